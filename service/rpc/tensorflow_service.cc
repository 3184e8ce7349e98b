#include "service/rpc/tensorflow_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/task_progress.h"
#include "service/rpc/coordination_requests.h"
#include "service/rpc/device_info.h"

namespace cohort {

using Ctx = grpc::CallbackServerContext;

RpcCall* TensorflowCoordinationService::NewCall(Ctx* ctx, const char* method) {
  return new RpcCall(backend_, metrics_, Protocol::kTensorflow, method, ctx, auth_);
}

absl::StatusOr<TaskName> TensorflowCoordinationService::Resolve(
    const tensorflow::CoordinatedTask& task) const {
  return backend_->ResolveTask(task.job_name(), task.task_id());
}

absl::StatusOr<TaskName> TensorflowCoordinationService::ResolveLegacy(
    bool has_current, const tensorflow::CoordinatedTask& current, const std::string& job,
    int32_t task) const {
  // The current field wins (jaxlib 0.9.1 sends it with an empty job name); old agents send
  // the legacy job and task fields instead.
  if (has_current) return Resolve(current);
  if (!job.empty()) return backend_->ResolveTask(job, task);
  return absl::InvalidArgumentError("the request names no task");
}

absl::StatusOr<TaskName> TensorflowCoordinationService::Resolve(
    bool present, const tensorflow::CoordinatedTask& task, const char* field) const {
  if (!present) {
    return absl::InvalidArgumentError(absl::StrCat("the request names no task (", field, ")"));
  }
  return Resolve(task);
}

void TensorflowCoordinationService::FillStateInfo(const TaskStateInfo& info,
                                                  tensorflow::CoordinatedTaskStateInfo* out) {
  out->mutable_task()->set_job_name(info.task.job);
  out->mutable_task()->set_task_id(info.task.id);
  requests::FillTaskState(info, out,
                          [](const TaskName& source, tensorflow::CoordinationServiceError* error) {
                            error->mutable_source_task()->set_job_name(source.job);
                            error->mutable_source_task()->set_task_id(source.id);
                          });
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::Register(
    Ctx* ctx, const char* method, const tensorflow::RegisterTaskRequest* request,
    tensorflow::RegisterTaskResponse* response) {
  RpcCall* call = NewCall(ctx, method);
  if (call->Refused()) return call;
  auto task = ResolveLegacy(request->has_source_task(), request->source_task(), request->job(),
                            request->task());
  if (!task.ok()) return call->Reply(task.status());
  return requests::RegisterTask(call, backend_, *task, request->incarnation(),
                                [response](uint64_t i) { response->set_leader_incarnation(i); });
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::RegisterTask(
    Ctx* ctx, const tensorflow::RegisterTaskRequest* request,
    tensorflow::RegisterTaskResponse* response) {
  return Register(ctx, "RegisterTask", request, response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::RegisterWorker(
    Ctx* ctx, const tensorflow::RegisterTaskRequest* request,
    tensorflow::RegisterTaskResponse* response) {
  return Register(ctx, "RegisterWorker", request, response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::Heartbeat(
    Ctx* ctx, const tensorflow::HeartbeatRequest* request,
    tensorflow::HeartbeatResponse* response) {
  RpcCall* call = NewCall(ctx, "Heartbeat");
  if (call->Refused()) return call;
  auto task = ResolveLegacy(request->has_source_task(), request->source_task(), request->job(),
                            request->task());
  if (!task.ok()) return call->Reply(task.status());
  TaskProgress progress;
  if (request->has_cohort_progress()) {
    const tensorflow::CohortTaskProgress& wire = request->cohort_progress();
    if (wire.has_step()) progress.step = wire.step();
    if (wire.has_busy_seconds_per_step()) {
      progress.busy_seconds_per_step = wire.busy_seconds_per_step();
    }
  }
  return requests::Heartbeat(
      call, backend_, *task, request->incarnation(),
      [response](uint64_t i) { response->set_leader_incarnation(i); }, progress);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::WaitForAllTasks(
    Ctx* ctx, const tensorflow::WaitForAllTasksRequest* request,
    tensorflow::WaitForAllTasksResponse* response) {
  RpcCall* call = NewCall(ctx, "WaitForAllTasks");
  if (call->Refused()) return call;
  auto task = ResolveLegacy(request->has_source_task(), request->source_task(), request->job(),
                            request->task());
  if (!task.ok()) return call->Reply(task.status());
  std::string devices = request->has_local_device_info()
                            ? EncodeLegacyDevices(request->local_device_info())
                            : EncodeDevices(request->device_info());
  backend_->WaitForAllTasks(call->Context(), *task, std::move(devices),
                            [this, call, response](absl::StatusOr<std::vector<std::string>> all) {
                              if (all.ok()) {
                                response->set_leader_incarnation(backend_->service_incarnation());
                                MergeDevices(*all, response->mutable_device_info(),
                                             response->mutable_cluster_device_info());
                                if (response->cluster_device_info().type_case() ==
                                    tensorflow::CoordinationServiceDeviceInfo::TYPE_NOT_SET) {
                                  response->clear_cluster_device_info();
                                }
                              }
                              call->Reply(all.status());
                            });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ShutdownTask(
    Ctx* ctx, const tensorflow::ShutdownTaskRequest* request, tensorflow::ShutdownTaskResponse*) {
  RpcCall* call = NewCall(ctx, "ShutdownTask");
  if (call->Refused()) return call;
  auto task = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!task.ok()) return call->Reply(task.status());
  return requests::ShutdownTask(call, backend_, *task);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ResetTask(
    Ctx* ctx, const tensorflow::ResetTaskRequest* request, tensorflow::ResetTaskResponse*) {
  RpcCall* call = NewCall(ctx, "ResetTask");
  if (call->Refused()) return call;
  auto task = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!task.ok()) return call->Reply(task.status());
  backend_->ResetTask(call->Context(), *task, requests::ReplyWith(call));
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ReportToTask(
    Ctx* ctx, const char* method, const tensorflow::ReportErrorToTaskRequest* request) {
  // The coordinator is no agent: an error sent "to a task" here is taken as reported by the
  // task named in its payload, and propagated like ReportErrorToService.
  RpcCall* call = NewCall(ctx, method);
  if (call->Refused()) return call;
  const auto& payload = request->error_payload();
  auto task = ResolveLegacy(payload.has_source_task(), payload.source_task(), payload.job(),
                            payload.task());
  if (!request->has_error_payload()) {
    return call->Reply(absl::InvalidArgumentError(
        absl::StrCat(method, " needs error_payload.source_task to name the failed task")));
  }
  if (!task.ok()) return call->Reply(task.status());
  return requests::ReportError(call, backend_, *task, request->error_code(),
                               request->error_message(), ErrorReporter::kSomeoneElse);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ReportErrorToTask(
    Ctx* ctx, const tensorflow::ReportErrorToTaskRequest* request,
    tensorflow::ReportErrorToTaskResponse*) {
  return ReportToTask(ctx, "ReportErrorToTask", request);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ReportErrorToAgent(
    Ctx* ctx, const tensorflow::ReportErrorToTaskRequest* request,
    tensorflow::ReportErrorToTaskResponse*) {
  return ReportToTask(ctx, "ReportErrorToAgent", request);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ReportErrorToService(
    Ctx* ctx, const tensorflow::ReportErrorToServiceRequest* request,
    tensorflow::ReportErrorToServiceResponse*) {
  RpcCall* call = NewCall(ctx, "ReportErrorToService");
  if (call->Refused()) return call;
  auto task = ResolveLegacy(request->has_error_origin(), request->error_origin(),
                            request->source_job(), request->source_task());
  if (!task.ok()) return call->Reply(task.status());
  return requests::ReportError(call, backend_, *task, request->error_code(),
                               request->error_message(), ErrorReporter::kTheTask,
                               request->cohort_failure_reason());
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetTaskState(
    Ctx* ctx, const tensorflow::GetTaskStateRequest* request,
    tensorflow::GetTaskStateResponse* response) {
  RpcCall* call = NewCall(ctx, "GetTaskState");
  if (call->Refused()) return call;
  std::vector<TaskName> tasks;
  for (const auto& t : request->source_task()) {
    auto task = Resolve(t);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  backend_->GetTaskStates(call->Context(), std::move(tasks),
                          [call, response](absl::StatusOr<std::vector<TaskStateInfo>> states) {
                            if (states.ok()) {
                              for (const TaskStateInfo& info : *states) {
                                FillStateInfo(info, response->add_task_state());
                              }
                            }
                            call->Reply(states.status());
                          });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::WatchJobState(
    Ctx* ctx, const tensorflow::WatchJobStateRequest* request,
    tensorflow::WatchJobStateResponse* response) {
  RpcCall* call = NewCall(ctx, "WatchJobState");
  if (call->Refused()) return call;
  return requests::WatchJobState(call, backend_, request->job_name(), request->version_number(),
                                 response, &FillStateInfo);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::InsertKeyValue(
    Ctx* ctx, const tensorflow::InsertKeyValueRequest* request,
    tensorflow::InsertKeyValueResponse*) {
  RpcCall* call = NewCall(ctx, "InsertKeyValue");
  if (call->Refused()) return call;
  return requests::InsertKeyValue(call, backend_, *request);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetKeyValue(
    Ctx* ctx, const tensorflow::GetKeyValueRequest* request,
    tensorflow::GetKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "GetKeyValue");
  if (call->Refused()) return call;
  return requests::GetKeyValue(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::TryGetKeyValue(
    Ctx* ctx, const tensorflow::TryGetKeyValueRequest* request,
    tensorflow::TryGetKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "TryGetKeyValue");
  if (call->Refused()) return call;
  return requests::TryGetKeyValue(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetKeyValueDir(
    Ctx* ctx, const tensorflow::GetKeyValueDirRequest* request,
    tensorflow::GetKeyValueDirResponse* response) {
  RpcCall* call = NewCall(ctx, "GetKeyValueDir");
  if (call->Refused()) return call;
  return requests::GetKeyValueDir(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::DeleteKeyValue(
    Ctx* ctx, const tensorflow::DeleteKeyValueRequest* request,
    tensorflow::DeleteKeyValueResponse*) {
  RpcCall* call = NewCall(ctx, "DeleteKeyValue");
  if (call->Refused()) return call;
  return requests::DeleteKeyValue(call, backend_, *request);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::IncrementKeyValue(
    Ctx* ctx, const tensorflow::IncrementKeyValueRequest* request,
    tensorflow::IncrementKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "IncrementKeyValue");
  if (call->Refused()) return call;
  return requests::IncrementKeyValue(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::Barrier(
    Ctx* ctx, const tensorflow::BarrierRequest* request, tensorflow::BarrierResponse* response) {
  RpcCall* call = NewCall(ctx, "Barrier");
  if (call->Refused()) return call;
  auto caller = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!caller.ok()) return call->Reply(caller.status());
  std::vector<TaskName> tasks;
  for (const auto& t : request->tasks()) {
    auto task = Resolve(t);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  return requests::Barrier(call, backend_, *request, *caller, std::move(tasks), response);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::CancelBarrier(
    Ctx* ctx, const tensorflow::CancelBarrierRequest* request, tensorflow::CancelBarrierResponse*) {
  RpcCall* call = NewCall(ctx, "CancelBarrier");
  if (call->Refused()) return call;
  auto caller = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!caller.ok()) return call->Reply(caller.status());
  return requests::CancelBarrier(call, backend_, *request, *caller);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetAliveTasks(
    Ctx* ctx, const tensorflow::GetAliveTasksRequest* request,
    tensorflow::GetAliveTasksResponse* response) {
  RpcCall* call = NewCall(ctx, "GetAliveTasks");
  if (call->Refused()) return call;
  auto requester =
      Resolve(request->has_requesting_task(), request->requesting_task(), "requesting_task");
  if (!requester.ok()) return call->Reply(requester.status());
  std::vector<TaskName> tasks;
  for (const auto& t : request->tasks()) {
    auto task = Resolve(t);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  return requests::GetAliveTasks(call, backend_, *requester, std::move(tasks),
                                 [response](const AliveTask& a) {
                                   auto* t = response->add_alive_tasks();
                                   t->set_job_name(a.task.job);
                                   t->set_task_id(a.task.id);
                                   response->add_incarnations(a.incarnation);
                                 });
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::PollForError(
    Ctx* ctx, const tensorflow::PollForErrorRequest* request, tensorflow::PollForErrorResponse*) {
  RpcCall* call = NewCall(ctx, "PollForError");
  if (call->Refused()) return call;
  auto task = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!task.ok()) return call->Reply(task.status());
  return requests::PollForError(call, backend_, *task);
}

}  // namespace cohort
