#pragma once

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "service/backend/coordination_backend.h"
#include "service/rpc/rpc_call.h"
#include "xla/distributed_runtime.grpc.pb.h"

namespace cohort {

// xla.DistributedRuntimeService of old jaxlib (0.4 and before): node ids in the default job,
// the session id is the service incarnation. Two facts of the wire are remembered from
// Connect, because later requests leave them out: the protocol version, which decides the
// layout of the topology messages (3 and later: jaxlib 0.4's, with a boot id), and the peer
// address of each node, because jaxlib 0.4's Shutdown names no node.
class DistributedRuntimeService final : public xla::DistributedRuntimeService::CallbackService {
 public:
  // `auth`: the credential every call must carry (null: none).
  DistributedRuntimeService(CoordinationBackend* backend, RpcMetrics* metrics,
                            const CallAuth* auth = nullptr)
      : backend_(backend), metrics_(metrics), auth_(auth) {}

  using Ctx = grpc::CallbackServerContext;
  grpc::ServerUnaryReactor* Connect(Ctx*, const xla::ConnectRequest*,
                                    xla::ConnectResponse*) override;
  grpc::ServerUnaryReactor* EnumerateDevices(Ctx*, const xla::EnumerateDevicesRequest*,
                                             xla::EnumerateDevicesResponse*) override;
  grpc::ServerUnaryReactor* Heartbeat(Ctx*, const xla::HeartbeatRequest*,
                                      xla::HeartbeatResponse*) override;
  grpc::ServerUnaryReactor* Shutdown(Ctx*, const xla::ShutdownRequest*,
                                     xla::ShutdownResponse*) override;
  grpc::ServerUnaryReactor* KeyValueGet(Ctx*, const xla::KeyValueGetRequest*,
                                        xla::KeyValueGetResponse*) override;
  grpc::ServerUnaryReactor* KeyValueSet(Ctx*, const xla::KeyValueSetRequest*,
                                        xla::KeyValueSetResponse*) override;
  grpc::ServerUnaryReactor* WaitAtBarrier(Ctx*, const xla::WaitAtBarrierRequest*,
                                          xla::WaitAtBarrierResponse*) override;

 private:
  RpcCall* NewCall(Ctx* ctx, const char* method);
  absl::Status CheckSession(uint64_t session_id) const;
  bool NewLayout(int32_t node) const;
  // The node a request came from: the one it names, or else the one that connected from
  // the same peer.
  int32_t NodeOf(Ctx* ctx, int32_t named) const;

  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  const CallAuth* const auth_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int32_t, int32_t> protocol_versions_ ABSL_GUARDED_BY(mu_);
  // Peer address -> the node that connected from it; -1 when several did.
  absl::flat_hash_map<std::string, int32_t> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
