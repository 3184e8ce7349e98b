#include "service/rpc/distributed_runtime_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/rpc/device_info.h"

namespace cohort {

using Ctx = grpc::CallbackServerContext;

RpcCall* DistributedRuntimeService::NewCall(const char* method) {
  return new RpcCall(service_, metrics_, Protocol::kDistributedRuntime, method);
}

absl::Status DistributedRuntimeService::CheckSession(uint64_t session_id) const {
  if (session_id != service_->service_incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session id ", session_id, " is not this coordinator's session (",
                     service_->service_incarnation(), "); connect again"));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DistributedRuntimeService::Connect(Ctx*,
                                                             const xla::ConnectRequest* request,
                                                             xla::ConnectResponse* response) {
  RpcCall* call = NewCall("Connect");
  auto task = service_->ResolveTask("", request->node_id());
  if (!task.ok()) return call->Reply(task.status());
  service_->RegisterTask(*task, request->client_id(), call->Park(),
                         [this, call, response](const absl::Status& s) {
                           if (s.ok()) response->set_session_id(service_->service_incarnation());
                           call->Reply(s);
                         });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::EnumerateDevices(
    Ctx*, const xla::EnumerateDevicesRequest* request, xla::EnumerateDevicesResponse* response) {
  RpcCall* call = NewCall("EnumerateDevices");
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  auto task = service_->ResolveTask("", request->local_topology().node_id());
  if (!task.ok()) return call->Reply(task.status());
  service_->WaitForAllTasks(*task, EncodeLocalTopology(request->local_topology()), call->Park(),
                            [call, response](absl::StatusOr<std::vector<std::string>> all) {
                              if (all.ok())
                                *response->mutable_global_topology() = BuildGlobalTopology(*all);
                              call->Reply(all.status());
                            });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::Heartbeat(Ctx*,
                                                               const xla::HeartbeatRequest* request,
                                                               xla::HeartbeatResponse*) {
  RpcCall* call = NewCall("Heartbeat");
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  auto task = service_->ResolveTask("", request->node_id());
  if (!task.ok()) return call->Reply(task.status());
  // This protocol's heartbeat names no incarnation: it is the registered one's.
  auto state = service_->GetTaskStates({*task});
  if (!state.ok()) return call->Reply(state.status());
  return call->Reply(service_->Heartbeat(*task, (*state)[0].incarnation));
}

grpc::ServerUnaryReactor* DistributedRuntimeService::Shutdown(Ctx*,
                                                              const xla::ShutdownRequest* request,
                                                              xla::ShutdownResponse*) {
  RpcCall* call = NewCall("Shutdown");
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  auto task = service_->ResolveTask("", request->node_id());
  if (!task.ok()) return call->Reply(task.status());
  service_->ShutdownTask(*task, call->Park(), [call](const absl::Status& s) { call->Reply(s); });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::KeyValueGet(
    Ctx*, const xla::KeyValueGetRequest* request, xla::KeyValueGetResponse* response) {
  RpcCall* call = NewCall("KeyValueGet");
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  std::optional<absl::Time> deadline;
  if (request->timeout_milliseconds() > 0) {
    deadline = service_->Now() + absl::Milliseconds(request->timeout_milliseconds());
  }
  service_->key_values().Get(request->key(), call->Park(), std::nullopt, deadline,
                             [call, response](absl::StatusOr<std::string> value) {
                               if (value.ok()) {
                                 response->set_found(true);
                                 response->set_value(std::move(*value));
                               }
                               call->Reply(value.status());
                             });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::KeyValueSet(
    Ctx*, const xla::KeyValueSetRequest* request, xla::KeyValueSetResponse*) {
  RpcCall* call = NewCall("KeyValueSet");
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  return call->Reply(
      service_->key_values().Insert(request->key(), request->value(), /*allow_overwrite=*/true));
}

}  // namespace cohort
