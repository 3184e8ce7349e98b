// CoordinationService: shutdown, reset, task states and watches, GetAliveTasks, device
// exchange, barriers, and stopping.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"
#include "service/core/service_internal.h"
#include "spdlog/spdlog.h"

namespace cohort {

absl::Status CoordinationService::ParkLocked(std::shared_ptr<ParkedCall> call,
                                             std::vector<std::shared_ptr<ParkedCall>>* list) {
  WaiterId id = call->id();
  call->set_unlink([this, list, id] {
    absl::MutexLock lock(&mu_);
    RemoveFrom(list, id);
  });
  absl::Status s = parked_.Add(call);
  if (s.ok()) list->push_back(std::move(call));
  return s;
}

void CoordinationService::RemoveFrom(std::vector<std::shared_ptr<ParkedCall>>* calls,
                                     WaiterId waiter) {
  calls->erase(std::remove_if(calls->begin(), calls->end(),
                              [waiter](const auto& c) { return c->id() == waiter; }),
               calls->end());
}

// ---- Shutdown and reset --------------------------------------------------------------

void CoordinationService::DisconnectLocked(Task& task, const absl::Status& why, Effects& fx) {
  if (task.at_shutdown_barrier && !task.job->auxiliary) {
    --workload_at_shutdown_;
    for (auto& call : shutdown_calls_) {
      if (call->owner() == task.name) {
        fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), absl::Status(why));
      }
    }
    RemoveIf(&shutdown_calls_, [&task](const auto& c) { return c->owner() == task.name; });
  }
  task.at_shutdown_barrier = false;
  SetStateLocked(task, TaskState::kDisconnected);
  task.disconnected_at = clock_->Now();
  task.error = absl::OkStatus();
  for (auto& call : task.polls) {
    fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), absl::Status(why));
  }
  task.polls.clear();
  fx.failed_tasks.emplace_back(task.name, why);
  FailGroupsWithLocked(task.name, why, fx);
  StateChangedLocked(fx);
}

void CoordinationService::ShutdownTask(const TaskName& name, WaiterId waiter, StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kShutdown, name, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    Task* task = FindLocked(name);
    if (!task) {
      answer =
          ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
    } else if (task->state == TaskState::kDisconnected) {
      answer = ServiceError(absl::FailedPreconditionError(
          absl::StrCat(name.ToString(), " is not connected; nothing to shut down")));
    } else if (task->job->auxiliary || config_.shutdown_barrier_timeout == absl::ZeroDuration()) {
      spdlog::info("task {} shut down", name.ToString());
      DisconnectLocked(*task, absl::CancelledError(absl::StrCat(name.ToString(), " shut down")),
                       fx);
    } else if (shutdown_state_ == Rendezvous::kPassed || shutdown_state_ == Rendezvous::kFailed) {
      answer = shutdown_result_;
      DisconnectLocked(*task, absl::CancelledError(absl::StrCat(name.ToString(), " shut down")),
                       fx);
    } else {
      if (shutdown_state_ == Rendezvous::kIdle) {
        shutdown_state_ = Rendezvous::kOpen;
        shutdown_timer_ = timers_.Schedule(clock_->Now() + config_.shutdown_barrier_timeout,
                                           [this] { OnShutdownTimeout(); });
      }
      answer = ParkLocked(call, &shutdown_calls_);
      parked = answer.ok();
      if (parked && !task->at_shutdown_barrier) {
        task->at_shutdown_barrier = true;
        ++workload_at_shutdown_;
      }
      CheckShutdownBarrierLocked(fx);
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

void CoordinationService::CheckShutdownBarrierLocked(Effects& fx) {
  if (shutdown_state_ != Rendezvous::kOpen) return;
  absl::Status result;
  if (workload_in_error_ > 0) {
    std::vector<TaskName> failed;
    for (const TaskName& name : *workload_tasks_) {
      if (FindLocked(name)->state == TaskState::kError) failed.push_back(name);
    }
    result = ServiceError(
        absl::InternalError(absl::StrCat("the shutdown barrier failed: ", failed.size(),
                                         " tasks are in error: ", internal::TaskList(failed))));
  } else if (workload_at_shutdown_ < static_cast<int>(workload_tasks_->size())) {
    return;
  }
  shutdown_state_ = result.ok() ? Rendezvous::kPassed : Rendezvous::kFailed;
  shutdown_result_ = result;
  timers_.Cancel(shutdown_timer_);
  spdlog::info("shutdown barrier {}", result.ok() ? "passed" : std::string(result.message()));
  std::vector<std::shared_ptr<ParkedCall>> calls;
  calls.swap(shutdown_calls_);
  for (auto& call : calls) {
    fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), result);
  }
  for (const TaskName& name : *workload_tasks_) {
    Task* task = FindLocked(name);
    if (task->at_shutdown_barrier) {
      DisconnectLocked(*task, absl::CancelledError(absl::StrCat(name.ToString(), " shut down")),
                       fx);
    }
  }
}

void CoordinationService::OnShutdownTimeout() {
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_state_ != Rendezvous::kOpen) return;
    std::vector<Task*> missing;
    std::vector<TaskName> names;
    for (const TaskName& name : *workload_tasks_) {
      Task* task = FindLocked(name);
      if (!task->at_shutdown_barrier) {
        missing.push_back(task);
        names.push_back(name);
      }
    }
    absl::Status error = ServiceError(absl::InternalError(
        absl::StrCat("the shutdown barrier failed: it timed out after ",
                     absl::FormatDuration(config_.shutdown_barrier_timeout), " with ", names.size(),
                     " tasks missing: ", internal::TaskList(names))));
    spdlog::error("{}", std::string(error.message()));
    // Everyone learns: the waiting tasks through the barrier, the missing ones and the
    // error pollers through their error state.
    shutdown_state_ = Rendezvous::kFailed;
    shutdown_result_ = error;
    std::vector<std::shared_ptr<ParkedCall>> calls;
    calls.swap(shutdown_calls_);
    for (auto& call : calls) {
      fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), error);
    }
    for (Task* task : missing) {
      if (task->state == TaskState::kConnected) SetErrorLocked(*task, error, false, fx);
    }
    for (const TaskName& name : *workload_tasks_) {
      Task* task = FindLocked(name);
      if (task->at_shutdown_barrier) DisconnectLocked(*task, error, fx);
    }
  }
  Apply(fx);
}

absl::Status CoordinationService::ResetTask(const TaskName& name) {
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    Task* task = FindLocked(name);
    if (!task) {
      return ServiceError(
          absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
    }
    if (task->state == TaskState::kDisconnected) {
      return ServiceError(absl::FailedPreconditionError(
          absl::StrCat(name.ToString(), " is already disconnected; nothing to reset")));
    }
    spdlog::info("task {} reset (was {})", name.ToString(), TaskStateName(task->state));
    DisconnectLocked(*task, absl::CancelledError(absl::StrCat(name.ToString(), " was reset")), fx);
  }
  Apply(fx);
  return absl::OkStatus();
}

// ---- Task states ---------------------------------------------------------------------

absl::StatusOr<std::vector<TaskStateInfo>> CoordinationService::GetTaskStates(
    const std::vector<TaskName>& tasks) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<TaskStateInfo> out;
  for (const TaskName& name : tasks) {
    Task* task = FindLocked(name);
    if (!task) {
      return ServiceError(
          absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
    }
    out.push_back({name, task->state, task->error, task->incarnation,
                   task->ever_registered ? absl::FromUnixNanos(task->last_heartbeat_ns.load())
                                         : absl::InfinitePast()});
  }
  return out;
}

std::vector<TaskStateInfo> CoordinationService::AllTasks() const {
  std::vector<TaskName> names;
  for (const auto& [name, task] : tasks_) names.push_back(name);
  return *GetTaskStates(names);
}

bool CoordinationService::ClusterRegistered() const {
  absl::ReaderMutexLock lock(&mu_);
  return register_state_ == Rendezvous::kPassed ||
         (!config_.register_barrier &&
          workload_connected_ == static_cast<int>(workload_tasks_->size()));
}

JobStateView CoordinationService::SnapshotLocked(const std::string& job) const {
  auto snap = std::make_shared<JobStateSnapshot>();
  snap->version = state_version_;
  for (auto it = tasks_.lower_bound(TaskName{job, 0}); it != tasks_.end() && it->first.job == job;
       ++it) {
    const Task& task = *it->second;
    snap->tasks.push_back({task.name, task.state, task.error, task.incarnation,
                           task.ever_registered ? absl::FromUnixNanos(task.last_heartbeat_ns.load())
                                                : absl::InfinitePast()});
  }
  return snap;
}

void CoordinationService::WatchJobState(const std::string& job, int64_t version, WaiterId waiter,
                                        Done<JobStateView> done) {
  const std::string& name = job.empty() ? default_job_ : job;
  if (!jobs_.count(name)) {
    return done(
        ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown job \"", name, "\""))));
  }
  auto call =
      std::make_shared<WatchCall>(waiter, ParkKind::kWatchJobState, std::nullopt, std::move(done));
  absl::StatusOr<JobStateView> answer;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else if (version != state_version_) {
      answer = SnapshotLocked(name);
    } else {
      call->set_unlink([this, waiter] {
        absl::MutexLock lock(&mu_);
        watch_calls_.erase(
            std::remove_if(watch_calls_.begin(), watch_calls_.end(),
                           [waiter](const auto& w) { return w.second->id() == waiter; }),
            watch_calls_.end());
      });
      absl::Status s = parked_.Add(call);
      if (s.ok()) {
        watch_calls_.emplace_back(name, call);
        parked = true;
      } else {
        answer = s;
      }
    }
  }
  if (!parked) call->Finish(std::move(answer));
}

// ---- GetAliveTasks -------------------------------------------------------------------

void CoordinationService::GetAliveTasks(const TaskName& requester, std::vector<TaskName> tasks,
                                        WaiterId waiter, Done<std::vector<AliveTask>> done) {
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  auto call =
      std::make_shared<AliveCall>(waiter, ParkKind::kAliveTasks, requester, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    for (const TaskName& t : tasks) {
      if (!FindLocked(t)) {
        answer =
            ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", t.ToString())));
        break;
      }
    }
    if (answer.ok() && !std::binary_search(tasks.begin(), tasks.end(), requester)) {
      answer = ServiceError(absl::InvalidArgumentError(
          absl::StrCat(requester.ToString(), " asked for alive tasks of a list it is not in")));
    }
    if (answer.ok()) {
      auto connected = ConnectedLocked(requester);
      if (!connected.ok()) answer = connected.status();
    }
    if (answer.ok()) {
      auto& group = alive_groups_[tasks];
      if (!group) {
        group = std::make_unique<Group>();
        group->members = tasks;
      }
      call->set_unlink([this, tasks, waiter] {
        absl::MutexLock lock(&mu_);
        auto it = alive_groups_.find(tasks);
        if (it != alive_groups_.end()) RemoveFrom(&it->second->calls, waiter);
      });
      answer = parked_.Add(call);
      if (answer.ok()) {
        group->arrived[requester];  // only an admitted call counts as an arrival
        group->calls.push_back(call);
        parked = true;
        CheckAliveGroupsLocked(fx);
      }
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

void CoordinationService::CheckAliveGroupsLocked(Effects& fx) {
  for (auto it = alive_groups_.begin(); it != alive_groups_.end();) {
    Group& group = *it->second;
    std::vector<AliveTask> alive;
    bool complete = true;
    for (const TaskName& name : group.members) {
      Task* task = FindLocked(name);
      if (task->state != TaskState::kConnected) continue;
      if (!group.arrived.count(name)) {
        complete = false;
        break;
      }
      alive.push_back({name, task->incarnation});
    }
    if (!complete) {
      ++it;
      continue;
    }
    for (auto& call : group.calls) {
      fx.Finish(parked_, std::static_pointer_cast<AliveCall>(call),
                absl::StatusOr<std::vector<AliveTask>>(alive));
    }
    it = alive_groups_.erase(it);
  }
}

// ---- Device exchange -----------------------------------------------------------------

void CoordinationService::WaitForAllTasks(const TaskName& name, std::string devices,
                                          WaiterId waiter, Done<std::vector<std::string>> done) {
  auto call =
      std::make_shared<DevicesCall>(waiter, ParkKind::kWaitForAllTasks, name, std::move(done));
  Effects fx;
  absl::StatusOr<std::vector<std::string>> answer = absl::UnknownError("unset");
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    auto task = ConnectedLocked(name);
    if (!task.ok()) {
      answer = task.status();
    } else {
      bool aux = (*task)->job->auxiliary;
      std::string key = aux ? name.job : std::string();
      auto& group = device_groups_[key];
      if (!group) {
        group = std::make_unique<Group>();
        if (aux) {
          for (int32_t i = 0; i < (*task)->job->num_tasks; ++i) {
            group->members.push_back({name.job, i});
          }
        } else {
          group->members = *workload_tasks_;
        }
      }
      if (group->done) {
        answer = group->error.ok() ? absl::StatusOr<std::vector<std::string>>(group->devices)
                                   : group->error;
      } else {
        call->set_unlink([this, key, waiter] {
          absl::MutexLock lock(&mu_);
          auto it = device_groups_.find(key);
          if (it != device_groups_.end()) RemoveFrom(&it->second->calls, waiter);
        });
        absl::Status s = parked_.Add(call);
        if (s.ok()) {
          group->arrived[name] = std::move(devices);  // only an admitted call counts
          group->calls.push_back(call);
          parked = true;
          if (group->arrived.size() == group->members.size()) FinishDeviceGroupLocked(*group, fx);
        } else {
          answer = s;
        }
      }
    }
  }
  Apply(fx);
  if (!parked) call->Finish(std::move(answer));
}

void CoordinationService::FinishDeviceGroupLocked(Group& group, Effects& fx) {
  group.done = true;
  if (group.error.ok()) {
    for (const TaskName& name : group.members) group.devices.push_back(group.arrived[name]);
  }
  for (auto& call : group.calls) {
    fx.Finish(parked_, std::static_pointer_cast<DevicesCall>(call),
              group.error.ok() ? absl::StatusOr<std::vector<std::string>>(group.devices)
                               : absl::StatusOr<std::vector<std::string>>(group.error));
  }
  group.calls.clear();
}

void CoordinationService::FailGroupsWithLocked(const TaskName& task, const absl::Status& error,
                                               Effects& fx) {
  for (auto& [key, group] : device_groups_) {
    if (group->done || !std::binary_search(group->members.begin(), group->members.end(), task)) {
      continue;
    }
    group->error = ServiceError(absl::InternalError(absl::StrCat(
        "device exchange failed: ", task.ToString(), " is unavailable: ", error.message())));
    FinishDeviceGroupLocked(*group, fx);
  }
}

// ---- Barriers ------------------------------------------------------------------------

void CoordinationService::Barrier(const std::string& id, int64_t counter, absl::Duration timeout,
                                  const TaskName& caller, std::vector<TaskName> tasks,
                                  WaiterId waiter, Done<int64_t> done) {
  BarrierArrival arrival{id, counter, timeout, caller, workload_tasks_};
  const bool explicit_tasks = !tasks.empty();
  if (explicit_tasks) {
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
    arrival.participants = std::make_shared<const std::vector<TaskName>>(std::move(tasks));
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    if (stopped_) {
      return done(ServiceError(absl::AbortedError("the coordination service is stopping")));
    }
    if (id.empty()) {
      return done(ServiceError(absl::InvalidArgumentError("barrier id must not be empty")));
    }
    if (!FindLocked(caller)) {
      return done(ServiceError(
          absl::InvalidArgumentError(absl::StrCat("unknown task ", caller.ToString()))));
    }
    // The default list is the service's own; only a caller's list needs checking.
    for (const TaskName& t : explicit_tasks ? *arrival.participants : std::vector<TaskName>{}) {
      if (!FindLocked(t)) {
        return done(ServiceError(absl::InvalidArgumentError(
            absl::StrCat("barrier \"", id, "\" names unknown task ", t.ToString()))));
      }
    }
  }
  auto health = [this](const TaskName& t) {
    absl::ReaderMutexLock lock(&mu_);
    return TaskHealthLocked(t);
  };
  bool started = barriers_.Arrive(arrival, waiter, health, std::move(done));
  if (started) {
    // A participant may have failed between the check above and the barrier's start; its
    // FailTask would then have found no barrier to fail.
    for (const TaskName& t : *arrival.participants) {
      absl::Status s = health(t);
      if (!s.ok()) barriers_.FailTask(t, s);
    }
  }
}

absl::Status CoordinationService::CancelBarrier(const std::string& id, int64_t counter,
                                                const TaskName& caller) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!FindLocked(caller)) {
      return ServiceError(
          absl::InvalidArgumentError(absl::StrCat("unknown task ", caller.ToString())));
    }
  }
  return barriers_.Cancel(id, counter, caller);
}

// ---- Stopping ------------------------------------------------------------------------

void CoordinationService::Stop(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  spdlog::info("coordination service stopping: {}", std::string(status.message()));
  barriers_.FailAll(ServiceError(absl::AbortedError(
      absl::StrCat("barrier aborted: the coordination service is stopping: ", status.message()))));
  parked_.CancelAll(ServiceError(status));
}

}  // namespace cohort
