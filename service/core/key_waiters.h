#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "service/core/parked_call.h"
#include "service/core/timer_queue.h"

namespace cohort {

// The calls parked on the key-value store until a key is set (Get), reaches a count
// (WaitAtLeast) or a queue gets an item (WaitQueue, WaitKeyOrQueue), with their deadline
// timers. Not thread-safe: the store calls it under its lock, and finishes the calls it hands
// back once that lock is released (a finished call runs its caller's code).
class KeyWaiters {
 public:
  using GetCall = Parked<absl::StatusOr<std::string>>;
  using ReachedCall = Parked<absl::Status>;

  // The calls a write of a key answered.
  struct Answered {
    struct Got {
      std::vector<std::shared_ptr<GetCall>> calls;  // parked gets of a key that was set
      std::string value;
    };
    std::vector<Got> got;
    std::vector<std::shared_ptr<ReachedCall>> reached;
  };

  // `parked`: where a deadline cancels a call; `timers`: where deadlines are scheduled.
  KeyWaiters(ParkedCallRegistry* parked, TimerQueue* timers) : parked_(parked), timers_(timers) {}

  // Each parks a call already registered with the registry; with a deadline, a timer cancels
  // the call then (DEADLINE_EXCEEDED).
  void AddGet(const std::string& key, std::shared_ptr<GetCall> call,
              std::optional<absl::Time> deadline);
  void AddAtLeast(const std::string& key, int64_t threshold, std::shared_ptr<ReachedCall> call,
                  std::optional<absl::Time> deadline);
  void AddQueue(const std::string& dir, std::shared_ptr<ReachedCall> call,
                std::optional<absl::Time> deadline);
  // It stays on both the key's list and the queue's until it is answered.
  void AddKeyOrQueue(const std::string& key, const std::string& dir,
                     std::shared_ptr<ReachedCall> call, std::optional<absl::Time> deadline);

  // Each forgets a cancelled call (its unlink), and its deadline timer.
  void RemoveGet(const std::string& key, WaiterId id);
  void RemoveAtLeast(const std::string& key, WaiterId id);
  void RemoveQueue(const std::string& dir, WaiterId id);
  void RemoveKeyOrQueue(const std::string& key, const std::string& dir, WaiterId id);

  // `key` was set to `value`: moves the calls that answers into `answered`.
  void KeySet(const std::string& key, const std::string& value, Answered* answered);
  // Takes the deadline timers of `answered`'s calls, in its order, for the caller to cancel.
  std::vector<TimerQueue::TimerId> TakeTimers(const Answered& answered);
  // Takes the longest-parked call a push into `dir` may end (null: none), and its deadline
  // timer, for the caller to cancel.
  std::shared_ptr<ReachedCall> TakeFirstOnQueue(const std::string& dir,
                                                std::optional<TimerQueue::TimerId>* timer);

 private:
  struct CountWaiter {
    int64_t threshold = 0;
    std::shared_ptr<ReachedCall> call;
  };
  // `key`: a WaitKeyOrQueue call's key (a write of it ends the call too), empty for
  // WaitQueue's.
  struct QueueWaiter {
    std::shared_ptr<ReachedCall> call;
    std::string key;
  };
  struct KeyOrQueueWaiter {
    std::string dir;
    std::shared_ptr<ReachedCall> call;
  };

  void ScheduleDeadline(WaiterId waiter, absl::Time deadline, std::string what);
  std::optional<TimerQueue::TimerId> TakeTimer(WaiterId id);
  void RemoveFromQueue(const std::string& dir, WaiterId id);

  ParkedCallRegistry* const parked_;
  TimerQueue* const timers_;

  // Deadline timers, cancelled when the call is answered first.
  absl::flat_hash_map<WaiterId, TimerQueue::TimerId> timed_calls_;
  // Get's calls, by key.
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<GetCall>>> gets_;
  // WaitAtLeast's calls, by key.
  absl::flat_hash_map<std::string, std::vector<CountWaiter>> count_waiters_;
  // The calls a push into a queue may end (WaitQueue's, WaitKeyOrQueue's), by queue, in the
  // order their ids were made (the order they parked, for one caller's calls; a cancel removes
  // one in log time: thousands wait on one name).
  absl::flat_hash_map<std::string, std::map<WaiterId, QueueWaiter>> queue_waiters_;
  // WaitKeyOrQueue's calls by key, each with its queue.
  absl::flat_hash_map<std::string, std::vector<KeyOrQueueWaiter>> key_or_queue_waiters_;
};

}  // namespace cohort
