// Objects: puts, readiness, requests, aliases, counts, deliveries between stores, lost stores
// and the rebuilding of what they held.
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/scheduler/task_scheduler.h"

namespace cohort::runtime {

absl::StatusOr<ObjectId> TaskScheduler::PutObj(WorkerId worker, CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = Repeated(call)) {
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
  OperationId id = next_operation_++;
  Operation& op = OpMut(id);
  op.id = id;
  op.creator = w.is_driver ? 0 : w.current;
  op.submitter = worker;
  op.put_object = object;
  op.state = OpState::kSucceeded;
  kept_puts_.insert(object);
  Finished(op);
  Remember(call, CallOutcome{absl::OkStatus(), false, {object}});
  return object;
}

absl::Status TaskScheduler::ObjReady(ObjectId object, StoreId store, uint64_t size) {
  Mutation lock(this);
  if (absl::Status s = members_.CheckStore(store); !s.ok()) return s;
  ObjectRecord* record = objects_.FindMutable(object);
  if (record == nullptr && object != 0 && object <= objects_.last_id()) {
    // Let go and forgotten (the history) before this copy landed: the store drops it.
    const Store& s = members_.store(store);
    Emit(DeallocateEffect{store, s.address, object});
    return absl::OkStatus();
  }
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no object ", object));
  if (record->alias_of != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", object, " is an alias of ", record->alias_of, "; a store holds canonical ids"));
  }
  Store& s = members_.store(store);
  s.last_seen = clock_.Now();
  Delivery delivery;
  if (auto it = deliveries_.find({store, object}); it != deliveries_.end()) {
    delivery = std::move(it->second);
    deliveries_.erase(it);
    DeliveryChanged({store, object});
    if (delivery.from != 0) counters_.delivered_bytes += size;
  }
  if (record->released) {
    // Let go while it was computed or on its way: the store drops it at once, and the stores
    // that asked for it meanwhile wait no more (nobody holds it to read it).
    Emit(DeallocateEffect{store, s.address, object});
    if (wanted_.erase(object) > 0) WantedChanged(object);
    return absl::OkStatus();
  }
  record->locations.insert(store);
  record->size = size;
  for (ObjectId alias : delivery.aliases) {
    Emit(NotifyAliasEffect{store, s.address, alias, object});
  }
  if (auto it = wanted_.find(object); it != wanted_.end()) {
    auto waiting = std::move(it->second);
    wanted_.erase(it);
    WantedChanged(object);
    for (const auto& [to, requested] : waiting) WantAt(to, requested, object);
  }
  for (auto& [id, w] : members_.workers()) {
    if (w.state == WorkerState::kBusy && w.store == store) DispatchIfLocal(operations_[w.current]);
  }
  Schedule();
  return absl::OkStatus();
}

absl::Status TaskScheduler::RequestObj(WorkerId worker, ObjectId object) {
  Mutation lock(this);
  if (absl::Status s = members_.CheckWorker(worker); !s.ok()) return s;
  if (absl::Status s = objects_.CheckLive(object); !s.ok()) return s;
  Worker& w = members_.worker(worker);
  w.last_seen = clock_.Now();
  WantAt(w.store, object, objects_.Canonical(object));
  return absl::OkStatus();
}

void TaskScheduler::WantAt(StoreId store, ObjectId requested, ObjectId canonical) {
  const Store& s = members_.store(store);
  if (!s.alive) return;
  const ObjectRecord* record = objects_.Find(canonical);
  if (record->locations.contains(store)) {
    if (requested != canonical) Emit(NotifyAliasEffect{store, s.address, requested, canonical});
    return;
  }
  if (record->locations.empty() && !record->failed) {
    wanted_[canonical].insert({store, requested});
    WantedChanged(canonical);
    return;
  }
  DeliveryChanged({store, canonical});
  auto [it, fresh] = deliveries_.try_emplace({store, canonical});
  if (requested != canonical) it->second.aliases.insert(requested);
  if (!fresh) return;
  if (record->failed) {
    // A failed object has no value to copy: the store is given its error to hold.
    const Operation* producer = nullptr;
    if (auto it = operations_.find(record->producer); it != operations_.end()) {
      producer = &it->second;
    }
    Emit(PlaceErrorEffect{store, s.address, canonical,
                          producer != nullptr ? producer->task.function_name : "", record->producer,
                          record->error});
    return;
  }
  Deliver(store, canonical);
}

void TaskScheduler::Deliver(StoreId to, ObjectId canonical) {
  DeliveryChanged({to, canonical});
  Delivery& delivery = deliveries_[{to, canonical}];
  const ObjectRecord* record = objects_.Find(canonical);
  // Sources in turn, so a repeated delivery tries another holder first.
  std::vector<StoreId> sources(record->locations.begin(), record->locations.end());
  StoreId from = sources[delivery.attempt % sources.size()];
  delivery.from = from;
  ++counters_.deliveries;
  Emit(DeliverEffect{to, members_.store(to).address, members_.store(from).address, canonical,
                     delivery.attempt});
}

void TaskScheduler::DeliveryFailed(StoreId to, ObjectId canonical, const std::string& reason) {
  Mutation lock(this);
  auto it = deliveries_.find({to, canonical});
  if (it == deliveries_.end()) return;
  DeliveryChanged({to, canonical});
  if (!members_.store(to).alive) {
    deliveries_.erase(it);
    return;
  }
  ++it->second.attempt;
  const ObjectRecord* record = objects_.Find(canonical);
  if (it->second.from == 0 || record->failed) {
    // Placing an error value failed: try again.
    Delivery again = std::move(it->second);
    deliveries_.erase(it);
    for (ObjectId alias : again.aliases) WantAt(to, alias, canonical);
    WantAt(to, canonical, canonical);
    return;
  }
  if (record->locations.empty()) {
    // Every copy is gone meanwhile: wait for the rebuild.
    WantedChanged(canonical);
    for (ObjectId alias : it->second.aliases) wanted_[canonical].insert({to, alias});
    wanted_[canonical].insert({to, canonical});
    deliveries_.erase(it);
    return;
  }
  Deliver(to, canonical);
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
  ObjectId canonical = objects_.Canonical(target);
  if (auto it = wanted_.find(alias); it != wanted_.end()) {
    auto waiting = std::move(it->second);
    wanted_.erase(it);
    WantedChanged(alias);
    for (const auto& [store, requested] : waiting) WantAt(store, requested, canonical);
  }
  Schedule();
  return absl::OkStatus();
}

absl::Status TaskScheduler::IncrementRefCount(const std::vector<ObjectId>& ids, CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = Repeated(call)) return repeated->status;
  if (absl::Status s = Fits(0, ids.size(), options_.limits.max_ids_per_call, "ids in one call",
                            "--max-ids-per-call");
      !s.ok()) {
    return s;
  }
  absl::Status s = objects_.AddRefs(ids);
  Remember(call, CallOutcome{s, false, {}});
  return s;
}

absl::Status TaskScheduler::DecrementRefCount(const std::vector<ObjectId>& ids, CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = Repeated(call)) return repeated->status;
  if (absl::Status s = Fits(0, ids.size(), options_.limits.max_ids_per_call, "ids in one call",
                            "--max-ids-per-call");
      !s.ok()) {
    return s;
  }
  std::vector<Deallocation> freed;
  absl::Status s = objects_.DropRefs(ids, &freed);
  if (s.ok()) Deallocate(freed);
  Remember(call, CallOutcome{s, false, {}});
  return s;
}

absl::Status TaskScheduler::AddContainedObjectIDs(ObjectId object,
                                                  const std::vector<ObjectId>& contained,
                                                  CallId call) {
  Mutation lock(this);
  if (const CallOutcome* repeated = Repeated(call)) return repeated->status;
  if (absl::Status s = Fits(0, contained.size(), options_.limits.max_ids_per_call,
                            "ids in one call", "--max-ids-per-call");
      !s.ok()) {
    return s;
  }
  absl::Status s = objects_.AddContained(object, contained);
  Remember(call, CallOutcome{s, false, {}});
  return s;
}

void TaskScheduler::Deallocate(const std::vector<Deallocation>& freed) {
  for (const Deallocation& d : freed) {
    for (StoreId store : d.stores) {
      const Store& s = members_.store(store);
      if (s.alive) Emit(DeallocateEffect{store, s.address, d.canonical});
    }
    if (wanted_.erase(d.canonical) > 0) WantedChanged(d.canonical);
  }
}

void TaskScheduler::FailObject(ObjectId canonical, const std::string& error) {
  ObjectRecord* record = objects_.FindMutable(canonical);
  record->failed = true;
  record->error = error;
  if (auto it = wanted_.find(canonical); it != wanted_.end()) {
    auto waiting = std::move(it->second);
    wanted_.erase(it);
    WantedChanged(canonical);
    for (const auto& [store, requested] : waiting) WantAt(store, requested, canonical);
  }
}

void TaskScheduler::StoreLost(StoreId store, const std::string& reason) {
  Mutation lock(this);
  auto it = members_.stores().find(store);
  if (it == members_.stores().end() || !it->second.alive) return;
  LoseStore(it->second, reason);
  Schedule();
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
  std::vector<std::pair<StoreId, ObjectId>> resend;
  for (auto it = deliveries_.begin(); it != deliveries_.end();) {
    DeliveryChanged(it->first);
    if (it->first.first == store.id) {
      it = deliveries_.erase(it);
    } else {
      if (it->second.from == store.id) resend.push_back(it->first);
      ++it;
    }
  }
  for (auto& [canonical, waiting] : wanted_) {
    if (absl::erase_if(waiting, [&](const auto& entry) { return entry.first == store.id; }) > 0) {
      WantedChanged(canonical);
    }
  }
  std::vector<ObjectId> gone;
  objects_.ForEach([&](ObjectId id, const ObjectRecord& record) {
    if (record.locations.contains(store.id)) gone.push_back(id);
  });
  for (ObjectId id : gone) {
    ObjectRecord* record = objects_.FindMutable(id);
    record->locations.erase(store.id);
    if (record->locations.empty() && !record->released && !record->failed) Rebuild(id, why);
  }
  for (const auto& key : resend) {
    auto it = deliveries_.find(key);
    if (it == deliveries_.end()) continue;
    const ObjectRecord* record = objects_.Find(key.second);
    if (!record->locations.empty()) {
      ++it->second.attempt;
      Deliver(key.first, key.second);
    } else if (!record->failed) {
      WantedChanged(key.second);
      for (ObjectId alias : it->second.aliases) wanted_[key.second].insert({key.first, alias});
      wanted_[key.second].insert({key.first, key.second});
      deliveries_.erase(it);
    } else {
      Delivery again = std::move(it->second);
      deliveries_.erase(it);
      for (ObjectId alias : again.aliases) WantAt(key.first, alias, key.second);
      WantAt(key.first, key.second, key.second);
    }
  }
}

void TaskScheduler::Rebuild(ObjectId canonical, const std::string& why) {
  ObjectRecord* record = objects_.FindMutable(canonical);
  if (record->producer == 0) {
    ++counters_.objects_lost;
    FailObject(canonical,
               absl::StrCat("object ", canonical, " is lost: it was put by worker ", record->put_by,
                            ", so it cannot be computed again, and ", why));
    return;
  }
  auto found = operations_.find(record->producer);
  if (found == operations_.end()) {
    ++counters_.objects_lost;
    FailObject(canonical,
               absl::StrCat("object ", canonical, " is lost: operation ", record->producer,
                            ", which computed it, is no longer kept (the scheduler keeps the last ",
                            options_.limits.task_history,
                            " finished tasks, --task-history), so it cannot be computed again, ",
                            "and ", why));
    return;
  }
  Operation& op = found->second;
  Changed(op);
  if (op.state != OpState::kSucceeded) return;  // being computed, or failed already
  if (op.rebuilds >= options_.max_task_retries) {
    ++counters_.objects_lost;
    FailObject(canonical,
               absl::StrCat("object ", canonical, " is lost: task ", op.task.function_name,
                            " (operation ", op.id, ") was run again ", op.rebuilds,
                            " times to rebuild it already, and ", why));
    return;
  }
  for (size_t i = 0; i < op.task.args.size(); ++i) {
    ObjectId arg = op.task.args[i].id;
    if (arg == 0 || objects_.Holdable(arg)) continue;
    ++counters_.objects_lost;
    FailObject(canonical,
               absl::StrCat("object ", canonical, " is lost: task ", op.task.function_name,
                            " (operation ", op.id, "), which computed it, cannot run again, since ",
                            "its argument ", i, " (object ", arg, ") was let go and forgotten ",
                            "with the task that computed it (--task-history), and ", why));
    return;
  }
  ++op.rebuilds;
  ++counters_.tasks_rebuilt;
  Unfinished(op);
  for (const TaskArg& arg : op.task.args) {
    if (arg.id == 0) continue;
    objects_.Hold(arg.id);
    ObjectId source = objects_.Canonical(arg.id);
    const ObjectRecord* input = objects_.Find(source);
    if (input->locations.empty() && !input->failed) Rebuild(source, why);
  }
  op.holds_args = true;
  Enqueue(op);
}

}  // namespace cohort::runtime
