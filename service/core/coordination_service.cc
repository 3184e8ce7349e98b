// CoordinationService: construction, durability, the rules that tie task states to everything
// built on them, the timers and stopping.
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

// ---- Timers --------------------------------------------------------------------------

absl::Time CoordinationService::RunTimers() {
  absl::Time now = clock_->Now();
  timers_.RunDue(now);
  if (heartbeats_.CheckDue(now)) CheckHeartbeats();
  return std::min(timers_.NextDeadline(), heartbeats_.next_check());
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
