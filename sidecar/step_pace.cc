#include "sidecar/step_pace.h"

#include <algorithm>

namespace cohort {

void StepPace::Sample(absl::Time at, std::optional<int64_t> step, bool waiting) {
  // A step that goes back is a restarted workload's: its pace starts anew.
  if (step && !points_.empty() && points_.back().step && *step < *points_.back().step) {
    points_.clear();
  }
  points_.push_back({at, step, waiting});
  while (points_.size() > 1 && points_.front().at < at - window_) points_.pop_front();
}

std::optional<double> StepPace::BusySecondsPerStep() const {
  auto first = std::find_if(points_.begin(), points_.end(),
                            [](const Point& p) { return p.step.has_value(); });
  if (first == points_.end()) return std::nullopt;
  const Point& last = points_.back();
  const int64_t steps = *last.step - *first->step;
  if (steps < kMinSteps) return std::nullopt;
  // The samples from the first step seen on: each stands for an equal share of the time.
  int64_t samples = 0, waiting = 0;
  for (auto it = first; it != points_.end(); ++it) {
    ++samples;
    if (it->waiting) ++waiting;
  }
  const double span = absl::ToDoubleSeconds(last.at - first->at);
  const double busy = span * (1.0 - static_cast<double>(waiting) / static_cast<double>(samples));
  return busy / static_cast<double>(steps);
}

}  // namespace cohort
