#include "agent/grpc_status.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/coordination_service.pb.h"
#include "tensorflow/grpc_payload.pb.h"

namespace cohort {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  if (!status.error_details().empty() && container.ParseFromString(status.error_details())) {
    for (const auto& [key, value] : container.payloads()) out.SetPayload(key, absl::Cord(value));
  }
  return out;
}

bool IsCoordinationServiceError(const absl::Status& status) {
  return status.GetPayload(kCoordinationServiceErrorUrl).has_value();
}

std::optional<ErrorSource> GetErrorSource(const absl::Status& status) {
  auto payload = status.GetPayload(kCoordinationServiceErrorUrl);
  if (!payload) return std::nullopt;
  tensorflow::CoordinationServiceError error;
  if (!error.ParseFromString(std::string(*payload))) return std::nullopt;
  ErrorSource source;
  source.is_reported_error = error.is_reported_error();
  if (error.has_source_task()) {
    source.job = error.source_task().job_name();
    source.task_id = error.source_task().task_id();
  }
  return source;
}

std::optional<int64_t> GetBarrierCounter(const absl::Status& status) {
  auto payload = status.GetPayload(kBarrierErrorUrl);
  if (!payload) return std::nullopt;
  tensorflow::BarrierError error;
  if (!error.ParseFromString(std::string(*payload))) return std::nullopt;
  return error.counter();
}

std::string DescribeStatus(const absl::Status& status) {
  if (status.ok()) return "OK";
  std::string text = absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
  if (auto source = GetErrorSource(status); source && !source->job.empty()) {
    const std::string task = absl::StrCat("/job:", source->job, "/task:", source->task_id);
    if (!absl::StrContains(status.message(), task)) {
      absl::StrAppend(&text, " (", source->is_reported_error ? "reported by " : "from ", task, ")");
    }
  }
  if (auto counter = GetBarrierCounter(status)) {
    absl::StrAppend(&text, " (barrier instance ", *counter, ")");
  }
  return text;
}

}  // namespace cohort
