#include "service/rpc/status_translation.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "tensorflow/coordination_service.pb.h"
#include "tensorflow/grpc_payload.pb.h"
#include "xla/coordination_service.pb.h"

namespace cohort {
namespace {

constexpr char kMismatchPayload[] = "cohort.dev/service-mismatch";

// Bytes gRPC sends as themselves in the grpc-message trailer; any other is sent as %XX.
bool SentAsIs(unsigned char c) { return c >= 0x20 && c <= 0x7E && c != '%'; }

}  // namespace

std::string CutMessage(absl::string_view text) {
  size_t sent = 0, cut = 0;
  while (cut < text.size()) {
    // Whole UTF-8 sequences only: a lead byte and its continuation bytes.
    size_t end = cut + 1;
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    size_t cost = 0;
    for (size_t i = cut; i < end; ++i)
      cost += SentAsIs(static_cast<unsigned char>(text[i])) ? 1 : 3;
    if (sent + cost > kMaxErrorMessageBytes) break;
    sent += cost;
    cut = end;
  }
  return std::string(text.substr(0, cut));
}

const char* ProtocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kTensorflow:
      return "tensorflow";
    case Protocol::kXla:
      return "xla";
    case Protocol::kDistributedRuntime:
      return "xla_distributed";
    case Protocol::kCohort:
      return "cohort";
  }
  return "unknown";
}

absl::Status ServiceMismatchError(uint64_t ours, uint64_t theirs) {
  absl::Status status = absl::InternalError(absl::StrCat(
      "the request names coordination service incarnation ", theirs, " but this service is ", ours,
      ": the coordinator restarted and lost the job, so this task must stop"));
  status.SetPayload(kMismatchPayload, absl::Cord(absl::StrCat(ours)));
  return WithServiceError(status, {});
}

grpc::Status ToGrpcStatus(const absl::Status& status, Protocol protocol) {
  if (status.ok()) return grpc::Status::OK;
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  auto& payloads = *container.mutable_payloads();

  ServiceErrorInfo info = GetServiceError(status).value_or(ServiceErrorInfo{});
  if (protocol == Protocol::kXla) {
    xla::coordination::CoordinationServiceError error;
    error.set_is_reported_error(info.is_reported_error);
    if (info.source) error.set_source_task_id(info.source->id);
    payloads[kCoordinationServiceErrorUrl] = error.SerializeAsString();
  } else {
    tensorflow::CoordinationServiceError error;
    error.set_is_reported_error(info.is_reported_error);
    if (info.source) {
      error.mutable_source_task()->set_job_name(info.source->job);
      error.mutable_source_task()->set_task_id(info.source->id);
    }
    payloads[kCoordinationServiceErrorUrl] = error.SerializeAsString();
  }
  if (auto barrier = GetBarrierError(status)) {
    tensorflow::BarrierError error;  // same fields in both protocols
    // An id too long for the trailers is left out, so the client still gets the error.
    if (barrier->barrier_id.size() <= kMaxPayloadBarrierIdBytes) {
      error.set_barrier_id(barrier->barrier_id);
    }
    error.set_counter(barrier->counter);
    payloads[kBarrierErrorUrl] = error.SerializeAsString();
  }
  if (auto mismatch = status.GetPayload(kMismatchPayload)) {
    xla::coordination::ServiceMismatchError error;
    uint64_t incarnation = 0;
    if (absl::SimpleAtoi(std::string(*mismatch), &incarnation)) {
      error.set_service_incarnation(incarnation);
    }
    payloads[kServiceMismatchErrorUrl] = error.SerializeAsString();
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), CutMessage(status.message()),
                      container.SerializeAsString());
}

absl::Status CoreStatusFromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  if (status.error_details().empty() || !container.ParseFromString(status.error_details())) {
    return out;
  }
  const auto& payloads = container.payloads();
  if (auto it = payloads.find(kCoordinationServiceErrorUrl); it != payloads.end()) {
    tensorflow::CoordinationServiceError error;
    error.ParseFromString(it->second);
    ServiceErrorInfo info;
    info.is_reported_error = error.is_reported_error();
    if (error.has_source_task()) {
      info.source = TaskName{error.source_task().job_name(), error.source_task().task_id()};
    }
    out = WithServiceError(out, info);
  }
  if (auto it = payloads.find(kBarrierErrorUrl); it != payloads.end()) {
    tensorflow::BarrierError error;
    error.ParseFromString(it->second);
    out = WithBarrierError(out, {error.barrier_id(), error.counter()});
  }
  if (auto it = payloads.find(kServiceMismatchErrorUrl); it != payloads.end()) {
    xla::coordination::ServiceMismatchError error;
    error.ParseFromString(it->second);
    out.SetPayload(kMismatchPayload, absl::Cord(absl::StrCat(error.service_incarnation())));
  }
  return out;
}

}  // namespace cohort
