#include "service/core/timer_queue.h"

#include <vector>

namespace cohort {

TimerQueue::TimerId TimerQueue::Schedule(absl::Time when, std::function<void()> fn) {
  std::function<void()> wakeup;
  TimerId id;
  {
    absl::MutexLock lock(&mu_);
    id = ++next_id_;
    bool earliest = timers_.empty() || when < timers_.begin()->first.first;
    timers_.emplace(std::make_pair(when, id), std::move(fn));
    when_[id] = when;
    if (earliest) wakeup = wakeup_;
  }
  if (wakeup) wakeup();
  return id;
}

void TimerQueue::Cancel(TimerId id) {
  absl::MutexLock lock(&mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return;
  timers_.erase({it->second, id});
  when_.erase(it);
}

void TimerQueue::RunDue(absl::Time now) {
  std::vector<std::function<void()>> due;
  {
    absl::MutexLock lock(&mu_);
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      auto node = timers_.extract(timers_.begin());
      when_.erase(node.key().second);
      due.push_back(std::move(node.mapped()));
    }
  }
  for (auto& fn : due) fn();
}

absl::Time TimerQueue::NextDeadline() const {
  absl::MutexLock lock(&mu_);
  return timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
}

void TimerQueue::SetWakeup(std::function<void()> wakeup) {
  absl::MutexLock lock(&mu_);
  wakeup_ = std::move(wakeup);
}

}  // namespace cohort
