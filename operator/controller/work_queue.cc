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
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  if (processing_.count(key)) {
    dirty_.insert(key);
    return;
  }
  if (queued_.insert(key).second) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  if (delay <= absl::ZeroDuration()) {
    Add(key);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  delayed_.emplace(clock_->Now() + delay, key);
  cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = failures_[key]++;
    delay = base_backoff_ * (1 << std::min(n, 20));
    if (delay > max_backoff_) delay = max_backoff_;
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::Failures(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (shut_down_) return std::nullopt;
    PromoteDueLocked(clock_->Now());
    if (!queue_.empty()) break;
    ++idle_;
    if (delayed_.empty()) {
      cv_.wait(lock);
    } else {
      // A test's clock moves by Poke(), not with time: look again at least every 50 ms.
      absl::Duration wait = delayed_.begin()->first - clock_->Now();
      if (clock_ != &real_clock_) wait = std::min(wait, absl::Milliseconds(50));
      cv_.wait_for(
          lock, std::chrono::microseconds(std::max<int64_t>(1, absl::ToInt64Microseconds(wait))));
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
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.erase(key) && !shut_down_ && queued_.insert(key).second) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::Poke() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::vector<std::pair<absl::Time, std::string>> WorkQueue::Delayed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {delayed_.begin(), delayed_.end()};
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  cv_.notify_all();
}

int WorkQueue::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_;
}

size_t WorkQueue::Depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace cohort::controller
