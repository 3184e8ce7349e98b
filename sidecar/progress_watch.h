// ProgressWatch: the sidecar's view of its task's progress, kept on a thread of its own. Every
// poll it reads the workload's progress file, the proxy's count of the workload's finished
// coordination calls and the pod's GPUs' activity, and gives them to a ProgressTracker; it
// serves cohort_task_step and cohort_task_seconds_since_progress, and with a timeout tells
// `on_stall` once per stall (again only after progress was seen since).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/task_progress.h"
#include "sidecar/progress_tracker.h"
#include "sidecar/step_pace.h"

namespace cohort {

class ProgressWatch {
 public:
  struct Options {
    // The file the workload writes at each step ($COHORT_PROGRESS_FILE); empty: none.
    std::string progress_file;
    // --progress-timeout: no progress for this long is a stall. Zero: no stall is told.
    absl::Duration timeout = absl::ZeroDuration();
    // Often enough to see what share of a sub-second step is spent waiting at its barrier.
    absl::Duration poll_interval = absl::Milliseconds(250);
    // The window of the busy seconds per step (StepPace).
    absl::Duration pace_window = absl::Seconds(60);
  };
  // Where the other signs come from; a null function: no such sign.
  struct Sources {
    std::function<uint64_t()> finished_calls;
    // The pod's calls open now that wait on its peers (barriers).
    std::function<uint64_t()> waiting_calls;
    // How busy the pod's GPUs are (GpuWatch::BusiestActivity); nullopt while there is no
    // sample.
    std::function<std::optional<GpuActivityReading>()> gpu_activity;
  };
  // Runs on the watch's thread (or Poll's caller) with the tracker's description.
  using StallCallback = std::function<void(const std::string& description)>;
  // Runs on the watch's thread (or Poll's caller) when the task's progress changed.
  using ProgressCallback = std::function<void(const TaskProgress& progress)>;

  ProgressWatch(Options options, Sources sources, const Clock& clock, StallCallback on_stall);
  ~ProgressWatch();
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  // cohort_task_step, cohort_task_seconds_since_progress, cohort_task_busy_seconds_per_step.
  void RegisterMetrics(MetricsRegistry* registry);
  // Before Start: told each change of the step or the busy seconds per step.
  void OnProgress(ProgressCallback on_progress) { on_progress_ = std::move(on_progress); }
  // The workload starts now: the first stall is timed from here. Polls on a thread of its own.
  void Start();
  void Stop();
  // One poll: reads every sign and judges. The thread's body; tests call it with a manual
  // clock.
  void Poll();

  std::optional<int64_t> step() const;
  // The last step and the busy seconds per step (StepPace) now.
  TaskProgress Progress() const;
  absl::Duration SinceProgress() const;

 private:
  // What a stat of the progress file saw: a write changes one of them.
  struct FileStamp {
    bool exists = false;
    ino_t inode = 0;
    int64_t size = 0;
    int64_t modified_ns = 0;
    bool operator==(const FileStamp& other) const;
  };
  FileStamp StatFile() const;
  std::optional<int64_t> ReadStep() const;
  void Run();
  std::vector<CollectedFamily> CollectMetrics() const;

  const Options options_;
  const Sources sources_;
  const Clock& clock_;
  const StallCallback on_stall_;
  ProgressCallback on_progress_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  ProgressTracker tracker_ ABSL_GUARDED_BY(mu_);
  StepPace pace_ ABSL_GUARDED_BY(mu_);
  TaskProgress told_ ABSL_GUARDED_BY(mu_);  // what on_progress_ was last given
  FileStamp last_stamp_ ABSL_GUARDED_BY(mu_);
  bool stall_told_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort
