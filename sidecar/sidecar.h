#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "agent/coordination_agent.h"
#include "common/metrics.h"
#include "runtime/objstore/object_store_server.h"
#include "sidecar/coordinator_proxy.h"
#include "sidecar/failure_reporter.h"
#include "sidecar/gpu_watch.h"
#include "sidecar/pod_object_store.h"
#include "sidecar/progress_watch.h"
#include "sidecar/sidecar_endpoints.h"
#include "sidecar/sidecar_registration.h"
#include "sidecar/stack_dump.h"
#include "sidecar/task_identity.h"
#include "sidecar/workload_watch.h"

namespace cohort {

// Each part's options, and what several parts share: who the pod is and how to reach the
// coordinator.
struct SidecarOptions {
  TaskIdentity task;
  CoordinatorAccess coordinator;
  // Empty listen: no proxy. Else the workload's coordinator endpoint (every coordinator
  // protocol, forwarded to the coordinator), which rides out coordinator outages up to
  // outage_tolerance; the sidecar's own agent then goes through it too, and so does the
  // object store.
  CoordinatorProxy::Options proxy;
  // The pod's object store of the task runtime (listen set: hosted here). It reaches the
  // scheduler through the proxy; every call to it carries the job's token, the pod's
  // workload's too (PodObjectStore).
  std::optional<runtime::ObjectStoreOptions> objstore;
  GpuWatch::Options gpus;
  WorkloadWatch::Options workload;
  // The workload's progress (its progress file, its calls through the proxy, its GPUs),
  // watched from the moment the gang has registered; a stall past the timeout is reported
  // as a hang, with the workload's stacks (`stacks`) when the sidecar may trace it.
  ProgressWatch::Options progress;
  StackDumpOptions stacks;
  SidecarRegistration::Options registration;
  SidecarEndpoints::Options http;
  // The pod runs task workers (a CoordinatedJob's spec.tasks), not a task of a gang: no agent
  // registers and the workload's exit is nobody's error; ready once the store registered.
  bool task_runtime = false;
};

// The pod's agent: registers this pod in the sidecar job, publishes the node's GPUs and
// learns the cluster's, hands rank and topology to the workload (files and GET
// /v1/cluster), serves metrics, and reports to the coordinator at once when a GPU turns
// unhealthy, the workload exits without shutting down or makes no progress for
// --progress-timeout, so the whole gang learns in milliseconds rather than after a heartbeat
// timeout. Each of these is a part of its own;
// the Sidecar starts them in order and stops them.
class Sidecar {
 public:
  Sidecar(SidecarOptions options, MetricsRegistry* registry);
  ~Sidecar();

  // Serves HTTP and starts the background work; fails only when the port cannot be bound.
  absl::Status Start();
  // A clean stop (SIGTERM): no error is reported; calls in flight to the coordinator end.
  void Stop();
  int http_port() const { return endpoints_.port(); }
  // The proxy's port (0 without one).
  int proxy_port() const { return proxy_.port(); }
  // The object store's address (empty without one).
  std::string objstore_address() const { return objstore_.address(); }

 private:
  // Once the gang has registered: the progress watch starts.
  void OnRegistered();
  // The workload made no progress for the timeout: its stacks, then the report.
  void OnStall(const std::string& description);

  const SidecarOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> progress_started_{false};
  MetricsRegistry* const registry_;
  RealClock clock_;

  // Each after those it uses; Start and Stop say the order they run in.
  CoordinatorProxy proxy_;
  PodObjectStore objstore_;
  CoordinationAgent agent_;  // the registration's, and the reporter's way to the coordinator
  FailureReporter reporter_;
  GpuWatch gpus_;
  WorkloadWatch workload_;
  ProgressWatch progress_;
  SidecarRegistration registration_;
  SidecarEndpoints endpoints_;
};

}  // namespace cohort
