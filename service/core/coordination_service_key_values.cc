// CoordinationService: the key-value calls. The store keeps its own lock, so that reads of
// large directories never hold up heartbeats or barriers; these calls are here so that
// every change to the service's state, keys included, enters through the service.
#include "service/core/coordination_service.h"

namespace cohort {

absl::Status CoordinationService::InsertKeyValue(absl::string_view key, std::string value,
                                                 bool allow_overwrite) {
  return key_values_.Insert(key, std::move(value), allow_overwrite);
}

void CoordinationService::GetKeyValue(absl::string_view key, WaiterId waiter,
                                      std::optional<TaskName> owner,
                                      std::optional<absl::Time> deadline,
                                      KeyValueStore::GetDone done, ParkKind kind) {
  key_values_.Get(key, waiter, std::move(owner), deadline, std::move(done), kind);
}

absl::StatusOr<std::string> CoordinationService::TryGetKeyValue(absl::string_view key) const {
  return key_values_.TryGet(key);
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValue(absl::string_view key,
                                                               int64_t delta) {
  return key_values_.Increment(key, delta);
}

std::vector<KeyValueEntry> CoordinationService::GetKeyValueDir(absl::string_view dir) const {
  return key_values_.GetDir(dir);
}

absl::Status CoordinationService::DeleteKeyValue(absl::string_view key) {
  return key_values_.Delete(key);
}

std::vector<std::string> CoordinationService::KeyValueKeys(absl::string_view dir) const {
  return key_values_.KeysUnder(dir);
}

size_t CoordinationService::CountKeyValues(absl::string_view dir) const {
  return key_values_.CountUnder(dir);
}

absl::StatusOr<std::optional<std::string>> CoordinationService::CompareAndSetKeyValue(
    absl::string_view key, absl::string_view expected, std::string desired) {
  return key_values_.CompareAndSet(key, expected, std::move(desired));
}

absl::Status CoordinationService::AppendKeyValue(absl::string_view key, absl::string_view data) {
  return key_values_.Append(key, data);
}

absl::StatusOr<bool> CoordinationService::EraseKeyValue(absl::string_view key) {
  return key_values_.Erase(key);
}

absl::Status CoordinationService::QueuePushKeyValue(absl::string_view dir, std::string value) {
  return key_values_.QueuePush(dir, std::move(value));
}

absl::StatusOr<KeyValueStore::Popped> CoordinationService::QueuePopKeyValue(absl::string_view dir) {
  return key_values_.QueuePop(dir);
}

void CoordinationService::KeyValueAtomically(
    const std::function<void(KeyValueStore::Batch&)>& body) {
  key_values_.Atomically(body);
}

size_t CoordinationService::QueueLengthKeyValue(absl::string_view dir) const {
  return key_values_.QueueLength(dir);
}

void CoordinationService::PassQueueWake(absl::string_view dir) { key_values_.PassQueueWake(dir); }

void CoordinationService::WaitKeyValueQueue(absl::string_view dir, WaiterId waiter,
                                            std::optional<TaskName> owner,
                                            std::optional<absl::Time> deadline,
                                            KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitQueue(dir, waiter, std::move(owner), deadline, std::move(done), kind);
}

void CoordinationService::WaitKeyValueOrQueue(absl::string_view key, absl::string_view dir,
                                              WaiterId waiter, std::optional<TaskName> owner,
                                              std::optional<absl::Time> deadline,
                                              KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitKeyOrQueue(key, dir, waiter, std::move(owner), deadline, std::move(done), kind);
}

void CoordinationService::WaitKeyValueAtLeast(absl::string_view key, int64_t threshold,
                                              WaiterId waiter, std::optional<TaskName> owner,
                                              std::optional<absl::Time> deadline,
                                              KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitAtLeast(key, threshold, waiter, std::move(owner), deadline, std::move(done),
                          kind);
}

absl::StatusOr<std::shared_ptr<KeyWatch>> CoordinationService::WatchKeys(
    absl::string_view key, int64_t start_revision, WaiterId waiter, std::function<void()> notify) {
  return key_values_.Watch(key, start_revision, waiter, std::move(notify));
}

KeyValueStore::Stats CoordinationService::KeyValueStats() const { return key_values_.GetStats(); }

}  // namespace cohort
