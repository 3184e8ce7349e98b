#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "service/core/job_directory.h"
#include "service/core/parked_call.h"
#include "service/core/task_name.h"

namespace cohort {

struct TaskStateInfo {
  TaskName task;
  TaskState state = TaskState::kDisconnected;
  absl::Status error;                                  // set in kError
  FailureReason reason = FailureReason::kUnspecified;  // why, in kError
  uint64_t incarnation = 0;
  absl::Time last_heartbeat;  // InfinitePast before the first registration
  TaskProgress progress;      // its heartbeats' last; empty when none carried one
};

struct AliveTask {
  TaskName task;
  uint64_t incarnation = 0;
};

struct JobStateSnapshot {
  std::vector<TaskStateInfo> tasks;
  int64_t version = 0;
};

using JobStateView = std::shared_ptr<const JobStateSnapshot>;
using JobStateWatch = Parked<absl::StatusOr<JobStateView>>;

// One declared task as the service sees it.
struct TaskRecord {
  TaskName name;
  const JobConfig* job = nullptr;
  TaskState state = TaskState::kDisconnected;
  uint64_t incarnation = 0;
  bool ever_registered = false;
  absl::Time disconnected_at = absl::InfinitePast();
  absl::Status error;
  FailureReason reason = FailureReason::kUnspecified;  // of `error`
  // The request id of the ResetTask that last reset it (a proxy's attempt again gets OK).
  std::string reset_request;
  // Written by heartbeats under the shared lock.
  std::atomic<int64_t> last_heartbeat_ns{0};
  // The progress its last heartbeat that carried one carried, since it connected. Telemetry
  // for the snapshot, in memory only: never journaled nor restored, since the next heartbeat
  // (every few seconds) brings it again. Written by heartbeats under the shared lock, hence a
  // lock of its own.
  mutable absl::Mutex progress_mu;
  TaskProgress progress ABSL_GUARDED_BY(progress_mu);
  // Its parked PollForError (one at most: a newer poll replaces it).
  std::vector<std::shared_ptr<ParkedCall>> polls;
  // Changed since the service last told its journal.
  bool changed = false;
};

// Every declared task with its state and incarnation, the counts the whole-job barriers
// look at, and the version that job-state watches wait on. Not thread-safe: the service
// calls it under its lock. The Mark* calls are the only way a task changes state, so the
// counts and the version stay right.
class TaskTable {
 public:
  using Records = absl::btree_map<TaskName, std::unique_ptr<TaskRecord>>;

  explicit TaskTable(const JobDirectory& jobs);

  TaskRecord* Find(const TaskName& name) const;
  // The task, or INVALID_ARGUMENT naming it.
  absl::StatusOr<TaskRecord*> Get(const TaskName& name) const;
  // The task when it is connected; its error, or FAILED_PRECONDITION, otherwise.
  absl::StatusOr<TaskRecord*> Connected(const TaskName& name) const;
  // Why the task cannot take part in a barrier (in error or gone); OK when it can.
  absl::Status Health(const TaskName& name) const;
  // Every task, in (job, id) order.
  const Records& all() const { return tasks_; }

  void MarkConnected(TaskRecord& task, uint64_t incarnation, absl::Time now);
  void MarkError(TaskRecord& task, absl::Status error, FailureReason reason);
  void MarkDisconnected(TaskRecord& task, absl::Time now);
  // The incarnation of a task that registered but waits at the register barrier.
  void SetIncarnation(TaskRecord& task, uint64_t incarnation);
  // A task as a restarted coordinator found it. A connected task gets a full heartbeat
  // timeout from `now` to show that it is still there.
  void Restore(TaskRecord& task, TaskState state, uint64_t incarnation, bool ever_registered,
               absl::Status error, FailureReason reason, std::string reset_request, absl::Time now);
  // The tasks changed since the last call, each once.
  std::vector<TaskRecord*> TakeChanged();
  // A heartbeat's progress replaces the task's; an empty one changes nothing. Safe under the
  // service's shared lock. Not a change of the task (no version, no journal record).
  static void RecordProgress(TaskRecord& task, const TaskProgress& progress);

  int workload_connected() const { return workload_connected_; }
  int workload_in_error() const { return workload_in_error_; }

  TaskStateInfo Info(const TaskRecord& task) const;
  JobStateView Snapshot(const std::string& job) const;

  // Job-state watches: answered, all at once, by the next change of the version.
  int64_t version() const { return version_; }
  void AddWatch(std::string job, std::shared_ptr<JobStateWatch> call);
  void RemoveWatch(WaiterId waiter);
  // Bumps the version and hands back every watch with the job it watches.
  std::vector<std::pair<std::string, std::shared_ptr<JobStateWatch>>> Changed();

 private:
  void SetState(TaskRecord& task, TaskState state);
  void Touch(TaskRecord& task);
  static void ClearProgress(TaskRecord& task);

  Records tasks_;  // the set of tasks is fixed after construction
  int workload_connected_ = 0;
  int workload_in_error_ = 0;
  int64_t version_ = 0;
  std::vector<std::pair<std::string, std::shared_ptr<JobStateWatch>>> watches_;
  std::vector<TaskRecord*> changed_;
};

}  // namespace cohort
