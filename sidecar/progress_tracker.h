// ProgressTracker: whether this pod's task is still making progress, from what the sidecar
// sees of it. Three signs, in the order they are trusted:
//   - the workload's own report: a write to its progress file ($COHORT_PROGRESS_FILE), with
//     the step number when it writes one;
//   - its coordination calls through the pod's proxy that finished (a barrier passed, a key
//     set or read), not its heartbeats or error polls, which a stuck process keeps sending;
//   - its GPUs' activity (the busiest GPU's utilisation).
// A workload waiting in a coordination call on its peers (a barrier) is not
// stalled: the peer it waits for is the one to blame, and is judged by its own sidecar.
// A workload that has reported once is judged by its reports alone from then on: a process
// stuck in a collective keeps its GPUs busy and may keep calling, but writes no new step.
// Not thread-safe (the sidecar's progress loop owns it); it keeps no clock of its own: every
// call says when.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace cohort {

class ProgressTracker {
 public:
  enum class Sign { kNone, kReport, kCoordinationCall, kGpuActivity, kWaitingOnPeers };
  static const char* SignName(Sign sign);

  struct Options {
    // No progress for this long while the workload is alive is a hang. Zero: never.
    absl::Duration timeout = absl::ZeroDuration();
    // GPU activity at or above this fraction (0..1) counts as progress.
    double gpu_active_threshold = 0.05;
  };

  // `start`: when the workload was first seen; the first stall is timed from it.
  ProgressTracker(Options options, absl::Time start);

  // The progress file changed at `at`; `step` when the workload wrote one.
  void Reported(absl::Time at, std::optional<int64_t> step);
  // The proxy's count of the workload's finished coordination calls, read at `at`.
  void CoordinationCalls(absl::Time at, uint64_t finished);
  // The busiest of the pod's GPUs at `at` (0..1).
  void GpuActivity(absl::Time at, double activity);
  // At `at` the workload waits in a coordination call that others must answer (whether or
  // not it has reported before).
  void WaitingOnPeers(absl::Time at);

  // The last step reported (none before the first report that had one).
  std::optional<int64_t> step() const { return step_; }
  Sign last_sign() const { return last_sign_; }
  absl::Time last_progress() const { return last_progress_; }
  absl::Duration SinceProgress(absl::Time now) const;
  // No progress for the timeout at `now`.
  bool Stalled(absl::Time now) const;
  // What a hang report says: "no progress for 5m0s (last: step 145, reported 5m0s ago)".
  std::string Describe(absl::Time now) const;

 private:
  void Progress(absl::Time at, Sign sign);

  Options options_;  // not const: a tracker is assigned anew when the workload starts
  absl::Time last_progress_;
  Sign last_sign_ = Sign::kNone;
  bool reports_seen_ = false;
  std::optional<int64_t> step_;
  std::optional<uint64_t> calls_;
};

// The step in a progress file's content: the last line that is a whole number (blank
// lines and spaces around it ignored). None when no line is: any write still counts.
std::optional<int64_t> ParseProgressStep(const std::string& content);

}  // namespace cohort
