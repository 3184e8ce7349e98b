#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/core/durable_state.h"
#include "service/core/key_change_log.h"
#include "service/core/key_table.h"
#include "service/core/key_waiters.h"
#include "service/core/key_watch.h"
#include "service/core/parked_call.h"
#include "service/core/timer_queue.h"

namespace cohort {

struct KeyValueLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{1} << 30;
  size_t max_total_bytes = size_t{4} << 30;
  // Recent changes kept for watches that resume from a revision.
  size_t history_events = 100'000;
  size_t history_bytes = size_t{64} << 20;
  // Events queued for one watch that is not reading; past this it is ended and told the
  // revision to resume from.
  size_t watch_queue_events = 100'000;
  size_t watch_queue_bytes = size_t{64} << 20;
};

struct KeyValueEntry {
  std::string key;
  std::string value;
};

// The key-value store: keys normalised ("/a//b/" is "a/b"), blocking gets that park,
// directory reads and deletes over "dir/", and watches that see every change in revision
// order and can resume from a recent revision. It has its own lock, so reads of large
// directories never hold up heartbeats or barriers.
class KeyValueStore {
 public:
  using GetDone = std::function<void(absl::StatusOr<std::string>)>;

  KeyValueStore(KeyValueLimits limits, ParkedCallRegistry* parked, TimerQueue* timers);

  static std::string NormalizeKey(absl::string_view key);

  absl::Status Insert(absl::string_view key, std::string value, bool allow_overwrite);
  absl::StatusOr<std::string> TryGet(absl::string_view key) const;
  // Answers at once when the key exists, else parks until it is set, `deadline` passes
  // (DEADLINE_EXCEEDED) or the call is cancelled.
  void Get(absl::string_view key, WaiterId waiter, std::optional<TaskName> owner,
           std::optional<absl::Time> deadline, GetDone done,
           ParkKind kind = ParkKind::kKeyValueGet);
  // Adds `delta` to the decimal integer stored at key (absent counts as 0); returns the sum.
  absl::StatusOr<int64_t> Increment(absl::string_view key, int64_t delta);
  // Every entry under "dir/", in key order.
  std::vector<KeyValueEntry> GetDir(absl::string_view dir) const;
  // The keys under "dir/", in key order, and how many there are (no values copied).
  std::vector<std::string> KeysUnder(absl::string_view dir) const;
  size_t CountUnder(absl::string_view dir) const;
  // Removes the key and everything under "key/". Removing nothing is not an error.
  absl::Status Delete(absl::string_view key);

  // PyTorch's store calls, each atomic:
  // Sets `desired` when the key holds `expected`, or is absent and `expected` is empty. Returns
  // what the key holds afterwards (nullopt: absent).
  absl::StatusOr<std::optional<std::string>> CompareAndSet(absl::string_view key,
                                                           absl::string_view expected,
                                                           std::string desired);
  // Appends `data` to the key's value (absent: creates it).
  absl::Status Append(absl::string_view key, absl::string_view data);
  // Removes the key alone, not what is under "key/"; whether it was there.
  absl::StatusOr<bool> Erase(absl::string_view key);
  // A FIFO queue under "dir/" (PyTorch's queue_push, queue_pop and queue_len): each item is
  // the key "dir/<its sequence number, 20 digits>", so a queue is journaled, restored, listed
  // and watched as keys are. A push wakes one call parked by WaitQueue on "dir", the longest
  // parked, as torch's server does.
  absl::Status QueuePush(absl::string_view dir, std::string value);
  struct Popped {
    int64_t length = 0;               // items before the pop
    std::optional<std::string> item;  // the first of them; none when the queue was empty
  };
  absl::StatusOr<Popped> QueuePop(absl::string_view dir);
  // The number of items (keys under "dir/" that are not items do not count).
  size_t QueueLength(absl::string_view dir) const;
  // Answers once "dir/" holds an item (at once when it does), else parks like Get until a
  // push wakes this call, `deadline` passes (DEADLINE_EXCEEDED) or the call is cancelled.
  void WaitQueue(absl::string_view dir, WaiterId waiter, std::optional<TaskName> owner,
                 std::optional<absl::Time> deadline, std::function<void(absl::Status)> done,
                 ParkKind kind = ParkKind::kKeyValueGet);
  // Answers once `key` is written or "dir/" holds an item (at once when either is so), else
  // parks until a write of the key, a push into "dir" that chooses this call (pushes wake the
  // calls on a queue one at a time, longest parked first, these and WaitQueue's alike),
  // `deadline` (DEADLINE_EXCEEDED) or a cancel. PyTorch's WAIT on a name, as one parked call.
  void WaitKeyOrQueue(absl::string_view key, absl::string_view dir, WaiterId waiter,
                      std::optional<TaskName> owner, std::optional<absl::Time> deadline,
                      std::function<void(absl::Status)> done,
                      ParkKind kind = ParkKind::kKeyValueGet);
  // Passes a push's wake-up on: when "dir/" holds an item, ends one more WaitQueue call. For
  // a caller whose call a push ended but who no longer wanted it (its wait had ended).
  void PassQueueWake(absl::string_view dir);
  // Answers once the decimal integer at `key` is at least `threshold` (at once when it is),
  // else parks like Get until a change makes it so, `deadline` passes (DEADLINE_EXCEEDED) or
  // the call is cancelled. A value that is not an integer counts as below any threshold.
  using ReachedDone = std::function<void(absl::Status)>;
  void WaitAtLeast(absl::string_view key, int64_t threshold, WaiterId waiter,
                   std::optional<TaskName> owner, std::optional<absl::Time> deadline,
                   ReachedDone done, ParkKind kind = ParkKind::kKeyValueGet);

 private:
  using Effects = KeyTable::Effects;  // what a change does once the lock is released

 public:
  // Several changes made as one: Atomically runs `body` under one hold of the store's lock,
  // so no one sees some of them without the others, and journals what it changed as one
  // record, which a restarted coordinator restores whole or not at all. The calls act as the
  // store's own of the same names; one that fails changes nothing itself, and leaves in
  // place what the calls before it changed. `body` must not call the store (or anything
  // that does) other than through the Batch, and must not keep the Batch.
  class Batch {
   public:
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

    absl::Status Insert(absl::string_view key, std::string value, bool allow_overwrite);
    absl::StatusOr<std::string> TryGet(absl::string_view key) const;
    absl::StatusOr<int64_t> Increment(absl::string_view key, int64_t delta);
    absl::StatusOr<std::optional<std::string>> CompareAndSet(absl::string_view key,
                                                             absl::string_view expected,
                                                             std::string desired);
    absl::Status Append(absl::string_view key, absl::string_view data);
    absl::StatusOr<bool> Erase(absl::string_view key);
    absl::Status QueuePush(absl::string_view dir, std::string value);
    absl::StatusOr<Popped> QueuePop(absl::string_view dir);

   private:
    friend class KeyValueStore;
    Batch(KeyValueStore* store, Effects* fx) : store_(store), fx_(fx) {}
    KeyValueStore* const store_;
    Effects* const fx_;
  };
  void Atomically(const std::function<void(Batch&)>& body) ABSL_LOCKS_EXCLUDED(mu_);

  // Watches `key` and everything under "key/" (every key when empty). Events with revision
  // >= `start_revision` are delivered (0: from now on); OUT_OF_RANGE when that revision is
  // no longer kept or not reached yet. The watch is parked under `waiter`: cancelling the
  // waiter or stopping the service ends it.
  absl::StatusOr<std::shared_ptr<KeyWatch>> Watch(absl::string_view key, int64_t start_revision,
                                                  WaiterId waiter, std::function<void()> notify);

  struct Stats {
    size_t keys = 0;
    size_t bytes = 0;
    int64_t revision = 0;
  };
  Stats GetStats() const;

  // Durability: every change is told to `journal` (null: none) before it is acknowledged.
  void set_journal(StateJournal* journal);
  // Fills an empty store with the keys a restarted coordinator found; watches can resume
  // only from revisions after `revision`.
  void Restore(std::vector<DurableKey> keys, int64_t revision);
  // Every key and the revision, for a snapshot.
  void Capture(std::vector<DurableKey>* keys, int64_t* revision) const;
  size_t NumKeys() const;
  size_t NumBytes() const;
  // Bumped by every change; what watches resume from.
  int64_t Revision() const;

 private:
  absl::Status CheckKey(absl::string_view normalized, absl::string_view original) const;
  using GetCall = KeyWaiters::GetCall;
  using ReachedCall = KeyWaiters::ReachedCall;
  absl::StatusOr<Popped> QueuePopLocked(const std::string& d, Effects* fx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the lock: finishes the calls the changes answered and tells the watches.
  void Apply(Effects& fx);
  // Calls f(key, value) for every entry under "dir/", in key order, under the read lock.
  template <typename F>
  void ForEachUnder(absl::string_view dir, F&& f) const ABSL_LOCKS_EXCLUDED(mu_);
  // Finishes the longest-parked WaitQueue call on `dir` that is still parked, if any.
  void WakeOneQueueWaiter(const std::string& dir);

  const KeyValueLimits limits_;
  ParkedCallRegistry* const parked_;
  TimerQueue* const timers_;

  mutable absl::Mutex mu_;
  KeyWaiters waiters_ ABSL_GUARDED_BY(mu_);
  KeyChangeLog log_ ABSL_GUARDED_BY(mu_);
  // Tells log_ of every change and waiters_ of every write.
  KeyTable keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
