#include "service/core/task_life.h"

#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"
#include "service/core/errors.h"
#include "spdlog/spdlog.h"

namespace cohort {

TaskLife::TaskLife(const ServiceConfig& config, const JobDirectory& jobs, const Clock* clock,
                   const HeartbeatMonitor* heartbeats, ParkedCallRegistry* parked,
                   TimerQueue* timers, UnderLock under_lock,
                   std::function<void()> on_register_timeout,
                   std::function<void()> on_shutdown_timeout)
    : config_(config),
      jobs_(jobs),
      clock_(clock),
      heartbeats_(heartbeats),
      parked_(parked),
      under_lock_(under_lock),
      tasks_(jobs),
      register_barrier_(timers, config.register_timeout, std::move(on_register_timeout)),
      shutdown_barrier_(timers, config.shutdown_barrier_timeout, std::move(on_shutdown_timeout)),
      exchanges_(jobs, parked, std::move(under_lock)) {}

// ---- State transitions ---------------------------------------------------------------

void TaskLife::StateChanged(TaskEffects& fx) {
  // One snapshot per job, shared by its watchers.
  absl::flat_hash_map<std::string, JobStateView> views;
  for (auto& [job, call] : tasks_.Changed()) {
    auto& view = views[job];
    if (!view) view = tasks_.Snapshot(job);
    fx.Finish<absl::StatusOr<JobStateView>>(*parked_, std::move(call), view);
  }
  exchanges_.CheckAlive(tasks_, fx);
}

void TaskLife::Connect(TaskRecord& task, uint64_t incarnation, TaskEffects& fx) {
  register_barrier_.RemoveWaiting(task.name);
  tasks_.MarkConnected(task, incarnation, clock_->Now());
  // A task that comes back exchanges devices anew.
  exchanges_.ForgetDevicesOf(task.name);
  spdlog::info("task {} connected with incarnation {:#x}", task.name.ToString(), incarnation);
  StateChanged(fx);
}

void TaskLife::SetError(TaskRecord& task, absl::Status error, FailureReason reason,
                        bool reported_by_task, TaskEffects& fx) {
  error = WithServiceError(std::move(error), {reported_by_task, task.name});
  register_barrier_.RemoveWaiting(task.name);
  tasks_.MarkError(task, error, reason);
  spdlog::error("task {} (incarnation {:#x}) is in error: {} (reason: {})", task.name.ToString(),
                task.incarnation, std::string(error.message()), FailureReasonName(reason));
  fx.failed_tasks.emplace_back(task.name, error);
  if (!task.job->auxiliary) FailRegisterBarrier(error, fx);
  exchanges_.FailDevicesWith(task.name, error, fx);
  if (!task.job->recoverable) Propagate(task.name, error, fx);
  StateChanged(fx);
  CheckShutdownBarrier(fx);
}

void TaskLife::Disconnect(TaskRecord& task, const absl::Status& why, TaskEffects& fx) {
  if (shutdown_barrier_.RemoveWaiting(task.name)) {
    fx.FinishAll<absl::Status>(*parked_, shutdown_barrier_.TakeCallsOf(task.name), why);
  }
  tasks_.MarkDisconnected(task, clock_->Now());
  std::vector<std::shared_ptr<ParkedCall>> polls;
  polls.swap(task.polls);
  fx.FinishAll<absl::Status>(*parked_, std::move(polls), why);
  fx.failed_tasks.emplace_back(task.name, why);
  exchanges_.FailDevicesWith(task.name, why, fx);
  StateChanged(fx);
}

void TaskLife::Propagate(const TaskName& source, const absl::Status& error, TaskEffects& fx) {
  if (!first_error_.ok()) return;
  first_error_ = error;
  first_error_changed_ = true;
  fx.propagated.emplace_back(source, error);
  for (auto& [name, task] : tasks_.all()) {
    std::vector<std::shared_ptr<ParkedCall>> polls;
    polls.swap(task->polls);
    fx.FinishAll<absl::Status>(*parked_, std::move(polls), error);
  }
}

// ---- Registration --------------------------------------------------------------------

std::optional<absl::Status> TaskLife::Register(const TaskName& name, uint64_t incarnation,
                                               const std::shared_ptr<StatusCall>& call,
                                               TaskEffects& fx) {
  TaskRecord* task = tasks_.Find(name);
  if (!task) return tasks_.Get(name).status();
  if (task->state == TaskState::kConnected && task->incarnation != incarnation &&
      !task->job->recoverable) {
    absl::Status error = absl::AbortedError(absl::StrCat(
        name.ToString(), " registered again with incarnation 0x", absl::Hex(incarnation),
        " while connected with incarnation 0x", absl::Hex(task->incarnation),
        ": the task restarted, so its old incarnation is lost"));
    SetError(*task, error, FailureReason::kTaskRestarted, /*reported_by_task=*/false, fx);
    return task->error;
  }
  if (task->state == TaskState::kError && !task->job->recoverable) {
    return Annotate(task->error, absl::StrCat(name.ToString(),
                                              " is in error and cannot register again "
                                              "(its job is not recoverable): "));
  }
  if (task->state == TaskState::kConnected && task->incarnation == incarnation) {
    // A retry whose first answer was lost.
    HeartbeatMonitor::Record(*task, clock_->Now());
    return absl::OkStatus();
  }
  if (!config_.register_barrier || task->job->auxiliary ||
      register_barrier_.state() == WholeJobBarrier::State::kPassed) {
    Connect(*task, incarnation, fx);
    return absl::OkStatus();
  }
  if (register_barrier_.state() == WholeJobBarrier::State::kFailed) {
    return register_barrier_.result();
  }
  register_barrier_.OpenIfIdle(clock_->Now());
  if (register_barrier_.IsWaiting(name)) {
    // A newer attempt of the same task supersedes the call still waiting.
    for (auto& earlier : register_barrier_.TakeCallsOf(name)) {
      fx.FinishReplaced<absl::Status>(
          *parked_, std::move(earlier),
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
  const WaiterId waiter = call->id();
  call->set_unlink(
      [this, waiter] { under_lock_([this, waiter] { register_barrier_.RemoveCall(waiter); }); });
  absl::Status answer = parked_->Add(call);
  if (answer.ok()) {
    register_barrier_.AddCall(call);
  } else {
    register_barrier_.RemoveWaiting(name);
  }
  StateChanged(fx);
  CheckRegisterBarrier(fx);
  if (answer.ok()) return std::nullopt;
  return answer;
}

void TaskLife::CheckRegisterBarrier(TaskEffects& fx) {
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
    Connect(*task, task->incarnation, fx);
  }
  spdlog::info("every workload task registered ({})",
               Plural(static_cast<long long>(jobs_.workload()->size()), "task"));
  fx.FinishAll<absl::Status>(*parked_, std::move(calls), absl::OkStatus());
}

void TaskLife::FailRegisterBarrier(const absl::Status& error, TaskEffects& fx) {
  if (!register_barrier_.is_open()) return;
  fx.FinishAll<absl::Status>(*parked_, register_barrier_.End(error), error);
}

void TaskLife::RegisterTimedOut(TaskEffects& fx) {
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
  FailRegisterBarrier(error, fx);
  absl::Status failed = ServiceError(
      absl::InternalError(absl::StrCat("cluster registration failed: ", error.message())));
  Propagate(TaskName{}, failed, fx);
  for (const auto& [name, task] : tasks_.all()) {
    if (task->state != TaskState::kError) {
      SetError(*task, failed, FailureReason::kRegisterTimeout, false, fx);
    }
  }
}

bool TaskLife::Registered() const {
  return register_barrier_.state() == WholeJobBarrier::State::kPassed ||
         (!config_.register_barrier &&
          tasks_.workload_connected() == static_cast<int>(jobs_.workload()->size()));
}

// ---- Shutdown and reset --------------------------------------------------------------

std::optional<absl::Status> TaskLife::Shutdown(const TaskName& name,
                                               const std::shared_ptr<StatusCall>& call,
                                               TaskEffects& fx) {
  TaskRecord* task = tasks_.Find(name);
  absl::Status shut_down = absl::CancelledError(absl::StrCat(name.ToString(), " shut down"));
  if (!task) return tasks_.Get(name).status();
  if (task->state == TaskState::kDisconnected) {
    return ServiceError(absl::FailedPreconditionError(
        absl::StrCat(name.ToString(), " is not connected; nothing to shut down")));
  }
  if (task->job->auxiliary || config_.shutdown_barrier_timeout == absl::ZeroDuration()) {
    spdlog::info("task {} shut down", name.ToString());
    Disconnect(*task, shut_down, fx);
    return absl::OkStatus();
  }
  if (shutdown_barrier_.is_done()) {
    absl::Status answer = shutdown_barrier_.result();
    Disconnect(*task, shut_down, fx);
    return answer;
  }
  shutdown_barrier_.OpenIfIdle(clock_->Now());
  const WaiterId waiter = call->id();
  call->set_unlink(
      [this, waiter] { under_lock_([this, waiter] { shutdown_barrier_.RemoveCall(waiter); }); });
  absl::Status answer = parked_->Add(call);
  if (answer.ok()) {
    shutdown_barrier_.AddCall(call);
    shutdown_barrier_.AddWaiting(name);
  }
  CheckShutdownBarrier(fx);
  if (answer.ok()) return std::nullopt;
  return answer;
}

void TaskLife::CheckShutdownBarrier(TaskEffects& fx) {
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
  fx.FinishAll<absl::Status>(*parked_, std::move(calls), result);
  // Disconnecting takes each task off the waiting list.
  std::vector<TaskName> waiting(shutdown_barrier_.waiting().begin(),
                                shutdown_barrier_.waiting().end());
  for (const TaskName& name : waiting) {
    Disconnect(*tasks_.Find(name),
               absl::CancelledError(absl::StrCat(name.ToString(), " shut down")), fx);
  }
}

void TaskLife::ShutdownTimedOut(TaskEffects& fx) {
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
  fx.FinishAll<absl::Status>(*parked_, shutdown_barrier_.End(error), error);
  for (const TaskName& name : missing) {
    TaskRecord* task = tasks_.Find(name);
    if (task->state == TaskState::kConnected) {
      SetError(*task, error, FailureReason::kShutdownTimeout, false, fx);
    }
  }
  std::vector<TaskName> waiting(shutdown_barrier_.waiting().begin(),
                                shutdown_barrier_.waiting().end());
  for (const TaskName& name : waiting) Disconnect(*tasks_.Find(name), error, fx);
}

absl::Status TaskLife::Reset(const TaskName& name, const std::string& request, TaskEffects& fx) {
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
  Disconnect(**task, absl::CancelledError(absl::StrCat(name.ToString(), " was reset")), fx);
  return absl::OkStatus();
}

// ---- Heartbeats and errors -----------------------------------------------------------

absl::Status TaskLife::HeartbeatOfAnotherIncarnation(const TaskName& name, uint64_t incarnation,
                                                     TaskEffects& fx) {
  TaskRecord* task = tasks_.Find(name);
  absl::Status error = absl::AbortedError(absl::StrCat(
      name.ToString(), " sent a heartbeat with incarnation ", incarnation,
      " but is registered with incarnation ", task->incarnation, ": the task restarted"));
  if (task->state == TaskState::kConnected && task->incarnation != incarnation) {
    SetError(*task, error, FailureReason::kTaskRestarted, /*reported_by_task=*/false, fx);
    error = task->error;
  }
  return error;
}

void TaskLife::FailStale(const std::vector<TaskName>& stale, absl::Time now, TaskEffects& fx) {
  for (const TaskName& name : stale) {
    TaskRecord* task = tasks_.Find(name);
    absl::Status error = heartbeats_->StaleError(*task, now);
    if (!error.ok()) {
      SetError(*task, error, FailureReason::kHeartbeatTimeout, /*reported_by_task=*/false, fx);
    }
  }
}

absl::Status TaskLife::ReportError(const TaskName& source, const absl::Status& error,
                                   ErrorReporter by, FailureReason reason, size_t max_message_bytes,
                                   TaskEffects& fx) {
  auto task = tasks_.Get(source);
  if (!task.ok()) return task.status();
  // As upstream: a task reports its own errors while registered. Errors about a task
  // reported by someone else (ReportErrorToTask, cohortctl) need no registration.
  if (by == ErrorReporter::kTheTask && (*task)->state == TaskState::kDisconnected &&
      !heartbeats_->InGrace(**task, clock_->Now())) {
    return ServiceError(absl::FailedPreconditionError(absl::StrCat(
        source.ToString(), " reported an error but is not registered; register first")));
  }
  // Cut rather than refused: a task in trouble must still be heard. The cut text is what
  // every task and the state log get.
  absl::string_view text = error.message();
  std::string cut;
  if (text.size() > max_message_bytes) {
    size_t keep = max_message_bytes;
    while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
    cut = absl::StrCat(" [", text.size() - keep, " more bytes cut by the coordinator]");
    spdlog::warn("{} reported an error of {} bytes; kept the first {}", source.ToString(),
                 text.size(), keep);
    text = text.substr(0, keep);
  }
  absl::Status reported(error.code(),
                        absl::StrCat("error reported by ", source.ToString(), ": ", text, cut));
  if (reason == FailureReason::kUnspecified) reason = ReportedErrorReason(error);
  SetError(**task, reported, reason, /*reported_by_task=*/true, fx);
  return absl::OkStatus();
}

std::optional<absl::Status> TaskLife::PollForError(const TaskName& name, bool stopped,
                                                   const std::shared_ptr<StatusCall>& call,
                                                   TaskEffects& fx) {
  TaskRecord* task = tasks_.Find(name);
  if (!task) return tasks_.Get(name).status();
  if (task->state == TaskState::kError) {
    return ServiceError(absl::FailedPreconditionError(absl::StrCat(
        name.ToString(), " polls for errors but is already in error: ", task->error.message())));
  }
  if (task->state != TaskState::kConnected && !heartbeats_->InGrace(*task, clock_->Now())) {
    return ServiceError(absl::FailedPreconditionError(
        absl::StrCat(name.ToString(), " polls for errors but is not registered (state ",
                     TaskStateName(task->state), ")")));
  }
  if (!first_error_.ok()) return first_error_;
  if (stopped) {
    return ServiceError(absl::UnavailableError("the coordination service is stopping"));
  }
  // One poll per task: a new one replaces the old, whose caller has likely gone.
  for (auto& earlier : task->polls) {
    fx.FinishReplaced<absl::Status>(
        *parked_, earlier,
        absl::CancelledError(
            absl::StrCat("a newer error poll of ", name.ToString(), " replaced this one")));
  }
  task->polls.clear();
  const WaiterId waiter = call->id();
  call->set_unlink([this, name, waiter] {
    under_lock_([this, &name, waiter] {
      if (TaskRecord* t = tasks_.Find(name)) RemoveParkedCall(&t->polls, waiter);
    });
  });
  absl::Status answer = parked_->Add(call);
  if (!answer.ok()) return answer;
  task->polls.push_back(call);
  return std::nullopt;
}

// ---- Task states ---------------------------------------------------------------------

std::optional<absl::StatusOr<JobStateView>> TaskLife::WatchJobState(
    const std::string& job, int64_t version, const std::shared_ptr<JobStateWatch>& call) {
  if (version != tasks_.version()) return tasks_.Snapshot(job);
  const WaiterId waiter = call->id();
  call->set_unlink([this, waiter] { under_lock_([this, waiter] { tasks_.RemoveWatch(waiter); }); });
  absl::Status s = parked_->Add(call);
  if (!s.ok()) return s;
  tasks_.AddWatch(job, call);
  return std::nullopt;
}

// ---- Durability ----------------------------------------------------------------------

namespace {
DurableTask TaskLifeDurableTask(const TaskRecord& task) {
  return {task.name,  task.state,  task.incarnation,  task.ever_registered,
          task.error, task.reason, task.reset_request};
}
DurableWholeBarrier TaskLifeDurableBarrier(const WholeJobBarrier& barrier, bool with_waiting) {
  DurableWholeBarrier out;
  out.state = static_cast<int>(barrier.state());
  out.result = barrier.result();
  if (with_waiting) out.waiting.assign(barrier.waiting().begin(), barrier.waiting().end());
  return out;
}
}  // namespace

void TaskLife::Journal(StateJournal* journal) {
  auto tasks = tasks_.TakeChanged();
  auto reg_changed = register_barrier_.TakeStateChanged();
  auto reg_waiting = register_barrier_.TakeWaitingChanges();
  auto shut_changed = shutdown_barrier_.TakeStateChanged();
  auto shut_waiting = shutdown_barrier_.TakeWaitingChanges();
  bool error_changed = std::exchange(first_error_changed_, false);
  if (journal) {
    for (const TaskRecord* task : tasks) journal->TaskChanged(TaskLifeDurableTask(*task));
    for (auto [kind, barrier, changed, waiting] :
         {std::tuple{WholeBarrierKind::kRegister, &register_barrier_, reg_changed, &reg_waiting},
          std::tuple{WholeBarrierKind::kShutdown, &shutdown_barrier_, shut_changed,
                     &shut_waiting}}) {
      if (changed) journal->WholeBarrierChanged(kind, TaskLifeDurableBarrier(*barrier, false));
      for (const auto& [task, is_waiting] : *waiting) {
        journal->WholeBarrierWaiting(kind, task, is_waiting);
      }
    }
    if (error_changed) journal->FirstError(first_error_);
  }
  exchanges_.Journal(journal);
}

absl::Status TaskLife::Restore(const DurableState& state, absl::Time now) {
  for (const DurableTask& saved : state.tasks) {
    TaskRecord* task = tasks_.Find(saved.task);
    if (!task) {
      return absl::FailedPreconditionError(absl::StrCat("the saved state has task ",
                                                        saved.task.ToString(),
                                                        ", which this coordinator's jobs "
                                                        "do not have"));
    }
    tasks_.Restore(*task, saved.state, saved.incarnation, saved.ever_registered, saved.error,
                   saved.reason, saved.reset_request, now);
  }
  for (auto [saved, barrier] : {std::pair{&state.register_barrier, &register_barrier_},
                                std::pair{&state.shutdown_barrier, &shutdown_barrier_}}) {
    if (saved->state < 0 || saved->state > static_cast<int>(WholeJobBarrier::State::kFailed)) {
      return absl::DataLossError(
          absl::StrCat("the saved state has a whole-job barrier in "
                       "unknown state ",
                       saved->state));
    }
    barrier->Restore(static_cast<WholeJobBarrier::State>(saved->state), saved->result,
                     saved->waiting, now);
  }
  first_error_ = state.first_error;
  exchanges_.Restore(state.device_groups);
  // What was restored is no change to record.
  tasks_.TakeChanged();
  register_barrier_.TakeStateChanged();
  register_barrier_.TakeWaitingChanges();
  shutdown_barrier_.TakeStateChanged();
  shutdown_barrier_.TakeWaitingChanges();
  return absl::OkStatus();
}

void TaskLife::Capture(DurableState* state) const {
  for (const auto& [name, task] : tasks_.all()) {
    state->tasks.push_back(TaskLifeDurableTask(*task));
  }
  state->register_barrier = TaskLifeDurableBarrier(register_barrier_, true);
  state->shutdown_barrier = TaskLifeDurableBarrier(shutdown_barrier_, true);
  state->first_error = first_error_;
  exchanges_.Capture(&state->device_groups);
}

}  // namespace cohort
