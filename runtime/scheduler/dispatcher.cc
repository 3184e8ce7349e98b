// Matching queued tasks to idle workers, and sending each its task.
#include "runtime/scheduler/dispatcher.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

void Dispatcher::Schedule() {
  if (!operations_.HasQueued() || !members_.AnyIdle()) return;
  std::deque<OperationId> waiting;
  while (operations_.HasQueued()) {
    OperationId id = operations_.PopQueued();
    Operation& op = operations_.operation(id);
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
  operations_.PutBack(std::move(waiting));
}

bool Dispatcher::ArgumentsReady(Operation& op) {
  for (size_t i = 0; i < op.task.args.size(); ++i) {
    ObjectId id = op.task.args[i].id;
    if (id == 0) continue;
    const ObjectRecord* record = objects_.Find(objects_.Canonical(id));
    if (record->failed) {
      fail_(op, absl::StrCat("argument ", i, " (object ", id, ") is an error: ", record->error));
      return false;
    }
    if (record->locations.empty()) return false;
  }
  return true;
}

WorkerId Dispatcher::PickWorker(const Operation& op) const {
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

void Dispatcher::Assign(Operation& op, Worker& worker) {
  operations_.Changed(op);
  members_.Changed(worker);
  op.state = OpState::kAssigned;
  op.worker = worker.id;
  worker.state = WorkerState::kBusy;
  worker.current = op.id;
  for (const TaskArg& arg : op.task.args) {
    if (arg.id == 0) continue;
    ObjectId canonical = objects_.Canonical(arg.id);
    if (!objects_.Find(canonical)->locations.contains(worker.store)) {
      directory_.WantAt(worker.store, canonical, canonical);
    }
  }
  DispatchIfLocal(op);
}

void Dispatcher::DispatchIfLocal(Operation& op) {
  if (op.state != OpState::kAssigned) return;
  Worker& worker = members_.worker(op.worker);
  TaskSpec task = op.task;
  for (TaskArg& arg : task.args) {
    if (arg.id == 0) continue;
    arg.id = objects_.Canonical(arg.id);
    if (!objects_.Find(arg.id)->locations.contains(worker.store)) return;
  }
  op.state = OpState::kRunning;
  operations_.Changed(op);
  if (on_dispatch_) on_dispatch_(clock_.Now() - op.queued_at);
  effects_.push_back(ExecuteTaskEffect{worker.id, worker.address, op.id, std::move(task)});
}

void Dispatcher::DispatchAt(StoreId store) {
  for (auto& [id, w] : members_.workers()) {
    if (w.state == WorkerState::kBusy && w.store == store) {
      DispatchIfLocal(operations_.operation(w.current));
    }
  }
}

void Dispatcher::SendAgain() {
  for (auto& [id, op] : operations_.all()) {
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
      effects_.push_back(ExecuteTaskEffect{worker.id, worker.address, op.id, std::move(task)});
    }
  }
}

}  // namespace cohort::runtime
