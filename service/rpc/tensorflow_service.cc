#include "service/rpc/tensorflow_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "service/rpc/device_info.h"

namespace cohort {
namespace {

tensorflow::CoordinatedTaskState ToProto(TaskState state) {
  switch (state) {
    case TaskState::kUninitialized:
      return tensorflow::TASKSTATE_UNINITIALIZED;
    case TaskState::kDisconnected:
      return tensorflow::TASKSTATE_DISCONNECTED;
    case TaskState::kConnected:
      return tensorflow::TASKSTATE_CONNECTED;
    case TaskState::kError:
      return tensorflow::TASKSTATE_ERROR;
  }
  return tensorflow::TASKSTATE_UNSPECIFIED;
}

}  // namespace

using Ctx = grpc::CallbackServerContext;

RpcCall* TensorflowCoordinationService::NewCall(Ctx*, const char* method) {
  return new RpcCall(service_, metrics_, Protocol::kTensorflow, method);
}

absl::StatusOr<TaskName> TensorflowCoordinationService::Resolve(
    const tensorflow::CoordinatedTask& task) const {
  return service_->ResolveTask(task.job_name(), task.task_id());
}

absl::StatusOr<TaskName> TensorflowCoordinationService::ResolveLegacy(
    bool has_current, const tensorflow::CoordinatedTask& current, const std::string& job,
    int32_t task) const {
  // The current field wins (jaxlib 0.9.1 sends it with an empty job name); old agents send
  // the legacy job and task fields instead.
  if (has_current) return Resolve(current);
  if (!job.empty()) return service_->ResolveTask(job, task);
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
                                                  tensorflow::CoordinatedTaskStateInfo* out) const {
  out->mutable_task()->set_job_name(info.task.job);
  out->mutable_task()->set_task_id(info.task.id);
  out->set_state(ToProto(info.state));
  out->set_incarnation(info.incarnation);
  if (!info.error.ok()) {
    out->set_error_code(static_cast<int32_t>(info.error.code()));
    out->set_error_message(std::string(info.error.message()));
    ServiceErrorInfo source = GetServiceError(info.error).value_or(ServiceErrorInfo{});
    out->mutable_error_payload()->set_is_reported_error(source.is_reported_error);
    if (source.source) {
      out->mutable_error_payload()->mutable_source_task()->set_job_name(source.source->job);
      out->mutable_error_payload()->mutable_source_task()->set_task_id(source.source->id);
    }
  }
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::Register(
    Ctx* ctx, const char* method, const tensorflow::RegisterTaskRequest* request,
    tensorflow::RegisterTaskResponse* response) {
  RpcCall* call = NewCall(ctx, method);
  auto task = ResolveLegacy(request->has_source_task(), request->source_task(), request->job(),
                            request->task());
  if (!task.ok()) return call->Reply(task.status());
  service_->RegisterTask(*task, request->incarnation(), call->Park(),
                         [this, call, response](const absl::Status& s) {
                           if (s.ok())
                             response->set_leader_incarnation(service_->service_incarnation());
                           call->Reply(s);
                         });
  return call;
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
  auto task = ResolveLegacy(request->has_source_task(), request->source_task(), request->job(),
                            request->task());
  if (!task.ok()) return call->Reply(task.status());
  absl::Status s = service_->Heartbeat(*task, request->incarnation());
  if (s.ok()) response->set_leader_incarnation(service_->service_incarnation());
  return call->Reply(s);
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::WaitForAllTasks(
    Ctx* ctx, const tensorflow::WaitForAllTasksRequest* request,
    tensorflow::WaitForAllTasksResponse* response) {
  RpcCall* call = NewCall(ctx, "WaitForAllTasks");
  auto task = ResolveLegacy(request->has_source_task(), request->source_task(), request->job(),
                            request->task());
  if (!task.ok()) return call->Reply(task.status());
  std::string devices = request->has_local_device_info()
                            ? EncodeLegacyDevices(request->local_device_info())
                            : EncodeDevices(request->device_info());
  service_->WaitForAllTasks(*task, std::move(devices), call->Park(),
                            [this, call, response](absl::StatusOr<std::vector<std::string>> all) {
                              if (all.ok()) {
                                response->set_leader_incarnation(service_->service_incarnation());
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
  auto task = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!task.ok()) return call->Reply(task.status());
  service_->ShutdownTask(*task, call->Park(), [call](const absl::Status& s) { call->Reply(s); });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ResetTask(
    Ctx* ctx, const tensorflow::ResetTaskRequest* request, tensorflow::ResetTaskResponse*) {
  RpcCall* call = NewCall(ctx, "ResetTask");
  auto task = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!task.ok()) return call->Reply(task.status());
  return call->Reply(service_->ResetTask(*task));
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::ReportToTask(
    Ctx* ctx, const char* method, const tensorflow::ReportErrorToTaskRequest* request) {
  // The coordinator is no agent: an error sent "to a task" here is taken as reported by the
  // task named in its payload, and propagated like ReportErrorToService.
  RpcCall* call = NewCall(ctx, method);
  const auto& payload = request->error_payload();
  auto task = ResolveLegacy(payload.has_source_task(), payload.source_task(), payload.job(),
                            payload.task());
  if (!request->has_error_payload()) {
    return call->Reply(absl::InvalidArgumentError(
        absl::StrCat(method, " needs error_payload.source_task to name the failed task")));
  }
  if (!task.ok()) return call->Reply(task.status());
  return call->Reply(service_->ReportError(
      *task, absl::Status(static_cast<absl::StatusCode>(request->error_code()),
                          request->error_message())));
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
  auto task = ResolveLegacy(request->has_error_origin(), request->error_origin(),
                            request->source_job(), request->source_task());
  if (!task.ok()) return call->Reply(task.status());
  return call->Reply(service_->ReportError(
      *task, absl::Status(static_cast<absl::StatusCode>(request->error_code()),
                          request->error_message())));
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetTaskState(
    Ctx* ctx, const tensorflow::GetTaskStateRequest* request,
    tensorflow::GetTaskStateResponse* response) {
  RpcCall* call = NewCall(ctx, "GetTaskState");
  std::vector<TaskName> tasks;
  for (const auto& t : request->source_task()) {
    auto task = Resolve(t);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  auto states = service_->GetTaskStates(tasks);
  if (!states.ok()) return call->Reply(states.status());
  for (const TaskStateInfo& info : *states) FillStateInfo(info, response->add_task_state());
  return call->Reply(absl::OkStatus());
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::WatchJobState(
    Ctx* ctx, const tensorflow::WatchJobStateRequest* request,
    tensorflow::WatchJobStateResponse* response) {
  RpcCall* call = NewCall(ctx, "WatchJobState");
  service_->WatchJobState(request->job_name(), request->version_number(), call->Park(),
                          [this, call, response](absl::StatusOr<JobStateView> view) {
                            if (view.ok()) {
                              response->set_version_number((*view)->version);
                              for (const TaskStateInfo& info : (*view)->tasks) {
                                FillStateInfo(info, response->add_task_state());
                              }
                            }
                            call->Reply(view.status());
                          });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::InsertKeyValue(
    Ctx* ctx, const tensorflow::InsertKeyValueRequest* request,
    tensorflow::InsertKeyValueResponse*) {
  RpcCall* call = NewCall(ctx, "InsertKeyValue");
  return call->Reply(service_->InsertKeyValue(request->kv().key(), request->kv().value(),
                                              request->allow_overwrite()));
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetKeyValue(
    Ctx* ctx, const tensorflow::GetKeyValueRequest* request,
    tensorflow::GetKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "GetKeyValue");
  service_->GetKeyValue(request->key(), call->Park(), std::nullopt, std::nullopt,
                        [call, request, response](absl::StatusOr<std::string> value) {
                          if (value.ok()) {
                            response->mutable_kv()->set_key(request->key());
                            response->mutable_kv()->set_value(std::move(*value));
                          }
                          call->Reply(value.status());
                        });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::TryGetKeyValue(
    Ctx* ctx, const tensorflow::TryGetKeyValueRequest* request,
    tensorflow::TryGetKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "TryGetKeyValue");
  auto value = service_->TryGetKeyValue(request->key());
  if (value.ok()) {
    response->mutable_kv()->set_key(request->key());
    response->mutable_kv()->set_value(std::move(*value));
  }
  return call->Reply(value.status());
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetKeyValueDir(
    Ctx* ctx, const tensorflow::GetKeyValueDirRequest* request,
    tensorflow::GetKeyValueDirResponse* response) {
  RpcCall* call = NewCall(ctx, "GetKeyValueDir");
  response->set_directory_key(request->directory_key());
  for (auto& entry : service_->GetKeyValueDir(request->directory_key())) {
    auto* kv = response->add_kv();
    kv->set_key(std::move(entry.key));
    kv->set_value(std::move(entry.value));
  }
  return call->Reply(absl::OkStatus());
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::DeleteKeyValue(
    Ctx* ctx, const tensorflow::DeleteKeyValueRequest* request,
    tensorflow::DeleteKeyValueResponse*) {
  RpcCall* call = NewCall(ctx, "DeleteKeyValue");
  return call->Reply(service_->DeleteKeyValue(request->key()));
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::IncrementKeyValue(
    Ctx* ctx, const tensorflow::IncrementKeyValueRequest* request,
    tensorflow::IncrementKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "IncrementKeyValue");
  auto sum = service_->IncrementKeyValue(request->key(), request->increment());
  if (sum.ok()) {
    response->mutable_kv()->set_key(request->key());
    response->mutable_kv()->set_value(absl::StrCat(*sum));
  }
  return call->Reply(sum.status());
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::Barrier(
    Ctx* ctx, const tensorflow::BarrierRequest* request, tensorflow::BarrierResponse* response) {
  RpcCall* call = NewCall(ctx, "Barrier");
  auto caller = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!caller.ok()) return call->Reply(caller.status());
  std::vector<TaskName> tasks;
  for (const auto& t : request->tasks()) {
    auto task = Resolve(t);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  if (request->barrier_timeout_in_ms() < 0) {
    return call->Reply(absl::InvalidArgumentError("barrier_timeout_in_ms must not be negative"));
  }
  absl::Duration timeout = request->barrier_timeout_in_ms() == 0
                               ? absl::InfiniteDuration()
                               : absl::Milliseconds(request->barrier_timeout_in_ms());
  service_->Barrier(request->barrier_id(), request->counter(), timeout, *caller, std::move(tasks),
                    call->Park(), [call, response](absl::StatusOr<int64_t> counter) {
                      if (counter.ok()) response->set_counter(*counter);
                      call->Reply(counter.status());
                    });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::CancelBarrier(
    Ctx* ctx, const tensorflow::CancelBarrierRequest* request, tensorflow::CancelBarrierResponse*) {
  RpcCall* call = NewCall(ctx, "CancelBarrier");
  auto caller = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!caller.ok()) return call->Reply(caller.status());
  return call->Reply(service_->CancelBarrier(request->barrier_id(), request->counter(), *caller));
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::GetAliveTasks(
    Ctx* ctx, const tensorflow::GetAliveTasksRequest* request,
    tensorflow::GetAliveTasksResponse* response) {
  RpcCall* call = NewCall(ctx, "GetAliveTasks");
  auto requester =
      Resolve(request->has_requesting_task(), request->requesting_task(), "requesting_task");
  if (!requester.ok()) return call->Reply(requester.status());
  std::vector<TaskName> tasks;
  for (const auto& t : request->tasks()) {
    auto task = Resolve(t);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  service_->GetAliveTasks(*requester, std::move(tasks), call->Park(),
                          [call, response](absl::StatusOr<std::vector<AliveTask>> alive) {
                            if (alive.ok()) {
                              for (const AliveTask& a : *alive) {
                                auto* t = response->add_alive_tasks();
                                t->set_job_name(a.task.job);
                                t->set_task_id(a.task.id);
                                response->add_incarnations(a.incarnation);
                              }
                            }
                            call->Reply(alive.status());
                          });
  return call;
}

grpc::ServerUnaryReactor* TensorflowCoordinationService::PollForError(
    Ctx* ctx, const tensorflow::PollForErrorRequest* request, tensorflow::PollForErrorResponse*) {
  RpcCall* call = NewCall(ctx, "PollForError");
  auto task = Resolve(request->has_source_task(), request->source_task(), "source_task");
  if (!task.ok()) return call->Reply(task.status());
  service_->PollForError(*task, call->Park(), [call](const absl::Status& s) { call->Reply(s); });
  return call;
}

}  // namespace cohort
