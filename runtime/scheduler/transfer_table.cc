// Waits and deliveries, and their durable form.
#include "runtime/scheduler/transfer_table.h"

#include <algorithm>

#include "absl/container/btree_set.h"

namespace cohort::runtime {

void TransferTable::Wait(ObjectId canonical, StoreId store, ObjectId requested) {
  wanted_[canonical].insert({store, requested});
  changed_wanted_.insert(canonical);
}

absl::btree_set<TransferTable::Waiter> TransferTable::TakeWaiters(ObjectId id) {
  auto it = wanted_.find(id);
  if (it == wanted_.end()) return {};
  absl::btree_set<Waiter> waiting = std::move(it->second);
  wanted_.erase(it);
  changed_wanted_.insert(id);
  return waiting;
}

void TransferTable::DropWaiters(ObjectId id) {
  if (wanted_.erase(id) > 0) changed_wanted_.insert(id);
}

bool TransferTable::AddDelivery(StoreId to, ObjectId canonical, ObjectId requested) {
  changed_deliveries_.insert({to, canonical});
  auto [it, fresh] = deliveries_.try_emplace({to, canonical});
  if (requested != canonical) it->second.aliases.insert(requested);
  return fresh;
}

Delivery* TransferTable::FindMutable(const Key& key) {
  auto it = deliveries_.find(key);
  if (it == deliveries_.end()) return nullptr;
  changed_deliveries_.insert(key);
  return &it->second;
}

std::optional<Delivery> TransferTable::Take(const Key& key) {
  auto it = deliveries_.find(key);
  if (it == deliveries_.end()) return std::nullopt;
  Delivery delivery = std::move(it->second);
  deliveries_.erase(it);
  changed_deliveries_.insert(key);
  return delivery;
}

void TransferTable::WaitInstead(const Key& key) {
  auto it = deliveries_.find(key);
  const auto& [to, canonical] = key;
  changed_wanted_.insert(canonical);
  for (ObjectId alias : it->second.aliases) wanted_[canonical].insert({to, alias});
  wanted_[canonical].insert({to, canonical});
  deliveries_.erase(it);
  changed_deliveries_.insert(key);
}

std::vector<TransferTable::Key> TransferTable::DeliveryKeys() const {
  std::vector<Key> keys;
  for (const auto& [key, delivery] : deliveries_) keys.push_back(key);
  return keys;
}

std::vector<TransferTable::Key> TransferTable::StoreLost(StoreId store) {
  std::vector<Key> resend;
  for (auto it = deliveries_.begin(); it != deliveries_.end();) {
    changed_deliveries_.insert(it->first);
    if (it->first.first == store) {
      it = deliveries_.erase(it);
    } else {
      if (it->second.from == store) resend.push_back(it->first);
      ++it;
    }
  }
  for (auto& [canonical, waiting] : wanted_) {
    if (absl::erase_if(waiting, [&](const Waiter& waiter) { return waiter.first == store; }) > 0) {
      changed_wanted_.insert(canonical);
    }
  }
  return resend;
}

bool TransferTable::Involves(ObjectId id) const {
  if (wanted_.contains(id)) return true;
  for (const auto& [key, delivery] : deliveries_) {
    if (key.second == id) return true;
  }
  return false;
}

std::vector<ObjectId> TransferTable::ChangedObjects() const {
  std::vector<ObjectId> changed;
  for (const auto& [store, id] : changed_deliveries_) changed.push_back(id);
  changed.insert(changed.end(), changed_wanted_.begin(), changed_wanted_.end());
  return changed;
}

void TransferTable::TakeChanges(SchedulerChanges* changes) {
  if (changes != nullptr) {
    for (ObjectId id : changed_wanted_) {
      auto it = wanted_.find(id);
      changes->wanted.emplace_back(id,
                                   it == wanted_.end() ? absl::btree_set<Waiter>() : it->second);
    }
    for (const Key& key : changed_deliveries_) {
      auto it = deliveries_.find(key);
      changes->deliveries.emplace_back(
          key, it == deliveries_.end() ? std::nullopt : std::optional<Delivery>(it->second));
    }
  }
  changed_wanted_.clear();
  changed_deliveries_.clear();
}

void TransferTable::Apply(const SchedulerChanges& changes) {
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
}

void TransferTable::Capture(SchedulerChanges* state) const {
  for (const auto& [canonical, waiting] : wanted_) {
    if (!waiting.empty()) state->wanted.emplace_back(canonical, waiting);
  }
  std::sort(state->wanted.begin(), state->wanted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [key, delivery] : deliveries_) state->deliveries.emplace_back(key, delivery);
}

}  // namespace cohort::runtime
