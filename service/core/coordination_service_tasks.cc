// CoordinationService: a task's life. Registration and shutdown, each behind its whole-job
// barrier; reset; heartbeats and the stale ones; errors, reported and propagated; task states
// and their watches.
#include <algorithm>
#include <memory>
#include <utility>

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

// ---- Heartbeats ----------------------------------------------------------------------

absl::Status CoordinationService::Heartbeat(const TaskName& name, uint64_t incarnation) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto found = tasks_.Get(name);
    if (!found.ok()) return found.status();
    TaskRecord* task = *found;
    if (task->state == TaskState::kError) {
      return WithServiceError(
          absl::AbortedError(absl::StrCat("heartbeat from ", name.ToString(),
                                          ", which is already in error: ", task->error.message())),
          GetServiceError(task->error).value_or(ServiceErrorInfo{}));
    }
    if (task->state != TaskState::kConnected) {
      if (heartbeats_.InGrace(*task, clock_->Now())) return absl::OkStatus();
      return ServiceError(absl::InvalidArgumentError(
          absl::StrCat(name.ToString(), " must register before sending heartbeats (state ",
                       TaskStateName(task->state), ")")));
    }
    if (task->incarnation == incarnation) {
      HeartbeatMonitor::Record(*task, clock_->Now());
      return absl::OkStatus();
    }
    if (task->job->recoverable) return absl::OkStatus();  // a stale process; not recorded
  }
  // A heartbeat of another incarnation: the task restarted without registering again.
  Effects fx;
  absl::Status error;
  {
    WriteLock lock(this);
    TaskRecord* task = tasks_.Find(name);
    error = absl::AbortedError(absl::StrCat(name.ToString(), " sent a heartbeat with incarnation ",
                                            incarnation, " but is registered with incarnation ",
                                            task->incarnation, ": the task restarted"));
    if (task->state == TaskState::kConnected && task->incarnation != incarnation) {
      SetErrorLocked(*task, error, /*reported_by_task=*/false, fx);
      error = task->error;
    }
  }
  Apply(fx);
  return error;
}

absl::Status CoordinationService::CheckIncarnation(const TaskName& name,
                                                   uint64_t incarnation) const {
  absl::ReaderMutexLock lock(&mu_);
  auto task = tasks_.Get(name);
  if (!task.ok()) return task.status();
  if ((*task)->ever_registered && (*task)->incarnation != incarnation) {
    return ServiceError(absl::AbortedError(absl::StrCat(
        "request from ", name.ToString(), " carries incarnation 0x", absl::Hex(incarnation),
        " but the task is registered with incarnation 0x", absl::Hex((*task)->incarnation))));
  }
  return absl::OkStatus();
}

void CoordinationService::CheckHeartbeats() {
  absl::Time now = clock_->Now();
  std::vector<TaskName> stale;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (stopped_) return;
    stale = heartbeats_.FindStale(tasks_, now);
  }
  if (stale.empty()) return;
  Effects fx;
  {
    WriteLock lock(this);
    for (const TaskName& name : stale) {
      TaskRecord* task = tasks_.Find(name);
      // Looked at again: a heartbeat may have come in between the two locks.
      absl::Status error = heartbeats_.StaleError(*task, now);
      if (!error.ok()) SetErrorLocked(*task, error, /*reported_by_task=*/false, fx);
    }
  }
  Apply(fx);
}

// ---- Errors --------------------------------------------------------------------------

absl::Status CoordinationService::PropagatedError() const {
  absl::ReaderMutexLock lock(&mu_);
  return first_error_;
}

absl::Status CoordinationService::ReportError(const TaskName& source, const absl::Status& error,
                                              ErrorReporter by) {
  if (error.ok()) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat(source.ToString(), " reported an error with code OK; nothing to report")));
  }
  Effects fx;
  {
    WriteLock lock(this);
    auto task = tasks_.Get(source);
    if (!task.ok()) return task.status();
    // As upstream: a task reports its own errors while registered. Errors about a task
    // reported by someone else (ReportErrorToTask, cohortctl) need no registration.
    if (by == ErrorReporter::kTheTask && (*task)->state == TaskState::kDisconnected &&
        !heartbeats_.InGrace(**task, clock_->Now())) {
      return ServiceError(absl::FailedPreconditionError(absl::StrCat(
          source.ToString(), " reported an error but is not registered; register first")));
    }
    // Cut rather than refused: a task in trouble must still be heard. The cut text is what
    // every task and the state log get.
    absl::string_view text = error.message();
    std::string cut;
    if (text.size() > kMaxReportedErrorBytes) {
      size_t keep = kMaxReportedErrorBytes;
      while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
      cut = absl::StrCat(" [", text.size() - keep, " more bytes cut by the coordinator]");
      spdlog::warn("{} reported an error of {} bytes; kept the first {}", source.ToString(),
                   text.size(), keep);
      text = text.substr(0, keep);
    }
    absl::Status reported(error.code(),
                          absl::StrCat("error reported by ", source.ToString(), ": ", text, cut));
    SetErrorLocked(**task, reported, /*reported_by_task=*/true, fx);
  }
  Apply(fx);
  return absl::OkStatus();
}

void CoordinationService::PollForError(const TaskName& name, WaiterId waiter, StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kPollForError, name, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    WriteLock lock(this);
    TaskRecord* task = tasks_.Find(name);
    if (!task) {
      answer = tasks_.Get(name).status();
    } else if (task->state == TaskState::kError) {
      answer = ServiceError(absl::FailedPreconditionError(absl::StrCat(
          name.ToString(), " polls for errors but is already in error: ", task->error.message())));
    } else if (task->state != TaskState::kConnected && !heartbeats_.InGrace(*task, clock_->Now())) {
      answer = ServiceError(absl::FailedPreconditionError(
          absl::StrCat(name.ToString(), " polls for errors but is not registered (state ",
                       TaskStateName(task->state), ")")));
    } else if (!first_error_.ok()) {
      answer = first_error_;
    } else if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else {
      // One poll per task: a new one replaces the old, whose caller has likely gone.
      for (auto& earlier : task->polls) {
        fx.FinishReplaced<absl::Status>(
            parked_, earlier,
            absl::CancelledError(
                absl::StrCat("a newer error poll of ", name.ToString(), " replaced this one")));
      }
      task->polls.clear();
      call->set_unlink([this, name, waiter] {
        WriteLock lock(this);
        if (TaskRecord* t = tasks_.Find(name)) RemoveParkedCall(&t->polls, waiter);
      });
      answer = parked_.Add(call);
      parked = answer.ok();
      if (parked) task->polls.push_back(call);
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

// ---- Task states ---------------------------------------------------------------------

absl::StatusOr<std::vector<TaskStateInfo>> CoordinationService::GetTaskStates(
    const std::vector<TaskName>& tasks) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<TaskStateInfo> out;
  for (const TaskName& name : tasks) {
    auto task = tasks_.Get(name);
    if (!task.ok()) return task.status();
    out.push_back(tasks_.Info(**task));
  }
  return out;
}

std::vector<TaskStateInfo> CoordinationService::AllTasks() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<TaskStateInfo> out;
  for (const auto& [name, task] : tasks_.all()) out.push_back(tasks_.Info(*task));
  return out;
}

void CoordinationService::WatchJobState(const std::string& job, int64_t version, WaiterId waiter,
                                        Done<JobStateView> done) {
  const std::string& name = job.empty() ? jobs_.default_job() : job;
  if (!jobs_.Find(name)) {
    return done(
        ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown job \"", name, "\""))));
  }
  auto call = std::make_shared<JobStateWatch>(waiter, ParkKind::kWatchJobState, std::nullopt,
                                              std::move(done));
  absl::StatusOr<JobStateView> answer;
  bool parked = false;
  {
    WriteLock lock(this);
    if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else if (version != tasks_.version()) {
      answer = tasks_.Snapshot(name);
    } else {
      call->set_unlink([this, waiter] {
        WriteLock lock(this);
        tasks_.RemoveWatch(waiter);
      });
      absl::Status s = parked_.Add(call);
      if (s.ok()) {
        tasks_.AddWatch(name, call);
        parked = true;
      } else {
        answer = s;
      }
    }
  }
  if (!parked) call->Finish(std::move(answer));
}

}  // namespace cohort
