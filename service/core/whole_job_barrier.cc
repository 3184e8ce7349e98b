#include "service/core/whole_job_barrier.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace cohort {

WholeJobBarrier::WholeJobBarrier(TimerQueue* timers, absl::Duration timeout,
                                 std::function<void()> on_timeout)
    : timers_(timers), timeout_(timeout), on_timeout_(std::move(on_timeout)) {}

void WholeJobBarrier::OpenIfIdle(absl::Time now) {
  if (state_ != State::kIdle) return;
  state_ = State::kOpen;
  state_changed_ = true;
  timer_ = timers_->Schedule(now + timeout_, on_timeout_);
}

void WholeJobBarrier::Restore(State state, absl::Status result,
                              const std::vector<TaskName>& waiting, absl::Time now) {
  state_ = state;
  result_ = std::move(result);
  waiting_.insert(waiting.begin(), waiting.end());
  if (state_ == State::kOpen) timer_ = timers_->Schedule(now + timeout_, on_timeout_);
}

void WholeJobBarrier::RemoveCall(WaiterId waiter) { RemoveParkedCall(&calls_, waiter); }

WholeJobBarrier::Calls WholeJobBarrier::TakeCallsOf(const TaskName& task) {
  Calls taken;
  auto of_task = [&task](const auto& call) { return call->owner() == task; };
  std::copy_if(calls_.begin(), calls_.end(), std::back_inserter(taken), of_task);
  calls_.erase(std::remove_if(calls_.begin(), calls_.end(), of_task), calls_.end());
  return taken;
}

WholeJobBarrier::Calls WholeJobBarrier::End(absl::Status result) {
  state_ = result.ok() ? State::kPassed : State::kFailed;
  result_ = std::move(result);
  state_changed_ = true;
  timers_->Cancel(timer_);
  Calls calls;
  calls.swap(calls_);
  return calls;
}

}  // namespace cohort
