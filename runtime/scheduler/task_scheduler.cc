// Registration, tasks and workers. Objects, deliveries and rebuilds: task_scheduler_objects.cc.
#include "runtime/scheduler/task_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cohort::runtime {

namespace {

std::string HostOf(const std::string& address) {
  // "host:port", "[v6]:port".
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

absl::Status CheckAddress(const std::string& what, const std::string& address) {
  size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", address, "' is not HOST:PORT"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TaskScheduler::Fits(size_t have, size_t more, size_t limit, const char* what,
                                 const char* flag) {
  if (more <= limit && have <= limit - more) return absl::OkStatus();
  if (have == 0) {  // a limit on one call
    return absl::ResourceExhaustedError(
        absl::StrCat("the scheduler takes at most ", limit, " ", what, " (this call has ", more,
                     "); the coordinator's ", flag, " raises the limit"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the scheduler keeps at most ", limit, " ", what, " (", have, " now, this call adds ", more,
      "); the coordinator's ", flag, " raises the limit"));
}

size_t TaskScheduler::ExportedBytes() const {
  size_t bytes = 0;
  for (const std::string& f : exported_functions_) bytes += f.size();
  for (const std::string& v : exported_variables_) bytes += v.size();
  return bytes;
}

TaskScheduler::TaskScheduler(const Clock& clock, SchedulerOptions options)
    : clock_(clock), options_(std::move(options)), next_port_(options_.first_assigned_port) {}

absl::Status TaskScheduler::CheckWorker(WorkerId worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker));
  if (it->second.state == WorkerState::kDead) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " was lost or told to die; register again"));
  }
  return absl::OkStatus();
}

absl::Status TaskScheduler::CheckStore(StoreId store) const {
  auto it = stores_.find(store);
  if (it == stores_.end()) return absl::NotFoundError(absl::StrCat("no object store ", store));
  if (!it->second.alive) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object store ", store, " (", it->second.address, ") was lost; register again"));
  }
  return absl::OkStatus();
}

void TaskScheduler::Emit(Effect effect) { effects_.push_back(std::move(effect)); }

absl::StatusOr<StoreId> TaskScheduler::RegisterObjStore(const std::string& address) {
  if (absl::Status s = CheckAddress("object store address", address); !s.ok()) return s;
  Mutation lock(this);
  const size_t alive = static_cast<size_t>(std::count_if(
      stores_.begin(), stores_.end(), [](const auto& entry) { return entry.second.alive; }));
  if (absl::Status s =
          Fits(alive, 1, options_.limits.max_stores, "object stores", "--max-object-stores");
      !s.ok()) {
    return s;
  }
  for (auto& [id, store] : stores_) {
    // A store starts empty: one registering again at a known address restarted, and what
    // the old one held is gone.
    if (store.alive && store.address == address) {
      LoseStore(store, absl::StrCat("a store registered again at ", address));
    }
  }
  StoreId id = next_store_++;
  stores_[id] = Store{id, address, true, clock_.Now()};
  changed_stores_.insert(id);
  Schedule();
  return id;
}

absl::StatusOr<WorkerRegistration> TaskScheduler::RegisterWorker(
    const std::string& node_ip, const std::string& objstore_address, bool is_driver,
    const std::string& worker_address) {
  Mutation lock(this);
  const size_t alive =
      static_cast<size_t>(std::count_if(workers_.begin(), workers_.end(), [](const auto& entry) {
        return entry.second.state != WorkerState::kDead;
      }));
  if (absl::Status s =
          Fits(alive, 1, options_.limits.max_workers, "workers and drivers", "--max-task-workers");
      !s.ok()) {
    return s;
  }
  const Store* store = nullptr;
  for (const auto& [id, s] : stores_) {
    if (!s.alive) continue;
    if (!objstore_address.empty() ? s.address == objstore_address
                                  : !node_ip.empty() && HostOf(s.address) == node_ip) {
      store = &s;
      break;
    }
  }
  if (store == nullptr) {
    return absl::NotFoundError(
        objstore_address.empty()
            ? absl::StrCat("no object store registered on node '", node_ip, "'")
            : absl::StrCat("no object store registered at ", objstore_address));
  }
  std::string address = worker_address;
  if (!address.empty()) {
    if (absl::Status s = CheckAddress("worker address", address); !s.ok()) return s;
  } else if (!is_driver) {
    if (node_ip.empty()) {
      return absl::InvalidArgumentError(
          "a worker registers with its own address or a node IP to be given one on");
    }
    address = absl::StrCat(node_ip.find(':') != std::string::npos ? "[" + node_ip + "]" : node_ip,
                           ":", next_port_++);
    port_changed_ = true;
  }
  if (!is_driver) {
    for (auto& [id, w] : workers_) {
      if (w.state != WorkerState::kDead && !w.is_driver && w.address == address) {
        LoseWorker(w, absl::StrCat("a worker registered again at ", address));
      }
    }
  }
  WorkerId id = next_worker_++;
  Worker& worker = WorkerMut(id);
  worker.id = id;
  worker.store = store->id;
  worker.address = address;
  worker.is_driver = is_driver;
  worker.last_seen = clock_.Now();
  WorkerRegistration registration{id, store->id, address, store->address};
  Schedule();
  return registration;
}

absl::Status TaskScheduler::RegisterFunction(WorkerId worker, const std::string& name,
                                             uint64_t num_return_vals) {
  if (name.empty()) return absl::InvalidArgumentError("a function needs a name");
  Mutation lock(this);
  if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
  Worker& w = workers_[worker];
  if (w.is_driver) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " is a driver; drivers never run tasks"));
  }
  w.last_seen = clock_.Now();
  auto it = functions_.find(name);
  if (it == functions_.end()) {
    if (absl::Status s = Fits(functions_.size(), 1, options_.limits.max_functions, "functions",
                              "--max-functions");
        !s.ok()) {
      return s;
    }
  }
  if (it != functions_.end() && it->second.num_return_vals != num_return_vals) {
    return absl::InvalidArgumentError(absl::StrCat(
        "function '", name, "' returns ", it->second.num_return_vals,
        " values where other workers registered it; worker ", worker, " says ", num_return_vals));
  }
  changed_functions_.insert(name);
  Function& function = functions_[name];
  function.num_return_vals = num_return_vals;
  function.workers.insert(worker);
  Schedule();
  return absl::OkStatus();
}

absl::Status TaskScheduler::ExportFunction(std::string implementation) {
  return Export(&exported_functions_, std::move(implementation), "the function");
}

absl::Status TaskScheduler::ExportReusableVariable(std::string reusable_variable) {
  return Export(&exported_variables_, std::move(reusable_variable), "the reusable variable");
}

absl::Status TaskScheduler::Export(std::vector<std::string>* exports, std::string item,
                                   const char* what) {
  if (item.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  Mutation lock(this);
  if (absl::Status s =
          Fits(ExportedBytes(), item.size(), options_.limits.max_export_bytes,
               "bytes of exported functions and reusable variables", "--max-export-bytes");
      !s.ok()) {
    return s;
  }
  exports->push_back(std::move(item));
  for (auto& [id, w] : workers_) {
    if (!w.is_driver && w.state != WorkerState::kDead && w.state != WorkerState::kRegistered) {
      SendExports(w);
    }
  }
  return absl::OkStatus();
}

void TaskScheduler::SendExports(Worker& worker) {
  Changed(worker);
  for (; worker.functions_sent < exported_functions_.size(); ++worker.functions_sent) {
    Emit(ImportFunctionEffect{worker.id, worker.address,
                              exported_functions_[worker.functions_sent]});
  }
  for (; worker.variables_sent < exported_variables_.size(); ++worker.variables_sent) {
    Emit(ImportReusableVariableEffect{worker.id, worker.address,
                                      exported_variables_[worker.variables_sent]});
  }
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
  if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
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
  Worker& submitter = workers_[worker];
  submitter.last_seen = clock_.Now();
  auto fn = functions_.find(task.function_name);
  if (fn == functions_.end()) {
    Remember(call, CallOutcome{absl::OkStatus(), false, {}});
    return SubmitResult{false, {}};
  }

  if (absl::Status s = Fits(objects_.size(), fn->second.num_return_vals,
                            options_.limits.max_objects, "object ids", "--max-objects");
      !s.ok()) {
    return s;
  }
  OperationId id = next_operation_++;
  Operation& op = OpMut(id);
  op.id = id;
  op.creator = submitter.is_driver ? 0 : submitter.current;
  op.submitter = worker;
  for (uint64_t i = 0; i < fn->second.num_return_vals; ++i) {
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
  auto any_idle = [this] {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const auto& entry) { return entry.second.state == WorkerState::kIdle; });
  };
  if (queue_.empty() || !any_idle()) return;
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
    Assign(op, workers_[worker]);
    if (!any_idle()) break;
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
  auto fn = functions_.find(op.task.function_name);
  if (fn == functions_.end()) return 0;
  // The idle worker whose store already holds the most arguments: fewest transfers.
  WorkerId best = 0;
  int best_local = -1;
  for (WorkerId id : fn->second.workers) {
    const Worker& w = workers_[id];
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
  Worker& worker = workers_[op.worker];
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
  if (op.worker != 0) worker_address = workers_[op.worker].address;
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
  if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
  Worker& w = workers_[worker];
  if (w.is_driver) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " is a driver; drivers never run tasks"));
  }
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
  for (auto& [name, function] : functions_) {
    if (function.workers.erase(worker.id) > 0) changed_functions_.insert(name);
  }
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
  for (auto& [id, w] : workers_) {
    if (w.is_driver || w.state == WorkerState::kDead) continue;
    Emit(DieEffect{id, w.address});
    w.state = WorkerState::kDead;
    Changed(w);
  }
  for (const auto& [name, function] : functions_) changed_functions_.insert(name);
  functions_.clear();
  exported_functions_.clear();
  exported_variables_.clear();
  exports_cleared_ = true;
  journaled_functions_ = 0;
  journaled_variables_ = 0;
  return true;
}

void TaskScheduler::WorkerLost(WorkerId worker, const std::string& reason) {
  Mutation lock(this);
  auto it = workers_.find(worker);
  if (it == workers_.end() || it->second.state == WorkerState::kDead) return;
  LoseWorker(it->second, reason);
  Schedule();
}

void TaskScheduler::LoseWorker(Worker& worker, const std::string& reason) {
  worker.state = WorkerState::kDead;
  Changed(worker);
  ++counters_.workers_lost;
  for (auto& [name, function] : functions_) {
    if (function.workers.erase(worker.id) > 0) changed_functions_.insert(name);
  }
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
  auto it = workers_.find(worker);
  if (it != workers_.end()) it->second.last_seen = clock_.Now();
}

void TaskScheduler::StoreSeen(StoreId store) {
  absl::MutexLock lock(&mu_);
  auto it = stores_.find(store);
  if (it != stores_.end()) it->second.last_seen = clock_.Now();
}

void TaskScheduler::CheckLiveness() {
  if (options_.liveness_timeout <= absl::ZeroDuration()) return;
  Mutation lock(this);
  absl::Time now = clock_.Now();
  std::string silent =
      absl::StrCat("not heard from for ", absl::FormatDuration(options_.liveness_timeout));
  for (auto& [id, store] : stores_) {
    if (store.alive && now - store.last_seen > options_.liveness_timeout) {
      LoseStore(store, silent);
    }
  }
  for (auto& [id, w] : workers_) {
    // Drivers serve nothing the scheduler could ask; they are lost only when reported.
    if (!w.is_driver && w.state != WorkerState::kDead &&
        now - w.last_seen > options_.liveness_timeout) {
      LoseWorker(w, silent);
    }
  }
  Schedule();
}

std::vector<LivenessTarget> TaskScheduler::LivenessTargets() const {
  absl::MutexLock lock(&mu_);
  std::vector<LivenessTarget> targets;
  for (const auto& [id, store] : stores_) {
    if (store.alive) targets.push_back({true, id, store.address});
  }
  for (const auto& [id, w] : workers_) {
    if (!w.is_driver && w.state != WorkerState::kDead) targets.push_back({false, id, w.address});
  }
  return targets;
}

TaskInfoView TaskScheduler::TaskInfo() const {
  absl::MutexLock lock(&mu_);
  TaskInfoView view;
  for (const auto& [id, op] : operations_) {
    if (op.put_object != 0) continue;
    std::string address;
    if (op.worker != 0) address = workers_.at(op.worker).address;
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
  for (const auto& [name, function] : functions_) {
    view.functions[name] = {std::vector<WorkerId>(function.workers.begin(), function.workers.end()),
                            function.num_return_vals};
  }
  for (const auto& [id, w] : workers_) {
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
  for (const auto& [id, w] : workers_) {
    if (!w.is_driver && w.state != WorkerState::kDead) ++stats.workers_alive;
  }
  absl::flat_hash_map<StoreId, size_t> index;
  for (const auto& [id, store] : stores_) {
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
