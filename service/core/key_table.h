#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "service/core/durable_state.h"
#include "service/core/key_change_log.h"
#include "service/core/key_waiters.h"

namespace cohort {

struct KeyValueLimits;

// The key-value store's keys and values, in key order, and the rules of each change: the size
// limits, overwrites, counts, compare-and-set, and PyTorch's queues laid out as keys. Every
// change is told to the change log, and every write to the parked calls it may answer. Not
// thread-safe: the store calls it under its lock, which guards the log and the waiters too.
class KeyTable {
 public:
  // What changes did that the store finishes once its lock is released.
  struct Effects {
    KeyWaiters::Answered answered;
    KeyChangeLog::Reached watches;
    std::vector<std::string> pushed_queues;  // each push wakes one of its WaitQueue calls
  };

  KeyTable(const KeyValueLimits& limits, KeyChangeLog* log, KeyWaiters* waiters);

  // Why `normalized` (the key `original`, normalised) cannot be a key; OK when it can.
  static absl::Status CheckKey(absl::string_view normalized, absl::string_view original,
                               size_t max_key_bytes);

  // The value at `key`; null when absent.
  const std::string* Find(const std::string& key) const;
  // Calls f(key, value) for every entry whose key starts with `prefix`, in key order.
  template <typename F>
  void ForEachUnder(const std::string& prefix, F&& f) const {
    for (auto it = entries_.lower_bound(prefix);
         it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
      f(it->first, it->second);
    }
  }
  // Whether `key`, under `prefix` (a queue's "dir/"), is one of the queue's items.
  static bool IsQueueItem(absl::string_view key, absl::string_view prefix);
  // Whether `prefix` (a queue's "dir/") holds an item.
  bool HasQueueItem(const std::string& prefix) const;
  size_t size() const { return entries_.size(); }
  size_t bytes() const { return bytes_; }

  // The store's calls of the same names, on a normalised and checked key (`d`: a queue's).
  absl::Status Insert(const std::string& k, std::string value, bool allow_overwrite, Effects* fx);
  absl::StatusOr<int64_t> Increment(const std::string& k, int64_t delta, Effects* fx);
  absl::StatusOr<std::optional<std::string>> CompareAndSet(const std::string& k,
                                                           absl::string_view expected,
                                                           std::string desired, Effects* fx);
  absl::Status Append(const std::string& k, absl::string_view data, Effects* fx);
  absl::StatusOr<bool> Erase(const std::string& k, Effects* fx);
  // False when there was nothing to remove.
  bool Delete(const std::string& k, Effects* fx);
  absl::Status QueuePush(const std::string& d, std::string value, Effects* fx);
  // `length`: the items before the pop; `item`: the first of them, now removed (none when the
  // queue was empty).
  absl::Status QueuePop(const std::string& d, int64_t* length, std::optional<std::string>* item,
                        Effects* fx);

  // Fills an empty table with the keys a restarted coordinator found.
  void Restore(std::vector<DurableKey> keys);
  // Every key, for a snapshot.
  void Capture(std::vector<DurableKey>* keys) const;

 private:
  absl::Status Put(const std::string& key, std::string value, Effects* fx);
  // The removal of one key with nothing under it (Erase, QueuePop).
  void EraseOne(std::map<std::string, std::string>::iterator it, Effects* fx);

  const size_t max_key_bytes_;
  const size_t max_value_bytes_;
  const size_t max_total_bytes_;
  KeyChangeLog* const log_;
  KeyWaiters* const waiters_;

  std::map<std::string, std::string> entries_;
  size_t bytes_ = 0;
};

}  // namespace cohort
