#include "common/crash_report.h"

#include <csignal>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/synchronization/mutex.h"

namespace cohort {

void InstallCrashReport(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  absl::FailureSignalHandlerOptions options;
  options.call_previous_handler = true;
  absl::InstallFailureSignalHandler(options);
  // abseil also reports SIGTERM, which is how Kubernetes stops every pod: no stack for that.
  std::signal(SIGTERM, SIG_DFL);
}

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace cohort
