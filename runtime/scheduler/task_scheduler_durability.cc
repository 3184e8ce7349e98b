// The scheduler's durability: what each call changed, told to the journal; the whole state for a
// snapshot; a scheduler rebuilt from saved changes; and the answers of repeated calls.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/scheduler/task_scheduler.h"

namespace cohort::runtime {

namespace {

// SchedulerStats' cumulative fields, in a fixed order (saved as a list).
std::vector<uint64_t> CountersOf(const SchedulerStats& s) {
  return {s.tasks_submitted, s.tasks_succeeded, s.tasks_failed, s.tasks_retried, s.tasks_rebuilt,
          s.workers_lost,    s.stores_lost,     s.objects_lost, s.deliveries,    s.delivered_bytes};
}

void SetCounters(const std::vector<uint64_t>& v, SchedulerStats* s) {
  uint64_t* fields[] = {&s->tasks_submitted, &s->tasks_succeeded, &s->tasks_failed,
                        &s->tasks_retried,   &s->tasks_rebuilt,   &s->workers_lost,
                        &s->stores_lost,     &s->objects_lost,    &s->deliveries,
                        &s->delivered_bytes};
  for (size_t i = 0; i < std::size(fields) && i < v.size(); ++i) *fields[i] = v[i];
}

}  // namespace

TaskScheduler::Mutation::~Mutation() {
  scheduler_->JournalLocked();
  scheduler_->mu_.Unlock();
}

void TaskScheduler::JournalLocked() {
  TrimHistory();
  std::vector<ObjectId> objects = objects_.TakeChanged();
  std::vector<ObjectId> forgotten_objects = objects_.TakeForgotten();
  SchedulerChanges changes;
  // The tables forget what changed even when there is no journal to tell.
  SchedulerChanges* told = journal_ != nullptr ? &changes : nullptr;
  members_.TakeChanges(told);
  functions_.TakeChanges(told);
  if (journal_ != nullptr) {
    for (OperationId id : changed_operations_) changes.operations.push_back(operations_.at(id));
    std::sort(objects.begin(), objects.end());
    for (ObjectId id : objects) changes.objects.emplace_back(id, *objects_.Find(id));
    for (ObjectId id : changed_wanted_) {
      auto it = wanted_.find(id);
      changes.wanted.emplace_back(
          id, it == wanted_.end() ? absl::btree_set<std::pair<StoreId, ObjectId>>() : it->second);
    }
    for (const auto& key : changed_deliveries_) {
      auto it = deliveries_.find(key);
      changes.deliveries.emplace_back(
          key, it == deliveries_.end() ? std::nullopt : std::optional<Delivery>(it->second));
    }
    changes.calls = std::move(new_calls_);
    std::vector<uint64_t> counters = CountersOf(counters_);
    if (counters != journaled_counters_) {
      changes.counters = counters;
      journaled_counters_ = std::move(counters);
    }
    changes.forgotten_operations = std::move(forgotten_operations_);
    changes.forgotten_objects = std::move(forgotten_objects);
    if (!changes.empty()) journal_->SchedulerChanged(changes);
  }
  forgotten_operations_.clear();
  changed_operations_.clear();
  changed_wanted_.clear();
  changed_deliveries_.clear();
  new_calls_.clear();
}

const CallOutcome* TaskScheduler::Repeated(const CallId& call) const {
  if (call.number == 0) return nullptr;
  auto it = calls_.find({call.worker, call.number});
  return it == calls_.end() ? nullptr : &it->second;
}

void TaskScheduler::Remember(const CallId& call, CallOutcome outcome) {
  if (call.number == 0) return;
  if (journal_ != nullptr) new_calls_.push_back({call.worker, call.number, outcome});
  bool fresh = calls_.insert_or_assign({call.worker, call.number}, std::move(outcome)).second;
  if (!fresh) return;  // read back twice (a snapshot and the log after it)
  std::deque<uint64_t>& order = call_order_[call.worker];
  order.push_back(call.number);
  while (order.size() > kRememberedCalls) {
    calls_.erase({call.worker, order.front()});
    order.pop_front();
  }
}

void TaskScheduler::ApplyLocked(const SchedulerChanges& changes) {
  const absl::Time now = clock_.Now();
  members_.Apply(changes, now);
  functions_.Apply(changes);
  for (Operation op : changes.operations) {
    op.queued_at = now;
    op.finished_seq = 0;
    next_operation_ = std::max(next_operation_, op.id + 1);
    if (op.put_object != 0) kept_puts_.insert(op.put_object);
    operations_[op.id] = std::move(op);
  }
  for (const auto& [id, record] : changes.objects) objects_.Restore(id, record);
  for (OperationId id : changes.forgotten_operations) {
    if (auto it = operations_.find(id); it != operations_.end()) {
      kept_puts_.erase(it->second.put_object);
      operations_.erase(it);
    }
    next_operation_ = std::max(next_operation_, id + 1);
  }
  for (ObjectId id : changes.forgotten_objects) objects_.RestoreForgotten(id);
  if (changes.next_operation.has_value()) {
    next_operation_ = std::max(next_operation_, *changes.next_operation);
  }
  if (changes.next_object.has_value()) objects_.RestoreNextId(*changes.next_object);
  for (const auto& [canonical, waiting] : changes.wanted) {
    if (waiting.empty()) {
      wanted_.erase(canonical);
    } else {
      wanted_[canonical] = waiting;
    }
  }
  for (const auto& [key, delivery] : changes.deliveries) {
    if (delivery.has_value()) {
      deliveries_[key] = *delivery;
    } else {
      deliveries_.erase(key);
    }
  }
  for (const RememberedCall& call : changes.calls) {
    Remember({call.worker, call.call}, call.outcome);
  }
  if (changes.counters.has_value()) SetCounters(*changes.counters, &counters_);
}

void TaskScheduler::Restore(const SchedulerChanges& changes) {
  absl::MutexLock lock(&mu_);
  ApplyLocked(changes);
  objects_.TakeChanged();
}

absl::Status TaskScheduler::CheckRestoredLocked() const {
  auto bad = [](auto&&... what) {
    return absl::DataLossError(
        absl::StrCat("the saved task runtime state is inconsistent (damaged files?): ", what...));
  };
  auto object = [this](ObjectId id) { return id != 0 && objects_.Find(id) != nullptr; };
  const ObjectId next_id = objects_.next_id();
  // An id handed out, whose record may have been forgotten since (the history): what an
  // alias to announce, or a finished task's argument, may name.
  auto handed_out = [next_id](ObjectId id) { return id != 0 && id < next_id; };
  const auto& workers = members_.workers();
  const auto& stores = members_.stores();
  for (const auto& [id, w] : workers) {
    if (!stores.contains(w.store)) return bad("worker ", id, " names store ", w.store);
    if (w.current != 0 && !operations_.contains(w.current)) {
      return bad("worker ", id, " names operation ", w.current);
    }
    if (w.state == WorkerState::kBusy) {
      auto op = operations_.find(w.current);
      if (op == operations_.end() || op->second.worker != id ||
          (op->second.state != OpState::kAssigned && op->second.state != OpState::kRunning)) {
        return bad("worker ", id, " is busy with operation ", w.current, ", which is not its");
      }
    }
  }
  for (const auto& [name, f] : functions_.functions()) {
    for (WorkerId w : f.workers) {
      if (!workers.contains(w)) return bad("function ", name, " names worker ", w);
    }
  }
  const std::vector<std::string>& exported_functions = functions_.exported_functions();
  for (size_t i = 0; i < exported_functions.size(); ++i) {
    if (exported_functions[i].empty()) return bad("exported function ", i, " is missing");
  }
  const std::vector<std::string>& exported_variables = functions_.exported_variables();
  for (size_t i = 0; i < exported_variables.size(); ++i) {
    if (exported_variables[i].empty()) return bad("reusable variable ", i, " is missing");
  }
  // Objects before operations: the checks of operations follow alias chains, known by then
  // to end.
  absl::Status damage;
  objects_.ForEach([&](ObjectId id, const ObjectRecord& r) {
    if (!damage.ok()) return;
    // A released alias's target may have been forgotten (the history).
    if (r.alias_of != 0 && !object(r.alias_of) && !(r.released && handed_out(r.alias_of))) {
      damage = bad("object ", id, " is an alias of ", r.alias_of, ", which is no object");
      return;
    }
    // An alias chain ends within as many steps as there are objects, or it is a cycle.
    ObjectId at = id;
    for (size_t steps = 0; at != 0 && steps <= objects_.size(); ++steps) {
      const ObjectRecord* next = objects_.Find(at);
      at = next == nullptr ? 0 : next->alias_of;  // a missing target is reported on its own
    }
    if (at != 0) {
      damage = bad("object ", id, "'s aliases make a cycle");
      return;
    }
    // A live id's alias chain is whole (what it reads as is kept while it is held).
    if (!r.released && !objects_.Holdable(id)) {
      damage = bad("object ", id, " is held, but its aliases end at a forgotten id");
      return;
    }
    for (StoreId s : r.locations) {
      if (!stores.contains(s)) damage = bad("object ", id, " is at store ", s);
    }
    if (r.producer >= next_operation_) {  // one below it may have left the history
      damage = bad("object ", id, " names operation ", r.producer);
    }
    for (ObjectId c : r.contained) {
      if (!object(c)) damage = bad("object ", id, " contains ", c, ", which is no object");
    }
  });
  if (!damage.ok()) return damage;
  for (const auto& [id, op] : operations_) {
    // A finished task's arguments may have been let go and forgotten since (the history).
    bool finished = op.state == OpState::kSucceeded || op.state == OpState::kFailed;
    for (const TaskArg& arg : op.task.args) {
      if (arg.id == 0) continue;
      bool may_be_forgotten = finished && !op.holds_args;
      if (may_be_forgotten ? !object(arg.id) && !handed_out(arg.id) : !objects_.Holdable(arg.id)) {
        return bad("operation ", id, " names object ", arg.id);
      }
    }
    for (ObjectId r : op.task.results) {
      if (!object(r)) return bad("operation ", id, " names result ", r);
    }
    if (op.put_object != 0 && !object(op.put_object)) {
      return bad("operation ", id, " names object ", op.put_object);
    }
    if (op.worker != 0 && !workers.contains(op.worker)) {
      return bad("operation ", id, " names worker ", op.worker);
    }
    if (op.state == OpState::kAssigned || op.state == OpState::kRunning) {
      auto w = workers.find(op.worker);
      if (w == workers.end() || w->second.current != id || w->second.state != WorkerState::kBusy) {
        return bad("operation ", id, " runs on worker ", op.worker, ", which does not run it");
      }
    }
  }
  for (const auto& [canonical, waiting] : wanted_) {
    if (!object(canonical)) return bad("a store waits for object ", canonical);
    for (const auto& [store, requested] : waiting) {
      if (!stores.contains(store) || !handed_out(requested)) {
        return bad("store ", store, " waits for object ", requested);
      }
    }
  }
  for (const auto& [key, delivery] : deliveries_) {
    if (!stores.contains(key.first) || !object(key.second) ||
        (delivery.from != 0 && !stores.contains(delivery.from))) {
      return bad("a delivery of object ", key.second, " to store ", key.first);
    }
    for (ObjectId a : delivery.aliases) {
      if (!handed_out(a)) return bad("a delivery of object ", key.second, " names alias ", a);
    }
  }
  return absl::OkStatus();
}

absl::Status TaskScheduler::FinishRestore() {
  Mutation lock(this);
  if (absl::Status s = CheckRestoredLocked(); !s.ok()) return s;
  // The queue, oldest task first (a restart forgets the order retries re-entered it in), and
  // the history of finished tasks, oldest first by id (a restart forgets the order they
  // finished in); past --task-history the oldest are forgotten at the end of this call.
  queue_.clear();
  history_.clear();
  history_size_ = 0;
  for (auto& [id, op] : operations_) {
    if (op.state == OpState::kQueued) queue_.push_back(id);
    if (op.state == OpState::kSucceeded || op.state == OpState::kFailed) Finished(op);
  }
  // Calls the old process may have decided on but never made. Each is harmless when repeated:
  // a worker ignores an ExecuteTask for a task it holds or has finished, a store one for an
  // object it holds, and aliases and imports are idempotent.
  for (auto& [id, op] : operations_) {
    if (op.state == OpState::kAssigned) {
      DispatchIfLocal(op);
    } else if (op.state == OpState::kRunning) {
      auto found = members_.workers().find(op.worker);
      if (found == members_.workers().end()) continue;
      const Worker& worker = found->second;
      TaskSpec task = op.task;
      for (TaskArg& arg : task.args) {
        if (arg.id != 0) arg.id = objects_.Canonical(arg.id);
      }
      Emit(ExecuteTaskEffect{worker.id, worker.address, op.id, std::move(task)});
    }
  }
  std::vector<std::pair<StoreId, ObjectId>> under_way;
  for (const auto& [key, delivery] : deliveries_) under_way.push_back(key);
  for (const auto& [to, canonical] : under_way) {
    Delivery delivery = std::move(deliveries_[{to, canonical}]);
    deliveries_.erase({to, canonical});
    DeliveryChanged({to, canonical});
    for (ObjectId alias : delivery.aliases) WantAt(to, alias, canonical);
    WantAt(to, canonical, canonical);
  }
  objects_.ForEach([&](ObjectId id, const ObjectRecord& record) {
    if (record.alias_of == 0 || record.released) return;
    ObjectId canonical = objects_.Canonical(id);
    for (StoreId store : objects_.Find(canonical)->locations) {
      const Store& s = members_.stores().at(store);
      if (s.alive) Emit(NotifyAliasEffect{store, s.address, id, canonical});
    }
  });
  for (auto& [id, w] : members_.workers()) {
    if (w.is_driver || w.state == WorkerState::kDead || w.state == WorkerState::kRegistered) {
      continue;
    }
    w.functions_sent = 0;
    w.variables_sent = 0;
    SendExports(w);
  }
  Schedule();
  return absl::OkStatus();
}

void TaskScheduler::SetJournal(SchedulerJournal* journal) {
  absl::MutexLock lock(&mu_);
  journal_ = journal;
  journaled_counters_ = CountersOf(counters_);
}

SchedulerChanges TaskScheduler::CaptureState() const {
  absl::MutexLock lock(&mu_);
  SchedulerChanges state;
  members_.Capture(&state);
  functions_.Capture(&state);
  for (const auto& [id, op] : operations_) state.operations.push_back(op);
  objects_.ForEach(
      [&](ObjectId id, const ObjectRecord& record) { state.objects.emplace_back(id, record); });
  std::sort(state.objects.begin(), state.objects.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [canonical, waiting] : wanted_) {
    if (!waiting.empty()) state.wanted.emplace_back(canonical, waiting);
  }
  std::sort(state.wanted.begin(), state.wanted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [key, delivery] : deliveries_) state.deliveries.emplace_back(key, delivery);
  // Each worker's calls oldest first (which ones are forgotten next); workers in order.
  std::vector<WorkerId> callers;
  for (const auto& [worker, order] : call_order_) callers.push_back(worker);
  std::sort(callers.begin(), callers.end());
  for (WorkerId worker : callers) {
    for (uint64_t number : call_order_.at(worker)) {
      state.calls.push_back({worker, number, calls_.at({worker, number})});
    }
  }
  state.counters = CountersOf(counters_);
  state.next_operation = next_operation_;
  state.next_object = objects_.next_id();
  return state;
}

}  // namespace cohort::runtime
