#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/failure_reason.h"
#include "service/core/task_name.h"

namespace cohort {

// The core describes errors with absl::Status plus two neutral payloads. rpc/ turns them
// into each protocol's payload messages in one place (status_translation.cc).

// Where an error came from. Every error the service returns is a service error. A
// "reported" error is one a task reported itself (ReportErrorToService); an error the service
// detected on a task's behalf, such as a heartbeat timeout, names the task as its source but
// is not reported, as in upstream TSL.
struct ServiceErrorInfo {
  bool is_reported_error = false;
  std::optional<TaskName> source;
};

struct BarrierErrorInfo {
  std::string barrier_id;
  int64_t counter = 0;
};

absl::Status WithServiceError(absl::Status status, const ServiceErrorInfo& info);
std::optional<ServiceErrorInfo> GetServiceError(const absl::Status& status);
// An error the service returns about a request, with no task as its source.
inline absl::Status ServiceError(absl::Status status) {
  return WithServiceError(std::move(status), {});
}

absl::Status WithBarrierError(absl::Status status, const BarrierErrorInfo& info);
std::optional<BarrierErrorInfo> GetBarrierError(const absl::Status& status);

// A copy of `status` with `prefix` in front of its message, payloads kept.
absl::Status Annotate(const absl::Status& status, absl::string_view prefix);

// The reason of an error a task reported without saying why: kHang for jaxlib's report of a
// GPU execution its watchdog gave up on, kReportedError for anything else.
FailureReason ReportedErrorReason(const absl::Status& error);

// "a, b and 3 more": tasks named in an error message, at most `limit` of them by name.
std::string JoinTaskNames(const std::vector<TaskName>& tasks, size_t limit = 10);

}  // namespace cohort
