#include "sidecar/progress_watch.h"

#include <sys/stat.h>

#include <fstream>
#include <utility>

#include "spdlog/spdlog.h"

namespace cohort {
namespace {

// The step is on the file's last lines: a workload that appends never makes us read much.
constexpr std::streamoff kProgressTailBytes = 4096;

ProgressTracker::Options TrackerOptions(const ProgressWatch::Options& options) {
  ProgressTracker::Options tracker;
  tracker.timeout = options.timeout;
  return tracker;
}

}  // namespace

bool ProgressWatch::FileStamp::operator==(const FileStamp& other) const {
  return exists == other.exists && inode == other.inode && size == other.size &&
         modified_ns == other.modified_ns;
}

ProgressWatch::ProgressWatch(Options options, Sources sources, const Clock& clock,
                             StallCallback on_stall)
    : options_(std::move(options)),
      sources_(std::move(sources)),
      clock_(clock),
      on_stall_(std::move(on_stall)),
      tracker_(TrackerOptions(options_), clock.Now()),
      pace_(options_.pace_window) {}

ProgressWatch::~ProgressWatch() { Stop(); }

void ProgressWatch::Start() {
  {
    absl::MutexLock lock(&mu_);
    tracker_ = ProgressTracker(TrackerOptions(options_), clock_.Now());
    // A file left by an earlier run of the container is where counting starts, not progress.
    last_stamp_ = StatFile();
  }
  thread_ = std::thread([this] { Run(); });
}

void ProgressWatch::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ProgressWatch::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped_), options_.poll_interval)) return;
    }
    Poll();
  }
}

ProgressWatch::FileStamp ProgressWatch::StatFile() const {
  FileStamp stamp;
  struct stat st {};
  if (options_.progress_file.empty() || stat(options_.progress_file.c_str(), &st) != 0) {
    return stamp;
  }
  stamp.exists = true;
  stamp.inode = st.st_ino;
  stamp.size = st.st_size;
  stamp.modified_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return stamp;
}

std::optional<int64_t> ProgressWatch::ReadStep() const {
  std::ifstream in(options_.progress_file, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;
  std::streamoff from = size > kProgressTailBytes ? size - kProgressTailBytes : 0;
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<size_t>(in.gcount()));
  return ParseProgressStep(tail);
}

void ProgressWatch::Poll() {
  const absl::Time now = clock_.Now();
  // Read outside the lock: the file and the sources may be slow.
  FileStamp stamp = StatFile();
  std::optional<int64_t> step;
  if (stamp.exists) step = ReadStep();
  std::optional<uint64_t> calls;
  if (sources_.finished_calls) calls = sources_.finished_calls();
  const bool waiting = sources_.waiting_calls && sources_.waiting_calls() > 0;
  std::optional<GpuActivityReading> activity;
  if (sources_.gpu_activity) activity = sources_.gpu_activity();

  std::string stall;
  std::optional<TaskProgress> changed;
  {
    absl::MutexLock lock(&mu_);
    if (stamp.exists && !(stamp == last_stamp_)) tracker_.Reported(now, step);
    last_stamp_ = stamp;
    if (calls) tracker_.CoordinationCalls(now, *calls);
    if (activity) tracker_.GpuActivity(now, *activity);
    if (waiting) tracker_.WaitingOnPeers(now);
    pace_.Sample(now, tracker_.step(), waiting);
    TaskProgress progress{tracker_.step(), pace_.BusySecondsPerStep()};
    if (!(progress == told_)) changed = told_ = progress;
    if (!tracker_.Stalled(now)) {
      stall_told_ = false;
    } else if (!stall_told_) {
      stall_told_ = true;
      stall = tracker_.Describe(now);
    }
  }
  if (changed && on_progress_) on_progress_(*changed);
  if (!stall.empty()) {
    spdlog::warn("the workload is stalled: {}", stall);
    if (on_stall_) on_stall_(stall);
  }
}

TaskProgress ProgressWatch::Progress() const {
  absl::MutexLock lock(&mu_);
  return {tracker_.step(), pace_.BusySecondsPerStep()};
}

std::optional<int64_t> ProgressWatch::step() const {
  absl::MutexLock lock(&mu_);
  return tracker_.step();
}

absl::Duration ProgressWatch::SinceProgress() const {
  absl::MutexLock lock(&mu_);
  return tracker_.SinceProgress(clock_.Now());
}

void ProgressWatch::RegisterMetrics(MetricsRegistry* registry) {
  registry->AddCollector([this] { return CollectMetrics(); });
}

std::vector<CollectedFamily> ProgressWatch::CollectMetrics() const {
  CollectedFamily step{
      "cohort_task_step", "The last step the workload reported in its progress file.", "gauge", {}};
  CollectedFamily since{"cohort_task_seconds_since_progress",
                        "Seconds since the task last showed progress (a report, a finished "
                        "coordination call, GPU activity: SM activity where NVML has it, else "
                        "utilisation).",
                        "gauge",
                        {}};
  CollectedFamily busy{"cohort_task_busy_seconds_per_step",
                       "Seconds each of the task's recent steps took it, not counting its waits "
                       "at barriers for its peers (over the last minute; absent before two "
                       "steps).",
                       "gauge",
                       {}};
  absl::MutexLock lock(&mu_);
  if (tracker_.step()) step.samples.push_back({{}, static_cast<double>(*tracker_.step())});
  if (auto b = pace_.BusySecondsPerStep()) busy.samples.push_back({{}, *b});
  since.samples.push_back({{}, absl::ToDoubleSeconds(tracker_.SinceProgress(clock_.Now()))});
  return {step, since, busy};
}

}  // namespace cohort
