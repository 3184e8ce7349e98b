#include "service/rpc/xla_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/core/errors.h"

namespace cohort {
namespace {

namespace xc = xla::coordination;

xc::TaskState ToProto(TaskState state) {
  switch (state) {
    case TaskState::kUninitialized:
      return xc::UNINITIALIZED;
    case TaskState::kDisconnected:
      return xc::DISCONNECTED;
    case TaskState::kConnected:
      return xc::CONNECTED;
    case TaskState::kError:
      return xc::ERROR;
  }
  return xc::UNSPECIFIED;
}

}  // namespace

using Ctx = grpc::CallbackServerContext;

RpcCall* XlaCoordinationService::NewCall(const char* method) {
  return new RpcCall(service_, metrics_, Protocol::kXla, method);
}

absl::Status XlaCoordinationService::Validate(const xc::Incarnations& incarnations) const {
  if (incarnations.service_incarnation() != service_->service_incarnation()) {
    return ServiceMismatchError(service_->service_incarnation(),
                                incarnations.service_incarnation());
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskName> XlaCoordinationService::Task(int32_t id) const {
  return service_->ResolveTask("", id);
}

absl::StatusOr<TaskName> XlaCoordinationService::Task(int32_t id,
                                                      const xc::Incarnations& incarnations) const {
  auto task = Task(id);
  if (!task.ok()) return task;
  // Upstream checks only the service incarnation. A stale process of a restarted task
  // would then still write keys and pass barriers; refuse it.
  if (incarnations.task_incarnation() != 0) {
    if (auto s = service_->CheckIncarnation(*task, incarnations.task_incarnation()); !s.ok()) {
      return s;
    }
  }
  return task;
}

grpc::ServerUnaryReactor* XlaCoordinationService::RegisterTask(
    Ctx*, const xc::RegisterTaskRequest* request, xc::RegisterTaskResponse* response) {
  RpcCall* call = NewCall("RegisterTask");
  auto task = Task(request->source_task_id());
  if (!task.ok()) return call->Reply(task.status());
  service_->RegisterTask(*task, request->incarnation(), call->Park(),
                         [this, call, response](const absl::Status& s) {
                           if (s.ok())
                             response->set_service_incarnation(service_->service_incarnation());
                           call->Reply(s);
                         });
  return call;
}

grpc::ServerUnaryReactor* XlaCoordinationService::Heartbeat(Ctx*,
                                                            const xc::HeartbeatRequest* request,
                                                            xc::HeartbeatResponse* response) {
  RpcCall* call = NewCall("Heartbeat");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id());
  if (!task.ok()) return call->Reply(task.status());
  absl::Status s = service_->Heartbeat(*task, request->incarnation());
  if (s.ok()) response->set_service_incarnation(service_->service_incarnation());
  return call->Reply(s);
}

grpc::ServerUnaryReactor* XlaCoordinationService::ShutdownTask(
    Ctx*, const xc::ShutdownTaskRequest* request, xc::ShutdownTaskResponse*) {
  RpcCall* call = NewCall("ShutdownTask");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id(), request->incarnations());
  if (!task.ok()) return call->Reply(task.status());
  service_->ShutdownTask(*task, call->Park(), [call](const absl::Status& s) { call->Reply(s); });
  return call;
}

grpc::ServerUnaryReactor* XlaCoordinationService::WatchTasks(Ctx*,
                                                             const xc::WatchTasksRequest* request,
                                                             xc::WatchTasksResponse* response) {
  RpcCall* call = NewCall("WatchTasks");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  service_->WatchJobState(
      "", request->version_number(), call->Park(),
      [call, response](absl::StatusOr<JobStateView> view) {
        if (view.ok()) {
          response->set_version_number((*view)->version);
          for (const TaskStateInfo& info : (*view)->tasks) {
            auto* out = response->add_task_state();
            out->set_task_id(info.task.id);
            out->set_state(ToProto(info.state));
            out->set_incarnation(info.incarnation);
            if (!info.error.ok()) {
              out->set_error_code(static_cast<int32_t>(info.error.code()));
              out->set_error_message(std::string(info.error.message()));
              auto source = GetServiceError(info.error).value_or(ServiceErrorInfo{});
              out->mutable_error_payload()->set_is_reported_error(source.is_reported_error);
              if (source.source) {
                out->mutable_error_payload()->set_source_task_id(source.source->id);
              }
            }
          }
        }
        call->Reply(view.status());
      });
  return call;
}

grpc::ServerUnaryReactor* XlaCoordinationService::InsertKeyValue(
    Ctx*, const xc::InsertKeyValueRequest* request, xc::InsertKeyValueResponse*) {
  RpcCall* call = NewCall("InsertKeyValue");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return call->Reply(service_->InsertKeyValue(request->kv().key(), request->kv().value(),
                                              request->allow_overwrite()));
}

grpc::ServerUnaryReactor* XlaCoordinationService::GetKeyValue(Ctx*,
                                                              const xc::GetKeyValueRequest* request,
                                                              xc::GetKeyValueResponse* response) {
  RpcCall* call = NewCall("GetKeyValue");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
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

grpc::ServerUnaryReactor* XlaCoordinationService::TryGetKeyValue(
    Ctx*, const xc::TryGetKeyValueRequest* request, xc::TryGetKeyValueResponse* response) {
  RpcCall* call = NewCall("TryGetKeyValue");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto value = service_->TryGetKeyValue(request->key());
  if (value.ok()) {
    response->mutable_kv()->set_key(request->key());
    response->mutable_kv()->set_value(std::move(*value));
  }
  return call->Reply(value.status());
}

grpc::ServerUnaryReactor* XlaCoordinationService::IncrementKeyValue(
    Ctx*, const xc::IncrementKeyValueRequest* request, xc::IncrementKeyValueResponse* response) {
  RpcCall* call = NewCall("IncrementKeyValue");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto sum = service_->IncrementKeyValue(request->key(), request->increment());
  if (sum.ok()) {
    response->mutable_kv()->set_key(request->key());
    response->mutable_kv()->set_value(absl::StrCat(*sum));
  }
  return call->Reply(sum.status());
}

grpc::ServerUnaryReactor* XlaCoordinationService::GetKeyValueDir(
    Ctx*, const xc::GetKeyValueDirRequest* request, xc::GetKeyValueDirResponse* response) {
  RpcCall* call = NewCall("GetKeyValueDir");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  response->set_directory_key(request->directory_key());
  for (auto& entry : service_->GetKeyValueDir(request->directory_key())) {
    auto* kv = response->add_kv();
    kv->set_key(std::move(entry.key));
    kv->set_value(std::move(entry.value));
  }
  return call->Reply(absl::OkStatus());
}

grpc::ServerUnaryReactor* XlaCoordinationService::DeleteKeyValue(
    Ctx*, const xc::DeleteKeyValueRequest* request, xc::DeleteKeyValueResponse*) {
  RpcCall* call = NewCall("DeleteKeyValue");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  return call->Reply(service_->DeleteKeyValue(request->key()));
}

grpc::ServerUnaryReactor* XlaCoordinationService::Barrier(Ctx*, const xc::BarrierRequest* request,
                                                          xc::BarrierResponse* response) {
  RpcCall* call = NewCall("Barrier");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto caller = Task(request->source_task_id(), request->incarnations());
  if (!caller.ok()) return call->Reply(caller.status());
  std::vector<TaskName> tasks;
  for (int32_t id : request->task_ids()) {
    auto task = Task(id);
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

grpc::ServerUnaryReactor* XlaCoordinationService::CancelBarrier(
    Ctx*, const xc::CancelBarrierRequest* request, xc::CancelBarrierResponse*) {
  RpcCall* call = NewCall("CancelBarrier");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto caller = Task(request->source_task_id(), request->incarnations());
  if (!caller.ok()) return call->Reply(caller.status());
  return call->Reply(service_->CancelBarrier(request->barrier_id(), request->counter(), *caller));
}

grpc::ServerUnaryReactor* XlaCoordinationService::GetAliveTasks(
    Ctx*, const xc::GetAliveTasksRequest* request, xc::GetAliveTasksResponse* response) {
  RpcCall* call = NewCall("GetAliveTasks");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto requester = Task(request->requesting_task_id(), request->incarnations());
  if (!requester.ok()) return call->Reply(requester.status());
  std::vector<TaskName> tasks;
  for (int32_t id : request->task_ids()) {
    auto task = Task(id);
    if (!task.ok()) return call->Reply(task.status());
    tasks.push_back(*task);
  }
  service_->GetAliveTasks(*requester, std::move(tasks), call->Park(),
                          [call, response](absl::StatusOr<std::vector<AliveTask>> alive) {
                            if (alive.ok()) {
                              for (const AliveTask& a : *alive) {
                                response->add_alive_task_ids(a.task.id);
                                response->add_incarnations(a.incarnation);
                              }
                            }
                            call->Reply(alive.status());
                          });
  return call;
}

grpc::ServerUnaryReactor* XlaCoordinationService::PollForError(
    Ctx*, const xc::PollForErrorRequest* request, xc::PollForErrorResponse*) {
  RpcCall* call = NewCall("PollForError");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id(), request->incarnations());
  if (!task.ok()) return call->Reply(task.status());
  service_->PollForError(*task, call->Park(), [call](const absl::Status& s) { call->Reply(s); });
  return call;
}

grpc::ServerUnaryReactor* XlaCoordinationService::ReportErrorToService(
    Ctx*, const xc::ReportErrorToServiceRequest* request, xc::ReportErrorToServiceResponse*) {
  RpcCall* call = NewCall("ReportErrorToService");
  if (auto s = Validate(request->incarnations()); !s.ok()) return call->Reply(s);
  auto task = Task(request->source_task_id(), request->incarnations());
  if (!task.ok()) return call->Reply(task.status());
  return call->Reply(service_->ReportError(
      *task, absl::Status(static_cast<absl::StatusCode>(request->error_code()),
                          request->error_message())));
}

}  // namespace cohort
