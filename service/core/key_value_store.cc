#include "service/core/key_value_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort {

KeyValueStore::KeyValueStore(KeyValueLimits limits, ParkedCallRegistry* parked, TimerQueue* timers)
    : limits_(limits), parked_(parked), timers_(timers) {}

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

absl::Status KeyValueStore::PutLocked(
    const std::string& key, std::string value,
    std::vector<std::shared_ptr<Parked<absl::StatusOr<std::string>>>>* woken) {
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("value of ", value.size(), " bytes for key \"",
                                                     key, "\" exceeds the limit of ",
                                                     limits_.max_value_bytes, " bytes"));
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
  if (it == entries_.end()) {
    entries_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  auto w = waiters_.find(key);
  if (w != waiters_.end()) {
    *woken = std::move(w->second);
    waiters_.erase(w);
  }
  return absl::OkStatus();
}

void KeyValueStore::Wake(std::vector<std::shared_ptr<Parked<absl::StatusOr<std::string>>>>& woken,
                         const std::string& value) {
  std::vector<TimerQueue::TimerId> timers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& call : woken) {
      auto t = timed_gets_.find(call->id());
      if (t == timed_gets_.end()) continue;
      timers.push_back(t->second);
      timed_gets_.erase(t);
    }
  }
  for (TimerQueue::TimerId t : timers) timers_->Cancel(t);
  for (auto& call : woken) {
    if (parked_->Claim(*call)) call->Finish(value);
  }
}

absl::Status KeyValueStore::Insert(absl::string_view key, std::string value, bool allow_overwrite) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  std::vector<std::shared_ptr<Parked<absl::StatusOr<std::string>>>> woken;
  std::string copy;
  {
    absl::MutexLock lock(&mu_);
    if (!allow_overwrite && entries_.count(k)) {
      return absl::AlreadyExistsError(absl::StrCat("key \"", k, "\" already exists"));
    }
    if (!waiters_.empty() && waiters_.count(k)) copy = value;
    if (auto s = PutLocked(k, std::move(value), &woken); !s.ok()) return s;
  }
  Wake(woken, copy);
  return absl::OkStatus();
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
                        std::optional<absl::Time> deadline, GetDone done) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return done(s);
  auto call = std::make_shared<Parked<absl::StatusOr<std::string>>>(
      waiter, ParkKind::kKeyValueGet, std::move(owner), std::move(done));
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
          timed_gets_[waiter] = timers_->Schedule(*deadline, [this, waiter, k] {
            parked_->Cancel(waiter, absl::DeadlineExceededError(
                                        absl::StrCat("timed out waiting for key \"", k, "\"")));
          });
        }
      }
    }
  }
  if (value) return call->Finish(std::move(*value));
  if (!parked.ok()) return call->FinishWithError(parked);
}

void KeyValueStore::RemoveWaiter(const std::string& key, WaiterId id) {
  absl::MutexLock lock(&mu_);
  timed_gets_.erase(id);
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& calls = it->second;
  calls.erase(std::remove_if(calls.begin(), calls.end(),
                             [id](const auto& call) { return call->id() == id; }),
              calls.end());
  if (calls.empty()) waiters_.erase(it);
}

absl::StatusOr<int64_t> KeyValueStore::Increment(absl::string_view key, int64_t delta) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  std::vector<std::shared_ptr<Parked<absl::StatusOr<std::string>>>> woken;
  int64_t sum = 0;
  {
    absl::MutexLock lock(&mu_);
    int64_t current = 0;
    auto it = entries_.find(k);
    if (it != entries_.end() && !absl::SimpleAtoi(it->second, &current)) {
      return absl::FailedPreconditionError(
          absl::StrCat("key \"", k, "\" holds a value that is not a decimal 64-bit integer"));
    }
    if (__builtin_add_overflow(current, delta, &sum)) {
      return absl::OutOfRangeError(
          absl::StrCat("incrementing key \"", k, "\" (", current, ") by ", delta, " overflows"));
    }
    if (auto s = PutLocked(k, absl::StrCat(sum), &woken); !s.ok()) return s;
  }
  Wake(woken, absl::StrCat(sum));
  return sum;
}

std::vector<KeyValueEntry> KeyValueStore::GetDir(absl::string_view dir) const {
  std::string prefix = NormalizeKey(dir);
  if (!prefix.empty()) prefix += "/";
  std::vector<KeyValueEntry> out;
  absl::ReaderMutexLock lock(&mu_);
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    out.push_back({it->first, it->second});
  }
  return out;
}

absl::Status KeyValueStore::Delete(absl::string_view key) {
  std::string k = NormalizeKey(key);
  if (auto s = CheckKey(k, key); !s.ok()) return s;
  std::string prefix = k + "/";
  absl::MutexLock lock(&mu_);
  bool changed = false;
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    bytes_ -= it->first.size() + it->second.size();
    entries_.erase(it);
    changed = true;
  }
  for (it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix);) {
    bytes_ -= it->first.size() + it->second.size();
    it = entries_.erase(it);
    changed = true;
  }
  if (changed) ++revision_;
  return absl::OkStatus();
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
