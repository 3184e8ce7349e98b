// SidecarRegistration: this pod's sidecar in the sidecar job, and the cluster it hands to the
// workload.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/coordination_agent.h"
#include "common/metrics.h"
#include "sidecar/cluster_topology.h"
#include "sidecar/coordinator_proxy.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/task_identity.h"

namespace cohort {

// Waits for the coordinator and registers the sidecar's agent (as the incarnation this pod's
// sidecar had before a restart), publishes the pod's GPUs and learns every other sidecar's,
// then hands rank and topology to the workload (files and GET /v1/cluster): ready from then
// on, until the job fails or the sidecar stops.
class SidecarRegistration {
 public:
  struct Options {
    std::string sidecar_job = "sidecar";  // the auxiliary job the sidecars register in
    std::string handoff_dir;              // empty: no files, only GET /v1/cluster
    absl::Duration heartbeat_interval = absl::Seconds(5);
    // --heartbeat-timeout: the agent's unreachable_timeout (coordination_agent.h).
    absl::Duration unreachable_timeout = absl::Seconds(30);
    absl::Duration register_timeout = absl::Minutes(10);
  };

  // The agent goes through `proxy` when it runs one. `on_connected` runs on the registration's
  // thread once the agent has connected, before the topology exchange.
  SidecarRegistration(Options options, TaskIdentity task, CoordinationAgent* agent,
                      const CoordinatorProxy* proxy, MetricsRegistry* registry,
                      std::function<void()> on_connected);
  ~SidecarRegistration();
  SidecarRegistration(const SidecarRegistration&) = delete;
  SidecarRegistration& operator=(const SidecarRegistration&) = delete;

  // cohort_sidecar_heartbeat*, _agent_state, _ready and _seconds_since_cluster_complete.
  void RegisterMetrics();
  // Registers on a thread of its own; `gpus` are the pod's, published to the other sidecars.
  void Start(gpu::GpuInventory gpus);
  // A task runtime pod registers no agent: ready as soon as the sidecar serves.
  void ReadyWithoutRegistering();
  // Not ready any more, and no new attempt to register: the first step of the sidecar's stop,
  // so that nothing registers while the rest of it stops.
  void BeginStop();
  // Ends the calls in flight, then tells the coordinator of the stop.
  void Stop();

  bool ready() const;
  // The cluster handed to the workload; nullopt until it is complete.
  std::optional<ClusterView> cluster() const;

 private:
  void Run();
  bool Connected();
  absl::Status ExchangeTopology();
  bool SleepUnlessStopped(absl::Duration d);
  std::vector<CollectedFamily> CollectMetrics() const;

  const Options options_;
  const TaskIdentity task_;
  CoordinationAgent* const agent_;
  const CoordinatorProxy* const proxy_;
  MetricsRegistry* const registry_;
  const std::function<void()> on_connected_;
  gpu::GpuInventory gpus_;          // set before the thread starts
  std::string last_connect_error_;  // the thread's only
  std::thread thread_;

  Histogram* heartbeat_rtt_ = nullptr;
  Family<Counter>* heartbeats_ = nullptr;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time cluster_complete_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::optional<ClusterView> view_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
