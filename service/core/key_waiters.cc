#include "service/core/key_waiters.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

// Removes the call `id` from the calls parked on `key` in `by_key` (a key's list goes when empty);
// `id_of` reads an element's waiter id.
template <typename Map, typename IdOf>
void RemoveParkedOnKey(Map& by_key, const std::string& key, WaiterId id, IdOf id_of) {
  auto it = by_key.find(key);
  if (it == by_key.end()) return;
  auto& calls = it->second;
  calls.erase(std::remove_if(calls.begin(), calls.end(),
                             [&](const auto& call) { return id_of(call) == id; }),
              calls.end());
  if (calls.empty()) by_key.erase(it);
}

}  // namespace

void KeyWaiters::AddGet(const std::string& key, std::shared_ptr<GetCall> call,
                        std::optional<absl::Time> deadline) {
  WaiterId waiter = call->id();
  gets_[key].push_back(std::move(call));
  if (deadline) {
    ScheduleDeadline(waiter, *deadline, absl::StrCat("timed out waiting for key \"", key, "\""));
  }
}

void KeyWaiters::AddAtLeast(const std::string& key, int64_t threshold,
                            std::shared_ptr<ReachedCall> call, std::optional<absl::Time> deadline) {
  WaiterId waiter = call->id();
  count_waiters_[key].push_back({threshold, std::move(call)});
  if (deadline) {
    ScheduleDeadline(waiter, *deadline,
                     absl::StrCat("timed out waiting for key \"", key, "\" to reach ", threshold));
  }
}

void KeyWaiters::AddQueue(const std::string& dir, std::shared_ptr<ReachedCall> call,
                          std::optional<absl::Time> deadline) {
  WaiterId waiter = call->id();
  queue_waiters_[dir].emplace(waiter, QueueWaiter{std::move(call), std::string()});
  if (deadline) {
    ScheduleDeadline(waiter, *deadline,
                     absl::StrCat("timed out waiting for an item in queue \"", dir, "\""));
  }
}

void KeyWaiters::AddKeyOrQueue(const std::string& key, const std::string& dir,
                               std::shared_ptr<ReachedCall> call,
                               std::optional<absl::Time> deadline) {
  WaiterId waiter = call->id();
  queue_waiters_[dir].emplace(waiter, QueueWaiter{call, key});
  key_or_queue_waiters_[key].push_back({dir, std::move(call)});
  if (deadline) {
    ScheduleDeadline(
        waiter, *deadline,
        absl::StrCat("timed out waiting for key \"", key, "\" or an item in queue \"", dir, "\""));
  }
}

void KeyWaiters::ScheduleDeadline(WaiterId waiter, absl::Time deadline, std::string what) {
  timed_calls_[waiter] = timers_->Schedule(deadline, [this, waiter, what = std::move(what)] {
    parked_->Cancel(waiter, absl::DeadlineExceededError(what));
  });
}

void KeyWaiters::RemoveGet(const std::string& key, WaiterId id) {
  timed_calls_.erase(id);
  RemoveParkedOnKey(gets_, key, id, [](const std::shared_ptr<GetCall>& c) { return c->id(); });
}

void KeyWaiters::RemoveAtLeast(const std::string& key, WaiterId id) {
  timed_calls_.erase(id);
  RemoveParkedOnKey(count_waiters_, key, id, [](const CountWaiter& w) { return w.call->id(); });
}

void KeyWaiters::RemoveQueue(const std::string& dir, WaiterId id) {
  timed_calls_.erase(id);
  RemoveFromQueue(dir, id);
}

void KeyWaiters::RemoveKeyOrQueue(const std::string& key, const std::string& dir, WaiterId id) {
  timed_calls_.erase(id);
  RemoveFromQueue(dir, id);
  RemoveParkedOnKey(key_or_queue_waiters_, key, id,
                    [](const KeyOrQueueWaiter& w) { return w.call->id(); });
}

void KeyWaiters::RemoveFromQueue(const std::string& dir, WaiterId id) {
  auto it = queue_waiters_.find(dir);
  if (it == queue_waiters_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) queue_waiters_.erase(it);
}

void KeyWaiters::KeySet(const std::string& key, const std::string& value, Answered* answered) {
  if (auto w = gets_.find(key); w != gets_.end()) {
    answered->got.push_back({std::move(w->second), value});
    gets_.erase(w);
  }
  if (auto c = count_waiters_.find(key); c != count_waiters_.end()) {
    int64_t count = 0;
    if (absl::SimpleAtoi(value, &count)) {
      std::vector<CountWaiter>& calls = c->second;
      auto below = std::partition(calls.begin(), calls.end(),
                                  [count](const CountWaiter& w) { return count < w.threshold; });
      for (auto it = below; it != calls.end(); ++it)
        answered->reached.push_back(std::move(it->call));
      calls.erase(below, calls.end());
      if (calls.empty()) count_waiters_.erase(c);
    }
  }
  if (auto e = key_or_queue_waiters_.find(key); e != key_or_queue_waiters_.end()) {
    for (KeyOrQueueWaiter& w : e->second) {
      RemoveFromQueue(w.dir, w.call->id());
      answered->reached.push_back(std::move(w.call));
    }
    key_or_queue_waiters_.erase(e);
  }
}

std::optional<TimerQueue::TimerId> KeyWaiters::TakeTimer(WaiterId id) {
  auto t = timed_calls_.find(id);
  if (t == timed_calls_.end()) return std::nullopt;
  TimerQueue::TimerId timer = t->second;
  timed_calls_.erase(t);
  return timer;
}

std::vector<TimerQueue::TimerId> KeyWaiters::TakeTimers(const Answered& answered) {
  std::vector<TimerQueue::TimerId> timers;
  auto take = [&](WaiterId id) {
    if (auto timer = TakeTimer(id)) timers.push_back(*timer);
  };
  for (const Answered::Got& got : answered.got) {
    for (const auto& call : got.calls) take(call->id());
  }
  for (const auto& call : answered.reached) take(call->id());
  return timers;
}

std::shared_ptr<KeyWaiters::ReachedCall> KeyWaiters::TakeFirstOnQueue(
    const std::string& dir, std::optional<TimerQueue::TimerId>* timer) {
  auto it = queue_waiters_.find(dir);
  if (it == queue_waiters_.end()) return nullptr;
  QueueWaiter& first = it->second.begin()->second;
  std::shared_ptr<ReachedCall> call = std::move(first.call);
  if (!first.key.empty()) {
    RemoveParkedOnKey(key_or_queue_waiters_, first.key, call->id(),
                      [](const KeyOrQueueWaiter& w) { return w.call->id(); });
  }
  it->second.erase(it->second.begin());
  if (it->second.empty()) queue_waiters_.erase(it);
  *timer = TakeTimer(call->id());
  return call;
}

}  // namespace cohort
