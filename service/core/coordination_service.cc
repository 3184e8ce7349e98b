// CoordinationService: construction, the rules that tie task states to everything built on
// them, heartbeats, errors, task states and stopping.
#include "service/core/coordination_service.h"

#include <algorithm>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "spdlog/spdlog.h"

namespace cohort {

absl::StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Create(
    ServiceConfig config, const Clock* clock, ServiceObserver* observer) {
  if (auto s = ValidateConfig(config); !s.ok()) return s;
  return std::unique_ptr<CoordinationService>(
      new CoordinationService(std::move(config), clock, observer));
}

namespace {
uint64_t RandomIncarnation() {
  std::random_device rd;
  std::mt19937_64 gen((uint64_t{rd()} << 32) ^ rd());
  uint64_t v = 0;
  while (v == 0) v = gen();
  return v;
}
}  // namespace

CoordinationService::CoordinationService(ServiceConfig config, const Clock* clock,
                                         ServiceObserver* observer)
    : config_(std::move(config)),
      clock_(clock),
      observer_(observer),
      service_incarnation_(config_.service_incarnation ? config_.service_incarnation
                                                       : RandomIncarnation()),
      jobs_(config_.jobs, config_.default_job),
      parked_(config_.parked),
      key_values_(config_.key_value, &parked_, &timers_),
      barriers_(clock, &parked_, &timers_, observer),
      heartbeats_(config_.heartbeat_timeout),
      tasks_(jobs_),
      register_barrier_(&timers_, config_.register_timeout, [this] { OnRegisterTimeout(); }),
      shutdown_barrier_(&timers_, config_.shutdown_barrier_timeout,
                        [this] { OnShutdownTimeout(); }) {}

CoordinationService::~CoordinationService() {
  Stop(absl::UnavailableError("the coordination service is shutting down"));
}

void CoordinationService::Apply(Effects& fx) {
  for (auto& [task, error] : fx.failed_tasks) barriers_.FailTask(task, error);
  for (auto& fn : fx.after) fn();
  for (auto& [task, error] : fx.propagated) {
    if (observer_) observer_->OnErrorPropagated(task, error);
  }
}

// ---- State transitions ---------------------------------------------------------------

void CoordinationService::StateChangedLocked(Effects& fx) {
  // One snapshot per job, shared by its watchers.
  absl::flat_hash_map<std::string, JobStateView> views;
  for (auto& [job, call] : tasks_.Changed()) {
    auto& view = views[job];
    if (!view) view = tasks_.Snapshot(job);
    fx.Finish<absl::StatusOr<JobStateView>>(parked_, std::move(call), view);
  }
  CheckAliveGroupsLocked(fx);
}

void CoordinationService::ConnectLocked(TaskRecord& task, uint64_t incarnation, Effects& fx) {
  register_barrier_.RemoveWaiting(task.name);
  tasks_.MarkConnected(task, incarnation, clock_->Now());
  // A task that comes back exchanges devices anew.
  device_groups_.ForgetFinishedWith(task.name);
  spdlog::info("task {} connected with incarnation {:#x}", task.name.ToString(), incarnation);
  StateChangedLocked(fx);
}

void CoordinationService::SetErrorLocked(TaskRecord& task, absl::Status error,
                                         bool reported_by_task, Effects& fx) {
  error = WithServiceError(std::move(error), {reported_by_task, task.name});
  register_barrier_.RemoveWaiting(task.name);
  tasks_.MarkError(task, error);
  spdlog::error("task {} (incarnation {:#x}) is in error: {}", task.name.ToString(),
                task.incarnation, std::string(error.message()));
  fx.failed_tasks.emplace_back(task.name, error);
  if (!task.job->auxiliary) FailRegisterBarrierLocked(error, fx);
  FailDeviceGroupsWithLocked(task.name, error, fx);
  if (!task.job->recoverable) PropagateLocked(task.name, error, fx);
  StateChangedLocked(fx);
  CheckShutdownBarrierLocked(fx);
}

void CoordinationService::DisconnectLocked(TaskRecord& task, const absl::Status& why, Effects& fx) {
  if (shutdown_barrier_.RemoveWaiting(task.name)) {
    fx.FinishAll<absl::Status>(parked_, shutdown_barrier_.TakeCallsOf(task.name), why);
  }
  tasks_.MarkDisconnected(task, clock_->Now());
  std::vector<std::shared_ptr<ParkedCall>> polls;
  polls.swap(task.polls);
  fx.FinishAll<absl::Status>(parked_, std::move(polls), why);
  fx.failed_tasks.emplace_back(task.name, why);
  FailDeviceGroupsWithLocked(task.name, why, fx);
  StateChangedLocked(fx);
}

void CoordinationService::PropagateLocked(const TaskName& source, const absl::Status& error,
                                          Effects& fx) {
  if (!first_error_.ok()) return;
  first_error_ = error;
  fx.propagated.emplace_back(source, error);
  for (auto& [name, task] : tasks_.all()) {
    std::vector<std::shared_ptr<ParkedCall>> polls;
    polls.swap(task->polls);
    fx.FinishAll<absl::Status>(parked_, std::move(polls), error);
  }
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
    absl::MutexLock lock(&mu_);
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
    return ServiceError(absl::AbortedError(
        absl::StrCat("request from ", name.ToString(), " carries incarnation ", incarnation,
                     " but the task is registered with incarnation ", (*task)->incarnation)));
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
    absl::MutexLock lock(&mu_);
    for (const TaskName& name : stale) {
      TaskRecord* task = tasks_.Find(name);
      // Looked at again: a heartbeat may have come in between the two locks.
      absl::Status error = heartbeats_.StaleError(*task, now);
      if (!error.ok()) SetErrorLocked(*task, error, /*reported_by_task=*/false, fx);
    }
  }
  Apply(fx);
}

absl::Time CoordinationService::RunTimers() {
  absl::Time now = clock_->Now();
  timers_.RunDue(now);
  if (heartbeats_.CheckDue(now)) CheckHeartbeats();
  return std::min(timers_.NextDeadline(), heartbeats_.next_check());
}

// ---- Errors --------------------------------------------------------------------------

absl::Status CoordinationService::PropagatedError() const {
  absl::ReaderMutexLock lock(&mu_);
  return first_error_;
}

absl::Status CoordinationService::ReportError(const TaskName& source, const absl::Status& error) {
  if (error.ok()) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat(source.ToString(), " reported an error with code OK; nothing to report")));
  }
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    auto task = tasks_.Get(source);
    if (!task.ok()) return task.status();
    absl::Status reported(
        error.code(), absl::StrCat("error reported by ", source.ToString(), ": ", error.message()));
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
    absl::MutexLock lock(&mu_);
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
        absl::MutexLock lock(&mu_);
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
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else if (version != tasks_.version()) {
      answer = tasks_.Snapshot(name);
    } else {
      call->set_unlink([this, waiter] {
        absl::MutexLock lock(&mu_);
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
