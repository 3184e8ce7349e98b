#pragma once
// cohort.v1.Coordinator/Park on the coordinator's side: a client's waiting calls (error
// polls, blocking gets, barriers) multiplexed on one stream. Each call is the backend's own
// call with its own waiter; a response goes out when it ends. What a parked call costs the
// coordinator is then the core's record of it, not an HTTP/2 stream and a gRPC call each.

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "service/backend/coordination_backend.h"
#include "service/rpc/rpc_call.h"

namespace cohort {

class ParkStream;

// The Park streams of one server. A stream lasts as long as its client keeps it; the server
// ends them all when it shuts down (the client sees UNAVAILABLE and finds the coordinator
// again), rather than letting the shutdown wait for its deadline.
class ParkStreams {
 public:
  ParkStreams(CoordinationBackend* backend, RpcMetrics* metrics)
      : backend_(backend), metrics_(metrics) {}
  ~ParkStreams();

  // A new stream's reactor; it deletes itself when gRPC is done with it.
  grpc::ServerBidiReactor<v1::ParkRequest, v1::ParkResponse>* NewStream();
  // Ends every stream with `why` (their open calls are cancelled); new ones end at once.
  void CloseAll(const absl::Status& why);

 private:
  friend class ParkStream;
  void Forget(ParkStream* stream);

  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  absl::Mutex mu_;
  absl::flat_hash_set<ParkStream*> streams_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
