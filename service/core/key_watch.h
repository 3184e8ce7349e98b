#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/durability_gate.h"
#include "common/key_change.h"
#include "service/core/parked_call.h"

namespace cohort {

using KeyChangePtr = std::shared_ptr<const KeyChange>;

// A watch on a key and everything under "key/" (the empty key watches the whole store).
// The store appends matching events in revision order; the consumer takes them in batches
// that never split a revision. The watch is a parked call, so the service's limits, Stop
// and the caller's cancellation end it like any other: FinishWithError ends the stream.
// Thread-safe.
class KeyWatch final : public ParkedCall {
 public:
  struct Batch {
    std::vector<KeyChangePtr> events;
    // Set once the queue is drained and the watch has ended: why.
    std::optional<absl::Status> end;
  };

  // `notify` runs, on any thread and without store locks held, when events or the end
  // arrive; the consumer then calls Take. It is never called after Detach returns.
  KeyWatch(WaiterId id, std::string prefix, std::function<void()> notify);

  const std::string& prefix() const { return prefix_; }
  bool Matches(const std::string& key) const;
  // The store's revision when the watch was created: events after it follow.
  int64_t created_revision() const { return created_revision_; }

  // Moves whole revisions out of the queue, stopping once `max_bytes` of keys and values
  // are taken (at least one revision is taken when any is queued).
  Batch Take(size_t max_bytes);
  // Ends the watch once the queue is drained.
  void FinishWithError(const absl::Status& status) override;
  // After this returns, `notify` is never called again.
  void Detach();

  // For whoever produces the events (the local store, or a proxy relaying a coordinator's
  // stream). False (and nothing queued) when the queue is full. The caller notifies.
  bool Push(const KeyChangePtr& event, size_t max_events, size_t max_bytes);
  // Set by the producer before the watch is shared.
  void set_created_revision(int64_t revision) { created_revision_ = revision; }
  // Set by the producer before the watch is shared: an event reaches the consumer only once
  // `gate` has its change on disk (Notify hands the events queued so far to the gate; Take
  // stops at the first one it has not released yet).
  void set_gate(DurabilityGate* gate);
  // Tells the consumer that events or the end arrived (through the gate, when there is one).
  void Notify();

 private:
  const std::string prefix_;
  int64_t created_revision_ = 0;

  mutable absl::Mutex mu_;
  std::deque<KeyChangePtr> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);

  DurabilityGate* gate_ = nullptr;
  // Shared with the gate's pending releases, which may outlive the watch.
  struct Consumer {
    absl::Mutex mu;
    std::function<void()> notify ABSL_GUARDED_BY(mu);
    // With a gate: the newest revision the gate has on disk, the last Take may hand out.
    std::atomic<int64_t> released{INT64_MAX};
    void Release(int64_t revision);
  };
  const std::shared_ptr<Consumer> consumer_;
};

// Recent events, for watches that resume from a revision. Bounded by count and bytes; the
// oldest revisions go first.
class KeyEventHistory {
 public:
  KeyEventHistory(size_t max_events, size_t max_bytes)
      : max_events_(max_events), max_bytes_(max_bytes) {}

  void Append(const KeyChangePtr& event);
  // Events with revision >= `start`, or OUT_OF_RANGE when some of them were dropped.
  absl::Status Since(int64_t start, std::vector<KeyChangePtr>* out) const;
  // Starts empty after `revision` (a restarted coordinator keeps no history).
  void Restart(int64_t revision) {
    events_.clear();
    bytes_ = 0;
    compacted_ = revision;
  }
  // The newest revision dropped from the history (0: none).
  int64_t compacted_revision() const { return compacted_; }

 private:
  const size_t max_events_;
  const size_t max_bytes_;
  std::deque<KeyChangePtr> events_;
  size_t bytes_ = 0;
  int64_t compacted_ = 0;
};

}  // namespace cohort
