#pragma once
// ProxyServer: the workload's coordinator endpoint inside a pod. The same four protocol
// adapters as the coordinator's, over an UpstreamBackend that forwards to the coordinator
// and rides out its restarts; and the task runtime's Scheduler, passed on call by call.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "service/proxy/scheduler_forward.h"
#include "service/proxy/upstream_backend.h"
#include "service/rpc/cohort_service.h"
#include "service/rpc/distributed_runtime_service.h"
#include "service/rpc/tensorflow_service.h"
#include "service/rpc/xla_service.h"
#include "service/torch/torch_store_server.h"

namespace cohort {

struct ProxyOptions {
  std::string listen = "127.0.0.1:8476";  // HOST:PORT
  UpstreamOptions upstream;
  // Also serves PyTorch's TCPStore protocol here (a loopback HOST:PORT), each connection
  // forwarded to the coordinator (torch::TorchStoreProxySession); empty: not served.
  std::string torch_store_listen;
  // Counts its connections and commands (cohort_sidecar_torch_store_*); null: none.
  torch::TorchStoreMetrics* torch_store_metrics = nullptr;
};

// "HOST:PORT" with a port number (0 picks one); what is wrong with it otherwise.
absl::Status ValidateListenAddress(const std::string& address);

class ProxyServer {
 public:
  explicit ProxyServer(ProxyOptions options);
  ~ProxyServer();

  // Binds the port and starts connecting to the coordinator.
  absl::Status Start();
  int port() const { return port_; }
  // The TCPStore port (0 without one).
  int torch_store_port() const { return torch_store_ ? torch_store_->port() : 0; }
  UpstreamBackend& backend() { return backend_; }
  // Ends every call with `why` and stops serving.
  void Shutdown(const absl::Status& why);

 private:
  const ProxyOptions options_;
  UpstreamBackend backend_;
  TensorflowCoordinationService tensorflow_;
  XlaCoordinationService xla_;
  DistributedRuntimeService distributed_runtime_;
  CohortCoordinatorService cohort_;
  SchedulerForward scheduler_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<torch::TorchStoreServer> torch_store_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace cohort
