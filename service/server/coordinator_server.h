#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_tls.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/local_backend.h"
#include "service/core/coordination_service.h"
#include "service/rpc/cohort_service.h"
#include "service/rpc/distributed_runtime_service.h"
#include "service/rpc/rpc_call.h"
#include "service/rpc/tensorflow_service.h"
#include "service/rpc/xla_service.h"

namespace cohort {

struct ServerOptions {
  std::string listen = "0.0.0.0:8476";
  std::string http_listen = "0.0.0.0:8477";  // empty: no HTTP endpoint
  TlsFiles tls;                              // empty cert: insecure, like upstream
  // The job's token every gRPC call must carry (empty: none, like upstream).
  std::string auth_token;
  // The largest message a caller with the token may send (gRPC answers RESOURCE_EXHAUSTED
  // past it): MaxMessageBytes of the service's config. A caller without the token is refused
  // before its message is read, whatever it is.
  int max_receive_message_bytes = 4 << 20;
  // More services on the same port (the task runtime's Scheduler). Not owned.
  std::vector<grpc::Service*> extra_services;
};

// The largest message a call needs: the largest key and value the store takes, with 1 MiB for
// the rest of the call (gRPC's limit is an int: at most 2 GiB - 1).
int MaxMessageBytes(const ServiceConfig& config);

// Serves one CoordinationService on one gRPC port in every protocol, drives its timers,
// and serves /metrics, /healthz and /readyz.
class CoordinatorServer {
 public:
  CoordinatorServer(CoordinationService* service, MetricsRegistry* registry, ServerOptions options);
  ~CoordinatorServer();

  absl::Status Start();
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_ ? http_->port() : 0; }
  // Ends parked calls with `why`, stops accepting, and waits for the threads.
  void Shutdown(const absl::Status& why);

 private:
  void RunTimers();

  CoordinationService* const service_;
  MetricsRegistry* const registry_;
  const ServerOptions options_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<CallAuth> auth_;  // null without a token
  LocalBackend backend_;
  TensorflowCoordinationService tensorflow_;
  XlaCoordinationService xla_;
  DistributedRuntimeService distributed_runtime_;
  CohortCoordinatorService cohort_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  int grpc_port_ = 0;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_thread_;
};

}  // namespace cohort
