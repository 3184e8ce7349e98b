// ProgressTracker: whether this pod's task is still making progress, from what the sidecar
// sees of it. Three signs, in the order they are trusted:
//   - the workload's own report: a write to its progress file ($COHORT_PROGRESS_FILE), with
//     the step number when it writes one;
//   - its coordination calls through the pod's proxy that finished (a barrier passed, a key
//     set or read), not its heartbeats or error polls, which a stuck process keeps sending;
//   - its GPUs' activity: SM activity where the GPUs have it (NVML's GPM, Hopper and later),
//     else utilisation (GpuActivityReading).
// A workload waiting in a coordination call on its peers (a barrier) is not
// stalled: the peer it waits for is the one to blame, and is judged by its own sidecar.
// A workload that has reported once is judged by its reports alone from then on: a process
// stuck in a collective keeps its GPUs busy and may keep calling, but writes no new step.
// One that never reports is judged by its GPUs too, and there utilisation is a weak sign: a
// collective spinning on a lost peer keeps it at 100 %. SM activity is not fooled so: the
// spinning kernel holds only its channels' SMs.
// Not thread-safe (the sidecar's progress loop owns it); it keeps no clock of its own: every
// call says when.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace cohort {

// How busy the pod's GPUs were in their last sample, by the best measure they have.
struct GpuActivityReading {
  enum class Measure {
    kUtilization,  // NVML utilisation: the share of the time any kernel ran
    kSmActivity,   // NVML GPM's SM activity: the share of the GPU's SMs that were busy
  };
  Measure measure = Measure::kUtilization;
  double value = 0;  // 0..1
};

class ProgressTracker {
 public:
  enum class Sign {
    kNone,
    kReport,
    kCoordinationCall,
    kGpuUtilization,
    kGpuSmActivity,
    kWaitingOnPeers,
  };
  static const char* SignName(Sign sign);

  struct Options {
    // No progress for this long while the workload is alive is a hang. Zero: never.
    absl::Duration timeout = absl::ZeroDuration();
    // GPU utilisation at or above this fraction (0..1) counts as progress: any kernel running.
    // A kernel that spins counts too; utilisation is the measure only where there is no other.
    double gpu_utilization_threshold = 0.05;
    // SM activity at or above this fraction (0..1) counts as progress. A collective (NCCL)
    // spinning on a lost peer runs one block per channel, each on an SM of its own, and uses
    // at most 32 channels on current GPUs (unless NCCL_MAX_NCHANNELS says more): 24 % of the
    // SMs of an H100 or H200 SXM (132), 22 % of a B200 (148), 28 % of an H100 PCIe (114), and
    // far fewer channels over PCIe. Half the SMs is above that, and above two such collectives
    // spinning at once on the SXM GPUs, while a step at work fills every SM with its matrix
    // products. A workload that keeps fewer than half the SMs busy in every sample period
    // (one mostly waiting on communication) does not progress by this sign: it should report
    // its steps (--progress-file), which then judge it alone.
    double gpu_sm_activity_threshold = 0.5;
  };

  // `start`: when the workload was first seen; the first stall is timed from it.
  ProgressTracker(Options options, absl::Time start);

  // The progress file changed at `at`; `step` when the workload wrote one.
  void Reported(absl::Time at, std::optional<int64_t> step);
  // The proxy's count of the workload's finished coordination calls, read at `at`.
  void CoordinationCalls(absl::Time at, uint64_t finished);
  // How busy the pod's GPUs were at `at`: progress when at or above the measure's threshold.
  void GpuActivity(absl::Time at, const GpuActivityReading& activity);
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
