#pragma once
// The files of a generation of --state-dir: its snapshot, which exists only once it is whole,
// and its log as it starts; and the removal of the older generations' files a snapshot
// replaces. The store switches to them; what goes in the log afterwards is the store's.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/scheduler/scheduler_state.h"
#include "service/core/durable_state.h"
#include "service/core/service_config.h"

namespace cohort {

struct StateStoreOptions;
class StateVolume;

// A new log: its header written, its first room after it, both synced.
struct NewLogFile {
  int fd = -1;
  int64_t end = 0;   // the header's length: where the first change goes
  int64_t room = 0;  // the file's length
};

class GenerationFiles {
 public:
  // `options`, `config` and `volume` (the store's) outlive this. `room_bytes`: the zeros
  // written ahead of a log at a time.
  GenerationFiles(const StateStoreOptions& options, const ServiceConfig& config, int64_t room_bytes,
                  StateVolume* volume);
  GenerationFiles(const GenerationFiles&) = delete;
  GenerationFiles& operator=(const GenerationFiles&) = delete;

  // Writes snapshot-G (to snapshot-G.tmp, synced, then renamed) and returns its length.
  // RESOURCE_EXHAUSTED when the volume has no room for it.
  absl::StatusOr<int64_t> WriteSnapshot(int64_t generation, uint64_t service_incarnation,
                                        const DurableState& state,
                                        const runtime::SchedulerChanges* scheduler);
  absl::StatusOr<NewLogFile> OpenLog(int64_t generation, uint64_t service_incarnation);
  // Removes the snapshots and logs of the generations before `generation`.
  void RemoveBefore(int64_t generation);

 private:
  const StateStoreOptions& options_;
  const ServiceConfig& config_;
  const int64_t room_bytes_;
  StateVolume* const volume_;
};

}  // namespace cohort
