#include "operator/controller/work_queue.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"

namespace cohort::controller {

WorkQueue::WorkQueue(absl::Duration base_backoff, absl::Duration max_backoff, const Clock* clock)
    : base_backoff_(base_backoff),
      max_backoff_(max_backoff),
      clock_(clock ? clock : &real_clock_) {}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  if (processing_.count(key)) {
    dirty_.insert(key);
    return;
  }
  if (queued_.insert(key).second) {
    queue_.push_back(key);
    cv_.Signal();
  }
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  if (delay <= absl::ZeroDuration()) {
    Add(key);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  delayed_.emplace(clock_->Now() + delay, key);
  cv_.SignalAll();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    const int n = failures_[key]++;
    delay = base_backoff_ * (1 << std::min(n, 20));
    if (delay > max_backoff_) delay = max_backoff_;
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
}

int WorkQueue::Failures(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::PromoteDueLocked(absl::Time now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    if (processing_.count(key)) {
      dirty_.insert(key);
    } else if (queued_.insert(key).second) {
      queue_.push_back(key);
    }
  }
}

std::optional<std::string> WorkQueue::Get() {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (shut_down_) return std::nullopt;
    PromoteDueLocked(clock_->Now());
    if (!queue_.empty()) break;
    ++idle_;
    if (delayed_.empty()) {
      cv_.Wait(&mu_);
    } else {
      // A test's clock moves by Poke(), not with time: look again at least every 50 ms.
      absl::Duration wait = delayed_.begin()->first - clock_->Now();
      if (clock_ != &real_clock_) wait = std::min(wait, absl::Milliseconds(50));
      cv_.WaitWithTimeout(&mu_, std::max(wait, absl::Microseconds(1)));
    }
    --idle_;
  }
  std::string key = queue_.front();
  queue_.pop_front();
  queued_.erase(key);
  processing_.insert(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  if (dirty_.erase(key) && !shut_down_ && queued_.insert(key).second) {
    queue_.push_back(key);
    cv_.Signal();
  }
}

void WorkQueue::Poke() {
  absl::MutexLock lock(&mu_);
  cv_.SignalAll();
}

std::vector<std::pair<absl::Time, std::string>> WorkQueue::Delayed() const {
  absl::MutexLock lock(&mu_);
  return {delayed_.begin(), delayed_.end()};
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  cv_.SignalAll();
}

int WorkQueue::Idle() const {
  absl::MutexLock lock(&mu_);
  return idle_;
}

size_t WorkQueue::Depth() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace cohort::controller
