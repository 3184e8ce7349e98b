#include "service/core/key_value_store.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort {

KeyValueStore::KeyValueStore(KeyValueLimits limits, ParkedCallRegistry* parked, TimerQueue* timers)
    : limits_(limits),
      parked_(parked),
      timers_(timers),
      waiters_(parked, timers),
      log_(limits, parked),
      keys_(limits, &log_, &waiters_) {}

std::string KeyValueStore::NormalizeKey(absl::string_view key) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, '/', absl::SkipEmpty());
  return absl::StrJoin(parts, "/");
}

absl::Status KeyValueStore::CheckKey(absl::string_view normalized,
                                     absl::string_view original) const {
  return KeyTable::CheckKey(normalized, original, limits_.max_key_bytes);
}

void KeyValueStore::Apply(Effects& fx) {
  std::vector<TimerQueue::TimerId> timers;
  if (!fx.answered.got.empty() || !fx.answered.reached.empty()) {
    absl::MutexLock lock(&mu_);
    timers = waiters_.TakeTimers(fx.answered);
  }
  for (TimerQueue::TimerId t : timers) timers_->Cancel(t);
  for (const KeyWaiters::Answered::Got& got : fx.answered.got) {
    for (const auto& call : got.calls) {
      if (parked_->Claim(*call)) call->Finish(got.value);
    }
  }
  for (auto& call : fx.answered.reached) {
    if (parked_->Claim(*call)) call->Finish(absl::OkStatus());
  }
  for (const std::string& dir : fx.pushed_queues) WakeOneQueueWaiter(dir);
  // A recursive delete notifies a watch once per key; once is enough.
  std::vector<std::shared_ptr<KeyWatch>>& notified = fx.watches.notified;
  std::sort(notified.begin(), notified.end());
  notified.erase(std::unique(notified.begin(), notified.end()), notified.end());
  for (auto& watch : notified) watch->Notify();
  for (auto& [watch, resume] : fx.watches.overflowed) {
    if (!parked_->Claim(*watch)) continue;
    watch->FinishWithError(absl::ResourceExhaustedError(
        absl::StrCat("the watch on \"", watch->prefix(), "\" fell behind (over ",
                     limits_.watch_queue_events, " events or ", limits_.watch_queue_bytes,
                     " bytes unread): resume from revision ", resume)));
  }
}

absl::Status KeyValueStore::Insert(absl::string_view key, std::string value, bool allow_overwrite) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::Status done;
  {
    absl::MutexLock lock(&mu_);
    done = keys_.Insert(k, std::move(value), allow_overwrite, &fx);
  }
  Apply(fx);
  return done;
}

absl::StatusOr<std::string> KeyValueStore::TryGet(absl::string_view key) const {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  absl::ReaderMutexLock lock(&mu_);
  const std::string* value = keys_.Find(k);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat("key \"", k, "\" not found"));
  }
  return *value;
}

void KeyValueStore::Get(absl::string_view key, WaiterId waiter, std::optional<TaskName> owner,
                        std::optional<absl::Time> deadline, GetDone done, ParkKind kind) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return done(s);
  auto call = std::make_shared<GetCall>(waiter, kind, std::move(owner), std::move(done));
  std::optional<std::string> value;
  absl::Status parked;
  {
    absl::MutexLock lock(&mu_);
    if (const std::string* found = keys_.Find(k)) {
      value = *found;
    } else {
      call->set_unlink([this, k, waiter] {
        absl::MutexLock lock(&mu_);
        waiters_.RemoveGet(k, waiter);
      });
      parked = parked_->Add(call);
      if (parked.ok()) waiters_.AddGet(k, call, deadline);
    }
  }
  if (value) return call->Finish(std::move(*value));
  if (!parked.ok()) return call->FinishWithError(parked);
}

void KeyValueStore::WaitAtLeast(absl::string_view key, int64_t threshold, WaiterId waiter,
                                std::optional<TaskName> owner, std::optional<absl::Time> deadline,
                                ReachedDone done, ParkKind kind) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return done(s);
  auto call = std::make_shared<ReachedCall>(waiter, kind, std::move(owner), std::move(done));
  bool reached = false;
  absl::Status parked;
  {
    absl::MutexLock lock(&mu_);
    const std::string* value = keys_.Find(k);
    int64_t count = 0;
    if (value != nullptr && absl::SimpleAtoi(*value, &count) && count >= threshold) {
      reached = true;
    } else {
      call->set_unlink([this, k, waiter] {
        absl::MutexLock lock(&mu_);
        waiters_.RemoveAtLeast(k, waiter);
      });
      parked = parked_->Add(call);
      if (parked.ok()) waiters_.AddAtLeast(k, threshold, call, deadline);
    }
  }
  if (reached) return call->Finish(absl::OkStatus());
  if (!parked.ok()) return call->FinishWithError(parked);
}

absl::StatusOr<int64_t> KeyValueStore::Increment(absl::string_view key, int64_t delta) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::StatusOr<int64_t> sum;
  {
    absl::MutexLock lock(&mu_);
    sum = keys_.Increment(k, delta, &fx);
  }
  Apply(fx);
  return sum;
}

template <typename F>
void KeyValueStore::ForEachUnder(absl::string_view dir, F&& f) const {
  std::string prefix = NormalizeKey(dir);
  if (!prefix.empty()) prefix += "/";
  absl::ReaderMutexLock lock(&mu_);
  keys_.ForEachUnder(prefix, f);
}

std::vector<KeyValueEntry> KeyValueStore::GetDir(absl::string_view dir) const {
  std::vector<KeyValueEntry> out;
  ForEachUnder(dir, [&](const std::string& key, const std::string& value) {
    out.push_back({key, value});
  });
  return out;
}

std::vector<std::string> KeyValueStore::KeysUnder(absl::string_view dir) const {
  std::vector<std::string> out;
  ForEachUnder(dir, [&](const std::string& key, const std::string&) { out.push_back(key); });
  return out;
}

size_t KeyValueStore::CountUnder(absl::string_view dir) const {
  size_t n = 0;
  ForEachUnder(dir, [&](const std::string&, const std::string&) { ++n; });
  return n;
}

absl::StatusOr<std::optional<std::string>> KeyValueStore::CompareAndSet(absl::string_view key,
                                                                        absl::string_view expected,
                                                                        std::string desired) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::StatusOr<std::optional<std::string>> after;
  {
    absl::MutexLock lock(&mu_);
    after = keys_.CompareAndSet(k, expected, std::move(desired), &fx);
  }
  Apply(fx);
  return after;
}

absl::Status KeyValueStore::Append(absl::string_view key, absl::string_view data) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::Status done;
  {
    absl::MutexLock lock(&mu_);
    done = keys_.Append(k, data, &fx);
  }
  Apply(fx);
  return done;
}

absl::StatusOr<bool> KeyValueStore::Erase(absl::string_view key) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::StatusOr<bool> erased;
  {
    absl::MutexLock lock(&mu_);
    erased = keys_.Erase(k, &fx);
  }
  Apply(fx);
  return erased;
}

absl::Status KeyValueStore::QueuePush(absl::string_view dir, std::string value) {
  std::string d = NormalizeKey(dir);
  if (auto s = CheckKey(d, dir); !s.ok()) return s;
  Effects fx;
  absl::Status done;
  {
    absl::MutexLock lock(&mu_);
    done = keys_.QueuePush(d, std::move(value), &fx);
  }
  Apply(fx);
  return done;
}

absl::StatusOr<KeyValueStore::Popped> KeyValueStore::QueuePop(absl::string_view dir) {
  std::string d = NormalizeKey(dir);
  if (auto s = CheckKey(d, dir); !s.ok()) return s;
  Effects fx;
  absl::StatusOr<Popped> popped;
  {
    absl::MutexLock lock(&mu_);
    popped = QueuePopLocked(d, &fx);
  }
  Apply(fx);
  return popped;
}

absl::StatusOr<KeyValueStore::Popped> KeyValueStore::QueuePopLocked(const std::string& d,
                                                                    Effects* fx) {
  Popped popped;
  if (auto s = keys_.QueuePop(d, &popped.length, &popped.item, fx); !s.ok()) return s;
  return popped;
}

void KeyValueStore::WaitQueue(absl::string_view dir, WaiterId waiter, std::optional<TaskName> owner,
                              std::optional<absl::Time> deadline,
                              std::function<void(absl::Status)> done, ParkKind kind) {
  std::string d = NormalizeKey(dir);
  if (auto s = CheckKey(d, dir); !s.ok()) return done(s);
  const std::string prefix = d + "/";
  auto call = std::make_shared<ReachedCall>(waiter, kind, std::move(owner), std::move(done));
  bool has_item = false;
  absl::Status parked;
  {
    absl::MutexLock lock(&mu_);
    has_item = keys_.HasQueueItem(prefix);
    if (!has_item) {
      call->set_unlink([this, d, waiter] {
        absl::MutexLock lock(&mu_);
        waiters_.RemoveQueue(d, waiter);
      });
      parked = parked_->Add(call);
      if (parked.ok()) waiters_.AddQueue(d, call, deadline);
    }
  }
  if (has_item) return call->Finish(absl::OkStatus());
  if (!parked.ok()) return call->FinishWithError(parked);
}

void KeyValueStore::WaitKeyOrQueue(absl::string_view key, absl::string_view dir, WaiterId waiter,
                                   std::optional<TaskName> owner,
                                   std::optional<absl::Time> deadline,
                                   std::function<void(absl::Status)> done, ParkKind kind) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return done(s);
  std::string d = NormalizeKey(dir);
  if (auto s = CheckKey(d, dir); !s.ok()) return done(s);
  auto call = std::make_shared<ReachedCall>(waiter, kind, std::move(owner), std::move(done));
  bool ready = false;
  absl::Status parked;
  {
    absl::MutexLock lock(&mu_);
    ready = keys_.Find(k) != nullptr || keys_.HasQueueItem(d + "/");
    if (!ready) {
      call->set_unlink([this, k, d, waiter] {
        absl::MutexLock lock(&mu_);
        waiters_.RemoveKeyOrQueue(k, d, waiter);
      });
      parked = parked_->Add(call);
      if (parked.ok()) waiters_.AddKeyOrQueue(k, d, call, deadline);
    }
  }
  if (ready) return call->Finish(absl::OkStatus());
  if (!parked.ok()) return call->FinishWithError(parked);
}

size_t KeyValueStore::QueueLength(absl::string_view dir) const {
  const std::string prefix = NormalizeKey(dir) + "/";
  size_t n = 0;
  ForEachUnder(dir, [&](const std::string& key, const std::string&) {
    if (KeyTable::IsQueueItem(key, prefix)) ++n;
  });
  return n;
}

void KeyValueStore::PassQueueWake(absl::string_view dir) {
  std::string d = NormalizeKey(dir);
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!keys_.HasQueueItem(d + "/")) return;
  }
  WakeOneQueueWaiter(d);
}

void KeyValueStore::WakeOneQueueWaiter(const std::string& dir) {
  // A call being cancelled right now cannot be claimed: the push goes to the next one.
  for (;;) {
    std::shared_ptr<ReachedCall> call;
    std::optional<TimerQueue::TimerId> timer;
    {
      absl::MutexLock lock(&mu_);
      call = waiters_.TakeFirstOnQueue(dir, &timer);
      if (call == nullptr) return;
    }
    if (timer) timers_->Cancel(*timer);
    if (parked_->Claim(*call)) {
      call->Finish(absl::OkStatus());
      return;
    }
  }
}

absl::Status KeyValueStore::Delete(absl::string_view key) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    if (!keys_.Delete(k, &fx)) return absl::OkStatus();
  }
  Apply(fx);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<KeyWatch>> KeyValueStore::Watch(absl::string_view key,
                                                               int64_t start_revision,
                                                               WaiterId waiter,
                                                               std::function<void()> notify) {
  if (start_revision < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start revision ", start_revision, " is negative"));
  }
  auto watch = std::make_shared<KeyWatch>(waiter, NormalizeKey(key), std::move(notify));
  watch->set_unlink([this, waiter] {
    absl::MutexLock lock(&mu_);
    log_.RemoveWatch(waiter);
  });
  bool replayed = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = log_.AddWatch(watch, start_revision, &replayed); !s.ok()) return s;
  }
  if (replayed) watch->Notify();
  return watch;
}

void KeyValueStore::Atomically(const std::function<void(Batch&)>& body) {
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    log_.BeginBatch();
    Batch batch(this, &fx);
    body(batch);
    log_.EndBatch();
  }
  Apply(fx);
}

// Each call runs under the lock Atomically holds for the batch's whole life.
absl::Status KeyValueStore::Batch::Insert(absl::string_view key, std::string value,
                                          bool allow_overwrite) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->keys_.Insert(k, std::move(value), allow_overwrite, fx_);
}

absl::StatusOr<std::string> KeyValueStore::Batch::TryGet(absl::string_view key) const {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  const std::string* value = store_->keys_.Find(k);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat("key \"", k, "\" not found"));
  }
  return *value;
}

absl::StatusOr<int64_t> KeyValueStore::Batch::Increment(absl::string_view key, int64_t delta) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->keys_.Increment(k, delta, fx_);
}

absl::StatusOr<std::optional<std::string>> KeyValueStore::Batch::CompareAndSet(
    absl::string_view key, absl::string_view expected, std::string desired) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->keys_.CompareAndSet(k, expected, std::move(desired), fx_);
}

absl::Status KeyValueStore::Batch::Append(absl::string_view key, absl::string_view data) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->keys_.Append(k, data, fx_);
}

absl::StatusOr<bool> KeyValueStore::Batch::Erase(absl::string_view key) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->keys_.Erase(k, fx_);
}

absl::Status KeyValueStore::Batch::QueuePush(absl::string_view dir, std::string value) {
  std::string d = NormalizeKey(dir);
  if (auto s = store_->CheckKey(d, dir); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->keys_.QueuePush(d, std::move(value), fx_);
}

absl::StatusOr<KeyValueStore::Popped> KeyValueStore::Batch::QueuePop(absl::string_view dir) {
  std::string d = NormalizeKey(dir);
  if (auto s = store_->CheckKey(d, dir); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->QueuePopLocked(d, fx_);
}

void KeyValueStore::set_journal(StateJournal* journal) {
  absl::MutexLock lock(&mu_);
  log_.set_journal(journal);
}

void KeyValueStore::Restore(std::vector<DurableKey> keys, int64_t revision) {
  absl::MutexLock lock(&mu_);
  keys_.Restore(std::move(keys));
  log_.Restart(revision);
}

void KeyValueStore::Capture(std::vector<DurableKey>* keys, int64_t* revision) const {
  absl::ReaderMutexLock lock(&mu_);
  keys_.Capture(keys);
  *revision = log_.revision();
}

KeyValueStore::Stats KeyValueStore::GetStats() const {
  absl::ReaderMutexLock lock(&mu_);
  return {keys_.size(), keys_.bytes(), log_.revision()};
}

size_t KeyValueStore::NumKeys() const {
  absl::ReaderMutexLock lock(&mu_);
  return keys_.size();
}

size_t KeyValueStore::NumBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return keys_.bytes();
}

int64_t KeyValueStore::Revision() const {
  absl::ReaderMutexLock lock(&mu_);
  return log_.revision();
}

}  // namespace cohort
