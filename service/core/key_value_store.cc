#include "service/core/key_value_store.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort {

KeyValueStore::KeyValueStore(KeyValueLimits limits, ParkedCallRegistry* parked, TimerQueue* timers)
    : limits_(limits),
      parked_(parked),
      timers_(timers),
      history_(limits.history_events, limits.history_bytes) {}

std::string KeyValueStore::NormalizeKey(absl::string_view key) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, '/', absl::SkipEmpty());
  return absl::StrJoin(parts, "/");
}

absl::Status KeyValueStore::CheckKey(absl::string_view normalized,
                                     absl::string_view original) const {
  if (normalized.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key \"", original, "\" is empty once its slashes are removed"));
  }
  if (normalized.size() > limits_.max_key_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("key of ", normalized.size(),
                                                     " bytes exceeds the limit of ",
                                                     limits_.max_key_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status KeyValueStore::PutLocked(const std::string& key, std::string value, Effects* fx) {
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("value of ", value.size(), " bytes for key \"",
                                                     key, "\" exceeds the limit of ",
                                                     limits_.max_value_bytes, " bytes"));
  }
  if (journal_ != nullptr) {
    if (auto room = journal_->RoomForValues(); !room.ok()) return room;
  }
  auto it = entries_.find(key);
  size_t old_bytes = it == entries_.end() ? 0 : key.size() + it->second.size();
  size_t new_total = bytes_ - old_bytes + key.size() + value.size();
  if (new_total > limits_.max_total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("storing key \"", key, "\" would bring the store to ", new_total,
                     " bytes, over its limit of ", limits_.max_total_bytes, " bytes"));
  }
  bytes_ = new_total;
  ++revision_;
  JournalLocked(/*deleted=*/false, key, value);
  auto w = waiters_.find(key);
  if (w != waiters_.end()) {
    fx->woken.push_back({std::move(w->second), value});
    waiters_.erase(w);
  }
  if (auto c = count_waiters_.find(key); c != count_waiters_.end()) {
    int64_t count = 0;
    if (absl::SimpleAtoi(value, &count)) {
      std::vector<CountWaiter>& calls = c->second;
      auto below = std::partition(calls.begin(), calls.end(),
                                  [count](const CountWaiter& w) { return count < w.threshold; });
      for (auto it = below; it != calls.end(); ++it) fx->reached.push_back(std::move(it->call));
      calls.erase(below, calls.end());
      if (calls.empty()) count_waiters_.erase(c);
    }
  }
  if (auto e = key_or_queue_waiters_.find(key); e != key_or_queue_waiters_.end()) {
    for (KeyOrQueueWaiter& w : e->second) {
      if (auto q = queue_waiters_.find(w.dir); q != queue_waiters_.end()) {
        q->second.erase(w.call->id());
        if (q->second.empty()) queue_waiters_.erase(q);
      }
      fx->reached.push_back(std::move(w.call));
    }
    key_or_queue_waiters_.erase(e);
  }
  KeyChange event{it == entries_.end() ? KeyChange::Type::kInserted : KeyChange::Type::kUpdated,
                  key, value, revision_};
  if (it == entries_.end()) {
    entries_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  RecordLocked(std::move(event), fx);
  return absl::OkStatus();
}

void KeyValueStore::RecordLocked(KeyChange event, Effects* fx) {
  auto shared = std::make_shared<const KeyChange>(std::move(event));
  history_.Append(shared);
  for (auto it = watches_.begin(); it != watches_.end();) {
    KeyWatch& watch = **it;
    if (!watch.Matches(shared->key)) {
      ++it;
      continue;
    }
    if (watch.Push(shared, limits_.watch_queue_events, limits_.watch_queue_bytes)) {
      fx->notified.push_back(*it);
      ++it;
      continue;
    }
    // What is queued still goes out; the end tells where to pick up.
    fx->overflowed.emplace_back(*it, shared->revision);
    it = watches_.erase(it);
  }
}

void KeyValueStore::Apply(Effects& fx) {
  std::vector<TimerQueue::TimerId> timers;
  if (!fx.woken.empty() || !fx.reached.empty()) {
    absl::MutexLock lock(&mu_);
    auto cancel_timer = [&](WaiterId id) {
      auto t = timed_gets_.find(id);
      if (t == timed_gets_.end()) return;
      timers.push_back(t->second);
      timed_gets_.erase(t);
    };
    for (const Effects::Woken& woken : fx.woken) {
      for (const auto& call : woken.calls) cancel_timer(call->id());
    }
    for (auto& call : fx.reached) cancel_timer(call->id());
  }
  for (TimerQueue::TimerId t : timers) timers_->Cancel(t);
  for (const Effects::Woken& woken : fx.woken) {
    for (const auto& call : woken.calls) {
      if (parked_->Claim(*call)) call->Finish(woken.value);
    }
  }
  for (auto& call : fx.reached) {
    if (parked_->Claim(*call)) call->Finish(absl::OkStatus());
  }
  for (const std::string& dir : fx.pushed_queues) WakeOneQueueWaiter(dir);
  // A recursive delete notifies a watch once per key; once is enough.
  std::sort(fx.notified.begin(), fx.notified.end());
  fx.notified.erase(std::unique(fx.notified.begin(), fx.notified.end()), fx.notified.end());
  for (auto& watch : fx.notified) watch->Notify();
  for (auto& [watch, resume] : fx.overflowed) {
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
    done = InsertLocked(k, std::move(value), allow_overwrite, &fx);
  }
  Apply(fx);
  return done;
}

absl::Status KeyValueStore::InsertLocked(const std::string& k, std::string value,
                                         bool allow_overwrite, Effects* fx) {
  if (!allow_overwrite && entries_.count(k)) {
    return absl::AlreadyExistsError(absl::StrCat("key \"", k, "\" already exists"));
  }
  return PutLocked(k, std::move(value), fx);
}

absl::StatusOr<std::string> KeyValueStore::TryGet(absl::string_view key) const {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  absl::ReaderMutexLock lock(&mu_);
  auto it = entries_.find(k);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("key \"", k, "\" not found"));
  }
  return it->second;
}

void KeyValueStore::Get(absl::string_view key, WaiterId waiter, std::optional<TaskName> owner,
                        std::optional<absl::Time> deadline, GetDone done, ParkKind kind) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return done(s);
  auto call = std::make_shared<Parked<absl::StatusOr<std::string>>>(waiter, kind, std::move(owner),
                                                                    std::move(done));
  std::optional<std::string> value;
  absl::Status parked;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      value = it->second;
    } else {
      call->set_unlink([this, k, waiter] { RemoveWaiter(k, waiter); });
      parked = parked_->Add(call);
      if (parked.ok()) {
        waiters_[k].push_back(call);
        if (deadline) {
          ScheduleDeadline(waiter, *deadline,
                           absl::StrCat("timed out waiting for key \"", k, "\""));
        }
      }
    }
  }
  if (value) return call->Finish(std::move(*value));
  if (!parked.ok()) return call->FinishWithError(parked);
}

void KeyValueStore::ScheduleDeadline(WaiterId waiter, absl::Time deadline, std::string what) {
  timed_gets_[waiter] = timers_->Schedule(deadline, [this, waiter, what = std::move(what)] {
    parked_->Cancel(waiter, absl::DeadlineExceededError(what));
  });
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
    auto it = entries_.find(k);
    int64_t count = 0;
    if (it != entries_.end() && absl::SimpleAtoi(it->second, &count) && count >= threshold) {
      reached = true;
    } else {
      call->set_unlink([this, k, waiter] { RemoveCountWaiter(k, waiter); });
      parked = parked_->Add(call);
      if (parked.ok()) {
        count_waiters_[k].push_back({threshold, call});
        if (deadline) {
          ScheduleDeadline(
              waiter, *deadline,
              absl::StrCat("timed out waiting for key \"", k, "\" to reach ", threshold));
        }
      }
    }
  }
  if (reached) return call->Finish(absl::OkStatus());
  if (!parked.ok()) return call->FinishWithError(parked);
}

namespace {
// Removes the call `id` from the calls parked on `key` in `by_key` (a key's list goes when empty);
// `id_of` reads an element's waiter id.
template <typename Map, typename IdOf>
void RemoveParked(Map& by_key, const std::string& key, WaiterId id, IdOf id_of) {
  auto it = by_key.find(key);
  if (it == by_key.end()) return;
  auto& calls = it->second;
  calls.erase(std::remove_if(calls.begin(), calls.end(),
                             [&](const auto& call) { return id_of(call) == id; }),
              calls.end());
  if (calls.empty()) by_key.erase(it);
}
}  // namespace

void KeyValueStore::RemoveCountWaiter(const std::string& key, WaiterId id) {
  absl::MutexLock lock(&mu_);
  timed_gets_.erase(id);
  RemoveParked(count_waiters_, key, id, [](const CountWaiter& w) { return w.call->id(); });
}

void KeyValueStore::RemoveWaiter(const std::string& key, WaiterId id) {
  absl::MutexLock lock(&mu_);
  timed_gets_.erase(id);
  RemoveParked(waiters_, key, id, [](const std::shared_ptr<GetCall>& c) { return c->id(); });
}

absl::StatusOr<int64_t> KeyValueStore::Increment(absl::string_view key, int64_t delta) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::StatusOr<int64_t> sum;
  {
    absl::MutexLock lock(&mu_);
    sum = IncrementLocked(k, delta, &fx);
  }
  Apply(fx);
  return sum;
}

absl::StatusOr<int64_t> KeyValueStore::IncrementLocked(const std::string& k, int64_t delta,
                                                       Effects* fx) {
  int64_t current = 0;
  auto it = entries_.find(k);
  if (it != entries_.end() && !absl::SimpleAtoi(it->second, &current)) {
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", k, "\" holds a value that is not a decimal 64-bit integer"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrCat("incrementing key \"", k, "\" (", current, ") by ", delta, " overflows"));
  }
  if (auto s = PutLocked(k, absl::StrCat(sum), fx); !s.ok()) return s;
  return sum;
}

template <typename F>
void KeyValueStore::ForEachUnder(absl::string_view dir, F&& f) const {
  std::string prefix = NormalizeKey(dir);
  if (!prefix.empty()) prefix += "/";
  absl::ReaderMutexLock lock(&mu_);
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    f(it->first, it->second);
  }
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
    after = CompareAndSetLocked(k, expected, std::move(desired), &fx);
  }
  Apply(fx);
  return after;
}

absl::StatusOr<std::optional<std::string>> KeyValueStore::CompareAndSetLocked(
    const std::string& k, absl::string_view expected, std::string desired, Effects* fx) {
  auto it = entries_.find(k);
  bool matches = it == entries_.end() ? expected.empty() : it->second == expected;
  if (!matches) {
    if (it != entries_.end()) return std::optional<std::string>(it->second);
    return std::optional<std::string>();
  }
  std::optional<std::string> after = desired;
  if (auto s = PutLocked(k, std::move(desired), fx); !s.ok()) return s;
  return after;
}

absl::Status KeyValueStore::Append(absl::string_view key, absl::string_view data) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::Status done;
  {
    absl::MutexLock lock(&mu_);
    done = AppendLocked(k, data, &fx);
  }
  Apply(fx);
  return done;
}

absl::Status KeyValueStore::AppendLocked(const std::string& k, absl::string_view data,
                                         Effects* fx) {
  auto it = entries_.find(k);
  std::string value = it == entries_.end() ? std::string() : it->second;
  value.append(data.data(), data.size());
  return PutLocked(k, std::move(value), fx);
}

absl::StatusOr<bool> KeyValueStore::Erase(absl::string_view key) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  Effects fx;
  absl::StatusOr<bool> erased;
  {
    absl::MutexLock lock(&mu_);
    erased = EraseKeyLocked(k, &fx);
  }
  Apply(fx);
  return erased;
}

absl::StatusOr<bool> KeyValueStore::EraseKeyLocked(const std::string& k, Effects* fx) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return false;
  // The journal's KeyDeleted removes what is under "key/" too when it is read back: only an
  // entry with nothing under it is erased alone.
  std::string under = k + "/";
  if (auto next = entries_.lower_bound(under);
      next != entries_.end() && absl::StartsWith(next->first, under)) {
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", k, "\" has keys under it; delete it with them"));
  }
  EraseLocked(it, fx);
  return true;
}

void KeyValueStore::EraseLocked(std::map<std::string, std::string>::iterator it, Effects* fx) {
  std::string key = it->first;
  bytes_ -= it->first.size() + it->second.size();
  entries_.erase(it);
  ++revision_;
  JournalLocked(/*deleted=*/true, key, std::string());
  RecordLocked(KeyChange{KeyChange::Type::kDeleted, std::move(key), "", revision_}, fx);
}

namespace {
constexpr size_t kQueueSequenceDigits = 20;  // every uint64_t

// The sequence number of a queue item's key "dir/NNN..." (`prefix` is "dir/"); nullopt for a
// key under the queue that is not an item.
std::optional<uint64_t> QueueSequence(absl::string_view key, absl::string_view prefix) {
  absl::string_view rest = key.substr(prefix.size());
  uint64_t sequence = 0;
  if (rest.size() != kQueueSequenceDigits || !absl::SimpleAtoi(rest, &sequence)) {
    return std::nullopt;
  }
  return sequence;
}
}  // namespace

absl::Status KeyValueStore::QueuePush(absl::string_view dir, std::string value) {
  std::string d = NormalizeKey(dir);
  if (auto s = CheckKey(d, dir); !s.ok()) return s;
  Effects fx;
  absl::Status done;
  {
    absl::MutexLock lock(&mu_);
    done = QueuePushLocked(d, std::move(value), &fx);
  }
  Apply(fx);
  return done;
}

absl::Status KeyValueStore::QueuePushLocked(const std::string& d, std::string value, Effects* fx) {
  const std::string prefix = d + "/";
  // One past the last item's number: the first key after every "dir/..." is "dir0".
  uint64_t next = 1;
  auto end = entries_.lower_bound(d + "0");
  if (end != entries_.begin() && absl::StartsWith(std::prev(end)->first, prefix)) {
    std::optional<uint64_t> last = QueueSequence(std::prev(end)->first, prefix);
    if (!last || *last == UINT64_MAX) {
      return absl::FailedPreconditionError(absl::StrCat(
          "queue \"", d, "\" holds the key \"", std::prev(end)->first,
          "\", which is not one of its items: delete it, or the queue, to push again"));
    }
    next = *last + 1;
  }
  std::string item = absl::StrCat(prefix, absl::Dec(next, absl::kZeroPad20));
  if (auto s = CheckKey(item, item); !s.ok()) return s;
  if (auto s = PutLocked(item, std::move(value), fx); !s.ok()) return s;
  fx->pushed_queues.push_back(d);
  return absl::OkStatus();
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
  const std::string prefix = d + "/";
  Popped popped;
  // Walks the queue's items to count them: queues in torch's jobs hold a few.
  auto first = entries_.end();
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (!QueueSequence(it->first, prefix)) continue;
    if (first == entries_.end()) first = it;
    ++popped.length;
  }
  if (first == entries_.end()) return popped;
  // As Erase: the journal's record of the removal would take what is under it too.
  if (auto next = std::next(first);
      next != entries_.end() && absl::StartsWith(next->first, first->first + "/")) {
    return absl::FailedPreconditionError(
        absl::StrCat("queue \"", d, "\": its item \"", first->first,
                     "\" has keys under it: delete them, or the queue, to pop again"));
  }
  popped.item = first->second;
  EraseLocked(first, fx);
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
    has_item = HasQueueItemLocked(prefix);
    if (!has_item) {
      call->set_unlink([this, d, waiter] { RemoveQueueWaiter(d, waiter); });
      parked = parked_->Add(call);
      if (parked.ok()) {
        queue_waiters_[d].emplace(waiter, QueueWaiter{call, std::string()});
        if (deadline) {
          ScheduleDeadline(waiter, *deadline,
                           absl::StrCat("timed out waiting for an item in queue \"", d, "\""));
        }
      }
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
    ready = entries_.count(k) > 0 || HasQueueItemLocked(d + "/");
    if (!ready) {
      call->set_unlink([this, k, d, waiter] { RemoveKeyOrQueueWaiter(k, d, waiter); });
      parked = parked_->Add(call);
      if (parked.ok()) {
        queue_waiters_[d].emplace(waiter, QueueWaiter{call, k});
        key_or_queue_waiters_[k].push_back({d, call});
        if (deadline) {
          ScheduleDeadline(waiter, *deadline,
                           absl::StrCat("timed out waiting for key \"", k,
                                        "\" or an item in queue \"", d, "\""));
        }
      }
    }
  }
  if (ready) return call->Finish(absl::OkStatus());
  if (!parked.ok()) return call->FinishWithError(parked);
}

void KeyValueStore::RemoveKeyOrQueueWaiter(const std::string& key, const std::string& dir,
                                           WaiterId id) {
  absl::MutexLock lock(&mu_);
  timed_gets_.erase(id);
  if (auto q = queue_waiters_.find(dir); q != queue_waiters_.end()) {
    q->second.erase(id);
    if (q->second.empty()) queue_waiters_.erase(q);
  }
  RemoveKeyOrQueueWaiterLocked(key, id);
}

void KeyValueStore::RemoveKeyOrQueueWaiterLocked(const std::string& key, WaiterId id) {
  RemoveParked(key_or_queue_waiters_, key, id,
               [](const KeyOrQueueWaiter& w) { return w.call->id(); });
}

void KeyValueStore::RemoveQueueWaiter(const std::string& dir, WaiterId id) {
  absl::MutexLock lock(&mu_);
  timed_gets_.erase(id);
  auto it = queue_waiters_.find(dir);
  if (it == queue_waiters_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) queue_waiters_.erase(it);
}

bool KeyValueStore::HasQueueItemLocked(const std::string& prefix) const {
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (QueueSequence(it->first, prefix)) return true;
  }
  return false;
}

size_t KeyValueStore::QueueLength(absl::string_view dir) const {
  const std::string prefix = NormalizeKey(dir) + "/";
  size_t n = 0;
  ForEachUnder(dir, [&](const std::string& key, const std::string&) {
    if (QueueSequence(key, prefix)) ++n;
  });
  return n;
}

void KeyValueStore::PassQueueWake(absl::string_view dir) {
  std::string d = NormalizeKey(dir);
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!HasQueueItemLocked(d + "/")) return;
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
      auto it = queue_waiters_.find(dir);
      if (it == queue_waiters_.end()) return;
      QueueWaiter& first = it->second.begin()->second;
      call = std::move(first.call);
      if (!first.key.empty()) RemoveKeyOrQueueWaiterLocked(first.key, call->id());
      it->second.erase(it->second.begin());
      if (it->second.empty()) queue_waiters_.erase(it);
      if (auto t = timed_gets_.find(call->id()); t != timed_gets_.end()) {
        timer = t->second;
        timed_gets_.erase(t);
      }
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
  std::string prefix = k + "/";
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> removed;
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      bytes_ -= it->first.size() + it->second.size();
      removed.push_back(it->first);
      entries_.erase(it);
    }
    for (it = entries_.lower_bound(prefix);
         it != entries_.end() && absl::StartsWith(it->first, prefix);) {
      bytes_ -= it->first.size() + it->second.size();
      removed.push_back(it->first);
      it = entries_.erase(it);
    }
    if (removed.empty()) return absl::OkStatus();
    ++revision_;
    JournalLocked(/*deleted=*/true, k, std::string());
    for (std::string& gone : removed) {
      RecordLocked(KeyChange{KeyChange::Type::kDeleted, std::move(gone), "", revision_}, &fx);
    }
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
  watch->set_unlink([this, waiter] { RemoveWatch(waiter); });
  bool replayed = false;
  {
    absl::MutexLock lock(&mu_);
    watch->set_gate(journal_);  // its events go out once they are on disk
    if (start_revision > revision_ + 1) {
      return absl::OutOfRangeError(absl::StrCat(
          "start revision ", start_revision, " is past the store's revision ", revision_,
          " (did the coordinator restart?): read the keys again and watch from now"));
    }
    std::vector<KeyChangePtr> past;
    if (start_revision != 0) {
      if (auto s = history_.Since(start_revision, &past); !s.ok()) return s;
    }
    if (auto s = parked_->Add(watch); !s.ok()) return s;
    watch->set_created_revision(revision_);
    for (const KeyChangePtr& event : past) {
      if (!watch->Matches(event->key)) continue;
      // A replay longer than the queue still goes out whole: the client asked for it.
      watch->Push(event, SIZE_MAX, SIZE_MAX);
      replayed = true;
    }
    watches_.push_back(watch);
  }
  if (replayed) watch->Notify();
  return watch;
}

void KeyValueStore::RemoveWatch(WaiterId id) {
  absl::MutexLock lock(&mu_);
  watches_.erase(std::remove_if(watches_.begin(), watches_.end(),
                                [id](const auto& watch) { return watch->id() == id; }),
                 watches_.end());
}

void KeyValueStore::JournalLocked(bool deleted, const std::string& key, const std::string& value) {
  if (journal_ == nullptr) return;
  if (batch_changes_ != nullptr) {
    batch_changes_->push_back({deleted, key, value, revision_});  // copied for the one record
  } else if (deleted) {
    journal_->KeyDeleted(key, revision_);
  } else {
    journal_->KeyPut(key, value, revision_);
  }
}

void KeyValueStore::JournalOne(const KeyJournalChange& change) {
  if (change.deleted) {
    journal_->KeyDeleted(change.key, change.revision);
  } else {
    journal_->KeyPut(change.key, change.value, change.revision);
  }
}

void KeyValueStore::Atomically(const std::function<void(Batch&)>& body) {
  Effects fx;
  {
    absl::MutexLock lock(&mu_);
    std::vector<KeyJournalChange> changes;
    batch_changes_ = &changes;
    Batch batch(this, &fx);
    body(batch);
    batch_changes_ = nullptr;
    // Changes are kept only with a journal (JournalLocked).
    if (changes.size() == 1) {
      JournalOne(changes[0]);
    } else if (!changes.empty()) {
      journal_->KeysChanged(changes);
    }
  }
  Apply(fx);
}

// Each call runs under the lock Atomically holds for the batch's whole life.
absl::Status KeyValueStore::Batch::Insert(absl::string_view key, std::string value,
                                          bool allow_overwrite) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->InsertLocked(k, std::move(value), allow_overwrite, fx_);
}

absl::StatusOr<std::string> KeyValueStore::Batch::TryGet(absl::string_view key) const {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  auto it = store_->entries_.find(k);
  if (it == store_->entries_.end()) {
    return absl::NotFoundError(absl::StrCat("key \"", k, "\" not found"));
  }
  return it->second;
}

absl::StatusOr<int64_t> KeyValueStore::Batch::Increment(absl::string_view key, int64_t delta) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->IncrementLocked(k, delta, fx_);
}

absl::StatusOr<std::optional<std::string>> KeyValueStore::Batch::CompareAndSet(
    absl::string_view key, absl::string_view expected, std::string desired) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->CompareAndSetLocked(k, expected, std::move(desired), fx_);
}

absl::Status KeyValueStore::Batch::Append(absl::string_view key, absl::string_view data) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->AppendLocked(k, data, fx_);
}

absl::StatusOr<bool> KeyValueStore::Batch::Erase(absl::string_view key) {
  std::string k = NormalizeKey(key);
  if (auto s = store_->CheckKey(k, key); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->EraseKeyLocked(k, fx_);
}

absl::Status KeyValueStore::Batch::QueuePush(absl::string_view dir, std::string value) {
  std::string d = NormalizeKey(dir);
  if (auto s = store_->CheckKey(d, dir); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->QueuePushLocked(d, std::move(value), fx_);
}

absl::StatusOr<KeyValueStore::Popped> KeyValueStore::Batch::QueuePop(absl::string_view dir) {
  std::string d = NormalizeKey(dir);
  if (auto s = store_->CheckKey(d, dir); !s.ok()) return s;
  store_->mu_.AssertHeld();
  return store_->QueuePopLocked(d, fx_);
}

void KeyValueStore::set_journal(StateJournal* journal) {
  absl::MutexLock lock(&mu_);
  journal_ = journal;
}

void KeyValueStore::Restore(std::vector<DurableKey> keys, int64_t revision) {
  absl::MutexLock lock(&mu_);
  for (DurableKey& entry : keys) {
    bytes_ += entry.key.size() + entry.value.size();
    entries_[std::move(entry.key)] = std::move(entry.value);
  }
  revision_ = revision;
  history_.Restart(revision);
}

void KeyValueStore::Capture(std::vector<DurableKey>* keys, int64_t* revision) const {
  absl::ReaderMutexLock lock(&mu_);
  keys->clear();
  keys->reserve(entries_.size());
  for (const auto& [key, value] : entries_) keys->push_back({key, value});
  *revision = revision_;
}

KeyValueStore::Stats KeyValueStore::GetStats() const {
  absl::ReaderMutexLock lock(&mu_);
  return {entries_.size(), bytes_, revision_};
}

size_t KeyValueStore::NumKeys() const {
  absl::ReaderMutexLock lock(&mu_);
  return entries_.size();
}

size_t KeyValueStore::NumBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return bytes_;
}

int64_t KeyValueStore::Revision() const {
  absl::ReaderMutexLock lock(&mu_);
  return revision_;
}

}  // namespace cohort
