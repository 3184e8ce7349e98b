// The running store: the log, its snapshots and compaction, the journal, and the metrics.
#include "service/state/state_store.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/state/v1/state.pb.h"
#include "common/metrics.h"
#include "runtime/scheduler/task_scheduler.h"
#include "service/state/generation_files.h"
#include "service/state/scheduler_records.h"
#include "service/state/state_store_internal.h"
#include "service/state/state_volume.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace pb = ::cohort::state::v1;
using state_store_internal::AppendFrame;
using state_store_internal::DeviceGroupRecord;
using state_store_internal::Errno;
using state_store_internal::FirstErrorRecord;
using state_store_internal::KeyPutRecord;
using state_store_internal::kMaxFrame;
using state_store_internal::TaskChangeRecord;
using state_store_internal::ToProto;
using state_store_internal::WaitingRecord;
using state_store_internal::WholeBarrierRecord;

// Group commit: the turns (a sync or a release) a thread that gave an answer takes at most
// before it goes back to its own work, leaving what is left to the next caller.
constexpr int kLeaderRounds = 64;
// How long the sync thread leaves answers that no thread is seeing to for a caller to take
// over before it leads itself.
constexpr absl::Duration kTakeOverGrace = absl::Microseconds(200);
// How long a change no answer waits for may stay unwritten (the next answer's sync
// usually writes it before).
constexpr absl::Duration kUnwaitedWriteDelay = absl::Milliseconds(10);

namespace {

[[noreturn]] void Fatal(const std::string& message) {
  spdlog::critical(
      "{}; a change may be acknowledged only once it is saved, so the coordinator exits now "
      "(started again on the same --state-dir, it recovers everything saved so far)",
      message);
  spdlog::default_logger()->flush();
  std::_Exit(75);
}

}  // namespace

// ---- Writing -------------------------------------------------------------------------------

absl::Status StateStore::WriteSnapshot(int64_t generation) {
  std::optional<runtime::SchedulerChanges> tasks;
  if (scheduler_ != nullptr) tasks = scheduler_->CaptureState();
  auto bytes = files_->WriteSnapshot(generation, service_incarnation_, service_->CaptureState(),
                                     tasks ? &*tasks : nullptr);
  if (!bytes.ok()) return bytes.status();
  absl::MutexLock lock(&mu_);
  snapshot_bytes_ = *bytes;
  ++snapshots_;
  return absl::OkStatus();
}

absl::Status StateStore::Start(CoordinationService* service, runtime::TaskScheduler* scheduler) {
  service_ = service;
  scheduler_ = scheduler;
  service_incarnation_ = service->service_incarnation();
  const int64_t generation = first_generation_;
  // The reserve of the last run makes room for this snapshot when the volume is full; it is
  // allocated again below once the older files are gone.
  if (auto s = volume_->RemoveLastReserve(); !s.ok()) return s;
  bool snapshot_written = true;
  if (auto s = WriteSnapshot(generation); !s.ok()) {
    // The volume is full. The saved files still hold the restored state: carry on with a
    // new log after them (a few bytes), and write the snapshot once space returns. Not when
    // this start changed the service incarnation (the logs would not match the snapshot).
    if (!absl::IsResourceExhausted(s) || saved_incarnation_ == 0 ||
        saved_incarnation_ != service_incarnation_) {
      return s;
    }
    spdlog::warn(
        "--state-dir {}: no room for a snapshot of the restored state ({}); going on after the "
        "saved logs, the snapshot follows once the volume has room",
        options_.dir, std::string(s.message()));
    snapshot_written = false;
  }
  auto log = files_->OpenLog(generation, service_incarnation_);
  if (!log.ok()) return log.status();
  {
    absl::MutexLock lock(&mu_);
    generation_ = generation;
    log_bytes_ = 0;
    StartedLogLocked(*log);
    buffered_ = options_.sync_interval == absl::ZeroDuration();
    snapshot_owed_ = !snapshot_written;
  }
  if (snapshot_written) files_->RemoveBefore(generation);
  spdlog::info("durable state in {} (generation {}, service incarnation {:#x})", options_.dir,
               generation, service_incarnation_);
  volume_->CheckSpace();
  if (!snapshot_written && !volume_->full()) {
    absl::MutexLock lock(&mu_);
    compact_wanted_ = true;  // the reserve's room was enough after all
  }
  background_ = std::thread([this] { Background(); });
  watcher_ = std::thread([this] {
    volume_->Watch([this] {
      // A start on the full volume could not write its snapshot: now it can.
      absl::MutexLock lock(&mu_);
      if (snapshot_owed_) compact_wanted_ = true;
    });
  });
  if (options_.sync_interval == absl::ZeroDuration()) {
    syncer_ = std::thread([this] { Syncer(); });
  }
  return absl::OkStatus();
}

void StateStore::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (background_.joinable()) background_.join();
  if (watcher_.joinable()) watcher_.join();
  if (syncer_.joinable()) syncer_.join();  // after the answers that waited
  absl::MutexLock lock(&mu_);
  if (log_fd_ >= 0) {
    WritePendingLocked();
    // Says that nothing acknowledged is missing from the log, whatever the mode.
    pb::Record closed;
    closed.mutable_log_closed();
    std::string frame;
    AppendFrame(closed, &frame);
    if (!WriteAtEndLocked(frame, /*may_wait=*/false)) {
      spdlog::warn("{}", Errno("cannot mark the state log closed in", options_.dir));
    }
    // The room left is not needed any more.
    if (::ftruncate(log_fd_, log_end_) != 0) {
      spdlog::warn("{}", Errno("cannot cut the state log to its end in", options_.dir));
    }
    ::fdatasync(log_fd_);
    ::close(log_fd_);
    log_fd_ = -1;
  }
}

StateStore::Stats StateStore::GetStats() const {
  absl::MutexLock lock(&mu_);
  const StateVolume::Stats volume = volume_->GetStats();
  return {generation_,
          log_bytes_,
          records_,
          snapshots_,
          compact_bytes_,
          syncs_,
          log_header_bytes_ + std::max<int64_t>(0, synced_ - log_start_),
          log_end_,
          volume.full,
          volume.free_bytes};
}

void StateStore::Append(const pb::Record& record) {
  std::string frame;
  AppendFrame(record, &frame);
  if (frame.size() >= kMaxFrame) {
    Fatal(absl::StrCat("a change of ", frame.size(), " bytes is too large to save"));
  }
  absl::MutexLock lock(&mu_);
  if (log_fd_ < 0) return;  // stopped: the service is shutting down
  if (buffered_) {
    // The next sync writes it with the others of its batch, then syncs: no answer that
    // follows it goes out before, and a write(2) here could wait for the disk while the
    // caller holds the lock of the part that changed.
    pending_ += frame;
  } else if (!WriteAtEndLocked(frame, /*may_wait=*/false)) {
    Fatal(Errno("cannot write the state log in", options_.dir));
  }
  log_bytes_ += static_cast<int64_t>(frame.size());
  appended_ += static_cast<int64_t>(frame.size());
  ++records_;
  if (log_bytes_ > std::max(compact_bytes_, 2 * snapshot_bytes_)) compact_wanted_ = true;
}

void StateStore::StartedLogLocked(const NewLogFile& log) {
  log_fd_ = log.fd;
  log_header_bytes_ = log.end;
  log_end_ = log.end;
  log_room_ = log.room;
  log_start_ = appended_;
}

bool StateStore::WriteAtEndLocked(absl::string_view data, bool may_wait) {
  if (!volume_->WriteLog(log_fd_, log_end_, data, may_wait)) return false;
  log_end_ += static_cast<int64_t>(data.size());
  if (log_end_ > log_room_) {
    log_room_ = StateVolume::WriteRoom(log_fd_, log_end_, log_end_ + room_bytes_);
  }
  return true;
}

void StateStore::Background() {
  for (;;) {
    int fd = -1;
    int64_t target = 0;
    bool compact = false;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || compact_wanted_; };
      if (options_.sync_interval == absl::ZeroDuration()) {
        mu_.Await(absl::Condition(&wake));
      } else {
        mu_.AwaitWithTimeout(absl::Condition(&wake), options_.sync_interval);
      }
      if (stopping_) return;
      compact = compact_wanted_;
      fd = log_fd_;
      target = appended_;
    }
    if (compact) {
      Compact();
    } else if (fd >= 0) {
      // The faster mode's periodic sync (this thread also switches logs, so fd stays open).
      if (::fdatasync(fd) != 0) Fatal(Errno("cannot sync the state log in", options_.dir));
      absl::MutexLock lock(&mu_);
      synced_ = std::max(synced_, target);
    }
  }
}

bool StateStore::StoppedWithin(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
}

void StateStore::Compact() {
  absl::MutexLock files(&files_mu_);
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = generation_ + 1;
  }
  auto log = files_->OpenLog(generation, service_incarnation_);
  if (!log.ok()) {
    // Nothing changed: the log goes on, and grows on to the next try.
    spdlog::error("cannot start a new state log for a compaction: {}",
                  std::string(log.status().message()));
    absl::MutexLock lock(&mu_);
    compact_wanted_ = false;
    return;
  }
  int old_fd = -1;
  int64_t old_end = 0;
  {
    // Records from here on go to the new log, so the capture below misses none of them.
    absl::MutexLock lock(&mu_);
    AwaitNoSyncLocked();  // the syncer is done with the old log
    old_fd = log_fd_;
    WritePendingLocked();
    old_end = log_end_;
    if (::fdatasync(old_fd) != 0) Fatal(Errno("cannot sync the state log in", options_.dir));
    synced_ = appended_;  // all of it was in the old log
    generation_ = generation;
    log_bytes_ = 0;
    StartedLogLocked(*log);
    compact_wanted_ = false;
  }
  // Its room is not needed any more (a crash before this leaves zeros after its end, which
  // recovery reads as room).
  if (::ftruncate(old_fd, old_end) != 0) {
    spdlog::warn("{}", Errno("cannot cut the replaced state log to its end in", options_.dir));
  }
  ::close(old_fd);
  if (auto s = WriteSnapshot(generation); !s.ok()) {
    // The older snapshot and both logs still hold everything; try again later.
    spdlog::error("cannot write a snapshot of the durable state: {}", std::string(s.message()));
    return;
  }
  files_->RemoveBefore(generation);
  {
    absl::MutexLock lock(&mu_);
    snapshot_owed_ = false;
  }
  spdlog::debug("durable state: snapshot-{} written, older files removed", generation);
}

void StateStore::AfterDurable(absl::AnyInvocable<void() &&> then) {
  {
    absl::MutexLock lock(&mu_);
    // Nothing before it still to run either: answers keep their order.
    const bool on_disk =
        synced_ >= appended_ && waiting_.empty() && releasable_.empty() && !releasing_;
    if (options_.sync_interval == absl::ZeroDuration() && log_fd_ >= 0 && !syncer_ended_ &&
        !on_disk) {
      waiting_.emplace_back(appended_, std::move(then));
      // A sync or a release under way: its leader goes on to this one after it.
      if (leaders_ == 0) LeadLocked(kLeaderRounds);
      return;
    }
  }
  std::move(then)();
}

void StateStore::AwaitNoSyncLocked() {
  mu_.Await(absl::Condition(
      +[](bool* syncing) { return !*syncing; }, &syncing_));
}

void StateStore::WritePendingLocked() {
  if (pending_.empty()) return;
  if (!WriteAtEndLocked(pending_, /*may_wait=*/false)) {
    Fatal(Errno("cannot write the state log in", options_.dir));
  }
  pending_.clear();
}

bool StateStore::SyncWantedLocked() const {
  return !pending_.empty() || (!waiting_.empty() && waiting_.front().first > synced_);
}

bool StateStore::WorkLeftLocked() const { return !waiting_.empty() || !releasable_.empty(); }

void StateStore::LeadLocked(int rounds) {
  ++leaders_;
  for (int round = 0; round < rounds; ++round) {
    // What is on disk already (a compaction's sync covers the changes before it too).
    while (!waiting_.empty() && waiting_.front().first <= synced_) {
      releasable_.push_back(std::move(waiting_.front().second));
      waiting_.pop_front();
    }
    // The answers on disk first, then one sync for all that came while they went out.
    if (!releasing_ && !releasable_.empty()) {
      ReleaseLocked();
    } else if (!syncing_ && SyncWantedLocked()) {
      SyncLocked();
    } else {
      break;
    }
  }
  --leaders_;
}

void StateStore::SyncLocked() {
  // Everything appended until now, the changes of the answers that came while the last
  // sync ran too: one write and one fdatasync for all of them.
  std::string data;
  data.swap(pending_);
  const int fd = log_fd_;
  const int64_t offset = log_end_;
  log_end_ += static_cast<int64_t>(data.size());
  // Past the room: more of it, synced with the data (the one sync in many that records a
  // new length of the file).
  const bool more_room = log_end_ > log_room_;
  const int64_t room_from = log_end_;
  const int64_t target = appended_;
  syncing_ = true;  // no other thread writes log_fd_ or switches it
  mu_.Unlock();
  if (options_.before_group_sync) options_.before_group_sync();
  // Waits for space rather than exit once even the reserve is spent: the answers wait.
  if (!volume_->WriteLog(fd, offset, data, /*may_wait=*/true)) {
    Fatal(Errno("cannot write the state log in", options_.dir));
  }
  const int64_t room =
      more_room ? StateVolume::WriteRoom(fd, room_from, room_from + room_bytes_) : 0;
  if (::fdatasync(fd) != 0) Fatal(Errno("cannot sync the state log in", options_.dir));
  mu_.Lock();
  if (more_room) log_room_ = room;
  syncing_ = false;
  synced_ = std::max(synced_, target);
  ++syncs_;
}

void StateStore::ReleaseLocked() {
  std::vector<absl::AnyInvocable<void() &&>> batch;
  batch.swap(releasable_);
  releasing_ = true;
  mu_.Unlock();
  for (auto& then : batch) std::move(then)();
  mu_.Lock();
  releasing_ = false;
}

void StateStore::Syncer() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    // Answers no thread is seeing to (a leader that used its turns, a compaction's sync);
    // changes no answer waits for are written after a while, with the next sync a caller
    // leads if one comes first.
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || (leaders_ == 0 && WorkLeftLocked());
    };
    const bool woken = mu_.AwaitWithTimeout(absl::Condition(&wake), kUnwaitedWriteDelay);
    if (stopping_) break;
    if (woken) {
      // Under load the next caller takes over at once; this thread leads only when none
      // comes (a thread of its own leading a busy store sends the answers more slowly than
      // the threads that give them: it waits for turns on the CPU with all of them).
      auto taken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || leaders_ > 0 || !WorkLeftLocked();
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&taken), kTakeOverGrace)) continue;
      LeadLocked(kLeaderRounds);
    } else if (leaders_ == 0 && !pending_.empty()) {
      LeadLocked(kLeaderRounds);
    }
  }
  // Stopping: what is left once the leaders are done, then later changes are written at
  // once and their answers go at once (Stop syncs last).
  for (;;) {
    mu_.Await(absl::Condition(
        +[](int* leaders) { return *leaders == 0; }, &leaders_));
    if (!WorkLeftLocked() && !SyncWantedLocked()) break;
    LeadLocked(INT_MAX);
  }
  buffered_ = false;
  syncer_ended_ = true;
}

absl::Status StateStore::RoomForValues() const { return volume_->RoomForValues(); }

// ---- Journal -------------------------------------------------------------------------------

void StateStore::TaskChanged(const DurableTask& task) { Append(TaskChangeRecord(task)); }

void StateStore::WholeBarrierChanged(WholeBarrierKind kind, const DurableWholeBarrier& barrier) {
  Append(WholeBarrierRecord(kind, barrier));
}

void StateStore::WholeBarrierWaiting(WholeBarrierKind kind, const TaskName& task, bool waiting) {
  Append(WaitingRecord(kind, task, waiting));
}

void StateStore::FirstError(const absl::Status& error) { Append(FirstErrorRecord(error)); }

void StateStore::DeviceGroupChanged(const std::vector<TaskName>& members,
                                    const DurableDeviceGroup* group) {
  Append(DeviceGroupRecord(members, group));
}

void StateStore::KeyPut(const std::string& key, const std::string& value, int64_t revision) {
  Append(KeyPutRecord(key, value, revision));
}

void StateStore::KeyDeleted(const std::string& key, int64_t revision) {
  pb::Record record;
  record.mutable_key_deleted()->set_key(key);
  record.mutable_key_deleted()->set_revision(revision);
  Append(record);
}

void StateStore::KeysChanged(const std::vector<KeyJournalChange>& changes) {
  pb::Record record;
  for (const KeyJournalChange& change : changes) {
    pb::KeyChanges::Change* out = record.mutable_key_changes()->add_changes();
    if (change.deleted) {
      out->mutable_deleted()->set_key(change.key);
      out->mutable_deleted()->set_revision(change.revision);
    } else {
      out->mutable_put()->set_key(change.key);
      out->mutable_put()->set_value(change.value);
      out->mutable_put()->set_revision(change.revision);
    }
  }
  Append(record);
}

void StateStore::BarrierStarted(const DurableBarrier& barrier) {
  pb::Record record;
  ToProto(barrier, record.mutable_barrier_started());
  Append(record);
}

void StateStore::BarrierArrived(const std::string& id, int64_t counter, const TaskName& task) {
  pb::Record record;
  record.mutable_barrier_arrived()->set_id(id);
  record.mutable_barrier_arrived()->set_counter(counter);
  ToProto(task, record.mutable_barrier_arrived()->mutable_task());
  Append(record);
}

void StateStore::BarrierDone(const std::string& id, int64_t counter, const absl::Status& result) {
  pb::Record record;
  record.mutable_barrier_done()->set_id(id);
  record.mutable_barrier_done()->set_counter(counter);
  ToProto(result, record.mutable_barrier_done()->mutable_result());
  Append(record);
}

void StateStore::BarrierForgotten(const std::string& id) {
  pb::Record record;
  record.mutable_barrier_forgotten()->set_id(id);
  Append(record);
}

void StateStore::SchedulerChanged(const runtime::SchedulerChanges& changes) {
  pb::Record record;
  SchedulerChangesToProto(changes, record.mutable_scheduler());
  Append(record);
}

// ---- Metrics -------------------------------------------------------------------------------

void AddStateMetrics(MetricsRegistry& registry, const StateStore* store, bool restored) {
  registry.AddCollector([store, restored] {
    StateStore::Stats stats = store->GetStats();
    std::vector<CollectedFamily> out;
    out.push_back({"cohort_coordinator_state_restored",
                   "1 when this coordinator started from state saved in --state-dir, 0 when "
                   "it started empty.",
                   "gauge",
                   {{{}, restored ? 1.0 : 0.0}}});
    out.push_back({"cohort_coordinator_state_log_bytes",
                   "Bytes in the current state log, since the last snapshot.",
                   "gauge",
                   {{{}, static_cast<double>(stats.log_bytes)}}});
    out.push_back({"cohort_coordinator_state_generation",
                   "Generation of the current state snapshot and log.",
                   "gauge",
                   {{{}, static_cast<double>(stats.generation)}}});
    out.push_back({"cohort_coordinator_state_records_total",
                   "Changes written to the state log since the coordinator started.",
                   "counter",
                   {{{}, static_cast<double>(stats.records)}}});
    out.push_back({"cohort_coordinator_state_syncs_total",
                   "Group syncs of the state log: the changes made since the last one written "
                   "and synced together, and the answers waiting for them released.",
                   "counter",
                   {{{}, static_cast<double>(stats.syncs)}}});
    out.push_back({"cohort_coordinator_state_volume_full",
                   "1 while the volume of --state-dir is full: key-value writes are refused "
                   "with RESOURCE_EXHAUSTED until space returns (reads, barriers and task "
                   "state go on).",
                   "gauge",
                   {{{}, stats.volume_full ? 1.0 : 0.0}}});
    if (stats.free_bytes >= 0) {
      out.push_back({"cohort_coordinator_state_volume_free_bytes",
                     "Free bytes on the volume of --state-dir at its last look (every second), "
                     "not counting the store's reserve.",
                     "gauge",
                     {{{}, static_cast<double>(stats.free_bytes)}}});
    }
    out.push_back({"cohort_coordinator_state_snapshots_total",
                   "State snapshots written since the coordinator started (one at the start).",
                   "counter",
                   {{{}, static_cast<double>(stats.snapshots)}}});
    return out;
  });
}

}  // namespace cohort
