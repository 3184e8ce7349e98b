#pragma once

#include <functional>
#include <regex>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort {

// Notices the end of the workload's main process as soon as it happens, so the sidecar can
// tell the coordinator at once instead of everyone waiting for a heartbeat timeout.
//   kProcess: the pod shares its process namespace; the workload is the first process whose
//             command line matches a pattern, and a pidfd wakes us the moment it exits.
//   kFile:    the workload touches a file; it is gone when the file is removed after it was
//             seen, or goes stale for longer than the timeout.
//   kHttp:    the workload calls the sidecar's POST /v1/alive; same staleness rule.
//   kNone:    no watch (the heartbeat timeout still applies).
// The callback runs on the watch's thread, once per exit; in kProcess mode the watch then
// looks for the process again (a restarted container).
class WorkloadWatch {
 public:
  enum class Mode { kNone, kProcess, kFile, kHttp };
  struct Options {
    Mode mode = Mode::kNone;
    std::string process_pattern;  // kProcess: ECMAScript regex over "argv0 argv1 ..."
    std::string liveness_file;    // kFile
    absl::Duration stale_after = absl::Seconds(10);  // kFile, kHttp
    std::string proc_dir = "/proc";
    absl::Duration poll_interval = absl::Milliseconds(200);
  };
  using ExitCallback = std::function<void(const std::string& what)>;

  WorkloadWatch(Options options, ExitCallback on_exit);
  ~WorkloadWatch();
  WorkloadWatch(const WorkloadWatch&) = delete;
  WorkloadWatch& operator=(const WorkloadWatch&) = delete;

  static bool ParseMode(const std::string& text, Mode* mode);
  void Start();
  void Stop();
  // kHttp: the workload said it is alive.
  void Ping();
  // What the watch sees now, for /v1/cluster and logs.
  std::string Describe() const;
  // kProcess: the workload's process being watched; -1 while there is none (or another mode).
  int pid() const;

 private:
  void RunProcess();
  void RunStaleness();
  // The pid of the first process (other than ours) whose command line matches, or -1.
  int FindProcess(std::string* command) const;
  bool SleepUnlessStopped(absl::Duration d);

  const Options options_;
  const ExitCallback on_exit_;
  std::regex pattern_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_ping_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string state_ ABSL_GUARDED_BY(mu_) = "not started";
  int pid_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace cohort
