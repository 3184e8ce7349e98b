#pragma once
// RpcCall and RpcMetrics: what every protocol adapter's unary calls share.

#include <atomic>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "common/grpc_auth.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/coordination_backend.h"
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

// The client's deadline; InfiniteFuture when it set none.
inline absl::Time DeadlineOf(const grpc::ServerContextBase& ctx) {
  auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// One unary call of any protocol. Handlers take the call's context (a waiter id and the
// client's deadline) and answer through Reply(); the client going away (deadline,
// cancellation) cancels the waiter in the backend. The reactor deletes itself once gRPC is
// done with it.
class RpcCall : public grpc::ServerUnaryReactor {
 public:
  // `auth`: the credential every call must carry (null: none).
  RpcCall(CoordinationBackend* backend, RpcMetrics* metrics, Protocol protocol, const char* method,
          grpc::CallbackServerContext* ctx, const CallAuth* auth = nullptr)
      : backend_(backend),
        metrics_(metrics),
        protocol_(protocol),
        method_(method),
        start_(absl::Now()),
        deadline_(ctx ? DeadlineOf(*ctx) : absl::InfiniteFuture()),
        refusal_(auth && ctx ? auth->Check(*ctx) : absl::OkStatus()) {
    // A request id (a sidecar's proxy): read only once the credential passed.
    if (refusal_.ok() && ctx) {
      auto& metadata = ctx->client_metadata();
      if (auto it = metadata.find(kRequestMetadataKey); it != metadata.end()) {
        absl::StatusOr<RequestId> id =
            ParseRequestId(absl::string_view(it->second.data(), it->second.size()));
        if (id.ok()) {
          request_ = *std::move(id);
        } else {
          refusal_ = id.status();
        }
      }
    }
  }

  // True when the call lacks the credential (or carries a malformed request id): it has been
  // answered UNAUTHENTICATED (INVALID_ARGUMENT), and the handler returns it without looking
  // at the request. Every handler asks first.
  bool Refused() {
    if (refusal_.ok()) return false;
    Reply(refusal_);
    return true;
  }

  RpcCall* Reply(const absl::Status& status) {
    if (metrics_) metrics_->Record(protocol_, method_, status.code(), absl::Now() - start_);
    Finish(ToGrpcStatus(status, protocol_));
    return this;
  }

  // The context to pass to the backend; registers the waiter that cancellation ends.
  CallContext Context() {
    WaiterId id = backend_->NewWaiterId();
    waiter_.store(id);
    return CallContext{id, deadline_, request_};
  }

  void OnCancel() override {
    WaiterId id = waiter_.load();
    if (id != 0) {
      backend_->Cancel(id, absl::CancelledError("the client cancelled the call or its deadline "
                                                "passed"));
    }
  }
  void OnDone() override { delete this; }

 private:
  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  const Protocol protocol_;
  const char* const method_;
  const absl::Time start_;
  const absl::Time deadline_;
  absl::Status refusal_;
  std::optional<RequestId> request_;
  std::atomic<WaiterId> waiter_{0};
};

}  // namespace cohort
