#pragma once

#include "service/core/coordination_service.h"
#include "service/rpc/rpc_call.h"
#include "xla/distributed_runtime.grpc.pb.h"

namespace cohort {

// xla.DistributedRuntimeService of old jaxlib (<= 0.3): node ids in the default job, the
// session id is the service incarnation.
class DistributedRuntimeService final : public xla::DistributedRuntimeService::CallbackService {
 public:
  DistributedRuntimeService(CoordinationService* service, RpcMetrics* metrics)
      : service_(service), metrics_(metrics) {}

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

 private:
  RpcCall* NewCall(const char* method);
  absl::Status CheckSession(uint64_t session_id) const;

  CoordinationService* const service_;
  RpcMetrics* const metrics_;
};

}  // namespace cohort
