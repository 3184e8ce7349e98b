#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "service/core/parked_call.h"
#include "service/core/task_name.h"
#include "service/core/timer_queue.h"

namespace cohort {

// A barrier of every workload task that runs once per coordinator: the register barrier
// (RegisterTask) and the shutdown barrier (ShutdownTask). It opens with the first arrival,
// times out a fixed time after that, and then stays passed or failed. What an arrival, a
// pass or a timeout does to the tasks is the service's policy; this holds who is waiting
// and their parked calls. Not thread-safe: the service calls it under its lock.
class WholeJobBarrier {
 public:
  enum class State { kIdle, kOpen, kPassed, kFailed };
  using Calls = std::vector<std::shared_ptr<ParkedCall>>;

  // `on_timeout` runs from the timer queue, without the service's lock.
  WholeJobBarrier(TimerQueue* timers, absl::Duration timeout, std::function<void()> on_timeout);

  State state() const { return state_; }
  bool is_open() const { return state_ == State::kOpen; }
  bool is_done() const { return state_ == State::kPassed || state_ == State::kFailed; }
  // What a task that comes after the end is told: OK when passed, the failure otherwise.
  const absl::Status& result() const { return result_; }

  // Opens an idle barrier and starts its timeout.
  void OpenIfIdle(absl::Time now);

  // The tasks that arrived and wait. A task stays here when its call is cancelled: it did
  // arrive, and its caller may come back.
  bool IsWaiting(const TaskName& task) const { return waiting_.count(task) > 0; }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  const absl::btree_set<TaskName>& waiting() const { return waiting_; }
  void AddWaiting(const TaskName& task) {
    if (waiting_.insert(task).second) waiting_changes_.emplace_back(task, true);
  }
  // True when the task was waiting.
  bool RemoveWaiting(const TaskName& task) {
    if (waiting_.erase(task) == 0) return false;
    waiting_changes_.emplace_back(task, false);
    return true;
  }

  void AddCall(std::shared_ptr<ParkedCall> call) { calls_.push_back(std::move(call)); }
  // The call's caller went away.
  void RemoveCall(WaiterId waiter);
  // Takes out the calls of one task, to finish them apart from the others.
  Calls TakeCallsOf(const TaskName& task);

  // Ends the barrier: passed when `result` is OK, failed otherwise. Returns every parked
  // call, to be finished with `result`. The waiting tasks stay for the service to act on.
  Calls End(absl::Status result);

  // The barrier as a restarted coordinator found it: an open one gets its whole timeout
  // again from `now`.
  void Restore(State state, absl::Status result, const std::vector<TaskName>& waiting,
               absl::Time now);

  // For the service's journal: whether the state or result changed, and which tasks
  // started or stopped waiting, since the last call.
  bool TakeStateChanged() { return std::exchange(state_changed_, false); }
  std::vector<std::pair<TaskName, bool>> TakeWaitingChanges() {
    return std::exchange(waiting_changes_, {});
  }

 private:
  TimerQueue* const timers_;
  const absl::Duration timeout_;
  const std::function<void()> on_timeout_;

  State state_ = State::kIdle;
  absl::Status result_;
  TimerQueue::TimerId timer_ = 0;
  absl::btree_set<TaskName> waiting_;
  Calls calls_;
  bool state_changed_ = false;
  std::vector<std::pair<TaskName, bool>> waiting_changes_;
};

}  // namespace cohort
