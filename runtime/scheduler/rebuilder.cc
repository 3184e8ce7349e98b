// Rebuilding lost objects from their lineage.
#include "runtime/scheduler/rebuilder.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

void Rebuilder::StoreLost(StoreId store, const std::string& why) {
  std::vector<ObjectId> gone;
  objects_.ForEach([&](ObjectId id, const ObjectRecord& record) {
    if (record.locations.contains(store)) gone.push_back(id);
  });
  for (ObjectId id : gone) {
    ObjectRecord* record = objects_.FindMutable(id);
    record->locations.erase(store);
    if (record->locations.empty() && !record->released && !record->failed) Rebuild(id, why);
  }
}

void Rebuilder::Rebuild(ObjectId canonical, const std::string& why) {
  ObjectRecord* record = objects_.FindMutable(canonical);
  if (record->producer == 0) {
    ++counters_.objects_lost;
    directory_.Fail(canonical,
                    absl::StrCat("object ", canonical, " is lost: it was put by worker ",
                                 record->put_by, ", so it cannot be computed again, and ", why));
    return;
  }
  Operation* found = operations_.Find(record->producer);
  if (found == nullptr) {
    ++counters_.objects_lost;
    directory_.Fail(
        canonical,
        absl::StrCat("object ", canonical, " is lost: operation ", record->producer,
                     ", which computed it, is no longer kept (the scheduler keeps the last ",
                     limits_.task_history,
                     " finished tasks, --task-history), so it cannot be computed again, ", "and ",
                     why));
    return;
  }
  Operation& op = *found;
  operations_.Changed(op);
  if (op.state != OpState::kSucceeded) return;  // being computed, or failed already
  if (op.rebuilds >= max_rebuilds_) {
    ++counters_.objects_lost;
    directory_.Fail(canonical,
                    absl::StrCat("object ", canonical, " is lost: task ", op.task.function_name,
                                 " (operation ", op.id, ") was run again ", op.rebuilds,
                                 " times to rebuild it already, and ", why));
    return;
  }
  for (size_t i = 0; i < op.task.args.size(); ++i) {
    ObjectId arg = op.task.args[i].id;
    if (arg == 0 || objects_.Holdable(arg)) continue;
    ++counters_.objects_lost;
    directory_.Fail(
        canonical,
        absl::StrCat("object ", canonical, " is lost: task ", op.task.function_name, " (operation ",
                     op.id, "), which computed it, cannot run again, since ", "its argument ", i,
                     " (object ", arg, ") was let go and forgotten ",
                     "with the task that computed it (--task-history), and ", why));
    return;
  }
  ++op.rebuilds;
  ++counters_.tasks_rebuilt;
  history_.Unfinished(op);
  for (const TaskArg& arg : op.task.args) {
    if (arg.id == 0) continue;
    objects_.Hold(arg.id);
    ObjectId source = objects_.Canonical(arg.id);
    const ObjectRecord* input = objects_.Find(source);
    if (input->locations.empty() && !input->failed) Rebuild(source, why);
  }
  op.holds_args = true;
  operations_.Enqueue(op, clock_.Now());
}

}  // namespace cohort::runtime
