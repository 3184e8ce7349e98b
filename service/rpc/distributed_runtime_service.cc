#include "service/rpc/distributed_runtime_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "service/rpc/coordination_requests.h"
#include "service/rpc/device_info.h"

namespace cohort {

using Ctx = grpc::CallbackServerContext;

namespace {

// Field 1 of a serialized message, read without knowing the rest of its layout.
int32_t NodeIdOf(const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    using google::protobuf::internal::WireFormatLite;
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      uint32_t value = 0;
      return in.ReadVarint32(&value) ? static_cast<int32_t>(value) : 0;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  return 0;
}

}  // namespace

RpcCall* DistributedRuntimeService::NewCall(Ctx* ctx, const char* method) {
  return new RpcCall(backend_, metrics_, Protocol::kDistributedRuntime, method, ctx, auth_);
}

absl::Status DistributedRuntimeService::CheckSession(uint64_t session_id) const {
  if (session_id != backend_->service_incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session id ", session_id, " is not this coordinator's session (",
                     backend_->service_incarnation(), "); connect again"));
  }
  return absl::OkStatus();
}

bool DistributedRuntimeService::NewLayout(int32_t node) const {
  absl::MutexLock lock(&mu_);
  auto it = protocol_versions_.find(node);
  return it != protocol_versions_.end() && it->second >= 3;
}

int32_t DistributedRuntimeService::NodeOf(Ctx* ctx, int32_t named) const {
  if (named != 0) return named;
  absl::MutexLock lock(&mu_);
  // Only clients that leave node_id out (protocol version 3 and later), and only a peer
  // that connected as one node: several nodes may share one connection in other clients.
  auto peer = peers_.find(ctx->peer());
  if (peer == peers_.end() || peer->second < 0) return named;
  auto version = protocol_versions_.find(peer->second);
  return version != protocol_versions_.end() && version->second >= 3 ? peer->second : named;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::Connect(Ctx* ctx,
                                                             const xla::ConnectRequest* request,
                                                             xla::ConnectResponse* response) {
  RpcCall* call = NewCall(ctx, "Connect");
  if (call->Refused()) return call;
  auto task = backend_->ResolveTask("", request->node_id());
  if (!task.ok()) return call->Reply(task.status());
  {
    absl::MutexLock lock(&mu_);
    protocol_versions_[request->node_id()] = request->protocol_version();
    auto [peer, added] = peers_.emplace(ctx->peer(), request->node_id());
    if (!added && peer->second != request->node_id()) peer->second = -1;  // shared: ambiguous
  }
  backend_->RegisterTask(call->Context(), *task, request->client_id(),
                         [this, call, response](const absl::Status& s) {
                           if (s.ok()) response->set_session_id(backend_->service_incarnation());
                           call->Reply(s);
                         });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::EnumerateDevices(
    Ctx* ctx, const xla::EnumerateDevicesRequest* request,
    xla::EnumerateDevicesResponse* response) {
  RpcCall* call = NewCall(ctx, "EnumerateDevices");
  if (call->Refused()) return call;
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  // node_id is field 1 in both layouts; the node's protocol version says which the rest is.
  bool new_layout = NewLayout(NodeIdOf(request->local_topology()));
  xla::LocalTopologyProtoV3 local;
  xla::LocalTopologyProto old_layout;
  if (new_layout ? !local.ParseFromString(request->local_topology())
                 : !old_layout.ParseFromString(request->local_topology())) {
    return call->Reply(absl::InvalidArgumentError(absl::StrCat(
        "local_topology is not a LocalTopologyProto of protocol version ",
        new_layout ? "3 or later (node_id, boot_id, devices)" : "1 or 2 (node_id, devices)")));
  }
  if (!new_layout) local = ToV3(old_layout);
  auto task = backend_->ResolveTask("", local.node_id());
  if (!task.ok()) return call->Reply(task.status());
  backend_->WaitForAllTasks(
      call->Context(), *task, EncodeLocalTopology(local),
      [call, response, new_layout](absl::StatusOr<std::vector<std::string>> all) {
        if (all.ok()) {
          xla::GlobalTopologyProtoV3 global = BuildGlobalTopology(*all);
          response->set_global_topology(new_layout ? global.SerializeAsString()
                                                   : ToV1(global).SerializeAsString());
        }
        call->Reply(all.status());
      });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::Heartbeat(Ctx* ctx,
                                                               const xla::HeartbeatRequest* request,
                                                               xla::HeartbeatResponse*) {
  RpcCall* call = NewCall(ctx, "Heartbeat");
  if (call->Refused()) return call;
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  auto task = backend_->ResolveTask("", request->node_id());
  if (!task.ok()) return call->Reply(task.status());
  // This protocol's heartbeat names no incarnation: it is the registered one's. It has no
  // error polling either: a failure elsewhere in the job reaches the other nodes as the
  // answer to their heartbeats, which makes old clients stop.
  CallContext context = call->Context();
  backend_->Heartbeat(context, *task, std::nullopt, TaskProgress{},
                      [this, call, context](const absl::Status& s) {
                        if (!s.ok()) {
                          call->Reply(s);
                          return;
                        }
                        backend_->PropagatedError(context, requests::ReplyWith(call));
                      });
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::Shutdown(Ctx* ctx,
                                                              const xla::ShutdownRequest* request,
                                                              xla::ShutdownResponse*) {
  RpcCall* call = NewCall(ctx, "Shutdown");
  if (call->Refused()) return call;
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  auto task = backend_->ResolveTask("", NodeOf(ctx, request->node_id()));
  if (!task.ok()) return call->Reply(task.status());
  backend_->ShutdownTask(call->Context(), *task, requests::ReplyWith(call));
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::KeyValueGet(
    Ctx* ctx, const xla::KeyValueGetRequest* request, xla::KeyValueGetResponse* response) {
  RpcCall* call = NewCall(ctx, "KeyValueGet");
  if (call->Refused()) return call;
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  std::optional<absl::Duration> timeout;
  if (request->timeout_milliseconds() > 0) {
    timeout = absl::Milliseconds(request->timeout_milliseconds());
  }
  backend_->GetKeyValue(call->Context(), request->key(), timeout,
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
    Ctx* ctx, const xla::KeyValueSetRequest* request, xla::KeyValueSetResponse*) {
  RpcCall* call = NewCall(ctx, "KeyValueSet");
  if (call->Refused()) return call;
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  backend_->InsertKeyValue(call->Context(), request->key(), request->value(),
                           /*allow_overwrite=*/true, requests::ReplyWith(call));
  return call;
}

grpc::ServerUnaryReactor* DistributedRuntimeService::WaitAtBarrier(
    Ctx* ctx, const xla::WaitAtBarrierRequest* request, xla::WaitAtBarrierResponse*) {
  RpcCall* call = NewCall(ctx, "WaitAtBarrier");
  if (call->Refused()) return call;
  if (auto s = CheckSession(request->session_id()); !s.ok()) return call->Reply(s);
  auto task = backend_->ResolveTask("", request->node_id());
  if (!task.ok()) return call->Reply(task.status());
  if (request->timeout_milliseconds() <= 0) {
    return call->Reply(absl::InvalidArgumentError("barrier timeout_milliseconds must be positive"));
  }
  // Every node of the job takes part; this protocol has no counters, so an id is one
  // barrier (a repeated call gets its cached result).
  backend_->Barrier(call->Context(), request->barrier_id(), /*counter=*/0,
                    absl::Milliseconds(request->timeout_milliseconds()), *task, {},
                    [call](const absl::StatusOr<int64_t>& r) { call->Reply(r.status()); });
  return call;
}

}  // namespace cohort
