// The task scheduler's decisions: registration, tasks from submission to their end, objects
// from their puts to their loss and rebuilding, and durability as a delegation to its tables.
#include "runtime/scheduler/task_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/scheduler/restore_check.h"

namespace cohort::runtime {

TaskScheduler::TaskScheduler(const Clock& clock, SchedulerOptions options)
    : clock_(clock),
      options_(std::move(options)),
      members_(clock_, options_.limits, options_.first_assigned_port),
      functions_(options_.limits),
      calls_(kRememberedCalls),
      directory_(members_, objects_, operations_, effects_, counters_),
      dispatcher_(clock_, options_.on_dispatch, members_, operations_, functions_, objects_,
                  directory_, effects_,
                  [this](Operation& op, const std::string& error)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { FinishTask(op, false, error); }),
      rebuilder_(clock_, options_.limits, options_.max_task_retries, objects_, operations_,
                 history_, directory_, counters_) {}

void TaskScheduler::Emit(Effect effect) { effects_.push_back(std::move(effect)); }

absl::StatusOr<StoreId> TaskScheduler::RegisterObjStore(const std::string& address) {
  if (absl::Status s = MemberTable::CheckAddress("object store address", address); !s.ok()) {
    return s;
  }
  Mutation lock(this);
  if (absl::Status s = members_.StoreFits(); !s.ok()) return s;
  for (auto& [id, store] : members_.stores()) {
    // A store starts empty: one registering again at a known address restarted, and what
    // the old one held is gone.
    if (store.alive && store.address == address) {
      LoseStore(store, absl::StrCat("a store registered again at ", address));
    }
  }
  StoreId id = members_.AddStore(address);
  dispatcher_.Schedule();
  return id;
}

absl::StatusOr<WorkerRegistration> TaskScheduler::RegisterWorker(
    const std::string& node_ip, const std::string& objstore_address, bool is_driver,
    const std::string& worker_address) {
  Mutation lock(this);
  if (absl::Status s = members_.WorkerFits(); !s.ok()) return s;
  absl::StatusOr<StoreId> store = members_.StoreFor(node_ip, objstore_address);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::string> address = members_.AddressFor(node_ip, is_driver, worker_address);
  if (!address.ok()) return address.status();
  if (!is_driver) {
    for (auto& [id, w] : members_.workers()) {
      if (w.state != WorkerState::kDead && !w.is_driver && w.address == *address) {
        LoseWorker(w, absl::StrCat("a worker registered again at ", *address));
      }
    }
  }
  const Worker& worker = members_.AddWorker(*store, *address, is_driver);
  WorkerRegistration registration{worker.id, *store, *address, members_.store(*store).address};
  dispatcher_.Schedule();
  return registration;
}

absl::Status TaskScheduler::RegisterFunction(WorkerId worker, const std::string& name,
                                             uint64_t num_return_vals) {
  if (name.empty()) return absl::InvalidArgumentError("a function needs a name");
  Mutation lock(this);
  if (absl::Status s = members_.CheckRunsTasks(worker); !s.ok()) return s;
  members_.WorkerSeen(worker);
  if (absl::Status s = functions_.Register(name, worker, num_return_vals); !s.ok()) return s;
  dispatcher_.Schedule();
  return absl::OkStatus();
}

absl::Status TaskScheduler::ExportFunction(std::string implementation) {
  return Export(FunctionTable::ExportKind::kFunction, std::move(implementation), "the function");
}

absl::Status TaskScheduler::ExportReusableVariable(std::string reusable_variable) {
  return Export(FunctionTable::ExportKind::kReusableVariable, std::move(reusable_variable),
                "the reusable variable");
}

absl::Status TaskScheduler::Export(FunctionTable::ExportKind kind, std::string item,
                                   const char* what) {
  if (item.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  Mutation lock(this);
  if (absl::Status s = functions_.Export(kind, std::move(item)); !s.ok()) return s;
  for (auto& [id, w] : members_.workers()) {
    if (!w.is_driver && w.state != WorkerState::kDead && w.state != WorkerState::kRegistered) {
      SendExports(w);
    }
  }
  return absl::OkStatus();
}

void TaskScheduler::SendExports(Worker& worker) {
  Changed(worker);
  functions_.SendExports(worker, &effects_);
}

absl::StatusOr<SubmitResult> TaskScheduler::SubmitTask(WorkerId worker, TaskSpec task,
                                                       CallId call) {
  if (task.function_name.empty()) return absl::InvalidArgumentError("the task names no function");
  if (!task.results.empty()) {
    return absl::InvalidArgumentError(
        "a submitted task names no results: the scheduler gives them their ids");
  }
  Mutation lock(this);
  if (const CallOutcome* repeated = calls_.Repeated(call)) {
    if (!repeated->status.ok()) return repeated->status;
    return SubmitResult{repeated->function_registered, repeated->ids};
  }
  if (absl::Status s = members_.CheckWorker(worker); !s.ok()) return s;
  if (absl::Status s = IdsFit(task.args.size(), "arguments in one task"); !s.ok()) return s;
  if (absl::Status s =
          Fits(operations_.size(), 1, options_.limits.max_tasks,
               "tasks and puts (those not finished, and the history's)", "--max-tasks");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = objects_.CheckArguments(task.args); !s.ok()) return s;
  Worker& submitter = members_.worker(worker);
  submitter.last_seen = clock_.Now();
  const Function* fn = functions_.Find(task.function_name);
  if (fn == nullptr) {
    calls_.Remember(call, CallOutcome{absl::OkStatus(), false, {}});
    return SubmitResult{false, {}};
  }

  if (absl::Status s = Fits(objects_.size(), fn->num_return_vals, options_.limits.max_objects,
                            "object ids", "--max-objects");
      !s.ok()) {
    return s;
  }
  Operation& op = operations_.Add();
  op.creator = submitter.is_driver ? 0 : submitter.current;
  op.submitter = worker;
  for (uint64_t i = 0; i < fn->num_return_vals; ++i) {
    task.results.push_back(objects_.Create(op.id, 0));
  }
  op.task = std::move(task);
  for (const TaskArg& arg : op.task.args) {
    if (arg.id != 0) objects_.Hold(arg.id);
  }
  op.holds_args = true;
  ++counters_.tasks_submitted;
  operations_.Enqueue(op, clock_.Now());
  SubmitResult result{true, op.task.results};
  calls_.Remember(call, CallOutcome{absl::OkStatus(), true, op.task.results});
  dispatcher_.Schedule();
  return result;
}

absl::Status TaskScheduler::IdsFit(size_t ids, const char* what) const {
  return Fits(0, ids, options_.limits.max_ids_per_call, what, "--max-ids-per-call");
}

void TaskScheduler::FinishTask(Operation& op, bool succeeded, const std::string& error) {
  Changed(op);
  op.state = succeeded ? OpState::kSucceeded : OpState::kFailed;
  op.error = succeeded ? "" : error;
  std::string worker_address;
  if (op.worker != 0) worker_address = members_.worker(op.worker).address;
  for (size_t i = 0; i < op.task.results.size(); ++i) {
    ObjectId result = op.task.results[i];
    const ObjectRecord* record = objects_.Find(result);
    if (record->released || record->alias_of != 0 || record->failed || !record->locations.empty()) {
      continue;
    }
    directory_.Fail(
        result,
        succeeded ? absl::StrCat("task ", op.task.function_name, " (operation ", op.id,
                                 ") finished without storing its result ", i)
                  : absl::StrCat("task ", op.task.function_name, " (operation ", op.id, ") failed",
                                 worker_address.empty() ? "" : " on worker " + worker_address, ": ",
                                 error));
  }
  ++(succeeded ? counters_.tasks_succeeded : counters_.tasks_failed);
  if (op.holds_args) {
    op.holds_args = false;
    std::vector<Deallocation> freed;
    for (const TaskArg& arg : op.task.args) {
      if (arg.id != 0) objects_.Release(arg.id, &freed);
    }
    directory_.Deallocate(freed);
  }
  history_.Finished(op);
}

void TaskScheduler::TrimHistory() {
  for (OperationId id : history_.TakePast(options_.limits.task_history, operations_.all())) {
    for (ObjectId object : operations_.Forget(id)) ForgetIfIdle(object);
  }
  // Ids let go during this call whose task (or put) is forgotten already, and such ids whose
  // delivery or wait ended during it.
  std::vector<ObjectId> candidates = objects_.TakeReleased();
  for (ObjectId id : directory_.transfers().ChangedObjects()) candidates.push_back(id);
  for (ObjectId id : candidates) {
    const ObjectRecord* record = objects_.Find(id);
    if (record == nullptr || !record->released) continue;
    if (!operations_.KeepsMaker(id, record->producer)) ForgetIfIdle(id);
  }
}

void TaskScheduler::ForgetIfIdle(ObjectId id) {
  const ObjectRecord* record = objects_.Find(id);
  // A store that gets it drops it when it lands.
  if (record == nullptr || !record->released || directory_.transfers().Involves(id)) return;
  objects_.Forget(id);
}

absl::Status TaskScheduler::ReadyForNewTask(WorkerId worker, std::optional<FinishedTask> previous,
                                            bool leaving) {
  Mutation lock(this);
  if (absl::Status s = members_.CheckRunsTasks(worker); !s.ok()) return s;
  Worker& w = members_.worker(worker);
  w.last_seen = clock_.Now();
  if (previous.has_value() && previous->operation != 0 && previous->operation != w.current) {
    // Sent again after a restart of the coordinator, which had taken it already.
    if (leaving) Leave(w);
    return absl::OkStatus();
  }
  if (leaving && w.state == WorkerState::kBusy && !previous.has_value()) {
    // It leaves before it ran what it was given last: that runs elsewhere.
    Leave(w);
    dispatcher_.Schedule();
    return absl::OkStatus();
  }
  if (w.state == WorkerState::kBusy) {
    Operation& op = operations_.operation(w.current);
    if (op.state == OpState::kAssigned) {
      // Its task was not sent yet: the worker asks twice. It keeps the task, unless it leaves.
      if (leaving) {
        Leave(w);
        dispatcher_.Schedule();
      }
      return absl::OkStatus();
    }
    if (previous.has_value()) {
      FinishTask(op, previous->succeeded, previous->error_message);
    } else {
      FinishTask(op, false, "the worker asked for a new task without reporting on this one");
    }
  }
  if (w.state == WorkerState::kRegistered) SendExports(w);
  Changed(w);
  w.state = WorkerState::kIdle;
  w.current = 0;
  if (leaving) Leave(w);
  dispatcher_.Schedule();
  return absl::OkStatus();
}

void TaskScheduler::Leave(Worker& worker) {
  Changed(worker);
  worker.state = WorkerState::kDead;
  functions_.DropWorker(worker.id);
  if (worker.current != 0) {
    Operation& op = operations_.Mutable(worker.current);
    if (op.state == OpState::kAssigned || op.state == OpState::kRunning)
      operations_.Enqueue(op, clock_.Now());
    worker.current = 0;
  }
}

bool TaskScheduler::KillWorkers() {
  Mutation lock(this);
  if (operations_.AnyUnfinished()) return false;
  for (auto& [id, w] : members_.workers()) {
    if (w.is_driver || w.state == WorkerState::kDead) continue;
    Emit(DieEffect{id, w.address});
    w.state = WorkerState::kDead;
    Changed(w);
  }
  functions_.Clear();
  return true;
}

void TaskScheduler::WorkerLost(WorkerId worker, const std::string& reason) {
  Mutation lock(this);
  auto it = members_.workers().find(worker);
  if (it == members_.workers().end() || it->second.state == WorkerState::kDead) return;
  LoseWorker(it->second, reason);
  dispatcher_.Schedule();
}

void TaskScheduler::LoseWorker(Worker& worker, const std::string& reason) {
  worker.state = WorkerState::kDead;
  Changed(worker);
  ++counters_.workers_lost;
  functions_.DropWorker(worker.id);
  if (worker.current == 0) return;
  Operation& op = operations_.Mutable(worker.current);
  worker.current = 0;
  if (op.state != OpState::kAssigned && op.state != OpState::kRunning) return;
  if (op.retries >= options_.max_task_retries) {
    FinishTask(op, false,
               absl::StrCat("its worker was lost ", op.retries + 1, " times (the last, worker ",
                            worker.id, " at ", worker.address, ": ", reason, ")"));
    return;
  }
  ++op.retries;
  ++counters_.tasks_retried;
  operations_.Enqueue(op, clock_.Now());
}

void TaskScheduler::WorkerSeen(WorkerId worker) {
  absl::MutexLock lock(&mu_);
  members_.WorkerSeen(worker);
}

void TaskScheduler::StoreSeen(StoreId store) {
  absl::MutexLock lock(&mu_);
  members_.StoreSeen(store);
}

void TaskScheduler::CheckLiveness() {
  if (options_.liveness_timeout <= absl::ZeroDuration()) return;
  Mutation lock(this);
  absl::Time now = clock_.Now();
  std::string silent =
      absl::StrCat("not heard from for ", absl::FormatDuration(options_.liveness_timeout));
  for (StoreId id : members_.SilentStores(now, options_.liveness_timeout)) {
    LoseStore(members_.store(id), silent);
  }
  // After the stores: their workers were lost with them.
  for (WorkerId id : members_.SilentWorkers(now, options_.liveness_timeout)) {
    LoseWorker(members_.worker(id), silent);
  }
  dispatcher_.Schedule();
}

std::vector<LivenessTarget> TaskScheduler::LivenessTargets() const {
  absl::MutexLock lock(&mu_);
  return members_.LivenessTargets();
}

TaskInfoView TaskScheduler::TaskInfo() const {
  absl::MutexLock lock(&mu_);
  return TaskInfoOf(operations_, members_, counters_.tasks_succeeded);
}

SchedulerInfoView TaskScheduler::SchedulerInfo() const {
  absl::MutexLock lock(&mu_);
  return SchedulerInfoOf(operations_, functions_, members_, objects_);
}

SchedulerStats TaskScheduler::Stats() const {
  absl::MutexLock lock(&mu_);
  return StatsOf(counters_, operations_, history_.size(), members_, objects_);
}

std::vector<Effect> TaskScheduler::TakeEffects() {
  absl::MutexLock lock(&mu_);
  return std::exchange(effects_, {});
}

bool TaskScheduler::WaitForEffects(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto has_effects = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !effects_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&has_effects), deadline);
}

absl::StatusOr<ObjectId> TaskScheduler::PutObj(WorkerId worker, CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = calls_.Repeated(call)) {
    if (!repeated->status.ok()) return repeated->status;
    return repeated->ids.at(0);
  }
  if (absl::Status s = members_.CheckWorker(worker); !s.ok()) return s;
  if (absl::Status s =
          Fits(operations_.size(), 1, options_.limits.max_tasks, "tasks and puts", "--max-tasks");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          Fits(objects_.size(), 1, options_.limits.max_objects, "object ids", "--max-objects");
      !s.ok()) {
    return s;
  }
  Worker& w = members_.worker(worker);
  w.last_seen = clock_.Now();
  ObjectId object = objects_.Create(0, worker);
  Operation& op = operations_.AddPut(object);
  op.creator = w.is_driver ? 0 : w.current;
  op.submitter = worker;
  op.state = OpState::kSucceeded;
  history_.Finished(op);
  calls_.Remember(call, CallOutcome{absl::OkStatus(), false, {object}});
  return object;
}

absl::Status TaskScheduler::ObjReady(ObjectId object, StoreId store, uint64_t size) {
  Mutation lock(this);
  if (absl::Status s = members_.CheckStore(store); !s.ok()) return s;
  const ObjectRecord* record = objects_.FindMutable(object);
  if (record == nullptr && object != 0 && object <= objects_.last_id()) {
    // Let go and forgotten (the history) before this copy landed: the store drops it.
    Emit(DeallocateEffect{store, members_.store(store).address, object});
    return absl::OkStatus();
  }
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no object ", object));
  if (record->alias_of != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", object, " is an alias of ", record->alias_of, "; a store holds canonical ids"));
  }
  members_.store(store).last_seen = clock_.Now();
  if (!directory_.Landed(store, object, size)) return absl::OkStatus();
  dispatcher_.DispatchAt(store);
  dispatcher_.Schedule();
  return absl::OkStatus();
}

absl::Status TaskScheduler::RequestObj(WorkerId worker, ObjectId object) {
  Mutation lock(this);
  if (absl::Status s = members_.CheckWorker(worker); !s.ok()) return s;
  if (absl::Status s = objects_.CheckLive(object); !s.ok()) return s;
  Worker& w = members_.worker(worker);
  w.last_seen = clock_.Now();
  directory_.WantAt(w.store, object, objects_.Canonical(object));
  return absl::OkStatus();
}

void TaskScheduler::DeliveryFailed(StoreId to, ObjectId canonical, const std::string& reason) {
  Mutation lock(this);
  directory_.DeliveryFailed(to, canonical);
}

absl::Status TaskScheduler::AliasObjectIDs(ObjectId alias, ObjectId target) {
  Mutation lock(this);
  const ObjectRecord* record = objects_.Find(alias);
  if (record != nullptr && record->alias_of == target) return absl::OkStatus();  // repeated
  if (record != nullptr && record->released && record->producer != 0) {
    // A task run again to rebuild another of its results aliases one let go meanwhile.
    return absl::OkStatus();
  }
  if (absl::Status s = objects_.Alias(alias, target); !s.ok()) return s;
  directory_.Answer(alias, objects_.Canonical(target));
  dispatcher_.Schedule();
  return absl::OkStatus();
}

absl::Status TaskScheduler::IncrementRefCount(const std::vector<ObjectId>& ids, CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = calls_.Repeated(call)) return repeated->status;
  if (absl::Status s = IdsFit(ids.size(), "ids in one call"); !s.ok()) return s;
  absl::Status s = objects_.AddRefs(ids);
  calls_.Remember(call, CallOutcome{s, false, {}});
  return s;
}

absl::Status TaskScheduler::DecrementRefCount(const std::vector<ObjectId>& ids, CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = calls_.Repeated(call)) return repeated->status;
  if (absl::Status s = IdsFit(ids.size(), "ids in one call"); !s.ok()) return s;
  std::vector<Deallocation> freed;
  absl::Status s = objects_.DropRefs(ids, &freed);
  if (s.ok()) directory_.Deallocate(freed);
  calls_.Remember(call, CallOutcome{s, false, {}});
  return s;
}

absl::Status TaskScheduler::AddContainedObjectIDs(ObjectId object,
                                                  const std::vector<ObjectId>& contained,
                                                  CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = calls_.Repeated(call)) return repeated->status;
  if (absl::Status s = IdsFit(contained.size(), "ids in one call"); !s.ok()) return s;
  absl::Status s = objects_.AddContained(object, contained);
  calls_.Remember(call, CallOutcome{s, false, {}});
  return s;
}

void TaskScheduler::StoreLost(StoreId store, const std::string& reason) {
  Mutation lock(this);
  auto it = members_.stores().find(store);
  if (it == members_.stores().end() || !it->second.alive) return;
  LoseStore(it->second, reason);
  dispatcher_.Schedule();
}

void TaskScheduler::LoseStore(Store& store, const std::string& reason) {
  store.alive = false;
  members_.Changed(store);
  ++counters_.stores_lost;
  std::string why =
      absl::StrCat("object store ", store.id, " at ", store.address, " was lost: ", reason);
  for (auto& [id, w] : members_.workers()) {
    if (w.store == store.id && w.state != WorkerState::kDead) LoseWorker(w, why);
  }
  // Deliveries to it are moot; those from it start again from another copy, or wait.
  std::vector<TransferTable::Key> resend = directory_.transfers().StoreLost(store.id);
  rebuilder_.StoreLost(store.id, why);
  directory_.Resend(resend);
}

// Durability: each table tells what changed in it, takes back what was saved, and captures its
// whole state; the scheduler's own part is its counters.

TaskScheduler::Mutation::~Mutation() {
  scheduler_->JournalLocked();
  scheduler_->mu_.Unlock();
}

void TaskScheduler::JournalLocked() {
  TrimHistory();
  SchedulerChanges changes;
  // The tables forget what changed even when there is no journal to tell.
  SchedulerChanges* told = journal_ != nullptr ? &changes : nullptr;
  objects_.TakeChanges(told);
  members_.TakeChanges(told);
  functions_.TakeChanges(told);
  operations_.TakeChanges(told);
  directory_.transfers().TakeChanges(told);
  calls_.TakeChanges(told);
  if (journal_ == nullptr) return;
  std::vector<uint64_t> counters = SavedCounters(counters_);
  if (counters != journaled_counters_) {
    changes.counters = counters;
    journaled_counters_ = std::move(counters);
  }
  if (!changes.empty()) journal_->SchedulerChanged(changes);
}

void TaskScheduler::Restore(const SchedulerChanges& changes) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  members_.Apply(changes, now);
  functions_.Apply(changes);
  operations_.Apply(changes, now);
  objects_.Apply(changes);
  directory_.transfers().Apply(changes);
  calls_.Apply(changes);
  if (changes.counters.has_value()) RestoreCounters(*changes.counters, &counters_);
  objects_.TakeChanged();
}

absl::Status TaskScheduler::FinishRestore() {
  Mutation lock(this);
  if (absl::Status s =
          CheckRestored(members_, functions_, objects_, operations_, directory_.transfers());
      !s.ok()) {
    return s;
  }
  // The queue, oldest task first, and the history of finished tasks, oldest first by id (a
  // restart forgets the order they finished in); past --task-history the oldest are forgotten at
  // the end of this call.
  operations_.RequeueByAge();
  history_.Restart(operations_.all());
  // Calls the old process may have decided on but never made. Each is harmless when repeated:
  // a worker ignores an ExecuteTask for a task it holds or has finished, a store one for an
  // object it holds, and aliases and imports are idempotent.
  dispatcher_.SendAgain();
  directory_.SendAgain();
  for (auto& [id, w] : members_.workers()) {
    if (w.is_driver || w.state == WorkerState::kDead || w.state == WorkerState::kRegistered) {
      continue;
    }
    w.functions_sent = 0;
    w.variables_sent = 0;
    SendExports(w);
  }
  dispatcher_.Schedule();
  return absl::OkStatus();
}

void TaskScheduler::SetJournal(SchedulerJournal* journal) {
  absl::MutexLock lock(&mu_);
  journal_ = journal;
  calls_.set_journaled(journal != nullptr);
  journaled_counters_ = SavedCounters(counters_);
}

SchedulerChanges TaskScheduler::CaptureState() const {
  absl::MutexLock lock(&mu_);
  SchedulerChanges state;
  members_.Capture(&state);
  functions_.Capture(&state);
  operations_.Capture(&state);
  objects_.Capture(&state);
  directory_.transfers().Capture(&state);
  calls_.Capture(&state);
  state.counters = SavedCounters(counters_);
  return state;
}

}  // namespace cohort::runtime
