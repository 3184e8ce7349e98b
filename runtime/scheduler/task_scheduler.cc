// Registration, tasks and workers. Objects, deliveries and rebuilds: task_scheduler_objects.cc.
#include "runtime/scheduler/task_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cohort::runtime {

TaskScheduler::TaskScheduler(const Clock& clock, SchedulerOptions options)
    : clock_(clock),
      options_(std::move(options)),
      members_(clock_, options_.limits, options_.first_assigned_port),
      functions_(options_.limits) {}

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
  Schedule();
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
  Schedule();
  return registration;
}

absl::Status TaskScheduler::RegisterFunction(WorkerId worker, const std::string& name,
                                             uint64_t num_return_vals) {
  if (name.empty()) return absl::InvalidArgumentError("a function needs a name");
  Mutation lock(this);
  if (absl::Status s = members_.CheckRunsTasks(worker); !s.ok()) return s;
  members_.WorkerSeen(worker);
  if (absl::Status s = functions_.Register(name, worker, num_return_vals); !s.ok()) return s;
  Schedule();
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
  if (const CallOutcome* repeated = Repeated(call)) {
    if (!repeated->status.ok()) return repeated->status;
    return SubmitResult{repeated->function_registered, repeated->ids};
  }
  if (absl::Status s = members_.CheckWorker(worker); !s.ok()) return s;
  if (absl::Status s = Fits(0, task.args.size(), options_.limits.max_ids_per_call,
                            "arguments in one task", "--max-ids-per-call");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          Fits(operations_.size(), 1, options_.limits.max_tasks,
               "tasks and puts (those not finished, and the history's)", "--max-tasks");
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < task.args.size(); ++i) {
    const TaskArg& arg = task.args[i];
    if (arg.id == 0 && arg.value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " has neither an object id nor a value"));
    }
    if (arg.id != 0) {
      if (absl::Status s = objects_.CheckLive(arg.id); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("argument ", i, ": ", s.message()));
      }
    }
  }
  Worker& submitter = members_.worker(worker);
  submitter.last_seen = clock_.Now();
  const Function* fn = functions_.Find(task.function_name);
  if (fn == nullptr) {
    Remember(call, CallOutcome{absl::OkStatus(), false, {}});
    return SubmitResult{false, {}};
  }

  if (absl::Status s = Fits(objects_.size(), fn->num_return_vals, options_.limits.max_objects,
                            "object ids", "--max-objects");
      !s.ok()) {
    return s;
  }
  OperationId id = next_operation_++;
  Operation& op = OpMut(id);
  op.id = id;
  op.creator = submitter.is_driver ? 0 : submitter.current;
  op.submitter = worker;
  for (uint64_t i = 0; i < fn->num_return_vals; ++i) {
    task.results.push_back(objects_.Create(id, 0));
  }
  op.task = std::move(task);
  for (const TaskArg& arg : op.task.args) {
    if (arg.id != 0) objects_.Hold(arg.id);
  }
  op.holds_args = true;
  ++counters_.tasks_submitted;
  Enqueue(op);
  SubmitResult result{true, op.task.results};
  Remember(call, CallOutcome{absl::OkStatus(), true, op.task.results});
  Schedule();
  return result;
}

void TaskScheduler::Enqueue(Operation& op) {
  Changed(op);
  op.state = OpState::kQueued;
  op.worker = 0;
  op.queued_at = clock_.Now();
  queue_.push_back(op.id);
}

void TaskScheduler::Schedule() {
  if (queue_.empty() || !members_.AnyIdle()) return;
  std::deque<OperationId> waiting;
  while (!queue_.empty()) {
    OperationId id = queue_.front();
    queue_.pop_front();
    Operation& op = operations_[id];
    if (op.state != OpState::kQueued) continue;
    if (!ArgumentsReady(op)) {
      if (op.state == OpState::kQueued) waiting.push_back(id);
      continue;
    }
    WorkerId worker = PickWorker(op);
    if (worker == 0) {
      waiting.push_back(id);
      continue;
    }
    Assign(op, members_.worker(worker));
    if (!members_.AnyIdle()) break;
  }
  // What was not looked at keeps its place behind what waited.
  waiting.insert(waiting.end(), queue_.begin(), queue_.end());
  queue_ = std::move(waiting);
}

bool TaskScheduler::ArgumentsReady(Operation& op) {
  for (size_t i = 0; i < op.task.args.size(); ++i) {
    ObjectId id = op.task.args[i].id;
    if (id == 0) continue;
    const ObjectRecord* record = objects_.Find(objects_.Canonical(id));
    if (record->failed) {
      FinishTask(op, false,
                 absl::StrCat("argument ", i, " (object ", id, ") is an error: ", record->error));
      return false;
    }
    if (record->locations.empty()) return false;
  }
  return true;
}

WorkerId TaskScheduler::PickWorker(const Operation& op) {
  const Function* fn = functions_.Find(op.task.function_name);
  if (fn == nullptr) return 0;
  // The idle worker whose store already holds the most arguments: fewest transfers.
  WorkerId best = 0;
  int best_local = -1;
  for (WorkerId id : fn->workers) {
    const Worker& w = members_.worker(id);
    if (w.state != WorkerState::kIdle) continue;
    int local = 0;
    for (const TaskArg& arg : op.task.args) {
      if (arg.id != 0 && objects_.Find(objects_.Canonical(arg.id))->locations.contains(w.store)) {
        ++local;
      }
    }
    if (local > best_local) {
      best = id;
      best_local = local;
    }
  }
  return best;
}

void TaskScheduler::Assign(Operation& op, Worker& worker) {
  Changed(op);
  Changed(worker);
  op.state = OpState::kAssigned;
  op.worker = worker.id;
  worker.state = WorkerState::kBusy;
  worker.current = op.id;
  for (const TaskArg& arg : op.task.args) {
    if (arg.id == 0) continue;
    ObjectId canonical = objects_.Canonical(arg.id);
    if (!objects_.Find(canonical)->locations.contains(worker.store)) {
      WantAt(worker.store, canonical, canonical);
    }
  }
  DispatchIfLocal(op);
}

void TaskScheduler::DispatchIfLocal(Operation& op) {
  if (op.state != OpState::kAssigned) return;
  Worker& worker = members_.worker(op.worker);
  TaskSpec task = op.task;
  for (TaskArg& arg : task.args) {
    if (arg.id == 0) continue;
    arg.id = objects_.Canonical(arg.id);
    if (!objects_.Find(arg.id)->locations.contains(worker.store)) return;
  }
  op.state = OpState::kRunning;
  Changed(op);
  if (options_.on_dispatch) options_.on_dispatch(clock_.Now() - op.queued_at);
  Emit(ExecuteTaskEffect{worker.id, worker.address, op.id, std::move(task)});
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
    FailObject(result,
               succeeded
                   ? absl::StrCat("task ", op.task.function_name, " (operation ", op.id,
                                  ") finished without storing its result ", i)
                   : absl::StrCat("task ", op.task.function_name, " (operation ", op.id, ") failed",
                                  worker_address.empty() ? "" : " on worker " + worker_address,
                                  ": ", error));
  }
  ++(succeeded ? counters_.tasks_succeeded : counters_.tasks_failed);
  if (op.holds_args) {
    op.holds_args = false;
    std::vector<Deallocation> freed;
    for (const TaskArg& arg : op.task.args) {
      if (arg.id != 0) objects_.Release(arg.id, &freed);
    }
    Deallocate(freed);
  }
  Finished(op);
}

void TaskScheduler::Finished(Operation& op) {
  if (op.finished_seq != 0) return;
  op.finished_seq = ++finish_seq_;
  history_.emplace_back(op.finished_seq, op.id);
  ++history_size_;
}

void TaskScheduler::Unfinished(Operation& op) {
  if (op.finished_seq == 0) return;
  op.finished_seq = 0;  // its entry in history_ is stale from now on
  --history_size_;
}

void TaskScheduler::TrimHistory() {
  while (history_size_ > options_.limits.task_history && !history_.empty()) {
    auto [seq, id] = history_.front();
    history_.pop_front();
    auto it = operations_.find(id);
    if (it == operations_.end() || it->second.finished_seq != seq) continue;  // stale
    --history_size_;
    ForgetOperation(id);
  }
  // Ids let go during this call whose task (or put) is forgotten already, and such ids whose
  // delivery or wait ended during it.
  std::vector<ObjectId> candidates = objects_.TakeReleased();
  for (const auto& [store, id] : changed_deliveries_) candidates.push_back(id);
  candidates.insert(candidates.end(), changed_wanted_.begin(), changed_wanted_.end());
  for (ObjectId id : candidates) {
    const ObjectRecord* record = objects_.Find(id);
    if (record == nullptr || !record->released) continue;
    bool kept =
        record->producer != 0 ? operations_.contains(record->producer) : kept_puts_.contains(id);
    if (!kept) ForgetIfIdle(id);
  }
}

void TaskScheduler::ForgetOperation(OperationId id) {
  auto it = operations_.find(id);
  std::vector<ObjectId> made = it->second.task.results;
  if (it->second.put_object != 0) {
    made.push_back(it->second.put_object);
    kept_puts_.erase(it->second.put_object);
  }
  operations_.erase(it);
  changed_operations_.erase(id);
  forgotten_operations_.push_back(id);
  for (ObjectId object : made) ForgetIfIdle(object);
}

void TaskScheduler::ForgetIfIdle(ObjectId id) {
  const ObjectRecord* record = objects_.Find(id);
  if (record == nullptr || !record->released || wanted_.contains(id)) return;
  for (const auto& [key, delivery] : deliveries_) {
    if (key.second == id) return;  // the store that gets it drops it when it lands
  }
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
    Schedule();
    return absl::OkStatus();
  }
  if (w.state == WorkerState::kBusy) {
    Operation& op = operations_[w.current];
    if (op.state == OpState::kAssigned) {
      // Its task was not sent yet: the worker asks twice. It keeps the task, unless it leaves.
      if (leaving) {
        Leave(w);
        Schedule();
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
  Schedule();
  return absl::OkStatus();
}

void TaskScheduler::Leave(Worker& worker) {
  Changed(worker);
  worker.state = WorkerState::kDead;
  functions_.DropWorker(worker.id);
  if (worker.current != 0) {
    Operation& op = OpMut(worker.current);
    if (op.state == OpState::kAssigned || op.state == OpState::kRunning) Enqueue(op);
    worker.current = 0;
  }
}

bool TaskScheduler::KillWorkers() {
  Mutation lock(this);
  for (const auto& [id, op] : operations_) {
    if (op.state == OpState::kQueued || op.state == OpState::kAssigned ||
        op.state == OpState::kRunning) {
      return false;
    }
  }
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
  Schedule();
}

void TaskScheduler::LoseWorker(Worker& worker, const std::string& reason) {
  worker.state = WorkerState::kDead;
  Changed(worker);
  ++counters_.workers_lost;
  functions_.DropWorker(worker.id);
  if (worker.current == 0) return;
  Operation& op = OpMut(worker.current);
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
  Enqueue(op);
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
  Schedule();
}

std::vector<LivenessTarget> TaskScheduler::LivenessTargets() const {
  absl::MutexLock lock(&mu_);
  return members_.LivenessTargets();
}

TaskInfoView TaskScheduler::TaskInfo() const {
  absl::MutexLock lock(&mu_);
  TaskInfoView view;
  for (const auto& [id, op] : operations_) {
    if (op.put_object != 0) continue;
    std::string address;
    if (op.worker != 0) address = members_.workers().at(op.worker).address;
    if (op.state == OpState::kFailed) {
      view.failed.push_back({id, op.task.function_name, address, op.error});
    } else if (op.state == OpState::kAssigned || op.state == OpState::kRunning) {
      view.running.push_back({id, op.task.function_name, address, ""});
    }
  }
  view.succeeded = counters_.tasks_succeeded;
  return view;
}

SchedulerInfoView TaskScheduler::SchedulerInfo() const {
  absl::MutexLock lock(&mu_);
  SchedulerInfoView view;
  view.queued.assign(queue_.begin(), queue_.end());
  for (const auto& [name, function] : functions_.functions()) {
    view.functions[name] = {std::vector<WorkerId>(function.workers.begin(), function.workers.end()),
                            function.num_return_vals};
  }
  for (const auto& [id, w] : members_.workers()) {
    if (w.state == WorkerState::kIdle) view.idle_workers.push_back(id);
  }
  // Indexed by object id, as in the original (entry 0 stands for no object).
  view.target_objectid.push_back(0);
  view.reference_count.push_back(0);
  for (ObjectId id = 1; id <= objects_.last_id(); ++id) {
    const ObjectRecord* record = objects_.Find(id);  // none: let go and forgotten
    view.target_objectid.push_back(record != nullptr && record->alias_of != 0 ? record->alias_of
                                                                              : id);
    view.reference_count.push_back(record == nullptr || record->released ? 0 : record->refs);
  }
  for (const auto& [id, op] : operations_) {
    OperationView operation{id, op.creator, op.put_object != 0, op.put_object, op.task};
    view.operations.push_back(std::move(operation));
  }
  return view;
}

SchedulerStats TaskScheduler::Stats() const {
  absl::MutexLock lock(&mu_);
  SchedulerStats stats = counters_;
  stats.tasks_kept = operations_.size();
  stats.tasks_history = history_size_;
  stats.objects_kept = objects_.size();
  for (const auto& [id, op] : operations_) {
    if (op.state == OpState::kQueued) ++stats.tasks_queued;
    if (op.state == OpState::kAssigned || op.state == OpState::kRunning) ++stats.tasks_running;
  }
  for (const auto& [id, w] : members_.workers()) {
    if (!w.is_driver && w.state != WorkerState::kDead) ++stats.workers_alive;
  }
  absl::flat_hash_map<StoreId, size_t> index;
  for (const auto& [id, store] : members_.stores()) {
    index[id] = stats.stores.size();
    stats.stores.push_back({id, store.address, store.alive, 0, 0});
  }
  objects_.ForEach([&](ObjectId, const ObjectRecord& record) {
    for (StoreId store : record.locations) {
      SchedulerStats::Store& s = stats.stores[index[store]];
      ++s.objects;
      s.bytes += record.size;
    }
  });
  return stats;
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

}  // namespace cohort::runtime
