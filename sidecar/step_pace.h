// StepPace: how long a task's steps take it, not counting the time it waits for its peers.
// In a gang that synchronises every step, every task moves at the slowest one's pace, so step
// rates alone cannot tell a straggler from the tasks it holds back: those wait for it at the
// step's barrier, it does not. StepPace samples, at each of the sidecar's polls, the step the
// workload last reported and whether it was waiting at a barrier of the coordinator; over a
// window, the busy seconds per step are the window's time less the share of samples spent
// waiting, over the steps it advanced. Not thread-safe (ProgressWatch owns it); no clock of
// its own.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "absl/time/time.h"

namespace cohort {

class StepPace {
 public:
  // Samples older than this are dropped.
  explicit StepPace(absl::Duration window = absl::Seconds(60)) : window_(window) {}

  // At `at` the workload's last step was `step` (none: no report yet), and it was or was not
  // `waiting` at a barrier.
  void Sample(absl::Time at, std::optional<int64_t> step, bool waiting);
  // Busy seconds per step over the window; none before it has seen kMinSteps steps advance
  // (fewer say more about when the samples fell than about the steps).
  std::optional<double> BusySecondsPerStep() const;
  static constexpr int64_t kMinSteps = 5;

 private:
  struct Point {
    absl::Time at;
    std::optional<int64_t> step;
    bool waiting = false;
  };
  const absl::Duration window_;
  std::deque<Point> points_;
};

}  // namespace cohort
