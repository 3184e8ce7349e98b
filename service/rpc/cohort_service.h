#pragma once

#include "cohort/v1/coordinator.grpc.pb.h"
#include "service/backend/coordination_backend.h"
#include "service/rpc/park_stream.h"
#include "service/rpc/rpc_call.h"

namespace cohort {

// cohort.v1.Coordinator: key watches, the cluster snapshot and park streams. Translation only; the
// watch itself lives in the core's key-value store.
class CohortCoordinatorService final : public cohort::v1::Coordinator::CallbackService {
 public:
  // `auth`: the credential every call must carry (null: none).
  CohortCoordinatorService(CoordinationBackend* backend, RpcMetrics* metrics,
                           const CallAuth* auth = nullptr)
      : backend_(backend), metrics_(metrics), auth_(auth), park_streams_(backend, metrics) {}

  // Ends every Park stream (the server is shutting down).
  void ClosePark(const absl::Status& why) { park_streams_.CloseAll(why); }

  grpc::ServerWriteReactor<v1::WatchKeysResponse>* WatchKeys(
      grpc::CallbackServerContext* ctx, const v1::WatchKeysRequest* request) override;
  grpc::ServerUnaryReactor* GetClusterSnapshot(grpc::CallbackServerContext* ctx,
                                               const v1::GetClusterSnapshotRequest* request,
                                               v1::ClusterSnapshot* response) override;
  grpc::ServerBidiReactor<v1::ParkRequest, v1::ParkResponse>* Park(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* TorchStore(grpc::CallbackServerContext* ctx,
                                       const v1::TorchStoreRequest* request,
                                       v1::TorchStoreResponse* response) override;
  grpc::ServerUnaryReactor* TorchStoreBatch(grpc::CallbackServerContext* ctx,
                                            const v1::TorchStoreBatchRequest* request,
                                            v1::TorchStoreBatchResponse* response) override;

 private:
  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  const CallAuth* const auth_;
  ParkStreams park_streams_;
};

}  // namespace cohort
