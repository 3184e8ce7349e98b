#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/failure_reason.h"
#include "service/core/durable_state.h"
#include "service/core/heartbeat_monitor.h"
#include "service/core/job_directory.h"
#include "service/core/parked_call.h"
#include "service/core/service_config.h"
#include "service/core/task_effects.h"
#include "service/core/task_exchanges.h"
#include "service/core/task_name.h"
#include "service/core/task_table.h"
#include "service/core/timer_queue.h"
#include "service/core/whole_job_barrier.h"

namespace cohort {

// The life of the job's tasks, from registration to shutdown: each task's state and
// incarnation, and the rules that tie a change of one to everything built on the task table.
// The register and shutdown barriers of the whole job, errors and the job's first error
// (propagated to every error poll), job-state watches and the group exchanges all follow
// from here. Every call collects the work it sets off in a TaskEffects, for the owner to
// carry out once its lock is released.
//
// Not thread-safe: the owner (CoordinationService) calls it under its lock, held exclusively
// for every non-const call. Heartbeats, under the shared lock, touch only a task's atomic
// timestamp.
class TaskLife {
 public:
  using StatusCall = Parked<absl::Status>;
  using UnderLock = TaskExchanges::UnderLock;

  // `under_lock` runs a function under the owner's lock (a parked call whose caller went
  // away leaves its container so). `on_register_timeout` and `on_shutdown_timeout` run from
  // the timer queue, without the lock: the owner takes it and calls RegisterTimedOut or
  // ShutdownTimedOut.
  TaskLife(const ServiceConfig& config, const JobDirectory& jobs, const Clock* clock,
           const HeartbeatMonitor* heartbeats, ParkedCallRegistry* parked, TimerQueue* timers,
           UnderLock under_lock, std::function<void()> on_register_timeout,
           std::function<void()> on_shutdown_timeout);

  const TaskTable& tasks() const { return tasks_; }
  // The error that was propagated to every task (OK while there is none).
  const absl::Status& first_error() const { return first_error_; }
  // True once every workload task has registered.
  bool Registered() const;

  // The calls of CoordinationService of the same names, once the service is known to run.
  // A call that parks returns nullopt once `call` is parked, else its answer.
  std::optional<absl::Status> Register(const TaskName& name, uint64_t incarnation,
                                       const std::shared_ptr<StatusCall>& call, TaskEffects& fx);
  std::optional<absl::Status> Shutdown(const TaskName& name,
                                       const std::shared_ptr<StatusCall>& call, TaskEffects& fx);
  absl::Status Reset(const TaskName& name, const std::string& request, TaskEffects& fx);
  // A message beyond `max_message_bytes` is cut, and says so. `reason` is what the reporter
  // said of the error; kUnspecified leaves it to ReportedErrorReason.
  absl::Status ReportError(const TaskName& source, const absl::Status& error, ErrorReporter by,
                           FailureReason reason, size_t max_message_bytes, TaskEffects& fx);
  // `stopped`: the service is stopping (what a poll is told when no error came first).
  std::optional<absl::Status> PollForError(const TaskName& name, bool stopped,
                                           const std::shared_ptr<StatusCall>& call,
                                           TaskEffects& fx);
  // `job`: a configured job's name.
  std::optional<absl::StatusOr<JobStateView>> WatchJobState(
      const std::string& job, int64_t version, const std::shared_ptr<JobStateWatch>& call);
  absl::Status GetAliveTasks(const TaskName& requester, const std::vector<TaskName>& tasks,
                             const std::shared_ptr<TaskExchanges::AliveCall>& call,
                             TaskEffects& fx) {
    return exchanges_.AskAlive(tasks_, requester, tasks, call, fx);
  }
  std::optional<TaskExchanges::DevicesResult> WaitForAllTasks(
      const TaskName& name, std::string devices,
      const std::shared_ptr<TaskExchanges::DevicesCall>& call, TaskEffects& fx) {
    return exchanges_.ExchangeDevices(tasks_, name, std::move(devices), call, fx);
  }

  // A heartbeat of `incarnation`, which is not the one `name` is connected with: the task
  // restarted without registering again. Returns the heartbeat's answer.
  absl::Status HeartbeatOfAnotherIncarnation(const TaskName& name, uint64_t incarnation,
                                             TaskEffects& fx);
  // Puts in error each of the `stale` tasks (HeartbeatMonitor::FindStale) still stale at
  // `now`: a heartbeat may have come in since they were found.
  void FailStale(const std::vector<TaskName>& stale, absl::Time now, TaskEffects& fx);

  // The whole-job barriers' timeouts.
  void RegisterTimedOut(TaskEffects& fx);
  void ShutdownTimedOut(TaskEffects& fx);

  // Tells `journal` what changed since the last call, in the order tasks, whole-job
  // barriers, first error, device exchanges; with a null `journal` the changes are only
  // taken.
  void Journal(StateJournal* journal);
  // The state a restarted coordinator found; no change to record.
  absl::Status Restore(const DurableState& state, absl::Time now);
  // This part of the durable state, for a snapshot.
  void Capture(DurableState* state) const;

 private:
  // The rules that tie the pieces together.
  void Connect(TaskRecord& task, uint64_t incarnation, TaskEffects& fx);
  void SetError(TaskRecord& task, absl::Status error, FailureReason reason, bool reported_by_task,
                TaskEffects& fx);
  void Disconnect(TaskRecord& task, const absl::Status& why, TaskEffects& fx);
  void Propagate(const TaskName& source, const absl::Status& error, TaskEffects& fx);
  void StateChanged(TaskEffects& fx);

  // The register and shutdown barriers: when they pass and fail.
  void CheckRegisterBarrier(TaskEffects& fx);
  void FailRegisterBarrier(const absl::Status& error, TaskEffects& fx);
  void CheckShutdownBarrier(TaskEffects& fx);

  const ServiceConfig& config_;
  const JobDirectory& jobs_;
  const Clock* const clock_;
  const HeartbeatMonitor* const heartbeats_;
  ParkedCallRegistry* const parked_;
  const UnderLock under_lock_;

  TaskTable tasks_;
  // Both over every workload task.
  WholeJobBarrier register_barrier_;
  WholeJobBarrier shutdown_barrier_;
  TaskExchanges exchanges_;
  absl::Status first_error_;
  bool first_error_changed_ = false;
};

}  // namespace cohort
