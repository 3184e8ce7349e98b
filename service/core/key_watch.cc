#include "service/core/key_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

size_t EventBytes(const KeyChange& event) { return event.key.size() + event.value.size(); }

}  // namespace

KeyWatch::KeyWatch(WaiterId id, std::string prefix, std::function<void()> notify)
    : ParkedCall(id, ParkKind::kWatchKeys, std::nullopt),
      prefix_(std::move(prefix)),
      consumer_(std::make_shared<Consumer>()) {
  absl::MutexLock lock(&consumer_->mu);
  consumer_->notify = std::move(notify);
}

void KeyWatch::set_gate(DurabilityGate* gate) {
  gate_ = gate;
  consumer_->released.store(gate == nullptr ? INT64_MAX : 0);
}

bool KeyWatch::Matches(const std::string& key) const {
  if (prefix_.empty()) return true;
  if (!absl::StartsWith(key, prefix_)) return false;
  return key.size() == prefix_.size() || key[prefix_.size()] == '/';
}

bool KeyWatch::Push(const KeyChangePtr& event, size_t max_events, size_t max_bytes) {
  absl::MutexLock lock(&mu_);
  if (end_) return true;  // ended: nothing more is delivered
  size_t bytes = EventBytes(*event);
  // A revision in progress is never split, and an empty queue always takes one event, so
  // that a single large value cannot wedge a watch.
  bool same_revision = !queue_.empty() && queue_.back()->revision == event->revision;
  if (!queue_.empty() && !same_revision &&
      (queue_.size() >= max_events || queued_bytes_ + bytes > max_bytes)) {
    return false;
  }
  queue_.push_back(event);
  queued_bytes_ += bytes;
  return true;
}

KeyWatch::Batch KeyWatch::Take(size_t max_bytes) {
  Batch batch;
  const int64_t released = consumer_->released.load();
  absl::MutexLock lock(&mu_);
  size_t taken = 0;
  while (!queue_.empty()) {
    const KeyChangePtr& next = queue_.front();
    if (next->revision > released) break;  // not on disk yet: its release notifies again
    bool continues_revision =
        !batch.events.empty() && batch.events.back()->revision == next->revision;
    if (!batch.events.empty() && !continues_revision && taken >= max_bytes) break;
    size_t bytes = EventBytes(*next);
    taken += bytes;
    queued_bytes_ -= bytes;
    batch.events.push_back(next);
    queue_.pop_front();
  }
  if (queue_.empty() && end_) batch.end = *end_;
  return batch;
}

void KeyWatch::FinishWithError(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (end_) return;
    end_ = status;
  }
  Notify();
}

void KeyWatch::Detach() {
  absl::MutexLock lock(&consumer_->mu);
  consumer_->notify = nullptr;
}

void KeyWatch::Notify() {
  if (gate_ == nullptr) return consumer_->Release(INT64_MAX);
  int64_t newest = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty()) newest = queue_.back()->revision;
  }
  // Every event queued so far was journaled before it was queued: once the gate has what
  // it was told until now on disk, they may go.
  gate_->AfterDurable([consumer = consumer_, newest] { consumer->Release(newest); });
}

void KeyWatch::Consumer::Release(int64_t revision) {
  int64_t was = released.load();
  while (was < revision && !released.compare_exchange_weak(was, revision)) {
  }
  // Held while notify runs (which may Take), so that Detach waits for a notification in
  // flight.
  absl::MutexLock lock(&mu);
  if (notify) notify();
}

void KeyEventHistory::Append(const KeyChangePtr& event) {
  events_.push_back(event);
  bytes_ += EventBytes(*event);
  while (!events_.empty() && (events_.size() > max_events_ || bytes_ > max_bytes_)) {
    compacted_ = std::max(compacted_, events_.front()->revision);
    bytes_ -= EventBytes(*events_.front());
    events_.pop_front();
  }
  // Never keep half a revision: a resume from it would miss the dropped half.
  while (!events_.empty() && events_.front()->revision <= compacted_) {
    bytes_ -= EventBytes(*events_.front());
    events_.pop_front();
  }
}

absl::Status KeyEventHistory::Since(int64_t start, std::vector<KeyChangePtr>* out) const {
  if (start <= compacted_) {
    return absl::OutOfRangeError(absl::StrCat(
        "revision ", start, " is no longer in the watch history (revisions up to ", compacted_,
        " were dropped): read the keys again and watch from the current revision"));
  }
  auto first = std::lower_bound(
      events_.begin(), events_.end(), start,
      [](const KeyChangePtr& event, int64_t revision) { return event->revision < revision; });
  out->insert(out->end(), first, events_.end());
  return absl::OkStatus();
}

}  // namespace cohort
