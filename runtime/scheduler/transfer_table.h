// Objects on their way to stores: the stores waiting for an object that is ready nowhere yet,
// and the deliveries under way from one store to another (or of an error value placed by the
// scheduler). Durable. Not thread-safe: the scheduler holds its lock around every call. Whether
// an object can be sent, and from where, is the scheduler's: it reads the object's record.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

class TransferTable {
 public:
  // A waiting store and the id it asked for (which may be an alias); the key of a delivery:
  // (to, canonical).
  using Waiter = std::pair<StoreId, ObjectId>;
  using Key = std::pair<StoreId, ObjectId>;

  // `store` waits for `canonical`, asked for as `requested`.
  void Wait(ObjectId canonical, StoreId store, ObjectId requested);
  // The stores waiting for `id` (none: empty), which wait no more.
  absl::btree_set<Waiter> TakeWaiters(ObjectId id);
  // Nobody waits for `id` any more (it was let go).
  void DropWaiters(ObjectId id);

  // A delivery of `canonical` to `to`, announced there as `requested` too when that is an alias.
  // False when one was under way already: `requested` joins it.
  bool AddDelivery(StoreId to, ObjectId canonical, ObjectId requested);
  // The delivery under way, or null; one found counts as changed.
  Delivery* FindMutable(const Key& key);
  // The delivery under way, if any, which ends.
  std::optional<Delivery> Take(const Key& key);
  // The delivery ends, and its store waits instead, for each id it was to announce and for the
  // object itself: every copy is gone, and a rebuild will make it again.
  void WaitInstead(const Key& key);
  std::vector<Key> DeliveryKeys() const;

  // `store` was lost: deliveries to it end, and its waits. Returns the deliveries from it, to be
  // sent again from another copy.
  std::vector<Key> StoreLost(StoreId store);
  // Whether a store waits for `id`, or a delivery of it is under way.
  bool Involves(ObjectId id) const;

  const absl::flat_hash_map<ObjectId, absl::btree_set<Waiter>>& wanted() const { return wanted_; }
  const absl::btree_map<Key, Delivery>& deliveries() const { return deliveries_; }
  // The objects whose deliveries, then whose waits, changed since TakeChanges.
  std::vector<ObjectId> ChangedObjects() const;

  // Durability (SchedulerChanges). TakeChanges adds to `changes` (null: there is no journal)
  // what changed since it was last called, and forgets that.
  void TakeChanges(SchedulerChanges* changes);
  void Apply(const SchedulerChanges& changes);
  void Capture(SchedulerChanges* state) const;

 private:
  // canonical -> the stores waiting for it. An entry may be left empty (a store lost): it reads
  // as none waiting for the journal, though Involves still counts it.
  absl::flat_hash_map<ObjectId, absl::btree_set<Waiter>> wanted_;
  absl::btree_map<Key, Delivery> deliveries_;
  // Since TakeChanges.
  absl::btree_set<ObjectId> changed_wanted_;
  absl::btree_set<Key> changed_deliveries_;
};

}  // namespace cohort::runtime
