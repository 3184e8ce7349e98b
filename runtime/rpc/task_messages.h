#pragma once
// The task runtime's wire messages <-> the scheduler's own types, and statuses to gRPC.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/runtime/v1/graph.pb.h"
#include "cohort/runtime/v1/messages.pb.h"
#include "grpcpp/grpcpp.h"
#include "runtime/scheduler/task_scheduler.h"

namespace cohort::runtime {

// Metadata that numbers a client's calls, "WORKER/NUMBER": a call sent again with the same
// number (after a restart of the coordinator cut off its answer) takes effect once. Read for
// SubmitTask, PutObj, IncrementRefCount, DecrementRefCount and AddContainedObjectIDs.
inline constexpr char kCallMetadata[] = "cohort-call";

// A submitted task: each argument an object id or a value.
TaskSpec ToTaskSpec(const cohort::runtime::v1::Task& task);
// A task as a worker receives it: values parsed back into Obj. A value that does not parse
// (it parsed when it came in) is an internal error.
absl::StatusOr<cohort::runtime::v1::Task> ToTaskMessage(const TaskSpec& spec);

void FillSchedulerInfo(const SchedulerInfoView& view, cohort::runtime::v1::SchedulerInfoReply* out);
void FillTaskInfo(const TaskInfoView& view, cohort::runtime::v1::TaskInfoReply* out);

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace cohort::runtime
