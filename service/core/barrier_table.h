#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "service/core/durable_state.h"
#include "service/core/parked_call.h"
#include "service/core/timer_queue.h"

namespace cohort {

// The payload of a cancelled barrier's result that names the request id of the cancel that
// ended it (internal: no protocol sends it on).
inline constexpr char kCancelRequestPayload[] = "type.cohort.dev/cohort.CancelRequest";

struct BarrierArrival {
  std::string id;
  int64_t counter = 0;
  absl::Duration timeout;
  TaskName caller;
  // Sorted, duplicates removed; the service fills in the default set when the caller gave none
  // (one shared list, so that comparing it with the first caller's is cheap).
  std::shared_ptr<const std::vector<TaskName>> participants;
};

struct BarrierSnapshot {
  std::string id;
  int64_t counter = 0;
  absl::Time started;
  absl::Time deadline;
  std::vector<TaskName> arrived;
  std::vector<TaskName> missing;
};

// Bounds on what callers can make the table hold. A finished instance is kept to answer
// repeated calls (a retry whose answer was lost, a proxy's re-send after an outage) for
// `finished_retention`, or until `max_finished` newer instances finished, whichever comes
// first; then its id is forgotten, and the id's next caller starts it afresh at the instance
// it names.
struct BarrierLimits {
  size_t max_id_bytes = 1024;
  size_t max_open = 10000;
  size_t max_finished = 10000;
  absl::Duration finished_retention = absl::Hours(1);
};

// INVALID_ARGUMENT naming the limit when `id` is empty or longer than the limit; the error
// quotes only the id's start.
absl::Status CheckBarrierId(const std::string& id, const BarrierLimits& limits);

// What a barrier did, for metrics and logs.
class BarrierObserver {
 public:
  virtual ~BarrierObserver() = default;
  virtual void OnBarrierDone(const std::string& id, int64_t counter, const absl::Status& result,
                             absl::Duration open_for) = 0;
};

// Barriers by id. Each id runs one instance at a time; an instance is identified by its
// counter, and a finished instance answers repeated calls with the same counter from its
// cached result. The result of a waiter is the instance's counter, or an error carrying a
// BarrierErrorInfo payload.
class BarrierTable {
 public:
  using Done = std::function<void(absl::StatusOr<int64_t>)>;
  // Error of a task when it cannot take part (in ERROR or gone); OK when it can.
  using TaskHealth = std::function<absl::Status(const TaskName&)>;

  BarrierTable(const Clock* clock, ParkedCallRegistry* parked, TimerQueue* timers,
               BarrierObserver* observer, BarrierLimits limits = {});

  // Participants' health is checked when an instance starts; later failures arrive through
  // FailTask. Returns true when this call started a new instance.
  bool Arrive(const BarrierArrival& arrival, WaiterId waiter, const TaskHealth& health, Done done);
  // `request`: the proxy's request id, kept with the result (kCancelRequestPayload), so that
  // an attempt again of the cancel that ended the instance is OK.
  absl::Status Cancel(const std::string& id, int64_t counter, const TaskName& caller,
                      const std::string& request = "");
  // Fails every open instance that `task` takes part in, with `error`.
  void FailTask(const TaskName& task, const absl::Status& error);
  // Fails every open instance with `error` (the service is stopping).
  void FailAll(const absl::Status& error);

  std::vector<BarrierSnapshot> OpenBarriers() const;
  // Instances open now, and finished ones still kept for repeated calls.
  size_t NumOpen() const;
  size_t NumFinished() const;

  // Durability: every change is told to `journal` (null: none) before any caller hears of
  // it. `workload` is the service's default participant list, recorded by reference.
  void set_journal(StateJournal* journal, std::shared_ptr<const std::vector<TaskName>> workload);
  // The instances a restarted coordinator found; an open one gets its whole timeout again.
  void Restore(const std::vector<DurableBarrier>& barriers);
  std::vector<DurableBarrier> Capture() const;

 private:
  struct Instance;
  using Call = Parked<absl::StatusOr<int64_t>>;

  std::shared_ptr<Instance> StartLocked(const BarrierArrival& arrival)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the instance done with `result` and returns the calls to finish.
  std::vector<std::shared_ptr<Call>> PassLocked(Instance& barrier, const absl::Status& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishCalls(std::vector<std::shared_ptr<Call>>& calls, const absl::StatusOr<int64_t>& r);
  void OnTimeout(const std::string& id, int64_t counter);
  void RemoveWaiter(const std::string& id, WaiterId waiter);
  // Forgets finished instances past the retention or over the count, oldest first.
  void ForgetFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberFinishedLocked(Instance& barrier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnrememberLocked(Instance& barrier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  ParkedCallRegistry* const parked_;
  TimerQueue* const timers_;
  BarrierObserver* const observer_;
  const BarrierLimits limits_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Instance>> barriers_ ABSL_GUARDED_BY(mu_);
  StateJournal* journal_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<const std::vector<TaskName>> workload_ ABSL_GUARDED_BY(mu_);
  // Finished instances in the order they finished: sequence number to id.
  absl::btree_map<uint64_t, std::string> finished_ ABSL_GUARDED_BY(mu_);
  uint64_t finish_sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cohort
