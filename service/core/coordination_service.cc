#include "service/core/coordination_service.h"

#include <algorithm>
#include <atomic>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "service/core/errors.h"
#include "service/core/service_internal.h"
#include "spdlog/spdlog.h"

namespace cohort {

const char* TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kUninitialized:
      return "uninitialized";
    case TaskState::kDisconnected:
      return "disconnected";
    case TaskState::kConnected:
      return "connected";
    case TaskState::kError:
      return "error";
  }
  return "unknown";
}

absl::Status ValidateConfig(const ServiceConfig& config) {
  if (config.jobs.empty()) {
    return absl::InvalidArgumentError("no jobs configured: give at least one --job NAME=COUNT");
  }
  absl::flat_hash_map<std::string, int> seen;
  int workload_jobs = 0;
  for (const JobConfig& job : config.jobs) {
    if (job.name.empty()) return absl::InvalidArgumentError("a job has an empty name");
    if (job.num_tasks <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job \"", job.name, "\" has ", job.num_tasks, " tasks; need at least 1"));
    }
    if (seen[job.name]++) {
      return absl::InvalidArgumentError(absl::StrCat("job \"", job.name, "\" is declared twice"));
    }
    if (!job.auxiliary) ++workload_jobs;
  }
  if (workload_jobs == 0) {
    return absl::InvalidArgumentError("every job is auxiliary; declare one workload job");
  }
  if (!config.default_job.empty() && !seen.count(config.default_job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("default job \"", config.default_job, "\" is not a declared job"));
  }
  if (config.default_job.empty() && workload_jobs > 1) {
    return absl::InvalidArgumentError(
        "several workload jobs are declared; name the one that requests without a job name "
        "go to (--default-job)");
  }
  if (config.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("heartbeat timeout must be positive");
  }
  if (config.register_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("register timeout must be positive");
  }
  if (config.shutdown_barrier_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("shutdown barrier timeout must not be negative");
  }
  return absl::OkStatus();
}

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
      parked_(config_.parked),
      key_values_(config_.key_value, &parked_, &timers_),
      barriers_(clock, &parked_, &timers_, observer) {
  for (const JobConfig& job : config_.jobs) {
    jobs_[job.name] = &job;
    if (default_job_.empty() && !job.auxiliary) default_job_ = job.name;
    for (int32_t i = 0; i < job.num_tasks; ++i) {
      TaskName name{job.name, i};
      auto task = std::make_unique<Task>();
      task->name = name;
      task->job = &job;
      tasks_.emplace(name, std::move(task));
    }
  }
  if (!config_.default_job.empty()) default_job_ = config_.default_job;
  auto workload = std::make_shared<std::vector<TaskName>>();
  for (const auto& [name, task] : tasks_) {
    if (!task->job->auxiliary) workload->push_back(name);
  }
  workload_tasks_ = std::move(workload);
}

CoordinationService::~CoordinationService() {
  Stop(absl::UnavailableError("the coordination service is shutting down"));
}

absl::StatusOr<TaskName> CoordinationService::ResolveTask(const std::string& job,
                                                          int32_t id) const {
  const std::string& name = job.empty() ? default_job_ : job;
  auto it = jobs_.find(name);
  if (it == jobs_.end()) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat("unknown job \"", name, "\"; this coordinator serves ",
                     absl::StrJoin(config_.jobs, ", ", [](std::string* out, const JobConfig& j) {
                       absl::StrAppend(out, j.name, " (", j.num_tasks, " tasks)");
                     }))));
  }
  if (id < 0 || id >= it->second->num_tasks) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat("task id ", id, " is out of range for job \"", name, "\", which has ",
                     it->second->num_tasks, " tasks (ids 0..", it->second->num_tasks - 1, ")")));
  }
  return TaskName{name, id};
}

bool CoordinationService::IsAuxiliary(const std::string& job) const {
  auto it = jobs_.find(job);
  return it != jobs_.end() && it->second->auxiliary;
}

CoordinationService::Task* CoordinationService::FindLocked(const TaskName& task) const {
  auto it = tasks_.find(task);
  return it == tasks_.end() ? nullptr : it->second.get();
}

absl::StatusOr<CoordinationService::Task*> CoordinationService::ConnectedLocked(
    const TaskName& name) const {
  Task* task = FindLocked(name);
  if (!task) {
    return ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
  }
  if (task->state == TaskState::kError) return task->error;
  if (task->state != TaskState::kConnected) {
    return ServiceError(absl::FailedPreconditionError(
        absl::StrCat(name.ToString(), " is not registered (state ", TaskStateName(task->state),
                     "); call RegisterTask first")));
  }
  return task;
}

absl::Status CoordinationService::TaskHealthLocked(const TaskName& name) const {
  Task* task = FindLocked(name);
  if (!task) return absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString()));
  if (task->state == TaskState::kError) return task->error;
  if (task->state == TaskState::kDisconnected && task->ever_registered) {
    return absl::FailedPreconditionError(absl::StrCat(name.ToString(), " has disconnected"));
  }
  return absl::OkStatus();
}

void CoordinationService::SetStateLocked(Task& task, TaskState state) {
  if (!task.job->auxiliary) {
    workload_connected_ += (state == TaskState::kConnected) - (task.state == TaskState::kConnected);
    workload_in_error_ += (state == TaskState::kError) - (task.state == TaskState::kError);
  }
  task.state = state;
}

void CoordinationService::Apply(Effects& fx) {
  for (auto& [task, error] : fx.failed_tasks) barriers_.FailTask(task, error);
  for (auto& fn : fx.after) fn();
  for (auto& [task, error] : fx.propagated) {
    if (observer_) observer_->OnErrorPropagated(task, error);
  }
}

void CoordinationService::StateChangedLocked(Effects& fx) {
  ++state_version_;
  std::vector<std::pair<std::string, std::shared_ptr<WatchCall>>> calls;
  calls.swap(watch_calls_);
  // One snapshot per job, shared by its watchers.
  absl::flat_hash_map<std::string, JobStateView> views;
  for (auto& [job, call] : calls) {
    auto& view = views[job];
    if (!view) view = SnapshotLocked(job);
    fx.Finish(parked_, call, absl::StatusOr<JobStateView>(view));
  }
  CheckAliveGroupsLocked(fx);
}

// ---- Registration --------------------------------------------------------------------

void CoordinationService::RegisterTask(const TaskName& name, uint64_t incarnation, WaiterId waiter,
                                       StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kRegister, name, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    Task* task = FindLocked(name);
    if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else if (!task) {
      answer =
          ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
    } else if (task->state == TaskState::kConnected && task->incarnation != incarnation &&
               !task->job->recoverable) {
      absl::Status error = absl::AbortedError(
          absl::StrCat(name.ToString(), " registered again with incarnation ", incarnation,
                       " while connected with incarnation ", task->incarnation,
                       ": the task restarted, so its old incarnation is lost"));
      SetErrorLocked(*task, error, /*reported_by_task=*/false, fx);
      answer = task->error;
    } else if (task->state == TaskState::kError && !task->job->recoverable) {
      answer = Annotate(task->error, absl::StrCat(name.ToString(),
                                                  " is in error and cannot register again "
                                                  "(its job is not recoverable): "));
    } else if (task->state == TaskState::kConnected && task->incarnation == incarnation) {
      // A retry whose first answer was lost.
      task->last_heartbeat_ns.store(absl::ToUnixNanos(clock_->Now()));
      answer = absl::OkStatus();
    } else if (!config_.register_barrier || task->job->auxiliary ||
               register_state_ == Rendezvous::kPassed) {
      ConnectLocked(*task, incarnation, fx);
      answer = absl::OkStatus();
    } else if (register_state_ == Rendezvous::kFailed) {
      answer = register_result_;
    } else {
      if (register_state_ == Rendezvous::kIdle) {
        register_state_ = Rendezvous::kOpen;
        register_timer_ = timers_.Schedule(clock_->Now() + config_.register_timeout,
                                           [this] { OnRegisterTimeout(); });
      }
      if (task->awaiting_register) {
        // A newer attempt of the same task supersedes the call still waiting.
        for (auto& earlier : register_calls_) {
          if (earlier->owner() == name) {
            fx.FinishReplaced(
                parked_, std::static_pointer_cast<StatusCall>(earlier),
                ServiceError(absl::AlreadyExistsError(absl::StrCat(
                    "registration of ", name.ToString(),
                    " superseded by a newer attempt with incarnation ", incarnation))));
          }
        }
        RemoveIf(&register_calls_, [&name](const auto& c) { return c->owner() == name; });
      } else {
        task->awaiting_register = true;
        ++workload_awaiting_register_;
      }
      task->incarnation = incarnation;
      spdlog::debug("task {} (incarnation {:#x}) waits at the register barrier ({} of {})",
                    name.ToString(), incarnation, workload_awaiting_register_ + workload_connected_,
                    workload_tasks_->size());
      answer = ParkLocked(call, &register_calls_);
      parked = answer.ok();
      if (!parked) {
        task->awaiting_register = false;
        --workload_awaiting_register_;
      }
      StateChangedLocked(fx);
      CheckRegisterBarrierLocked(fx);
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

void CoordinationService::CheckRegisterBarrierLocked(Effects& fx) {
  if (register_state_ != Rendezvous::kOpen) return;
  if (workload_awaiting_register_ + workload_connected_ <
      static_cast<int>(workload_tasks_->size())) {
    return;
  }
  register_state_ = Rendezvous::kPassed;
  timers_.Cancel(register_timer_);
  for (const TaskName& name : *workload_tasks_) {
    Task* task = FindLocked(name);
    if (task->awaiting_register) ConnectLocked(*task, task->incarnation, fx);
  }
  spdlog::info("all {} workload tasks registered", workload_tasks_->size());
  for (auto& call : register_calls_) {
    fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), absl::OkStatus());
  }
  register_calls_.clear();
}

void CoordinationService::ConnectLocked(Task& task, uint64_t incarnation, Effects& fx) {
  if (task.awaiting_register) {
    task.awaiting_register = false;
    --workload_awaiting_register_;
  }
  SetStateLocked(task, TaskState::kConnected);
  // A task that comes back exchanges devices anew: forget finished exchanges it was part of.
  for (auto it = device_groups_.begin(); it != device_groups_.end();) {
    const auto& members = it->second->members;
    bool member = std::binary_search(members.begin(), members.end(), task.name);
    it = (member && it->second->done) ? device_groups_.erase(it) : std::next(it);
  }
  task.incarnation = incarnation;
  task.error = absl::OkStatus();
  task.ever_registered = true;
  task.last_heartbeat_ns.store(absl::ToUnixNanos(clock_->Now()));
  spdlog::info("task {} connected with incarnation {:#x}", task.name.ToString(), incarnation);
  StateChangedLocked(fx);
}

void CoordinationService::FailRegisterBarrierLocked(const absl::Status& error, Effects& fx) {
  if (register_state_ != Rendezvous::kOpen) return;
  register_state_ = Rendezvous::kFailed;
  register_result_ = error;
  timers_.Cancel(register_timer_);
  for (auto& call : register_calls_) {
    fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), error);
  }
  register_calls_.clear();
}

void CoordinationService::OnRegisterTimeout() {
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    if (register_state_ != Rendezvous::kOpen) return;
    std::vector<TaskName> missing;
    for (const auto& [name, task] : tasks_) {
      // Tasks waiting at the barrier are still disconnected, but they did register.
      if (!task->job->auxiliary && task->state != TaskState::kConnected &&
          !task->awaiting_register) {
        missing.push_back(name);
      }
    }
    absl::Status error = ServiceError(absl::DeadlineExceededError(absl::StrCat(
        "the register barrier timed out after ", absl::FormatDuration(config_.register_timeout),
        " with ", missing.size(), " tasks missing: ", internal::TaskList(missing))));
    spdlog::error("{}", std::string(error.message()));
    FailRegisterBarrierLocked(error, fx);
    absl::Status failed = ServiceError(
        absl::InternalError(absl::StrCat("cluster registration failed: ", error.message())));
    PropagateLocked(TaskName{}, failed, fx);
    for (auto& [n, task] : tasks_) {
      if (task->state != TaskState::kError) SetErrorLocked(*task, failed, false, fx);
    }
  }
  Apply(fx);
}

bool CoordinationService::InGraceLocked(const Task& task) const {
  // A task that just disconnected may still have a heartbeat or a poll in flight.
  return task.state == TaskState::kDisconnected &&
         clock_->Now() < task.disconnected_at + config_.heartbeat_timeout;
}

absl::Status CoordinationService::Heartbeat(const TaskName& name, uint64_t incarnation) {
  {
    absl::ReaderMutexLock lock(&mu_);
    Task* task = FindLocked(name);
    if (!task) {
      return ServiceError(
          absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
    }
    if (task->state == TaskState::kError) {
      return WithServiceError(
          absl::AbortedError(absl::StrCat("heartbeat from ", name.ToString(),
                                          ", which is already in error: ", task->error.message())),
          GetServiceError(task->error).value_or(ServiceErrorInfo{}));
    }
    if (task->state != TaskState::kConnected) {
      if (InGraceLocked(*task)) return absl::OkStatus();
      return ServiceError(absl::InvalidArgumentError(
          absl::StrCat(name.ToString(), " must register before sending heartbeats (state ",
                       TaskStateName(task->state), ")")));
    }
    if (task->incarnation == incarnation) {
      task->last_heartbeat_ns.store(absl::ToUnixNanos(clock_->Now()));
      return absl::OkStatus();
    }
    if (task->job->recoverable) return absl::OkStatus();  // a stale process; not recorded
  }
  // A heartbeat of another incarnation: the task restarted without registering again.
  Effects fx;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    Task* task = FindLocked(name);
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
  Task* task = FindLocked(name);
  if (!task) {
    return ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
  }
  if (task->ever_registered && task->incarnation != incarnation) {
    return ServiceError(absl::AbortedError(
        absl::StrCat("request from ", name.ToString(), " carries incarnation ", incarnation,
                     " but the task is registered with incarnation ", task->incarnation)));
  }
  return absl::OkStatus();
}

void CoordinationService::CheckHeartbeats() {
  std::vector<std::pair<TaskName, absl::Duration>> stale;
  absl::Time now = clock_->Now();
  {
    absl::ReaderMutexLock lock(&mu_);
    if (stopped_) return;
    for (const auto& [name, task] : tasks_) {
      if (task->state != TaskState::kConnected) continue;
      absl::Duration since = now - absl::FromUnixNanos(task->last_heartbeat_ns.load());
      if (since > config_.heartbeat_timeout) stale.emplace_back(name, since);
    }
  }
  if (stale.empty()) return;
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, since] : stale) {
      Task* task = FindLocked(name);
      absl::Duration now_since = now - absl::FromUnixNanos(task->last_heartbeat_ns.load());
      if (task->state != TaskState::kConnected || now_since <= config_.heartbeat_timeout) continue;
      absl::Status error = absl::UnavailableError(absl::StrCat(
          name.ToString(), " (incarnation ", task->incarnation, ") sent no heartbeat for ",
          absl::FormatDuration(now_since), ", over the heartbeat timeout of ",
          absl::FormatDuration(config_.heartbeat_timeout),
          "; the task has probably crashed or hung"));
      SetErrorLocked(*task, error, /*reported_by_task=*/false, fx);
    }
  }
  Apply(fx);
}

absl::Time CoordinationService::RunTimers() {
  absl::Time now = clock_->Now();
  timers_.RunDue(now);
  if (now >= next_heartbeat_check_) {
    CheckHeartbeats();
    // Check often enough that a stale task is found within a tenth of the timeout.
    next_heartbeat_check_ =
        now + std::clamp(config_.heartbeat_timeout / 10, absl::Milliseconds(10), absl::Seconds(1));
  }
  return std::min(timers_.NextDeadline(), next_heartbeat_check_);
}

// ---- Errors --------------------------------------------------------------------------

void CoordinationService::SetErrorLocked(Task& task, absl::Status error, bool reported_by_task,
                                         Effects& fx) {
  error = WithServiceError(std::move(error), {reported_by_task, task.name});
  if (task.awaiting_register) {
    task.awaiting_register = false;
    --workload_awaiting_register_;
  }
  SetStateLocked(task, TaskState::kError);
  task.error = error;
  spdlog::error("task {} (incarnation {:#x}) is in error: {}", task.name.ToString(),
                task.incarnation, std::string(error.message()));
  fx.failed_tasks.emplace_back(task.name, error);
  if (!task.job->auxiliary) FailRegisterBarrierLocked(error, fx);
  FailGroupsWithLocked(task.name, error, fx);
  if (!task.job->recoverable) PropagateLocked(task.name, error, fx);
  StateChangedLocked(fx);
  CheckShutdownBarrierLocked(fx);
}

absl::Status CoordinationService::PropagatedError() const {
  absl::ReaderMutexLock lock(&mu_);
  return first_error_;
}

void CoordinationService::PropagateLocked(const TaskName& source, const absl::Status& error,
                                          Effects& fx) {
  if (!first_error_.ok()) return;
  first_error_ = error;
  fx.propagated.emplace_back(source, error);
  for (auto& [name, task] : tasks_) {
    for (auto& call : task->polls) {
      fx.Finish(parked_, std::static_pointer_cast<StatusCall>(call), error);
    }
    task->polls.clear();
  }
}

absl::Status CoordinationService::ReportError(const TaskName& source, const absl::Status& error) {
  if (error.ok()) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat(source.ToString(), " reported an error with code OK; nothing to report")));
  }
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    Task* task = FindLocked(source);
    if (!task) {
      return ServiceError(
          absl::InvalidArgumentError(absl::StrCat("unknown task ", source.ToString())));
    }
    absl::Status reported(
        error.code(), absl::StrCat("error reported by ", source.ToString(), ": ", error.message()));
    SetErrorLocked(*task, reported, /*reported_by_task=*/true, fx);
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
    Task* task = FindLocked(name);
    if (!task) {
      answer =
          ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
    } else if (task->state == TaskState::kError) {
      answer = ServiceError(absl::FailedPreconditionError(absl::StrCat(
          name.ToString(), " polls for errors but is already in error: ", task->error.message())));
    } else if (task->state != TaskState::kConnected && !InGraceLocked(*task)) {
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
        fx.FinishReplaced(parked_, std::static_pointer_cast<StatusCall>(earlier),
                          absl::CancelledError(absl::StrCat(
                              "a newer error poll of ", name.ToString(), " replaced this one")));
      }
      task->polls.clear();
      answer = ParkLocked(call, &task->polls);
      parked = answer.ok();
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

}  // namespace cohort
