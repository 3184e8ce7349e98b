#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort {

// Deadlines of the core (barrier timeouts, register and shutdown barriers, timed key-value
// gets). The core never sleeps: whoever drives it calls RunDue(now) at NextDeadline(),
// a thread in the server and the test itself in unit tests.
class TimerQueue {
 public:
  using TimerId = uint64_t;

  TimerId Schedule(absl::Time when, std::function<void()> fn);
  void Cancel(TimerId id);
  // Runs, outside the lock, every timer due at `now`.
  void RunDue(absl::Time now);
  absl::Time NextDeadline() const;
  // Called (outside the lock) when a timer is scheduled before the previous next deadline.
  void SetWakeup(std::function<void()> wakeup);

 private:
  mutable absl::Mutex mu_;
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TimerId, absl::Time> when_ ABSL_GUARDED_BY(mu_);
  std::function<void()> wakeup_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
