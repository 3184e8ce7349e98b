#pragma once

// The coordinator's durable state in a directory (cohort-coordinator --state-dir): a
// write-ahead log of every change the core makes, and snapshots that let the log start
// over. Hand-written over protobuf records and zlib's CRC-32 rather than an embedded
// database (LevelDB, SQLite): the core already reports its changes as records, recovery
// needs only "last snapshot plus the logs after it", and a database would add a second
// copy of the state and rewrite large values in its own compactions.
//
// Files in the directory (G is a generation number, written in decimal):
//   LOCK            held with flock(2) while a coordinator uses the directory;
//   snapshot-G      the whole state when generation G began (written to snapshot-G.tmp,
//                   synced, then renamed, so a snapshot that exists is complete);
//   log-G           every change made in generation G, in order, then zeros: room for the
//                   next changes written ahead of them (below);
//   reserve         allocated, never written: room kept for when the volume fills (below).
// Every file is a sequence of frames: 4-byte little-endian length, 4-byte little-endian
// CRC-32 of the payload, payload (a cohort.state.v1 Header first, then Records).
// Recovery reads the newest snapshot-G and replays log-G, log-G+1, ... over it. Records
// set a value rather than change one, so a record replayed over a snapshot that already
// holds its effect changes nothing.
//
// The log's room is written ahead (zeros, LogRoomBytes at a time, as etcd's WAL preallocates
// its segments), and changes are written over it: a file whose size and blocks are already
// on disk, so that the fdatasync of a group of changes writes their data and nothing else (on
// ext4 here about 0.05 ms of CPU and 0.2 ms in all, against 0.1-0.2 and 0.3-0.6 ms for an
// append, whose sync must also record the file's new size: bench/sync_cost.py). A log ends at its
// first frame that is zeros to the end of the file; a log that is closed (Stop) or replaced
// (compaction) is cut to its end.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/scheduler/scheduler_state.h"
#include "service/core/coordination_service.h"
#include "service/core/durable_state.h"
#include "service/core/service_config.h"

namespace cohort {

namespace state::v1 {
class Record;
}
namespace runtime {
class TaskScheduler;
}
class GenerationFiles;
class StateVolume;
struct NewLogFile;

struct StateStoreOptions {
  std::string dir;
  // Zero (the default): nothing is acknowledged before it is on disk. An answer that
  // follows a change (AfterDurable) waits for the fdatasync that covers it, one for all the
  // answers that wait together (group commit).
  // Above zero, the opt-in faster mode: answers go out once the change is written to the
  // log (it survives the process at once) and the log is synced this often, so a crash of
  // the whole machine can take this much of what was acknowledged.
  absl::Duration sync_interval = absl::ZeroDuration();
  // A log this long (and at least twice the last snapshot) is replaced by a new snapshot.
  // 0: AutoCompactBytes of the volume that holds `dir`.
  int64_t compact_bytes = 0;
  // The machine's boot id (empty: /proc/sys/kernel/random/boot_id). A log of the faster mode
  // that a coordinator of another boot left unclosed may lack acknowledged changes: the state
  // read from it comes back under a new service incarnation, so every client sees a restart.
  std::string boot_id;
  // The zeros written ahead of the log at a time. 0: LogRoomBytes(compact_bytes).
  int64_t log_room_bytes = 0;
  // How often the free space of the volume is looked at (see RoomForValues).
  absl::Duration space_check_interval = absl::Seconds(1);
  // Tests: runs on the thread that leads a group sync, before it (after the changes it
  // covers are chosen).
  std::function<void()> before_group_sync;
};

// The log length that starts a compaction when none is given: an eighth of the volume (the
// log, the snapshot it replaces and the new one must fit together, with room for the
// volume's other users), at least 1 MiB and at most 64 MiB.
int64_t AutoCompactBytes(int64_t volume_bytes);

// The size of the file `reserve` the store keeps in the directory: space freed when the
// volume fills, so that the changes already made, a restart's first snapshot and the small
// records of tasks and barriers still have room. A quarter of the compaction length, at
// least 256 KiB and at most 16 MiB.
int64_t ReserveBytes(int64_t compact_bytes);

// How far the log's room is written ahead of its changes: a sixteenth of the compaction
// length, at least 64 KiB and at most 4 MiB.
int64_t LogRoomBytes(int64_t compact_bytes);

// The task runtime's scheduler keeps its state in the same files: its changes are records of
// the same log, and its whole state is part of every snapshot.
class StateStore final : public StateJournal, public runtime::SchedulerJournal {
 public:
  // Opens (creating it when missing) and locks the directory, and reads the state saved in
  // it into `restored` (left empty when the directory holds none). Refuses, with an error
  // saying why, a directory that another coordinator holds, one written for other jobs, and
  // one whose files are damaged. With a `scheduler`, the scheduler's saved state is restored
  // into it (TaskScheduler::Restore; the caller then calls FinishRestore).
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      const StateStoreOptions& options, const ServiceConfig& config,
      std::optional<DurableState>* restored, runtime::TaskScheduler* scheduler = nullptr);
  ~StateStore() override;

  // Before `service` serves anything: writes its state as the snapshot of a new generation,
  // removes the files that snapshot replaces, and starts syncing and compacting.
  // With a `scheduler`, its state is saved too (set this store as its journal after Start).
  // Both must outlive Stop (a compaction under way reads them).
  absl::Status Start(CoordinationService* service, runtime::TaskScheduler* scheduler = nullptr);
  // Stops the background work and syncs the log. Changes after this are lost.
  void Stop();

  struct Stats {
    int64_t generation = 0;
    int64_t log_bytes = 0;
    int64_t records = 0;  // appended since the start
    int64_t snapshots = 0;
    int64_t compact_bytes = 0;  // the log length that starts a compaction
    int64_t syncs = 0;          // group syncs (sync_interval 0)
    // Of the current log file, the bytes known to be on disk: what a crash of the machine
    // now leaves of it at least.
    int64_t synced_log_bytes = 0;
    // Of the current log file, the bytes written (its header and changes); after them, to
    // the file's end, its room.
    int64_t written_log_bytes = 0;
    bool volume_full = false;  // key-value writes refused (RoomForValues)
    int64_t free_bytes = -1;   // on the volume, at the last look (-1: not looked yet)
  };
  Stats GetStats() const;

  // Runs `f` while no snapshot is being written or old files removed: a copy of the
  // directory made in `f` is one a crash could have left.
  // (Changes not yet written, whose answers have not gone out, are written first.)
  void WithFilesSettled(const std::function<void()>& f) {
    absl::MutexLock lock(&files_mu_);
    {
      absl::MutexLock state(&mu_);
      AwaitNoSyncLocked();
      if (log_fd_ >= 0) WritePendingLocked();
    }
    f();
  }

  // StateJournal.
  void TaskChanged(const DurableTask& task) override;
  void WholeBarrierChanged(WholeBarrierKind kind, const DurableWholeBarrier& barrier) override;
  void WholeBarrierWaiting(WholeBarrierKind kind, const TaskName& task, bool waiting) override;
  void FirstError(const absl::Status& error) override;
  void DeviceGroupChanged(const std::vector<TaskName>& members,
                          const DurableDeviceGroup* group) override;
  void KeyPut(const std::string& key, const std::string& value, int64_t revision) override;
  void KeyDeleted(const std::string& key, int64_t revision) override;
  void KeysChanged(const std::vector<KeyJournalChange>& changes) override;
  void BarrierStarted(const DurableBarrier& barrier) override;
  void BarrierArrived(const std::string& id, int64_t counter, const TaskName& task) override;
  void BarrierDone(const std::string& id, int64_t counter, const absl::Status& result) override;
  void BarrierForgotten(const std::string& id) override;
  // SchedulerJournal.
  void SchedulerChanged(const runtime::SchedulerChanges& changes) override;
  // DurabilityGate: with sync_interval 0, `then` runs once every change appended before
  // this call is synced, in the order of the calls: at once, on this thread, when it is and
  // nothing waits before it; else on the thread that syncs it (this one, when no sync runs
  // now: see LeadLocked) or on the one then running the answers before it. In the faster
  // mode, at once.
  void AfterDurable(absl::AnyInvocable<void() &&> then) override;
  // The volume is full once a write to it fails for want of space (the reserve is freed, and
  // the write goes on into it) or its free space falls below half the reserve; it is no
  // longer once the reserve is allocated again with as much free beside it.
  absl::Status RoomForValues() const override;

 private:
  StateStore(StateStoreOptions options, const ServiceConfig& config, int lock_fd);

  void Append(const state::v1::Record& record);
  // The state of service_ and scheduler_ as the snapshot of `generation`.
  absl::Status WriteSnapshot(int64_t generation);
  void Background();
  void Compact();
  // Waits at most `wait` for Stop (true: it came). Takes mu_: StateVolume's waits call it.
  bool StoppedWithin(absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no thread is writing or syncing log_fd_.
  void AwaitNoSyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes pending_ to log_fd_ (no sync under way).
  void WritePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `log` becomes log_fd_ (only its header in it).
  void StartedLogLocked(const NewLogFile& log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `data` at the log's end (log_end_, which it moves on), and more room after it
  // when it reaches past log_room_. The caller is the only writer of log_fd_.
  bool WriteAtEndLocked(absl::string_view data, bool may_wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Group commit, by leader and followers (as RocksDB's write groups and MySQL's binlog group
  // commit do): a thread that gives AfterDurable an answer while no thread leads becomes the
  // leader. It writes and syncs every change appended until then, runs the answers that sync
  // covers (its own among them) in order, then syncs what came meanwhile, and so on for at
  // most `rounds` turns (a sync or a release) or until nothing waits. The answers given while
  // it leads (the followers) only queue. One leader at a time: a sync covers everything
  // that came while the answers before it went out, so that each fdatasync (about 0.05 ms of
  // the kernel's CPU here) is shared by as many answers as possible. An answer goes out from
  // the thread that led its sync, with no hand-off to a thread of the store's on the way.
  void LeadLocked(int rounds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SyncWantedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WorkLeftLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sync thread: leads when answers wait, no thread leads and no caller comes to (after
  // a leader that used its turns, a compaction's sync), writes and syncs changes no answer
  // waits for after a while, and at Stop finishes what is left.
  void Syncer();

  const StateStoreOptions options_;
  int64_t compact_bytes_ = 0;  // options_.compact_bytes, or AutoCompactBytes of the volume
  const ServiceConfig config_;
  const int lock_fd_;
  uint64_t service_incarnation_ = 0;
  uint64_t saved_incarnation_ = 0;  // of the snapshot read by Open (0: none)
  int64_t first_generation_ = 1;    // of the next Start
  CoordinationService* service_ = nullptr;
  runtime::TaskScheduler* scheduler_ = nullptr;
  // Made by Open, once the sizes are known. The volume's lock is taken after mu_.
  std::unique_ptr<StateVolume> volume_;
  std::unique_ptr<GenerationFiles> files_;

  // Held while a compaction writes its snapshot and removes the files it replaces.
  absl::Mutex files_mu_;
  mutable absl::Mutex mu_;
  int log_fd_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t log_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t snapshot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t records_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t snapshots_ ABSL_GUARDED_BY(mu_) = 0;
  bool compact_wanted_ ABSL_GUARDED_BY(mu_) = false;
  // Start found no room for its snapshot and went on after the saved logs.
  bool snapshot_owed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread background_;
  // Group commit. Positions are bytes appended to the logs since the start.
  int64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t synced_ ABSL_GUARDED_BY(mu_) = 0;  // of those, the ones on disk
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t log_start_ ABSL_GUARDED_BY(mu_) = 0;         // appended_ when log_fd_ was opened
  int64_t log_header_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // log_fd_'s header
  // Of log_fd_: where the next write goes, and the end of the room written ahead.
  int64_t log_end_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t log_room_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t room_bytes_ = 0;  // options_.log_room_bytes, or LogRoomBytes(compact_bytes_)
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;    // an fdatasync of log_fd_ outside mu_
  bool releasing_ ABSL_GUARDED_BY(mu_) = false;  // a thread runs answers; later ones queue
  int leaders_ ABSL_GUARDED_BY(mu_) = 0;         // threads in LeadLocked
  bool syncer_ended_ ABSL_GUARDED_BY(mu_) = false;
  // Group commit: Append leaves its frame in pending_ for the next sync to write (the sync
  // thread runs). Otherwise it writes it to the log at once.
  bool buffered_ ABSL_GUARDED_BY(mu_) = false;
  std::string pending_ ABSL_GUARDED_BY(mu_);
  // Answers and the position each waits for, in the order given (positions never fall).
  std::deque<std::pair<int64_t, absl::AnyInvocable<void() &&>>> waiting_ ABSL_GUARDED_BY(mu_);
  // Answers on disk, to run in order by whichever thread releases next.
  std::vector<absl::AnyInvocable<void() &&>> releasable_ ABSL_GUARDED_BY(mu_);
  std::thread syncer_;
  std::thread watcher_;  // StateVolume::Watch
};

class MetricsRegistry;

// The store's figures on the coordinator's /metrics (cohort_coordinator_state_*, listed in
// docs/metrics.md). `store` must outlive the registry's use.
void AddStateMetrics(MetricsRegistry& registry, const StateStore* store, bool restored);

}  // namespace cohort
