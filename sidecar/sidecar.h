#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/coordination_agent.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "runtime/objstore/object_store_server.h"
#include "service/proxy/proxy_server.h"
#include "sidecar/cluster_topology.h"
#include "sidecar/gpu/gpu_monitor.h"
#include "sidecar/gpu_metrics.h"
#include "sidecar/workload_watch.h"

namespace cohort {

struct SidecarOptions {
  std::string coordinator_address;
  std::string workload_job = "worker";  // whose task this pod runs
  std::string sidecar_job = "sidecar";  // the auxiliary job the sidecars register in
  int task_id = 0;
  int num_tasks = 1;
  PodIdentity pod;
  std::string pod_ip;
  std::string http_listen = "0.0.0.0:9477";
  std::string handoff_dir;  // empty: no files, only GET /v1/cluster
  absl::Duration sample_interval = absl::Seconds(5);
  absl::Duration heartbeat_interval = absl::Seconds(5);
  // --heartbeat-timeout: the agent's unreachable_timeout (coordination_agent.h).
  absl::Duration unreachable_timeout = absl::Seconds(30);
  absl::Duration register_timeout = absl::Minutes(10);
  bool dcgm_metrics = false;
  gpu::GpuMonitorOptions gpu;
  // GPUs the pod's workload asks for (its nvidia.com/gpu limits; -1: unknown, e.g. DRA): fewer
  // seen is said in the log and in cohort_sidecar_gpus_missing.
  int expected_gpus = -1;
  // Where the pod's GPUs come from when NVML shows the node's: the kubelet's PodResources
  // socket (asked for the devices of `pod_gpu_resources` given to the pod's other
  // containers), or a fixed list of UUIDs. Neither: every GPU NVML shows is the pod's.
  std::string pod_resources_socket;
  std::vector<std::string> pod_gpu_resources = {"nvidia.com/gpu"};
  std::vector<std::string> gpu_uuids;
  WorkloadWatch::Options workload;
  // Empty: no proxy. Else the workload's coordinator endpoint (every coordinator protocol,
  // forwarded to coordinator_address), which rides out coordinator outages up to
  // outage_tolerance; the sidecar's own agent then goes through it too.
  std::string proxy_listen;
  // With the proxy: PyTorch's TCPStore protocol served here too (loopback), forwarded to the
  // coordinator (--torch-store-proxy-listen). Empty: not served.
  std::string torch_store_proxy_listen;
  absl::Duration outage_tolerance = absl::Seconds(60);
  // The job's token (--auth-token-file), sent with every call to the coordinator: the
  // proxy's on the workload's behalf, and the agent's own. Empty: none.
  std::string auth_token;
  // TLS to the coordinator (--tls-*): null is plain. The proxy's upstream uses it, and so
  // does the agent when there is no proxy (through the proxy it talks over loopback).
  std::shared_ptr<grpc::ChannelCredentials> coordinator_credentials;
  std::string tls_server_name;
  // The pod's object store of the task runtime (listen set: hosted here). It reaches the
  // scheduler through the proxy, and serves the pod's workload without the token.
  std::optional<runtime::ObjectStoreOptions> objstore;
  // The pod runs task workers (a CoordinatedJob's spec.tasks), not a task of a gang: no agent
  // registers and the workload's exit is nobody's error; ready once the store registered.
  bool task_runtime = false;
};

// The pod's agent: registers this pod in the sidecar job, publishes the node's GPUs and
// learns the cluster's, hands rank and topology to the workload (files and GET
// /v1/cluster), serves metrics, and reports to the coordinator at once when a GPU turns
// unhealthy or the workload exits without shutting down, so the whole gang learns in
// milliseconds rather than after a heartbeat timeout.
class Sidecar {
 public:
  Sidecar(SidecarOptions options, MetricsRegistry* registry);
  ~Sidecar();

  // Serves HTTP and starts the background work; fails only when the port cannot be bound.
  absl::Status Start();
  // A clean stop (SIGTERM): no error is reported; calls in flight to the coordinator end.
  void Stop();
  int http_port() const;
  // The proxy's port (0 without one).
  int proxy_port() const { return proxy_ ? proxy_->port() : 0; }
  // The object store's address (empty without one).
  std::string objstore_address() const { return objstore_ ? objstore_->address() : ""; }

 private:
  void Lifecycle();
  void SampleLoop();
  bool Connected();
  absl::Status ExchangeTopology();
  void Report(const std::string& reason, const absl::Status& error);
  void OnWorkloadExit(const std::string& what);
  void OnGpuProblem(const gpu::HealthEvent& event);
  bool SleepUnlessStopped(absl::Duration d);
  std::string TaskString() const;
  void RegisterMetrics();
  std::vector<CollectedFamily> CollectAgentMetrics() const;
  HttpResponse ClusterResponse() const;

  const SidecarOptions options_;
  MetricsRegistry* const registry_;
  // Where the workload and the sidecar's agent reach the coordinator: the proxy, if any.
  std::string CoordinatorEndpoint() const;

  std::unique_ptr<torch::TorchStoreMetrics> torch_store_metrics_;  // outlives proxy_
  std::unique_ptr<ProxyServer> proxy_;
  std::unique_ptr<runtime::ObjectStoreServer> objstore_;
  CoordinationAgent agent_;
  std::unique_ptr<gpu::GpuMonitor> gpus_;
  std::unique_ptr<GpuMetrics> gpu_metrics_;
  std::string last_connect_error_;  // Connected()'s thread only
  // The pod's GPUs against what its workload asked for (RegisterMetrics).
  int gpus_expected_ = -1;
  int gpus_missing_ = 0;
  // Decides GpuMonitorOptions::only_uuids; says how in `how`.
  void ChoosePodGpus(gpu::GpuMonitorOptions* options, std::string* how) const;
  std::unique_ptr<WorkloadWatch> workload_;
  HttpServer http_;
  std::thread lifecycle_thread_;
  std::thread sample_thread_;

  Histogram* heartbeat_rtt_ = nullptr;
  Family<Counter>* heartbeats_ = nullptr;
  Family<Counter>* reported_ = nullptr;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time cluster_complete_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::optional<ClusterView> view_ ABSL_GUARDED_BY(mu_);
  // An error found before the agent connected, sent once it does.
  std::optional<std::pair<std::string, absl::Status>> pending_report_ ABSL_GUARDED_BY(mu_);
  std::string last_error_reason_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  absl::Time last_error_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace cohort
