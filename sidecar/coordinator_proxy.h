// CoordinatorProxy: the workload's coordinator endpoint inside the pod (--proxy-listen), and
// how the pod's own clients reach the coordinator with or without it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "service/proxy/proxy_server.h"

namespace cohort {

// Where the coordinator is and what a call to it carries.
struct CoordinatorAccess {
  std::string address;  // HOST:PORT
  // The job's token (--auth-token-file), sent with every call to the coordinator: the
  // proxy's on the workload's behalf, and the agent's own. Empty: none.
  std::string auth_token;
  // TLS to the coordinator (--tls-*): null is plain.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string tls_server_name;
};

// Every coordinator protocol, served in the pod and forwarded to the coordinator, riding out
// its outages up to outage_tolerance. Without a listen address it serves nothing and the pod
// reaches the coordinator directly.
class CoordinatorProxy {
 public:
  struct Options {
    // Empty: no proxy.
    std::string listen;
    // PyTorch's TCPStore protocol served here too (loopback), forwarded to the coordinator
    // (--torch-store-proxy-listen). Empty: not served.
    std::string torch_store_listen;
    absl::Duration outage_tolerance = absl::Seconds(60);
  };

  CoordinatorProxy(Options options, CoordinatorAccess coordinator, MetricsRegistry* registry);

  // Binds the port and starts connecting to the coordinator.
  absl::Status Start();
  // Ends every call in flight and stops serving.
  void Stop();
  // cohort_sidecar_proxy_*: the link to the coordinator and the calls on it.
  void RegisterMetrics();

  // 0 without a proxy.
  int port() const { return server_ ? server_->port() : 0; }
  // The coordinator itself (--coordinator), for messages.
  const std::string& coordinator_address() const { return coordinator_.address; }
  // How the pod's own clients reach the coordinator: through the proxy on loopback, plain (its
  // upstream carries the TLS), or without a proxy as configured.
  CoordinatorAccess PodAccess() const;
  // The proxy would hold a call until the coordinator is back (false without a proxy).
  bool CoordinatorUnreachable() const;
  // The pod's calls that came back OK, other than heartbeats and error polls (0 without a
  // proxy): one sign of the workload's progress.
  uint64_t finished_calls() const { return server_ ? server_->backend().finished_calls() : 0; }
  // The pod's calls open now that wait on its peers (barriers): its workload is
  // waiting on its peers.
  int64_t waiting_calls() const { return server_ ? server_->backend().waiting_calls() : 0; }

 private:
  std::vector<CollectedFamily> CollectMetrics() const;

  const Options options_;
  const CoordinatorAccess coordinator_;
  MetricsRegistry* const registry_;
  std::unique_ptr<torch::TorchStoreMetrics> torch_store_metrics_;  // outlives server_
  std::unique_ptr<ProxyServer> server_;
};

}  // namespace cohort
