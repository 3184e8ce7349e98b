// CoordinationService: construction, the lock and the journal, restoring and capturing the
// state, timers and stopping. Each call goes to the piece that knows its rules: TaskLife
// (under mu_), BarrierTable and KeyValueStore (under their own locks).
#include "service/core/coordination_service.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
      key_values_once_(&key_values_),
      barriers_(clock, &parked_, &timers_, observer, config_.barriers),
      heartbeats_(config_.heartbeat_timeout),
      life_(
          config_, jobs_, clock, &heartbeats_, &parked_, &timers_,
          [this](const std::function<void()>& fn) {
            WriteLock lock(this);
            fn();
          },
          [this] { OnRegisterTimeout(); }, [this] { OnShutdownTimeout(); }) {
  // Restoring goes to the parts directly; the journal hears only of later changes.
  key_values_.set_journal(journal_);
  barriers_.set_journal(journal_, jobs_.workload());
}

CoordinationService::WriteLock::~WriteLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  service_->JournalLocked();
  service_->mu_.Unlock();
}

// ---- Durability ----------------------------------------------------------------------

void CoordinationService::JournalLocked() { life_.Journal(journaling_ ? journal_ : nullptr); }

absl::Status CoordinationService::RestoreLocked(const DurableState& state) {
  if (absl::Status s = life_.Restore(state, clock_->Now()); !s.ok()) return s;
  // The key-value store and the barrier table are restored by Create, outside mu_: the
  // barrier table calls into the service under its own lock (a barrier's health check), so
  // taking its lock under mu_ would make a lock-order cycle.
  spdlog::info(
      "restored the saved state: service incarnation {:#x}, {} of {} workload tasks connected, "
      "{} keys (revision {}), {} barriers",
      service_incarnation_, life_.tasks().workload_connected(), jobs_.workload()->size(),
      state.keys.size(), state.key_revision, state.barriers.size());
  return absl::OkStatus();
}

DurableState CoordinationService::CaptureState() const {
  DurableState state;
  state.service_incarnation = service_incarnation_;
  {
    absl::ReaderMutexLock lock(&mu_);
    life_.Capture(&state);
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

// ---- Tasks ---------------------------------------------------------------------------

void CoordinationService::RegisterTask(const TaskName& name, uint64_t incarnation, WaiterId waiter,
                                       StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kRegister, name, std::move(done));
  Effects fx;
  std::optional<absl::Status> answer;
  {
    WriteLock lock(this);
    if (stopped_) {
      answer = ServiceError(absl::UnavailableError("the coordination service is stopping"));
    } else {
      answer = life_.Register(name, incarnation, call, fx);
    }
  }
  Apply(fx);
  if (answer) call->Finish(*std::move(answer));
}

void CoordinationService::OnRegisterTimeout() {
  Effects fx;
  {
    WriteLock lock(this);
    life_.RegisterTimedOut(fx);
  }
  Apply(fx);
}

bool CoordinationService::ClusterRegistered() const {
  absl::ReaderMutexLock lock(&mu_);
  return life_.Registered();
}

void CoordinationService::ShutdownTask(const TaskName& name, WaiterId waiter, StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kShutdown, name, std::move(done));
  Effects fx;
  std::optional<absl::Status> answer;
  {
    WriteLock lock(this);
    answer = life_.Shutdown(name, call, fx);
  }
  Apply(fx);
  if (answer) call->Finish(*std::move(answer));
}

void CoordinationService::OnShutdownTimeout() {
  Effects fx;
  {
    WriteLock lock(this);
    life_.ShutdownTimedOut(fx);
  }
  Apply(fx);
}

absl::Status CoordinationService::ResetTask(const TaskName& name, const std::string& request) {
  Effects fx;
  absl::Status answer;
  {
    WriteLock lock(this);
    answer = life_.Reset(name, request, fx);
  }
  Apply(fx);
  return answer;
}

absl::Status CoordinationService::Heartbeat(const TaskName& name, uint64_t incarnation,
                                            const TaskProgress& progress) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto found = life_.tasks().Get(name);
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
      TaskTable::RecordProgress(*task, progress);
      return absl::OkStatus();
    }
    if (task->job->recoverable) return absl::OkStatus();  // a stale process; not recorded
  }
  // A heartbeat of another incarnation: the task restarted without registering again.
  Effects fx;
  absl::Status error;
  {
    WriteLock lock(this);
    error = life_.HeartbeatOfAnotherIncarnation(name, incarnation, fx);
  }
  Apply(fx);
  return error;
}

absl::Status CoordinationService::CheckIncarnation(const TaskName& name,
                                                   uint64_t incarnation) const {
  absl::ReaderMutexLock lock(&mu_);
  auto task = life_.tasks().Get(name);
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
    stale = heartbeats_.FindStale(life_.tasks(), now);
  }
  if (stale.empty()) return;
  Effects fx;
  {
    WriteLock lock(this);
    life_.FailStale(stale, now, fx);
  }
  Apply(fx);
}

absl::Status CoordinationService::PropagatedError() const {
  absl::ReaderMutexLock lock(&mu_);
  return life_.first_error();
}

absl::Status CoordinationService::ReportError(const TaskName& source, const absl::Status& error,
                                              ErrorReporter by, FailureReason reason) {
  if (error.ok()) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat(source.ToString(), " reported an error with code OK; nothing to report")));
  }
  Effects fx;
  absl::Status answer;
  {
    WriteLock lock(this);
    answer = life_.ReportError(source, error, by, reason, kMaxReportedErrorBytes, fx);
  }
  Apply(fx);
  return answer;
}

void CoordinationService::PollForError(const TaskName& name, WaiterId waiter, StatusDone done) {
  auto call = std::make_shared<StatusCall>(waiter, ParkKind::kPollForError, name, std::move(done));
  Effects fx;
  std::optional<absl::Status> answer;
  {
    WriteLock lock(this);
    answer = life_.PollForError(name, stopped_, call, fx);
  }
  Apply(fx);
  if (answer) call->Finish(*std::move(answer));
}

absl::StatusOr<std::vector<TaskStateInfo>> CoordinationService::GetTaskStates(
    const std::vector<TaskName>& tasks) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<TaskStateInfo> out;
  for (const TaskName& name : tasks) {
    auto task = life_.tasks().Get(name);
    if (!task.ok()) return task.status();
    out.push_back(life_.tasks().Info(**task));
  }
  return out;
}

std::vector<TaskStateInfo> CoordinationService::AllTasks() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<TaskStateInfo> out;
  for (const auto& [name, task] : life_.tasks().all()) out.push_back(life_.tasks().Info(*task));
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
  std::optional<absl::StatusOr<JobStateView>> answer;
  {
    WriteLock lock(this);
    if (stopped_) {
      answer = absl::StatusOr<JobStateView>(
          ServiceError(absl::UnavailableError("the coordination service is stopping")));
    } else {
      answer = life_.WatchJobState(name, version, call);
    }
  }
  if (answer) call->Finish(*std::move(answer));
}

void CoordinationService::GetAliveTasks(const TaskName& requester, std::vector<TaskName> tasks,
                                        WaiterId waiter, Done<std::vector<AliveTask>> done) {
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  auto call =
      std::make_shared<AliveCall>(waiter, ParkKind::kAliveTasks, requester, std::move(done));
  Effects fx;
  absl::Status answer;
  {
    WriteLock lock(this);
    answer = life_.GetAliveTasks(requester, tasks, call, fx);
  }
  Apply(fx);
  if (!answer.ok()) call->Finish(answer);
}

void CoordinationService::WaitForAllTasks(const TaskName& name, std::string devices,
                                          WaiterId waiter, Done<std::vector<std::string>> done) {
  auto call =
      std::make_shared<DevicesCall>(waiter, ParkKind::kWaitForAllTasks, name, std::move(done));
  Effects fx;
  std::optional<TaskExchanges::DevicesResult> answer;
  {
    WriteLock lock(this);
    answer = life_.WaitForAllTasks(name, std::move(devices), call, fx);
  }
  Apply(fx);
  if (answer) call->Finish(*std::move(answer));
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
    const TaskRecord* task = life_.tasks().Find(caller);
    if (!task) return done(life_.tasks().Get(caller).status());
    // A task that is not registered has no say in the job's barriers (a restarted
    // coordinator still hears the tasks it restored, within their grace period).
    if (task->state == TaskState::kDisconnected && !heartbeats_.InGrace(*task, clock_->Now())) {
      return done(ServiceError(
          absl::FailedPreconditionError(absl::StrCat(caller.ToString(), " called barrier \"", id,
                                                     "\" but is not registered; register first"))));
    }
    // The default list is the service's own; only a caller's list needs checking.
    for (const TaskName& t : explicit_tasks ? *arrival.participants : std::vector<TaskName>{}) {
      if (!life_.tasks().Find(t)) {
        return done(ServiceError(absl::InvalidArgumentError(
            absl::StrCat("barrier \"", id, "\" names unknown task ", t.ToString()))));
      }
    }
  }
  auto health = [this](const TaskName& t) {
    absl::ReaderMutexLock lock(&mu_);
    return life_.tasks().Health(t);
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
    if (!life_.tasks().Find(caller)) return life_.tasks().Get(caller).status();
  }
  return barriers_.Cancel(id, counter, caller, request);
}

// ---- Key-value store (KeyValueStore keeps its own lock) ----------------------------

absl::Status CoordinationService::InsertKeyValue(absl::string_view key, std::string value,
                                                 bool allow_overwrite) {
  return key_values_.Insert(key, std::move(value), allow_overwrite);
}

void CoordinationService::GetKeyValue(absl::string_view key, WaiterId waiter,
                                      std::optional<TaskName> owner,
                                      std::optional<absl::Time> deadline,
                                      KeyValueStore::GetDone done, ParkKind kind) {
  key_values_.Get(key, waiter, std::move(owner), deadline, std::move(done), kind);
}

absl::StatusOr<std::string> CoordinationService::TryGetKeyValue(absl::string_view key) const {
  return key_values_.TryGet(key);
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValue(absl::string_view key,
                                                               int64_t delta) {
  return key_values_.Increment(key, delta);
}

absl::Status CoordinationService::InsertKeyValueOnce(const RequestId& request,
                                                     absl::string_view key, std::string value,
                                                     bool allow_overwrite) {
  return key_values_once_.Insert(request, key, std::move(value), allow_overwrite);
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValueOnce(const RequestId& request,
                                                                   absl::string_view key,
                                                                   int64_t delta) {
  return key_values_once_.Increment(request, key, delta);
}

std::vector<KeyValueEntry> CoordinationService::GetKeyValueDir(absl::string_view dir) const {
  return key_values_.GetDir(dir);
}

absl::Status CoordinationService::DeleteKeyValue(absl::string_view key) {
  return key_values_.Delete(key);
}

std::vector<std::string> CoordinationService::KeyValueKeys(absl::string_view dir) const {
  return key_values_.KeysUnder(dir);
}

size_t CoordinationService::CountKeyValues(absl::string_view dir) const {
  return key_values_.CountUnder(dir);
}

absl::StatusOr<std::optional<std::string>> CoordinationService::CompareAndSetKeyValue(
    absl::string_view key, absl::string_view expected, std::string desired) {
  return key_values_.CompareAndSet(key, expected, std::move(desired));
}

absl::Status CoordinationService::AppendKeyValue(absl::string_view key, absl::string_view data) {
  return key_values_.Append(key, data);
}

absl::StatusOr<bool> CoordinationService::EraseKeyValue(absl::string_view key) {
  return key_values_.Erase(key);
}

absl::Status CoordinationService::QueuePushKeyValue(absl::string_view dir, std::string value) {
  return key_values_.QueuePush(dir, std::move(value));
}

absl::StatusOr<KeyValueStore::Popped> CoordinationService::QueuePopKeyValue(absl::string_view dir) {
  return key_values_.QueuePop(dir);
}

void CoordinationService::KeyValueAtomically(
    const std::function<void(KeyValueStore::Batch&)>& body) {
  key_values_.Atomically(body);
}

size_t CoordinationService::QueueLengthKeyValue(absl::string_view dir) const {
  return key_values_.QueueLength(dir);
}

void CoordinationService::PassQueueWake(absl::string_view dir) { key_values_.PassQueueWake(dir); }

void CoordinationService::WaitKeyValueQueue(absl::string_view dir, WaiterId waiter,
                                            std::optional<TaskName> owner,
                                            std::optional<absl::Time> deadline,
                                            KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitQueue(dir, waiter, std::move(owner), deadline, std::move(done), kind);
}

void CoordinationService::WaitKeyValueOrQueue(absl::string_view key, absl::string_view dir,
                                              WaiterId waiter, std::optional<TaskName> owner,
                                              std::optional<absl::Time> deadline,
                                              KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitKeyOrQueue(key, dir, waiter, std::move(owner), deadline, std::move(done), kind);
}

void CoordinationService::WaitKeyValueAtLeast(absl::string_view key, int64_t threshold,
                                              WaiterId waiter, std::optional<TaskName> owner,
                                              std::optional<absl::Time> deadline,
                                              KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitAtLeast(key, threshold, waiter, std::move(owner), deadline, std::move(done),
                          kind);
}

absl::StatusOr<std::shared_ptr<KeyWatch>> CoordinationService::WatchKeys(
    absl::string_view key, int64_t start_revision, WaiterId waiter, std::function<void()> notify) {
  return key_values_.Watch(key, start_revision, waiter, std::move(notify));
}

KeyValueStore::Stats CoordinationService::KeyValueStats() const { return key_values_.GetStats(); }

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
