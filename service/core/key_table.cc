#include "service/core/key_table.h"

#include <cstdint>
#include <iterator>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/core/key_value_store.h"

namespace cohort {
namespace {

constexpr size_t kQueueSequenceDigits = 20;  // every uint64_t

// The sequence number of a queue item's key "dir/NNN..." (`prefix` is "dir/"); nullopt for a
// key under the queue that is not an item.
std::optional<uint64_t> QueueSequence(absl::string_view key, absl::string_view prefix) {
  absl::string_view rest = key.substr(prefix.size());
  uint64_t sequence = 0;
  if (rest.size() != kQueueSequenceDigits || !absl::SimpleAtoi(rest, &sequence)) {
    return std::nullopt;
  }
  return sequence;
}

}  // namespace

KeyTable::KeyTable(const KeyValueLimits& limits, KeyChangeLog* log, KeyWaiters* waiters)
    : max_key_bytes_(limits.max_key_bytes),
      max_value_bytes_(limits.max_value_bytes),
      max_total_bytes_(limits.max_total_bytes),
      log_(log),
      waiters_(waiters) {}

absl::Status KeyTable::CheckKey(absl::string_view normalized, absl::string_view original,
                                size_t max_key_bytes) {
  if (normalized.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key \"", original, "\" is empty once its slashes are removed"));
  }
  if (normalized.size() > max_key_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key of ", normalized.size(), " bytes exceeds the limit of ", max_key_bytes, " bytes"));
  }
  return absl::OkStatus();
}

const std::string* KeyTable::Find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

bool KeyTable::IsQueueItem(absl::string_view key, absl::string_view prefix) {
  return QueueSequence(key, prefix).has_value();
}

bool KeyTable::HasQueueItem(const std::string& prefix) const {
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (QueueSequence(it->first, prefix)) return true;
  }
  return false;
}

absl::Status KeyTable::Put(const std::string& key, std::string value, Effects* fx) {
  if (value.size() > max_value_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("value of ", value.size(), " bytes for key \"",
                                                     key, "\" exceeds the limit of ",
                                                     max_value_bytes_, " bytes"));
  }
  if (auto room = log_->RoomForValues(); !room.ok()) return room;
  auto it = entries_.find(key);
  size_t old_bytes = it == entries_.end() ? 0 : key.size() + it->second.size();
  size_t new_total = bytes_ - old_bytes + key.size() + value.size();
  if (new_total > max_total_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("storing key \"", key, "\" would bring the store to ", new_total,
                     " bytes, over its limit of ", max_total_bytes_, " bytes"));
  }
  bytes_ = new_total;
  int64_t revision = log_->Advance(/*deleted=*/false, key, value);
  waiters_->KeySet(key, value, &fx->answered);
  KeyChange event{it == entries_.end() ? KeyChange::Type::kInserted : KeyChange::Type::kUpdated,
                  key, value, revision};
  if (it == entries_.end()) {
    entries_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  log_->Record(std::move(event), &fx->watches);
  return absl::OkStatus();
}

absl::Status KeyTable::Insert(const std::string& k, std::string value, bool allow_overwrite,
                              Effects* fx) {
  if (!allow_overwrite && entries_.count(k)) {
    return absl::AlreadyExistsError(absl::StrCat("key \"", k, "\" already exists"));
  }
  return Put(k, std::move(value), fx);
}

absl::StatusOr<int64_t> KeyTable::Increment(const std::string& k, int64_t delta, Effects* fx) {
  int64_t current = 0;
  auto it = entries_.find(k);
  if (it != entries_.end() && !absl::SimpleAtoi(it->second, &current)) {
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", k, "\" holds a value that is not a decimal 64-bit integer"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrCat("incrementing key \"", k, "\" (", current, ") by ", delta, " overflows"));
  }
  if (auto s = Put(k, absl::StrCat(sum), fx); !s.ok()) return s;
  return sum;
}

absl::StatusOr<std::optional<std::string>> KeyTable::CompareAndSet(const std::string& k,
                                                                   absl::string_view expected,
                                                                   std::string desired,
                                                                   Effects* fx) {
  auto it = entries_.find(k);
  bool matches = it == entries_.end() ? expected.empty() : it->second == expected;
  if (!matches) {
    if (it != entries_.end()) return std::optional<std::string>(it->second);
    return std::optional<std::string>();
  }
  std::optional<std::string> after = desired;
  if (auto s = Put(k, std::move(desired), fx); !s.ok()) return s;
  return after;
}

absl::Status KeyTable::Append(const std::string& k, absl::string_view data, Effects* fx) {
  auto it = entries_.find(k);
  std::string value = it == entries_.end() ? std::string() : it->second;
  value.append(data.data(), data.size());
  return Put(k, std::move(value), fx);
}

absl::StatusOr<bool> KeyTable::Erase(const std::string& k, Effects* fx) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return false;
  // The journal's KeyDeleted removes what is under "key/" too when it is read back: only an
  // entry with nothing under it is erased alone.
  std::string under = k + "/";
  if (auto next = entries_.lower_bound(under);
      next != entries_.end() && absl::StartsWith(next->first, under)) {
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", k, "\" has keys under it; delete it with them"));
  }
  EraseOne(it, fx);
  return true;
}

void KeyTable::EraseOne(std::map<std::string, std::string>::iterator it, Effects* fx) {
  std::string key = it->first;
  bytes_ -= it->first.size() + it->second.size();
  entries_.erase(it);
  int64_t revision = log_->Advance(/*deleted=*/true, key, std::string());
  log_->Record(KeyChange{KeyChange::Type::kDeleted, std::move(key), "", revision}, &fx->watches);
}

bool KeyTable::Delete(const std::string& k, Effects* fx) {
  std::string prefix = k + "/";
  std::vector<std::string> removed;
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    bytes_ -= it->first.size() + it->second.size();
    removed.push_back(it->first);
    entries_.erase(it);
  }
  for (it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix);) {
    bytes_ -= it->first.size() + it->second.size();
    removed.push_back(it->first);
    it = entries_.erase(it);
  }
  if (removed.empty()) return false;
  int64_t revision = log_->Advance(/*deleted=*/true, k, std::string());
  for (std::string& gone : removed) {
    log_->Record(KeyChange{KeyChange::Type::kDeleted, std::move(gone), "", revision}, &fx->watches);
  }
  return true;
}

absl::Status KeyTable::QueuePush(const std::string& d, std::string value, Effects* fx) {
  const std::string prefix = d + "/";
  // One past the last item's number: the first key after every "dir/..." is "dir0".
  uint64_t next = 1;
  auto end = entries_.lower_bound(d + "0");
  if (end != entries_.begin() && absl::StartsWith(std::prev(end)->first, prefix)) {
    std::optional<uint64_t> last = QueueSequence(std::prev(end)->first, prefix);
    if (!last || *last == UINT64_MAX) {
      return absl::FailedPreconditionError(absl::StrCat(
          "queue \"", d, "\" holds the key \"", std::prev(end)->first,
          "\", which is not one of its items: delete it, or the queue, to push again"));
    }
    next = *last + 1;
  }
  std::string item = absl::StrCat(prefix, absl::Dec(next, absl::kZeroPad20));
  if (auto s = CheckKey(item, item, max_key_bytes_); !s.ok()) return s;
  if (auto s = Put(item, std::move(value), fx); !s.ok()) return s;
  fx->pushed_queues.push_back(d);
  return absl::OkStatus();
}

absl::Status KeyTable::QueuePop(const std::string& d, int64_t* length,
                                std::optional<std::string>* item, Effects* fx) {
  const std::string prefix = d + "/";
  // Walks the queue's items to count them: queues in torch's jobs hold a few.
  auto first = entries_.end();
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (!QueueSequence(it->first, prefix)) continue;
    if (first == entries_.end()) first = it;
    ++*length;
  }
  if (first == entries_.end()) return absl::OkStatus();
  // As Erase: the journal's record of the removal would take what is under it too.
  if (auto next = std::next(first);
      next != entries_.end() && absl::StartsWith(next->first, first->first + "/")) {
    return absl::FailedPreconditionError(
        absl::StrCat("queue \"", d, "\": its item \"", first->first,
                     "\" has keys under it: delete them, or the queue, to pop again"));
  }
  *item = first->second;
  EraseOne(first, fx);
  return absl::OkStatus();
}

void KeyTable::Restore(std::vector<DurableKey> keys) {
  for (DurableKey& entry : keys) {
    bytes_ += entry.key.size() + entry.value.size();
    entries_[std::move(entry.key)] = std::move(entry.value);
  }
}

void KeyTable::Capture(std::vector<DurableKey>* keys) const {
  keys->clear();
  keys->reserve(entries_.size());
  for (const auto& [key, value] : entries_) keys->push_back({key, value});
}

}  // namespace cohort
