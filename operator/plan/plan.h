// What the plan decides for a CoordinatedJob: objects to create, write back or delete, the
// job's status and Events, and when to look again. The controller applies it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"

namespace cohort::controller {

struct PlannedEvent {
  std::string type;  // Normal or Warning
  std::string reason;
  std::string message;
};

struct Plan {
  std::vector<nlohmann::json> create;  // in this order
  // Objects to write back whole (PUT, conditional on their resourceVersion): a NetworkPolicy
  // whose spec someone changed.
  std::vector<nlohmann::json> update;
  std::vector<std::string> delete_pods;
  // The job's NetworkPolicy, made by an operator that now runs with --network-policy=false.
  bool delete_network_policy = false;
  bool delete_job = false;  // ttlSecondsAfterFinished has passed
  api::JobStatus status;
  std::vector<PlannedEvent> events;
  // A failure is being observed: the controller remembers when it first saw one, and the
  // failure reasons seen (Observed::failure_reasons).
  bool failure_seen = false;
  std::vector<std::string> failure_reasons;
  std::optional<absl::Duration> requeue_after;
  // Kueue (kueue.h): the job's Workload with the status to write (PUT of /status, conditional
  // on its resourceVersion); its finalizer to remove (the job finished, or its Workload is
  // going), after that status; the Workload to delete (it no longer describes the job).
  std::optional<nlohmann::json> workload_status;
  bool release_workload = false;
  bool delete_workload = false;
};

// Condition types the operator sets.
inline constexpr char kConditionReady[] = "Ready";
inline constexpr char kConditionRestarting[] = "Restarting";
inline constexpr char kConditionSucceeded[] = "Succeeded";
inline constexpr char kConditionFailed[] = "Failed";
inline constexpr char kConditionSuspended[] = "Suspended";

}  // namespace cohort::controller
