// Moving objects between stores: requests, deliveries and their failures, aliases announced,
// objects dropped.
#include "runtime/scheduler/object_directory.h"

#include <optional>
#include <utility>

namespace cohort::runtime {

void ObjectDirectory::WantAt(StoreId store, ObjectId requested, ObjectId canonical) {
  const Store& s = members_.store(store);
  if (!s.alive) return;
  const ObjectRecord* record = objects_.Find(canonical);
  if (record->locations.contains(store)) {
    if (requested != canonical) {
      effects_.push_back(NotifyAliasEffect{store, s.address, requested, canonical});
    }
    return;
  }
  if (record->locations.empty() && !record->failed) {
    transfers_.Wait(canonical, store, requested);
    return;
  }
  if (!transfers_.AddDelivery(store, canonical, requested)) return;
  if (record->failed) {
    // A failed object has no value to copy: the store is given its error to hold.
    const Operation* producer = operations_.Find(record->producer);
    effects_.push_back(PlaceErrorEffect{store, s.address, canonical,
                                        producer != nullptr ? producer->task.function_name : "",
                                        record->producer, record->error});
    return;
  }
  Deliver(store, canonical);
}

void ObjectDirectory::Answer(ObjectId id, ObjectId canonical) {
  for (const auto& [store, requested] : transfers_.TakeWaiters(id)) {
    WantAt(store, requested, canonical);
  }
}

void ObjectDirectory::Fail(ObjectId canonical, const std::string& error) {
  ObjectRecord* record = objects_.FindMutable(canonical);
  record->failed = true;
  record->error = error;
  Answer(canonical, canonical);
}

void ObjectDirectory::Deliver(StoreId to, ObjectId canonical) {
  Delivery& delivery = *transfers_.FindMutable({to, canonical});
  const ObjectRecord* record = objects_.Find(canonical);
  // Sources in turn, so a repeated delivery tries another holder first.
  std::vector<StoreId> sources(record->locations.begin(), record->locations.end());
  StoreId from = sources[delivery.attempt % sources.size()];
  delivery.from = from;
  ++counters_.deliveries;
  effects_.push_back(DeliverEffect{to, members_.store(to).address, members_.store(from).address,
                                   canonical, delivery.attempt});
}

void ObjectDirectory::AskAgain(StoreId to, ObjectId canonical, const Delivery& delivery) {
  for (ObjectId alias : delivery.aliases) WantAt(to, alias, canonical);
  WantAt(to, canonical, canonical);
}

bool ObjectDirectory::Landed(StoreId store, ObjectId object, uint64_t size) {
  const Store& s = members_.store(store);
  Delivery delivery;
  if (std::optional<Delivery> ended = transfers_.Take({store, object}); ended.has_value()) {
    delivery = std::move(*ended);
    if (delivery.from != 0) counters_.delivered_bytes += size;
  }
  ObjectRecord* record = objects_.FindMutable(object);
  if (record->released) {
    // Let go while it was computed or on its way: the store drops it at once, and the stores
    // that asked for it meanwhile wait no more (nobody holds it to read it).
    effects_.push_back(DeallocateEffect{store, s.address, object});
    transfers_.DropWaiters(object);
    return false;
  }
  record->locations.insert(store);
  record->size = size;
  for (ObjectId alias : delivery.aliases) {
    effects_.push_back(NotifyAliasEffect{store, s.address, alias, object});
  }
  Answer(object, object);
  return true;
}

void ObjectDirectory::DeliveryFailed(StoreId to, ObjectId canonical) {
  Delivery* delivery = transfers_.FindMutable({to, canonical});
  if (delivery == nullptr) return;
  if (!members_.store(to).alive) {
    transfers_.Take({to, canonical});
    return;
  }
  ++delivery->attempt;
  const ObjectRecord* record = objects_.Find(canonical);
  if (delivery->from == 0 || record->failed) {
    // Placing an error value failed: try again.
    AskAgain(to, canonical, *transfers_.Take({to, canonical}));
    return;
  }
  if (record->locations.empty()) {
    // Every copy is gone meanwhile: wait for the rebuild.
    transfers_.WaitInstead({to, canonical});
    return;
  }
  Deliver(to, canonical);
}

void ObjectDirectory::Resend(const std::vector<TransferTable::Key>& resend) {
  for (const auto& key : resend) {
    Delivery* delivery = transfers_.FindMutable(key);
    if (delivery == nullptr) continue;
    const ObjectRecord* record = objects_.Find(key.second);
    if (!record->locations.empty()) {
      ++delivery->attempt;
      Deliver(key.first, key.second);
    } else if (!record->failed) {
      transfers_.WaitInstead(key);
    } else {
      AskAgain(key.first, key.second, *transfers_.Take(key));
    }
  }
}

void ObjectDirectory::Deallocate(const std::vector<Deallocation>& freed) {
  for (const Deallocation& d : freed) {
    for (StoreId store : d.stores) {
      const Store& s = members_.store(store);
      if (s.alive) effects_.push_back(DeallocateEffect{store, s.address, d.canonical});
    }
    transfers_.DropWaiters(d.canonical);
  }
}

void ObjectDirectory::SendAgain() {
  for (const auto& [to, canonical] : transfers_.DeliveryKeys()) {
    AskAgain(to, canonical, *transfers_.Take({to, canonical}));
  }
  objects_.ForEach([&](ObjectId id, const ObjectRecord& record) {
    if (record.alias_of == 0 || record.released) return;
    ObjectId canonical = objects_.Canonical(id);
    for (StoreId store : objects_.Find(canonical)->locations) {
      const Store& s = members_.stores().at(store);
      if (s.alive) effects_.push_back(NotifyAliasEffect{store, s.address, id, canonical});
    }
  });
}

}  // namespace cohort::runtime
