// The consistency check of a task scheduler's restored state.
#include "runtime/scheduler/restore_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

absl::Status CheckRestored(const MemberTable& members, const FunctionTable& functions,
                           const ObjectTable& objects, const OperationTable& operations,
                           const TransferTable& transfers) {
  auto bad = [](auto&&... what) {
    return absl::DataLossError(
        absl::StrCat("the saved task runtime state is inconsistent (damaged files?): ", what...));
  };
  auto object = [&objects](ObjectId id) { return id != 0 && objects.Find(id) != nullptr; };
  const ObjectId next_id = objects.next_id();
  // An id handed out, whose record may have been forgotten since (the history): what an
  // alias to announce, or a finished task's argument, may name.
  auto handed_out = [next_id](ObjectId id) { return id != 0 && id < next_id; };
  const auto& workers = members.workers();
  const auto& stores = members.stores();
  const auto& ops = operations.all();
  for (const auto& [id, w] : workers) {
    if (!stores.contains(w.store)) return bad("worker ", id, " names store ", w.store);
    if (w.current != 0 && !ops.contains(w.current)) {
      return bad("worker ", id, " names operation ", w.current);
    }
    if (w.state == WorkerState::kBusy) {
      auto op = ops.find(w.current);
      if (op == ops.end() || op->second.worker != id ||
          (op->second.state != OpState::kAssigned && op->second.state != OpState::kRunning)) {
        return bad("worker ", id, " is busy with operation ", w.current, ", which is not its");
      }
    }
  }
  for (const auto& [name, f] : functions.functions()) {
    for (WorkerId w : f.workers) {
      if (!workers.contains(w)) return bad("function ", name, " names worker ", w);
    }
  }
  const std::vector<std::string>& exported_functions = functions.exported_functions();
  for (size_t i = 0; i < exported_functions.size(); ++i) {
    if (exported_functions[i].empty()) return bad("exported function ", i, " is missing");
  }
  const std::vector<std::string>& exported_variables = functions.exported_variables();
  for (size_t i = 0; i < exported_variables.size(); ++i) {
    if (exported_variables[i].empty()) return bad("reusable variable ", i, " is missing");
  }
  // Objects before operations: the checks of operations follow alias chains, known by then
  // to end.
  absl::Status damage;
  objects.ForEach([&](ObjectId id, const ObjectRecord& r) {
    if (!damage.ok()) return;
    // A released alias's target may have been forgotten (the history).
    if (r.alias_of != 0 && !object(r.alias_of) && !(r.released && handed_out(r.alias_of))) {
      damage = bad("object ", id, " is an alias of ", r.alias_of, ", which is no object");
      return;
    }
    // An alias chain ends within as many steps as there are objects, or it is a cycle.
    ObjectId at = id;
    for (size_t steps = 0; at != 0 && steps <= objects.size(); ++steps) {
      const ObjectRecord* next = objects.Find(at);
      at = next == nullptr ? 0 : next->alias_of;  // a missing target is reported on its own
    }
    if (at != 0) {
      damage = bad("object ", id, "'s aliases make a cycle");
      return;
    }
    // A live id's alias chain is whole (what it reads as is kept while it is held).
    if (!r.released && !objects.Holdable(id)) {
      damage = bad("object ", id, " is held, but its aliases end at a forgotten id");
      return;
    }
    for (StoreId s : r.locations) {
      if (!stores.contains(s)) damage = bad("object ", id, " is at store ", s);
    }
    if (r.producer >= operations.next_id()) {  // one below it may have left the history
      damage = bad("object ", id, " names operation ", r.producer);
    }
    for (ObjectId c : r.contained) {
      if (!object(c)) damage = bad("object ", id, " contains ", c, ", which is no object");
    }
  });
  if (!damage.ok()) return damage;
  for (const auto& [id, op] : ops) {
    // A finished task's arguments may have been let go and forgotten since (the history).
    bool finished = op.state == OpState::kSucceeded || op.state == OpState::kFailed;
    for (const TaskArg& arg : op.task.args) {
      if (arg.id == 0) continue;
      bool may_be_forgotten = finished && !op.holds_args;
      if (may_be_forgotten ? !object(arg.id) && !handed_out(arg.id) : !objects.Holdable(arg.id)) {
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
  for (const auto& [canonical, waiting] : transfers.wanted()) {
    if (!object(canonical)) return bad("a store waits for object ", canonical);
    for (const auto& [store, requested] : waiting) {
      if (!stores.contains(store) || !handed_out(requested)) {
        return bad("store ", store, " waits for object ", requested);
      }
    }
  }
  for (const auto& [key, delivery] : transfers.deliveries()) {
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

}  // namespace cohort::runtime
