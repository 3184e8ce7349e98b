// FailureReporter: tells the coordinator at once that this pod failed (a GPU turned unhealthy,
// the workload exited without shutting down, the workload hung), so the whole gang learns in
// milliseconds rather than after a heartbeat timeout.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/coordination_agent.h"
#include "common/failure_reason.h"
#include "common/metrics.h"
#include "sidecar/gpu/gpu_health.h"
#include "sidecar/task_identity.h"

namespace cohort {

// Reports through the sidecar's agent, each with its typed reason (the coordinator's snapshot
// and the operator's failure rules go by it); a failure found before it connected goes once
// it does.
class FailureReporter {
 public:
  FailureReporter(TaskIdentity task, CoordinationAgent* agent, MetricsRegistry* registry);

  // cohort_sidecar_errors_reported_total and the last error found.
  void RegisterMetrics();
  // kGpuFault.
  void OnGpuProblem(const gpu::HealthEvent& event);
  // kWorkloadExit, unless the workload shut down through the coordinator.
  void OnWorkloadExit(const std::string& what);
  // kHang: the workload made no progress; `description` says how long and what was seen.
  void OnHang(const std::string& description);
  // Once the agent connected: the failure found before, if any.
  void SendPending();

 private:
  // One failure: its metric label (cohort_sidecar_errors_reported_total{reason}), the error
  // and its reason for the coordinator.
  struct Failure {
    std::string label;
    absl::Status error;
    FailureReason reason = FailureReason::kUnspecified;
  };

  void Report(Failure failure);
  std::vector<CollectedFamily> CollectMetrics() const;

  const TaskIdentity task_;
  CoordinationAgent* const agent_;
  MetricsRegistry* const registry_;
  Family<Counter>* reported_ = nullptr;

  mutable absl::Mutex mu_;
  std::optional<Failure> pending_ ABSL_GUARDED_BY(mu_);
  std::string last_error_reason_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  absl::Time last_error_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace cohort
