// CoordinationService: registration and shutdown, each behind its whole-job barrier, task
// reset, and the named barriers of the barrier table.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"
#include "spdlog/spdlog.h"

namespace cohort {

// ---- Registration --------------------------------------------------------------------

void CoordinationService::RegisterTask(const TaskName& name, uint64_t incarnation, WaiterId waiter,
                                       StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kRegister, name, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    WriteLock lock(this);
    TaskRecord* task = tasks_.Find(name);
    if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else if (!task) {
      answer = tasks_.Get(name).status();
    } else if (task->state == TaskState::kConnected && task->incarnation != incarnation &&
               !task->job->recoverable) {
      absl::Status error = absl::AbortedError(absl::StrCat(
          name.ToString(), " registered again with incarnation 0x", absl::Hex(incarnation),
          " while connected with incarnation 0x", absl::Hex(task->incarnation),
          ": the task restarted, so its old incarnation is lost"));
      SetErrorLocked(*task, error, /*reported_by_task=*/false, fx);
      answer = task->error;
    } else if (task->state == TaskState::kError && !task->job->recoverable) {
      answer = Annotate(task->error, absl::StrCat(name.ToString(),
                                                  " is in error and cannot register again "
                                                  "(its job is not recoverable): "));
    } else if (task->state == TaskState::kConnected && task->incarnation == incarnation) {
      // A retry whose first answer was lost.
      HeartbeatMonitor::Record(*task, clock_->Now());
      answer = absl::OkStatus();
    } else if (!config_.register_barrier || task->job->auxiliary ||
               register_barrier_.state() == WholeJobBarrier::State::kPassed) {
      ConnectLocked(*task, incarnation, fx);
      answer = absl::OkStatus();
    } else if (register_barrier_.state() == WholeJobBarrier::State::kFailed) {
      answer = register_barrier_.result();
    } else {
      register_barrier_.OpenIfIdle(clock_->Now());
      if (register_barrier_.IsWaiting(name)) {
        // A newer attempt of the same task supersedes the call still waiting.
        for (auto& earlier : register_barrier_.TakeCallsOf(name)) {
          fx.FinishReplaced<absl::Status>(
              parked_, std::move(earlier),
              ServiceError(absl::AlreadyExistsError(absl::StrCat(
                  "registration of ", name.ToString(),
                  " superseded by a newer attempt with incarnation 0x", absl::Hex(incarnation)))));
        }
      } else {
        // Registered, but still disconnected and sending no heartbeats until the barrier passes.
        register_barrier_.AddWaiting(name);
      }
      tasks_.SetIncarnation(*task, incarnation);
      spdlog::debug("task {} (incarnation {:#x}) waits at the register barrier ({} of {})",
                    name.ToString(), incarnation,
                    register_barrier_.num_waiting() + tasks_.workload_connected(),
                    jobs_.workload()->size());
      call->set_unlink([this, waiter] {
        WriteLock lock(this);
        register_barrier_.RemoveCall(waiter);
      });
      answer = parked_.Add(call);
      parked = answer.ok();
      if (parked) {
        register_barrier_.AddCall(call);
      } else {
        register_barrier_.RemoveWaiting(name);
      }
      StateChangedLocked(fx);
      CheckRegisterBarrierLocked(fx);
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

void CoordinationService::CheckRegisterBarrierLocked(Effects& fx) {
  if (!register_barrier_.is_open()) return;
  if (register_barrier_.num_waiting() + tasks_.workload_connected() <
      static_cast<int>(jobs_.workload()->size())) {
    return;
  }
  auto calls = register_barrier_.End(absl::OkStatus());
  // Connecting takes each task off the waiting list.
  std::vector<TaskName> waiting(register_barrier_.waiting().begin(),
                                register_barrier_.waiting().end());
  for (const TaskName& name : waiting) {
    TaskRecord* task = tasks_.Find(name);
    ConnectLocked(*task, task->incarnation, fx);
  }
  spdlog::info("every workload task registered ({})",
               Plural(static_cast<long long>(jobs_.workload()->size()), "task"));
  fx.FinishAll<absl::Status>(parked_, std::move(calls), absl::OkStatus());
}

void CoordinationService::FailRegisterBarrierLocked(const absl::Status& error, Effects& fx) {
  if (!register_barrier_.is_open()) return;
  fx.FinishAll<absl::Status>(parked_, register_barrier_.End(error), error);
}

void CoordinationService::OnRegisterTimeout() {
  Effects fx;
  {
    WriteLock lock(this);
    if (!register_barrier_.is_open()) return;
    std::vector<TaskName> missing;
    for (const auto& [name, task] : tasks_.all()) {
      // Tasks waiting at the barrier are still disconnected, but they did register.
      if (!task->job->auxiliary && task->state != TaskState::kConnected &&
          !register_barrier_.IsWaiting(name)) {
        missing.push_back(name);
      }
    }
    absl::Status error = ServiceError(absl::DeadlineExceededError(absl::StrCat(
        "the register barrier timed out after ", absl::FormatDuration(config_.register_timeout),
        " with ", Plural(static_cast<long long>(missing.size()), "task"),
        " missing: ", JoinTaskNames(missing))));
    spdlog::error("{}", std::string(error.message()));
    FailRegisterBarrierLocked(error, fx);
    absl::Status failed = ServiceError(
        absl::InternalError(absl::StrCat("cluster registration failed: ", error.message())));
    PropagateLocked(TaskName{}, failed, fx);
    for (const auto& [name, task] : tasks_.all()) {
      if (task->state != TaskState::kError) SetErrorLocked(*task, failed, false, fx);
    }
  }
  Apply(fx);
}

bool CoordinationService::ClusterRegistered() const {
  absl::ReaderMutexLock lock(&mu_);
  return register_barrier_.state() == WholeJobBarrier::State::kPassed ||
         (!config_.register_barrier &&
          tasks_.workload_connected() == static_cast<int>(jobs_.workload()->size()));
}

// ---- Shutdown and reset --------------------------------------------------------------

void CoordinationService::ShutdownTask(const TaskName& name, WaiterId waiter, StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kShutdown, name, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    WriteLock lock(this);
    TaskRecord* task = tasks_.Find(name);
    absl::Status shut_down = absl::CancelledError(absl::StrCat(name.ToString(), " shut down"));
    if (!task) {
      answer = tasks_.Get(name).status();
    } else if (task->state == TaskState::kDisconnected) {
      answer = ServiceError(absl::FailedPreconditionError(
          absl::StrCat(name.ToString(), " is not connected; nothing to shut down")));
    } else if (task->job->auxiliary || config_.shutdown_barrier_timeout == absl::ZeroDuration()) {
      spdlog::info("task {} shut down", name.ToString());
      DisconnectLocked(*task, shut_down, fx);
    } else if (shutdown_barrier_.is_done()) {
      answer = shutdown_barrier_.result();
      DisconnectLocked(*task, shut_down, fx);
    } else {
      shutdown_barrier_.OpenIfIdle(clock_->Now());
      call->set_unlink([this, waiter] {
        WriteLock lock(this);
        shutdown_barrier_.RemoveCall(waiter);
      });
      answer = parked_.Add(call);
      parked = answer.ok();
      if (parked) {
        shutdown_barrier_.AddCall(call);
        shutdown_barrier_.AddWaiting(name);
      }
      CheckShutdownBarrierLocked(fx);
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

void CoordinationService::CheckShutdownBarrierLocked(Effects& fx) {
  if (!shutdown_barrier_.is_open()) return;
  absl::Status result;
  if (tasks_.workload_in_error() > 0) {
    std::vector<TaskName> failed;
    for (const TaskName& name : *jobs_.workload()) {
      if (tasks_.Find(name)->state == TaskState::kError) failed.push_back(name);
    }
    result = ServiceError(
        absl::InternalError(absl::StrCat("the shutdown barrier failed: ", failed.size(),
                                         " tasks are in error: ", JoinTaskNames(failed))));
  } else if (shutdown_barrier_.num_waiting() < static_cast<int>(jobs_.workload()->size())) {
    return;
  }
  auto calls = shutdown_barrier_.End(result);
  spdlog::info("shutdown barrier {}", result.ok() ? "passed" : std::string(result.message()));
  fx.FinishAll<absl::Status>(parked_, std::move(calls), result);
  // Disconnecting takes each task off the waiting list.
  std::vector<TaskName> waiting(shutdown_barrier_.waiting().begin(),
                                shutdown_barrier_.waiting().end());
  for (const TaskName& name : waiting) {
    DisconnectLocked(*tasks_.Find(name),
                     absl::CancelledError(absl::StrCat(name.ToString(), " shut down")), fx);
  }
}

void CoordinationService::OnShutdownTimeout() {
  Effects fx;
  {
    WriteLock lock(this);
    if (!shutdown_barrier_.is_open()) return;
    std::vector<TaskName> missing;
    for (const TaskName& name : *jobs_.workload()) {
      if (!shutdown_barrier_.IsWaiting(name)) missing.push_back(name);
    }
    absl::Status error = ServiceError(absl::InternalError(
        absl::StrCat("the shutdown barrier failed: it timed out after ",
                     absl::FormatDuration(config_.shutdown_barrier_timeout), " with ",
                     Plural(static_cast<long long>(missing.size()), "task"),
                     " missing: ", JoinTaskNames(missing))));
    spdlog::error("{}", std::string(error.message()));
    // Everyone learns: the waiting tasks through the barrier, the missing ones and the
    // error pollers through their error state.
    fx.FinishAll<absl::Status>(parked_, shutdown_barrier_.End(error), error);
    for (const TaskName& name : missing) {
      TaskRecord* task = tasks_.Find(name);
      if (task->state == TaskState::kConnected) SetErrorLocked(*task, error, false, fx);
    }
    std::vector<TaskName> waiting(shutdown_barrier_.waiting().begin(),
                                  shutdown_barrier_.waiting().end());
    for (const TaskName& name : waiting) DisconnectLocked(*tasks_.Find(name), error, fx);
  }
  Apply(fx);
}

absl::Status CoordinationService::ResetTask(const TaskName& name, const std::string& request) {
  Effects fx;
  {
    WriteLock lock(this);
    auto task = tasks_.Get(name);
    if (!task.ok()) return task.status();
    // Its first attempt reset the task (whatever the task did since): that attempt's answer.
    if (!request.empty() && (*task)->reset_request == request) return absl::OkStatus();
    if ((*task)->state == TaskState::kDisconnected) {
      return ServiceError(absl::FailedPreconditionError(
          absl::StrCat(name.ToString(), " is already disconnected; nothing to reset")));
    }
    spdlog::info("task {} reset (was {})", name.ToString(), TaskStateName((*task)->state));
    (*task)->reset_request = request;  // journaled with the change below
    DisconnectLocked(**task, absl::CancelledError(absl::StrCat(name.ToString(), " was reset")), fx);
  }
  Apply(fx);
  return absl::OkStatus();
}

// ---- Named barriers ------------------------------------------------------------------

void CoordinationService::Barrier(const std::string& id, int64_t counter, absl::Duration timeout,
                                  const TaskName& caller, std::vector<TaskName> tasks,
                                  WaiterId waiter, Done<int64_t> done) {
  BarrierArrival arrival{id, counter, timeout, caller, jobs_.workload()};
  const bool explicit_tasks = !tasks.empty();
  if (explicit_tasks) {
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
    arrival.participants = std::make_shared<const std::vector<TaskName>>(std::move(tasks));
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    if (stopped_) {
      return done(ServiceError(absl::UnavailableError("the coordination service is stopping")));
    }
    if (auto bad = CheckBarrierId(id, config_.barriers); !bad.ok()) {
      return done(ServiceError(bad));
    }
    const TaskRecord* task = tasks_.Find(caller);
    if (!task) return done(tasks_.Get(caller).status());
    // A task that is not registered has no say in the job's barriers (a restarted
    // coordinator still hears the tasks it restored, within their grace period).
    if (task->state == TaskState::kDisconnected && !heartbeats_.InGrace(*task, clock_->Now())) {
      return done(ServiceError(
          absl::FailedPreconditionError(absl::StrCat(caller.ToString(), " called barrier \"", id,
                                                     "\" but is not registered; register first"))));
    }
    // The default list is the service's own; only a caller's list needs checking.
    for (const TaskName& t : explicit_tasks ? *arrival.participants : std::vector<TaskName>{}) {
      if (!tasks_.Find(t)) {
        return done(ServiceError(absl::InvalidArgumentError(
            absl::StrCat("barrier \"", id, "\" names unknown task ", t.ToString()))));
      }
    }
  }
  auto health = [this](const TaskName& t) {
    absl::ReaderMutexLock lock(&mu_);
    return tasks_.Health(t);
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
                                                const TaskName& caller,
                                                const std::string& request) {
  if (auto bad = CheckBarrierId(id, config_.barriers); !bad.ok()) return ServiceError(bad);
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!tasks_.Find(caller)) return tasks_.Get(caller).status();
  }
  return barriers_.Cancel(id, counter, caller, request);
}

}  // namespace cohort
