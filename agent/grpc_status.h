#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/status_payloads.h"
#include "grpcpp/support/status.h"

namespace cohort {

// A gRPC status as an absl::Status, with the coordinator's payloads attached.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The coordinator itself said no (the status has a CoordinationServiceError payload), as
// opposed to the call not reaching it.
bool IsCoordinationServiceError(const absl::Status& status);

struct ErrorSource {
  bool is_reported_error = false;
  std::string job;
  int32_t task_id = -1;  // -1: none named
};
std::optional<ErrorSource> GetErrorSource(const absl::Status& status);
// The counter of the barrier instance an error is about.
std::optional<int64_t> GetBarrierCounter(const absl::Status& status);

// A status for a log line or a message: "CODE: message", with the task its
// CoordinationServiceError payload names (when the message does not already) and its barrier
// instance, instead of absl::Status::ToString()'s raw payload bytes.
std::string DescribeStatus(const absl::Status& status);

}  // namespace cohort
