// The outcomes of the calls that must not take effect twice (TaskScheduler, "Repeated calls"):
// each client's last `capacity` numbered calls and what they answered, so that a call sent again
// to the next coordinator is answered as it was the first time. Durable. Not thread-safe: the
// scheduler holds its lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

// A call that must not take effect twice: the client's worker id and the call's number, unique
// for that worker (cohort's `cohort-call` metadata, "WORKER/NUMBER"). A call with no number
// (0) is taken as new every time.
struct CallId {
  WorkerId worker = 0;
  uint64_t number = 0;
};

class CallLog {
 public:
  explicit CallLog(size_t capacity) : capacity_(capacity) {}

  // The outcome `call` was answered with, or null when it is new (or has no number).
  const CallOutcome* Repeated(const CallId& call) const;
  // Keeps `outcome` for `call` (nothing for a call with no number), forgetting the caller's
  // oldest past `capacity`.
  void Remember(const CallId& call, CallOutcome outcome);

  // Durability (SchedulerChanges::calls). Only while journaled does Remember keep what is new
  // for TakeChanges, which adds it to `changes` (null: there is no journal) and forgets it.
  void set_journaled(bool journaled) { journaled_ = journaled; }
  void TakeChanges(SchedulerChanges* changes);
  void Apply(const SchedulerChanges& changes);
  // Each worker's calls oldest first (which ones are forgotten next); workers in order.
  void Capture(SchedulerChanges* state) const;

 private:
  const size_t capacity_;
  bool journaled_ = false;
  // (worker, number) -> outcome, and each worker's numbers oldest first.
  absl::flat_hash_map<std::pair<WorkerId, uint64_t>, CallOutcome> calls_;
  absl::flat_hash_map<WorkerId, std::deque<uint64_t>> order_;
  // Since TakeChanges.
  std::vector<RememberedCall> new_calls_;
};

}  // namespace cohort::runtime
