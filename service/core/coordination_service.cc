// CoordinationService: construction, the rules that tie task states to everything built on
// them, heartbeats, errors, task states and stopping.
#include "service/core/coordination_service.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "spdlog/spdlog.h"

namespace cohort {

uint64_t RandomIncarnation() {
  std::random_device rd;
  std::mt19937_64 gen((uint64_t{rd()} << 32) ^ rd());
  uint64_t v = 0;
  while (v == 0) v = gen();
  return v;
}

absl::StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Create(
    ServiceConfig config, const Clock* clock, ServiceObserver* observer, StateJournal* journal,
    const DurableState* restored) {
  if (auto s = ValidateConfig(config); !s.ok()) return s;
  uint64_t incarnation = config.service_incarnation;
  if (restored) {
    if (incarnation != 0 && incarnation != restored->service_incarnation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the saved state belongs to service incarnation ", restored->service_incarnation,
          ", not to the ", incarnation, " this coordinator was given"));
    }
    incarnation = restored->service_incarnation;
  }
  if (incarnation == 0) incarnation = RandomIncarnation();
  std::unique_ptr<CoordinationService> service(
      new CoordinationService(std::move(config), clock, observer, incarnation, journal));
  if (restored) {
    absl::Status s;
    {
      absl::MutexLock lock(&service->mu_);
      s = service->RestoreLocked(*restored);
    }
    if (!s.ok()) return s;
    service->key_values_.Restore(restored->keys, restored->key_revision);
    service->barriers_.Restore(restored->barriers);
  }
  {
    absl::MutexLock lock(&service->mu_);
    service->journaling_ = journal != nullptr;
  }
  return service;
}

namespace {
// Calls that name no task share a pool per kind, sized by the job unless the config says.
ParkLimits WithTaskCount(ParkLimits limits, const std::vector<JobConfig>& jobs) {
  if (limits.max_without_task_per_kind == 0) {
    int64_t tasks = 0;
    for (const JobConfig& job : jobs) tasks += job.num_tasks;
    limits.max_without_task_per_kind = std::max<int64_t>(1, tasks) * limits.max_per_task;
  }
  return limits;
}
}  // namespace

CoordinationService::CoordinationService(ServiceConfig config, const Clock* clock,
                                         ServiceObserver* observer, uint64_t service_incarnation,
                                         StateJournal* journal)
    : config_(std::move(config)),
      clock_(clock),
      observer_(observer),
      service_incarnation_(service_incarnation),
      jobs_(config_.jobs, config_.default_job),
      journal_(journal),
      parked_(WithTaskCount(config_.parked, config_.jobs)),
      key_values_(config_.key_value, &parked_, &timers_),
      barriers_(clock, &parked_, &timers_, observer, config_.barriers),
      heartbeats_(config_.heartbeat_timeout),
      tasks_(jobs_),
      register_barrier_(&timers_, config_.register_timeout, [this] { OnRegisterTimeout(); }),
      shutdown_barrier_(&timers_, config_.shutdown_barrier_timeout,
                        [this] { OnShutdownTimeout(); }) {
  // Restoring goes to the parts directly; the journal hears only of later changes.
  key_values_.set_journal(journal_);
  barriers_.set_journal(journal_, jobs_.workload());
}

CoordinationService::WriteLock::~WriteLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  service_->JournalLocked();
  service_->mu_.Unlock();
}

// ---- Durability ----------------------------------------------------------------------

namespace {
DurableTask ToDurable(const TaskRecord& task) {
  return {task.name,  task.state,        task.incarnation, task.ever_registered,
          task.error, task.reset_request};
}
DurableWholeBarrier ToDurable(const WholeJobBarrier& barrier, bool with_waiting) {
  DurableWholeBarrier out;
  out.state = static_cast<int>(barrier.state());
  out.result = barrier.result();
  if (with_waiting) out.waiting.assign(barrier.waiting().begin(), barrier.waiting().end());
  return out;
}
}  // namespace

void CoordinationService::JournalLocked() {
  auto tasks = tasks_.TakeChanged();
  auto reg_changed = register_barrier_.TakeStateChanged();
  auto reg_waiting = register_barrier_.TakeWaitingChanges();
  auto shut_changed = shutdown_barrier_.TakeStateChanged();
  auto shut_waiting = shutdown_barrier_.TakeWaitingChanges();
  auto groups = device_groups_.TakeChanged();
  alive_groups_.TakeChanged();  // not durable: every caller asks again after a restart
  bool error_changed = std::exchange(first_error_changed_, false);
  if (!journaling_) return;
  for (const TaskRecord* task : tasks) journal_->TaskChanged(ToDurable(*task));
  for (auto [kind, barrier, changed, waiting] :
       {std::tuple{WholeBarrierKind::kRegister, &register_barrier_, reg_changed, &reg_waiting},
        std::tuple{WholeBarrierKind::kShutdown, &shutdown_barrier_, shut_changed, &shut_waiting}}) {
    if (changed) journal_->WholeBarrierChanged(kind, ToDurable(*barrier, false));
    for (const auto& [task, is_waiting] : *waiting) {
      journal_->WholeBarrierWaiting(kind, task, is_waiting);
    }
  }
  if (error_changed) journal_->FirstError(first_error_);
  for (const auto& members : groups) {
    const TaskGroupExchange::Group* group = device_groups_.FindFinished(members);
    if (!group) {
      journal_->DeviceGroupChanged(members, nullptr);
      continue;
    }
    DurableDeviceGroup record{members, group->error, group->payloads};
    journal_->DeviceGroupChanged(members, &record);
  }
}

absl::Status CoordinationService::RestoreLocked(const DurableState& state) {
  const absl::Time now = clock_->Now();
  for (const DurableTask& saved : state.tasks) {
    TaskRecord* task = tasks_.Find(saved.task);
    if (!task) {
      return absl::FailedPreconditionError(absl::StrCat("the saved state has task ",
                                                        saved.task.ToString(),
                                                        ", which this coordinator's jobs "
                                                        "do not have"));
    }
    tasks_.Restore(*task, saved.state, saved.incarnation, saved.ever_registered, saved.error,
                   saved.reset_request, now);
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
  for (const DurableDeviceGroup& group : state.device_groups) {
    device_groups_.RestoreFinished(group.members, group.error, group.payloads);
  }
  // The key-value store and the barrier table are restored by Create, outside mu_: the
  // barrier table calls into the service under its own lock (a barrier's health check), so
  // taking its lock under mu_ would make a lock-order cycle.
  // What was restored is no change to record.
  tasks_.TakeChanged();
  register_barrier_.TakeStateChanged();
  register_barrier_.TakeWaitingChanges();
  shutdown_barrier_.TakeStateChanged();
  shutdown_barrier_.TakeWaitingChanges();
  device_groups_.TakeChanged();
  spdlog::info(
      "restored the saved state: service incarnation {:#x}, {} of {} workload tasks connected, "
      "{} keys (revision {}), {} barriers",
      service_incarnation_, tasks_.workload_connected(), jobs_.workload()->size(),
      state.keys.size(), state.key_revision, state.barriers.size());
  return absl::OkStatus();
}

DurableState CoordinationService::CaptureState() const {
  DurableState state;
  state.service_incarnation = service_incarnation_;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, task] : tasks_.all()) state.tasks.push_back(ToDurable(*task));
    state.register_barrier = ToDurable(register_barrier_, true);
    state.shutdown_barrier = ToDurable(shutdown_barrier_, true);
    state.first_error = first_error_;
    device_groups_.ForEachFinished([&state](const TaskGroupExchange::Group& group) {
      state.device_groups.push_back({group.members, group.error, group.payloads});
    });
  }
  key_values_.Capture(&state.keys, &state.key_revision);
  state.barriers = barriers_.Capture();
  return state;
}

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
  first_error_changed_ = true;
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

// ---- Stopping ------------------------------------------------------------------------

void CoordinationService::Stop(const absl::Status& status) {
  {
    WriteLock lock(this);
    if (stopped_) return;
    stopped_ = true;
    journaling_ = false;
  }
  // The barriers this fails stay open in the saved state: their tasks come back to them.
  barriers_.set_journal(nullptr, jobs_.workload());
  spdlog::debug("coordination service stopping: {}", std::string(status.message()));
  // UNAVAILABLE, not ABORTED: the barrier did not fail, the coordinator went away. A
  // sidecar's proxy holds the arrival and sends it again to the coordinator that comes back
  // on the same state, where the barrier is still open.
  barriers_.FailAll(ServiceError(absl::UnavailableError(
      absl::StrCat("barrier aborted: the coordination service is stopping: ", status.message()))));
  parked_.CancelAll(ServiceError(status));
}

}  // namespace cohort
