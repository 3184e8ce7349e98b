#include "service/rpc/xla_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/rpc/coordination_requests.h"

namespace cohort {
namespace {

namespace xc = xla::coordination;

void FillTaskInfo(const TaskStateInfo& info, xc::TaskInfo* out) {
  out->set_task_id(info.task.id);
  requests::FillTaskState(info, out, [](const TaskName& source, xc::CoordinationServiceError* e) {
    e->set_source_task_id(source.id);
  });
}

}  // namespace

using Ctx = grpc::CallbackServerContext;

RpcCall* XlaCoordinationService::NewCall(Ctx* ctx, const char* method) {
  return new RpcCall(backend_, metrics_, Protocol::kXla, method, ctx, auth_);
}

absl::Status XlaCoordinationService::Validate(const xc::Incarnations& incarnations) const {
  if (incarnations.service_incarnation() != backend_->service_incarnation()) {
    return ServiceMismatchError(backend_->service_incarnation(),
                                incarnations.service_incarnation());
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskName> XlaCoordinationService::Task(int32_t id) const {
  return backend_->ResolveTask("", id);
}

absl::StatusOr<TaskName> XlaCoordinationService::Task(int32_t id,
                                                      const xc::Incarnations& incarnations) const {
  auto task = Task(id);
  if (!task.ok()) return task;
  // Upstream checks only the service incarnation. A stale process of a restarted task
  // would then still write keys and pass barriers; refuse it.
  if (incarnations.task_incarnation() != 0) {
    if (auto s = backend_->CheckIncarnation(*task, incarnations.task_incarnation()); !s.ok()) {
      return s;
    }
  }
  return task;
}

grpc::ServerUnaryReactor* XlaCoordinationService::RegisterTask(
    Ctx* ctx, const xc::RegisterTaskRequest* request, xc::RegisterTaskResponse* response) {
  RpcCall* call = NewCall(ctx, "RegisterTask");
  if (call->Refused()) return call;
  auto task = Task(request->source_task_id());
  if (!task.ok()) return call->Reply(task.status());
  return requests::RegisterTask(call, backend_, *task, request->incarnation(),
                                [response](uint64_t i) { response->set_service_incarnation(i); });
}

grpc::ServerUnaryReactor* XlaCoordinationService::Heartbeat(Ctx* ctx,
                                                            const xc::HeartbeatRequest* request,
                                                            xc::HeartbeatResponse* response) {
  RpcCall* call = NewCall(ctx, "Heartbeat");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id());
  if (!task.ok()) return call->Reply(task.status());
  return requests::Heartbeat(call, backend_, *task, request->incarnation(),
                             [response](uint64_t i) { response->set_service_incarnation(i); });
}

grpc::ServerUnaryReactor* XlaCoordinationService::ShutdownTask(
    Ctx* ctx, const xc::ShutdownTaskRequest* request, xc::ShutdownTaskResponse*) {
  RpcCall* call = NewCall(ctx, "ShutdownTask");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id(), request->incarnations());
  if (!task.ok()) return call->Reply(task.status());
  return requests::ShutdownTask(call, backend_, *task);
}

grpc::ServerUnaryReactor* XlaCoordinationService::WatchTasks(Ctx* ctx,
                                                             const xc::WatchTasksRequest* request,
                                                             xc::WatchTasksResponse* response) {
  RpcCall* call = NewCall(ctx, "WatchTasks");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::WatchJobState(call, backend_, "", request->version_number(), response,
                                 &FillTaskInfo);
}

grpc::ServerUnaryReactor* XlaCoordinationService::InsertKeyValue(
    Ctx* ctx, const xc::InsertKeyValueRequest* request, xc::InsertKeyValueResponse*) {
  RpcCall* call = NewCall(ctx, "InsertKeyValue");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::InsertKeyValue(call, backend_, *request);
}

grpc::ServerUnaryReactor* XlaCoordinationService::GetKeyValue(Ctx* ctx,
                                                              const xc::GetKeyValueRequest* request,
                                                              xc::GetKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "GetKeyValue");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::GetKeyValue(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* XlaCoordinationService::TryGetKeyValue(
    Ctx* ctx, const xc::TryGetKeyValueRequest* request, xc::TryGetKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "TryGetKeyValue");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::TryGetKeyValue(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* XlaCoordinationService::IncrementKeyValue(
    Ctx* ctx, const xc::IncrementKeyValueRequest* request,
    xc::IncrementKeyValueResponse* response) {
  RpcCall* call = NewCall(ctx, "IncrementKeyValue");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::IncrementKeyValue(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* XlaCoordinationService::GetKeyValueDir(
    Ctx* ctx, const xc::GetKeyValueDirRequest* request, xc::GetKeyValueDirResponse* response) {
  RpcCall* call = NewCall(ctx, "GetKeyValueDir");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::GetKeyValueDir(call, backend_, *request, response);
}

grpc::ServerUnaryReactor* XlaCoordinationService::DeleteKeyValue(
    Ctx* ctx, const xc::DeleteKeyValueRequest* request, xc::DeleteKeyValueResponse*) {
  RpcCall* call = NewCall(ctx, "DeleteKeyValue");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return requests::DeleteKeyValue(call, backend_, *request);
}

grpc::ServerUnaryReactor* XlaCoordinationService::Barrier(Ctx* ctx,
                                                          const xc::BarrierRequest* request,
                                                          xc::BarrierResponse* response) {
  RpcCall* call = NewCall(ctx, "Barrier");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto caller = Task(request->source_task_id(), request->incarnations());
  if (!caller.ok()) return call->Reply(caller.status());
  std::vector<TaskName> tasks;
  for (int32_t id : request->task_ids()) {
    auto task = Task(id);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  return requests::Barrier(call, backend_, *request, *caller, std::move(tasks), response);
}

grpc::ServerUnaryReactor* XlaCoordinationService::CancelBarrier(
    Ctx* ctx, const xc::CancelBarrierRequest* request, xc::CancelBarrierResponse*) {
  RpcCall* call = NewCall(ctx, "CancelBarrier");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto caller = Task(request->source_task_id(), request->incarnations());
  if (!caller.ok()) return call->Reply(caller.status());
  return requests::CancelBarrier(call, backend_, *request, *caller);
}

grpc::ServerUnaryReactor* XlaCoordinationService::GetAliveTasks(
    Ctx* ctx, const xc::GetAliveTasksRequest* request, xc::GetAliveTasksResponse* response) {
  RpcCall* call = NewCall(ctx, "GetAliveTasks");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto requester = Task(request->requesting_task_id(), request->incarnations());
  if (!requester.ok()) return call->Reply(requester.status());
  std::vector<TaskName> tasks;
  for (int32_t id : request->task_ids()) {
    auto task = Task(id);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  return requests::GetAliveTasks(call, backend_, *requester, std::move(tasks),
                                 [response](const AliveTask& a) {
                                   response->add_alive_task_ids(a.task.id);
                                   response->add_incarnations(a.incarnation);
                                 });
}

grpc::ServerUnaryReactor* XlaCoordinationService::PollForError(
    Ctx* ctx, const xc::PollForErrorRequest* request, xc::PollForErrorResponse*) {
  RpcCall* call = NewCall(ctx, "PollForError");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id(), request->incarnations());
  if (!task.ok()) return call->Reply(task.status());
  return requests::PollForError(call, backend_, *task);
}

grpc::ServerUnaryReactor* XlaCoordinationService::ReportErrorToService(
    Ctx* ctx, const xc::ReportErrorToServiceRequest* request, xc::ReportErrorToServiceResponse*) {
  RpcCall* call = NewCall(ctx, "ReportErrorToService");
  if (call->Refused()) return call;
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id(), request->incarnations());
  if (!task.ok()) return call->Reply(task.status());
  return requests::ReportError(call, backend_, *task, request->error_code(),
                               request->error_message(), ErrorReporter::kTheTask);
}

}  // namespace cohort
