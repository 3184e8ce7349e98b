// StateStore's internals shared by its files: the frames of the state files, and the records.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/state/v1/state.pb.h"
#include "service/core/durable_state.h"
#include "service/core/service_config.h"
#include "service/state/state_store.h"

namespace cohort::state_store_internal {

namespace pb = ::cohort::state::v1;

inline constexpr uint32_t kFormat = 1;
// Larger than any record the service can make (a value is at most 1 GiB by default, and the
// limit is a flag): a length past this is damage, not data.
inline constexpr uint32_t kMaxFrame = uint32_t{1} << 31;

std::string Errno(absl::string_view what, const std::string& path);

// ---- Frames (state_store_files.cc) -------------------------------------------------------

void AppendFrame(const google::protobuf::MessageLite& message, std::string* out);
bool WriteAll(int fd, absl::string_view data);

// Reads a file's frames one at a time.
class FrameReader {
 public:
  enum class Result { kFrame, kEnd, kTorn };

  // Sectors a disk writes whole or not at all: what a crash leaves of a write is whole sectors
  // of it, the others as they were (zeros, past the old end of the file).
  static constexpr int64_t kSectorBytes = 512;

  explicit FrameReader(std::string path) : path_(std::move(path)) {}
  ~FrameReader();
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;

  absl::Status Open();
  // kEnd at a clean end of file; kTorn when what follows is what a crash of the machine can
  // leave of the last writes (torn_why() says which): the file ends inside a frame, zeros from
  // here to its end (a file extended but not written), or a frame whose checksum fails with a
  // whole sector of it zero (part of a write that never reached the disk). An error when a
  // frame is damaged otherwise.
  absl::StatusOr<Result> Next(std::string* payload);
  // After kTorn: what the tail is, for the log.
  const std::string& torn_why() const { return torn_why_; }
  // After kTorn: the tail is zeros from the start of a frame to the end of the file (in a log,
  // its room: the log ends there).
  bool tail_is_zeros() const { return tail_is_zeros_; }

  absl::Status Damaged(absl::string_view what) const;
  int64_t frame_start() const { return frame_start_; }
  const std::string& path() const { return path_; }

 private:
  // The file ended early, or could not be read.
  absl::StatusOr<Result> Short();
  absl::StatusOr<Result> Torn(std::string why);
  // Whether every byte from the current offset to the end of the file is zero.
  absl::StatusOr<bool> RestIsZero();

  const std::string path_;
  std::FILE* file_ = nullptr;
  int64_t size_ = 0;
  int64_t offset_ = 0;
  int64_t frame_start_ = 0;
  std::string torn_why_;
  bool tail_is_zeros_ = false;
};

// "snapshot-12" -> 12.
std::optional<int64_t> Generation(absl::string_view name, absl::string_view prefix);
absl::Status SyncDir(const std::string& dir);
// options.boot_id, or the machine's boot id (empty when it cannot be read).
std::string BootId(const StateStoreOptions& options);
// Reads a file's header and checks what it must say.
absl::StatusOr<pb::Header> ReadHeader(FrameReader& reader, pb::Header::Kind kind,
                                      int64_t generation);

// ---- Records (state_store_records.cc) ----------------------------------------------------

void ToProto(const TaskName& task, pb::Task* out);
TaskName FromProto(const pb::Task& task);
void ToProto(const absl::Status& status, pb::Status* out);
absl::Status FromProto(const pb::Status& status);
absl::Duration TimeoutFromProto(int64_t ms);
void ToProto(const DurableBarrier& barrier, pb::BarrierStarted* out);
void JobsToProto(const ServiceConfig& config, google::protobuf::RepeatedPtrField<pb::Job>* out);

// The record of each kind of change: what the journal appends, and what a snapshot holds.
pb::Record TaskChangeRecord(const DurableTask& task);
pb::Record WholeBarrierRecord(WholeBarrierKind kind, const DurableWholeBarrier& barrier);
pb::Record WaitingRecord(WholeBarrierKind kind, const TaskName& task, bool waiting);
pb::Record FirstErrorRecord(const absl::Status& error);
pb::Record DeviceGroupRecord(const std::vector<TaskName>& members, const DurableDeviceGroup* group);
pb::Record KeyPutRecord(const std::string& key, const std::string& value, int64_t revision);

}  // namespace cohort::state_store_internal
