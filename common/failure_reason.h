#pragma once
// Why a task is in error, as a type rather than text: set by the coordinator where it puts a
// task in error (or taken from the reporter, who may say), kept in its durable state, shown
// in its cluster snapshot, and matched by the operator's failure rules. Header-only, with no
// dependency beyond abseil's strings, so the operator's pure plan may use it.
//
// The numbers are the wire's and the state files': cohort.v1.FailureReason (coordinator
// snapshots), ReportErrorToServiceRequest.cohort_failure_reason (a cohort client's report) and
// cohort.state.v1.TaskChanged.reason. Never renumber; add new reasons at the end.
//
// Names are stable snake_case words ("heartbeat_timeout"): what cohortctl prints and
// ParseFailureReason reads, and the proto enum's value names without FAILURE_REASON_, in
// lower case.

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace cohort {

enum class FailureReason : int32_t {
  kUnspecified = 0,       // not said: a report that names none, or state from before reasons
  kReportedError = 1,     // the task reported an error of its own (ReportErrorToService)
  kWorkloadExit = 2,      // a sidecar: its workload container exited
  kHeartbeatTimeout = 3,  // the coordinator heard no heartbeat within the timeout
  kHang = 4,              // the task makes no progress (a sidecar's watch, jaxlib's watchdog)
  kGpuFault = 5,          // a sidecar: its GPU health check failed
  kTaskRestarted = 6,     // the task came back with a new incarnation while connected
  kRegisterTimeout = 7,   // the register barrier timed out
  kShutdownTimeout = 8,   // the task never reached the shutdown barrier before it timed out
};

inline constexpr FailureReason kLastFailureReason = FailureReason::kShutdownTimeout;

inline const char* FailureReasonName(FailureReason reason) {
  switch (reason) {
    case FailureReason::kUnspecified:
      return "unspecified";
    case FailureReason::kReportedError:
      return "reported_error";
    case FailureReason::kWorkloadExit:
      return "workload_exit";
    case FailureReason::kHeartbeatTimeout:
      return "heartbeat_timeout";
    case FailureReason::kHang:
      return "hang";
    case FailureReason::kGpuFault:
      return "gpu_fault";
    case FailureReason::kTaskRestarted:
      return "task_restarted";
    case FailureReason::kRegisterTimeout:
      return "register_timeout";
    case FailureReason::kShutdownTimeout:
      return "shutdown_timeout";
  }
  return "unknown";
}

// The reason of a wire or state number; nullopt for a number no reason has.
inline std::optional<FailureReason> FailureReasonFromNumber(int64_t number) {
  if (number < 0 || number > static_cast<int64_t>(kLastFailureReason)) return std::nullopt;
  return static_cast<FailureReason>(number);
}

// The reason FailureReasonName gives `name`; nullopt for any other text.
inline std::optional<FailureReason> ParseFailureReason(absl::string_view name) {
  for (int32_t n = 0; n <= static_cast<int32_t>(kLastFailureReason); ++n) {
    auto reason = static_cast<FailureReason>(n);
    if (name == FailureReasonName(reason)) return reason;
  }
  return std::nullopt;
}

}  // namespace cohort
