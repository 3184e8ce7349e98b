#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "service/core/barrier_table.h"
#include "service/core/key_value_store.h"
#include "service/core/parked_call.h"
#include "service/core/task_name.h"
#include "service/core/timer_queue.h"

namespace cohort {

struct JobConfig {
  std::string name;
  int32_t num_tasks = 0;
  // Sidecars: left out of every "all tasks" set; their errors still reach everyone.
  bool auxiliary = false;
  // Its tasks may come back with a new incarnation after an error, which then does not
  // propagate to the other tasks.
  bool recoverable = false;
};

struct ServiceConfig {
  std::vector<JobConfig> jobs;
  // Where requests without a job name go (every xla.* request). Empty: the only workload job.
  std::string default_job;
  // Clients heartbeat every half of their own timeout (jaxlib: 100 s); keep this >= theirs.
  absl::Duration heartbeat_timeout = absl::Seconds(100);
  absl::Duration register_timeout = absl::Minutes(5);
  // Zero turns the shutdown barrier off: ShutdownTask returns at once.
  absl::Duration shutdown_barrier_timeout = absl::Minutes(5);
  bool register_barrier = true;
  KeyValueLimits key_value;
  ParkLimits parked;
  // Zero picks a random one. Set it to keep the incarnation across coordinator restarts.
  uint64_t service_incarnation = 0;
};

absl::Status ValidateConfig(const ServiceConfig& config);

struct TaskStateInfo {
  TaskName task;
  TaskState state = TaskState::kDisconnected;
  absl::Status error;  // set in kError
  uint64_t incarnation = 0;
  absl::Time last_heartbeat;  // InfinitePast before the first registration
};

struct JobStateSnapshot {
  std::vector<TaskStateInfo> tasks;
  int64_t version = 0;
};

using JobStateView = std::shared_ptr<const JobStateSnapshot>;

struct AliveTask {
  TaskName task;
  uint64_t incarnation = 0;
};

// What the service did, for metrics. Every method may be called from any thread.
class ServiceObserver : public BarrierObserver {
 public:
  virtual void OnErrorPropagated(const TaskName& source, const absl::Status& error) = 0;
};

// The coordination state machine: tasks and incarnations, heartbeats, errors, key-value
// store, barriers, watches, device exchange and shutdown. It knows no transport: every
// protocol adapter translates into these calls. Blocking calls take a WaiterId (from
// NewWaiterId) and a callback, and park without a thread; Cancel(id) ends one early.
class CoordinationService {
 public:
  using StatusDone = std::function<void(absl::Status)>;
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  static absl::StatusOr<std::unique_ptr<CoordinationService>> Create(
      ServiceConfig config, const Clock* clock, ServiceObserver* observer = nullptr);
  ~CoordinationService();

  uint64_t service_incarnation() const { return service_incarnation_; }
  absl::Time Now() const { return clock_->Now(); }
  const ServiceConfig& config() const { return config_; }
  TimerQueue& timers() { return timers_; }

  WaiterId NewWaiterId() { return parked_.NextId(); }
  // The caller of a parked call went away (deadline, cancellation): finish it with `status`.
  void Cancel(WaiterId waiter, const absl::Status& status) { parked_.Cancel(waiter, status); }

  // A task of a configured job; an empty job name means the default job.
  absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const;
  const std::string& default_job() const { return default_job_; }

  // Tasks.
  void RegisterTask(const TaskName& task, uint64_t incarnation, WaiterId waiter, StatusDone done);
  absl::Status Heartbeat(const TaskName& task, uint64_t incarnation);
  // OK when `task` is connected with this incarnation; what a stale request is told otherwise.
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const;
  void ShutdownTask(const TaskName& task, WaiterId waiter, StatusDone done);
  absl::Status ResetTask(const TaskName& task);
  absl::Status ReportError(const TaskName& source, const absl::Status& error);
  void PollForError(const TaskName& task, WaiterId waiter, StatusDone done);
  absl::StatusOr<std::vector<TaskStateInfo>> GetTaskStates(
      const std::vector<TaskName>& tasks) const;
  // Answers at once when `version` differs from the current one, else when a task of the
  // service changes state.
  void WatchJobState(const std::string& job, int64_t version, WaiterId waiter,
                     Done<JobStateView> done);
  // Blocks until every alive task of `tasks` has asked; answers the alive ones.
  void GetAliveTasks(const TaskName& requester, std::vector<TaskName> tasks, WaiterId waiter,
                     Done<std::vector<AliveTask>> done);
  // Exchanges an opaque device description: blocks until every task of the caller's group
  // (the workload tasks, or the caller's auxiliary job) sent one; answers them in task order.
  void WaitForAllTasks(const TaskName& task, std::string devices, WaiterId waiter,
                       Done<std::vector<std::string>> done);

  // Barriers. An empty task list means every workload task.
  void Barrier(const std::string& id, int64_t counter, absl::Duration timeout,
               const TaskName& caller, std::vector<TaskName> tasks, WaiterId waiter,
               Done<int64_t> done);
  absl::Status CancelBarrier(const std::string& id, int64_t counter, const TaskName& caller);

  // Key-value store (see KeyValueStore for each call's rules). The store keeps its own lock;
  // these calls are here so that every change to the service's state enters through it.
  absl::Status InsertKeyValue(absl::string_view key, std::string value, bool allow_overwrite);
  // Parks until the key is set, `deadline` passes or the call is cancelled.
  void GetKeyValue(absl::string_view key, WaiterId waiter, std::optional<TaskName> owner,
                   std::optional<absl::Time> deadline, KeyValueStore::GetDone done);
  absl::StatusOr<std::string> TryGetKeyValue(absl::string_view key) const;
  absl::StatusOr<int64_t> IncrementKeyValue(absl::string_view key, int64_t delta);
  std::vector<KeyValueEntry> GetKeyValueDir(absl::string_view dir) const;
  absl::Status DeleteKeyValue(absl::string_view key);
  absl::StatusOr<std::shared_ptr<KeyWatch>> WatchKeys(absl::string_view key, int64_t start_revision,
                                                      WaiterId waiter,
                                                      std::function<void()> notify);
  KeyValueStore::Stats KeyValueStats() const;

  std::vector<BarrierSnapshot> OpenBarriers() const { return barriers_.OpenBarriers(); }
  int64_t ParkedCalls(ParkKind kind) const { return parked_.Count(kind); }
  std::vector<TaskStateInfo> AllTasks() const;
  bool IsAuxiliary(const std::string& job) const;
  // True once every workload task has registered.
  bool ClusterRegistered() const;
  // The error that was propagated to every task (OK while there is none).
  absl::Status PropagatedError() const;

  // Runs due timers and the heartbeat check. Returns when it next wants to run.
  absl::Time RunTimers();
  // Ends every parked call with `status` and refuses new work.
  void Stop(const absl::Status& status);

 private:
  struct Task;
  struct Group;
  using StatusCall = Parked<absl::Status>;
  using WatchCall = Parked<absl::StatusOr<JobStateView>>;
  using AliveCall = Parked<absl::StatusOr<std::vector<AliveTask>>>;
  using DevicesCall = Parked<absl::StatusOr<std::vector<std::string>>>;

  CoordinationService(ServiceConfig config, const Clock* clock, ServiceObserver* observer);

  Task* FindLocked(const TaskName& task) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Task*> ConnectedLocked(const TaskName& task) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status TaskHealthLocked(const TaskName& task) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::vector<TaskName> WorkloadTasks() const;

  // State changes collect follow-up work, done once mu_ is released.
  struct Effects;
  void ConnectLocked(Task& task, uint64_t incarnation, Effects& fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetErrorLocked(Task& task, absl::Status error, bool reported_by_task, Effects& fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DisconnectLocked(Task& task, const absl::Status& why, Effects& fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StateChangedLocked(Effects& fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckRegisterBarrierLocked(Effects& fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckShutdownBarrierLocked(Effects& fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckAliveGroupsLocked(Effects& fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailGroupsWithLocked(const TaskName& task, const absl::Status& error, Effects& fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PropagateLocked(const TaskName& source, const absl::Status& error, Effects& fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishDeviceGroupLocked(Group& group, Effects& fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailRegisterBarrierLocked(const absl::Status& error, Effects& fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(Effects& fx);
  bool InGraceLocked(const Task& task) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CheckHeartbeats();
  void OnRegisterTimeout();
  void OnShutdownTimeout();
  JobStateView SnapshotLocked(const std::string& job) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SetStateLocked(Task& task, TaskState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveFrom(std::vector<std::shared_ptr<ParkedCall>>* calls, WaiterId waiter);
  absl::Status ParkLocked(std::shared_ptr<ParkedCall> call,
                          std::vector<std::shared_ptr<ParkedCall>>* list)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceConfig config_;
  const Clock* const clock_;
  ServiceObserver* const observer_;
  const uint64_t service_incarnation_;
  std::string default_job_;

  ParkedCallRegistry parked_;
  TimerQueue timers_;
  KeyValueStore key_values_;
  BarrierTable barriers_;

  // Guards the task table and every rendezvous built on it. Heartbeats take it shared and
  // touch only their own task's atomic timestamp.
  mutable absl::Mutex mu_;
  absl::btree_map<TaskName, std::unique_ptr<Task>> tasks_;  // fixed after construction
  absl::flat_hash_map<std::string, const JobConfig*> jobs_;
  std::shared_ptr<const std::vector<TaskName>> workload_tasks_;  // sorted, fixed
  int64_t state_version_ ABSL_GUARDED_BY(mu_) = 0;
  // Workload tasks by state, and those waiting at the shutdown barrier.
  int workload_connected_ ABSL_GUARDED_BY(mu_) = 0;
  int workload_in_error_ ABSL_GUARDED_BY(mu_) = 0;
  int workload_at_shutdown_ ABSL_GUARDED_BY(mu_) = 0;
  int workload_awaiting_register_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);

  // Register barrier over every workload task.
  enum class Rendezvous { kIdle, kOpen, kPassed, kFailed };
  Rendezvous register_state_ ABSL_GUARDED_BY(mu_) = Rendezvous::kIdle;
  absl::Status register_result_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ParkedCall>> register_calls_ ABSL_GUARDED_BY(mu_);
  TimerQueue::TimerId register_timer_ = 0;

  // Shutdown barrier over every workload task.
  Rendezvous shutdown_state_ ABSL_GUARDED_BY(mu_) = Rendezvous::kIdle;
  absl::Status shutdown_result_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ParkedCall>> shutdown_calls_ ABSL_GUARDED_BY(mu_);
  TimerQueue::TimerId shutdown_timer_ = 0;

  std::vector<std::pair<std::string, std::shared_ptr<WatchCall>>> watch_calls_ ABSL_GUARDED_BY(mu_);
  absl::Time next_heartbeat_check_ = absl::InfinitePast();  // used by the timer thread only
  // Device exchange and GetAliveTasks rendezvous, by group key.
  std::map<std::string, std::unique_ptr<Group>> device_groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::vector<TaskName>, std::unique_ptr<Group>> alive_groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
