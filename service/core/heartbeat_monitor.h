#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "service/core/task_table.h"

namespace cohort {

// Heartbeat timing: when a connected task is stale (HB-4), and the grace after a task
// disconnects (HB-5). It changes no task state itself; the service acts on its answers.
class HeartbeatMonitor {
 public:
  explicit HeartbeatMonitor(absl::Duration timeout) : timeout_(timeout) {}

  absl::Duration timeout() const { return timeout_; }

  // Safe under the service's shared lock: the timestamp is atomic.
  static void Record(TaskRecord& task, absl::Time now) {
    task.last_heartbeat_ns.store(absl::ToUnixNanos(now));
  }
  // A task that just disconnected may still have a heartbeat or a poll in flight.
  bool InGrace(const TaskRecord& task, absl::Time now) const;

  // Connected tasks whose last heartbeat is more than the timeout before `now`.
  std::vector<TaskName> FindStale(const TaskTable& tasks, absl::Time now) const;
  // The error a stale task goes into; OK when `task` is not (or no longer) stale.
  absl::Status StaleError(const TaskRecord& task, absl::Time now) const;

  // True when a check is due at `now`, and then schedules the next one. Only the thread
  // that runs the timers calls these two.
  bool CheckDue(absl::Time now);
  absl::Time next_check() const { return next_check_; }

 private:
  const absl::Duration timeout_;
  absl::Time next_check_ = absl::InfinitePast();
};

}  // namespace cohort
