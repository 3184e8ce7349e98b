// The task scheduler's views of itself, and its counters' saved form.
#include "runtime/scheduler/scheduler_views.h"

#include "absl/container/flat_hash_map.h"

namespace cohort::runtime {

TaskInfoView TaskInfoOf(const OperationTable& operations, const MemberTable& members,
                        uint64_t succeeded) {
  TaskInfoView view;
  for (const auto& [id, op] : operations.all()) {
    if (op.put_object != 0) continue;
    std::string address;
    if (op.worker != 0) address = members.workers().at(op.worker).address;
    if (op.state == OpState::kFailed) {
      view.failed.push_back({id, op.task.function_name, address, op.error});
    } else if (op.state == OpState::kAssigned || op.state == OpState::kRunning) {
      view.running.push_back({id, op.task.function_name, address, ""});
    }
  }
  view.succeeded = succeeded;
  return view;
}

SchedulerInfoView SchedulerInfoOf(const OperationTable& operations, const FunctionTable& functions,
                                  const MemberTable& members, const ObjectTable& objects) {
  SchedulerInfoView view;
  view.queued.assign(operations.queue().begin(), operations.queue().end());
  for (const auto& [name, function] : functions.functions()) {
    view.functions[name] = {std::vector<WorkerId>(function.workers.begin(), function.workers.end()),
                            function.num_return_vals};
  }
  for (const auto& [id, w] : members.workers()) {
    if (w.state == WorkerState::kIdle) view.idle_workers.push_back(id);
  }
  // Indexed by object id, as in the original (entry 0 stands for no object).
  view.target_objectid.push_back(0);
  view.reference_count.push_back(0);
  for (ObjectId id = 1; id <= objects.last_id(); ++id) {
    const ObjectRecord* record = objects.Find(id);  // none: let go and forgotten
    view.target_objectid.push_back(record != nullptr && record->alias_of != 0 ? record->alias_of
                                                                              : id);
    view.reference_count.push_back(record == nullptr || record->released ? 0 : record->refs);
  }
  for (const auto& [id, op] : operations.all()) {
    OperationView operation{id, op.creator, op.put_object != 0, op.put_object, op.task};
    view.operations.push_back(std::move(operation));
  }
  return view;
}

SchedulerStats StatsOf(SchedulerStats counters, const OperationTable& operations, size_t history,
                       const MemberTable& members, const ObjectTable& objects) {
  SchedulerStats stats = std::move(counters);
  stats.tasks_kept = operations.size();
  stats.tasks_history = history;
  stats.objects_kept = objects.size();
  for (const auto& [id, op] : operations.all()) {
    if (op.state == OpState::kQueued) ++stats.tasks_queued;
    if (op.state == OpState::kAssigned || op.state == OpState::kRunning) ++stats.tasks_running;
  }
  for (const auto& [id, w] : members.workers()) {
    if (!w.is_driver && w.state != WorkerState::kDead) ++stats.workers_alive;
  }
  absl::flat_hash_map<StoreId, size_t> index;
  for (const auto& [id, store] : members.stores()) {
    index[id] = stats.stores.size();
    stats.stores.push_back({id, store.address, store.alive, 0, 0});
  }
  objects.ForEach([&](ObjectId, const ObjectRecord& record) {
    for (StoreId store : record.locations) {
      SchedulerStats::Store& s = stats.stores[index[store]];
      ++s.objects;
      s.bytes += record.size;
    }
  });
  return stats;
}

std::vector<uint64_t> SavedCounters(const SchedulerStats& s) {
  return {s.tasks_submitted, s.tasks_succeeded, s.tasks_failed, s.tasks_retried, s.tasks_rebuilt,
          s.workers_lost,    s.stores_lost,     s.objects_lost, s.deliveries,    s.delivered_bytes};
}

void RestoreCounters(const std::vector<uint64_t>& saved, SchedulerStats* s) {
  uint64_t* fields[] = {&s->tasks_submitted, &s->tasks_succeeded, &s->tasks_failed,
                        &s->tasks_retried,   &s->tasks_rebuilt,   &s->workers_lost,
                        &s->stores_lost,     &s->objects_lost,    &s->deliveries,
                        &s->delivered_bytes};
  for (size_t i = 0; i < std::size(fields) && i < saved.size(); ++i) *fields[i] = saved[i];
}

}  // namespace cohort::runtime
