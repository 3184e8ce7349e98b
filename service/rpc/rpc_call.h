#pragma once

#include <atomic>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "service/core/coordination_service.h"
#include "service/rpc/status_translation.h"

namespace cohort {

// Request counts and latencies by protocol, method and code.
class RpcMetrics {
 public:
  explicit RpcMetrics(MetricsRegistry& registry);
  void Record(Protocol protocol, const char* method, absl::StatusCode code, absl::Duration latency);

 private:
  Family<Counter>& requests_;
  Family<Histogram>& latency_;
};

// One unary call of any protocol. Handlers answer through Reply(); a parked call takes a
// waiter id first, so that the client going away (deadline, cancellation) cancels it in
// the core. The reactor deletes itself once gRPC is done with it.
class RpcCall : public grpc::ServerUnaryReactor {
 public:
  RpcCall(CoordinationService* service, RpcMetrics* metrics, Protocol protocol, const char* method)
      : service_(service),
        metrics_(metrics),
        protocol_(protocol),
        method_(method),
        start_(absl::Now()) {}

  RpcCall* Reply(const absl::Status& status) {
    if (metrics_) metrics_->Record(protocol_, method_, status.code(), absl::Now() - start_);
    Finish(ToGrpcStatus(status, protocol_));
    return this;
  }

  WaiterId Park() {
    WaiterId id = service_->NewWaiterId();
    waiter_.store(id);
    return id;
  }

  void OnCancel() override {
    WaiterId id = waiter_.load();
    if (id != 0) {
      service_->Cancel(id, absl::CancelledError("the client cancelled the call or its deadline "
                                                "passed"));
    }
  }
  void OnDone() override { delete this; }

 private:
  CoordinationService* const service_;
  RpcMetrics* const metrics_;
  const Protocol protocol_;
  const char* const method_;
  const absl::Time start_;
  std::atomic<WaiterId> waiter_{0};
};

}  // namespace cohort
