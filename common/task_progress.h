#pragma once
// A task's progress as its sidecar measures it: the workload's last step, and its busy seconds
// per step (compute time per step over a recent window, time spent waiting at barriers on its
// peers left out, so that the slow task shows and not the ones waiting for it). It rides on the
// task's heartbeats to the coordinator (HeartbeatRequest.cohort_progress), is shown in the
// cluster snapshot, and lets the operator compare a gang's tasks to find stragglers.
// Header-only, with no dependency beyond the standard library, so the operator's pure plan
// may use it.

#include <cmath>
#include <cstdint>
#include <optional>

namespace cohort {

struct TaskProgress {
  std::optional<int64_t> step;
  std::optional<double> busy_seconds_per_step;

  bool operator==(const TaskProgress& other) const {
    return step == other.step && busy_seconds_per_step == other.busy_seconds_per_step;
  }
  bool operator!=(const TaskProgress& other) const { return !(*this == other); }
  // Nothing measured yet: a heartbeat that carries no progress.
  bool empty() const { return !step && !busy_seconds_per_step; }
};

// What a coordinator accepts: a step of 0 or more, and busy seconds per step that are finite
// and not negative. Anything else is refused with the heartbeat that carried it.
inline bool IsValidTaskProgress(const TaskProgress& progress) {
  if (progress.step && *progress.step < 0) return false;
  if (progress.busy_seconds_per_step) {
    const double busy = *progress.busy_seconds_per_step;
    if (!std::isfinite(busy) || busy < 0) return false;
  }
  return true;
}

}  // namespace cohort
