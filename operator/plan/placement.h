// Where a pod is placed beyond what its template says: the job's PodGroup, which the gang's
// workers join (spec.gangScheduling), and what Kueue's admission gives the pod's pod set (its
// flavors' node labels and tolerations, admission checks' updates, the topology gate). The pod
// builders (CoordinatorPod, WorkerPod, DriverPod in children.h) take a Placement and apply it
// last, so that each pod is made once, whole; a queued job's admission is checked against its
// pods (kueue::CheckAdmission) before the plan makes any.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"

namespace cohort::controller {

namespace kueue {
// What a pod of an admitted pod set gets (Kueue's PodSetInfo).
struct PodSetInfo {
  bool topology_gate = false;  // the admission assigns the pod set a topology (TAS)
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> node_selector;
  std::vector<nlohmann::json> tolerations;
};
}  // namespace kueue

struct Placement {
  // The gang's workers join the job's PodGroup (the job has spec.gangScheduling).
  bool pod_group = false;
  // A queued job's admission, by pod set name (kueue::PodSetOf); null for a job not queued.
  const std::map<std::string, kueue::PodSetInfo>* pod_sets = nullptr;
  // Nodes the gang's workers keep off (status.avoidedNodes, while they last): WorkerPod
  // excludes them by name (AvoidNodes).
  std::vector<std::string> avoided_nodes;
};

// The placement of the pods the plan makes for `job`: its PodGroup, and `pod_sets` when Kueue
// admitted it.
Placement PlacementOf(const api::CoordinatedJob& job,
                      const std::map<std::string, kueue::PodSetInfo>* pod_sets = nullptr);

// Applies `placement` to a pod `job`'s builders made.
void Place(const api::CoordinatedJob& job, const Placement& placement, nlohmann::json* pod);

// Keeps `pod` off `nodes`: every term of its required node affinity (one, if it has none) gains
// a `metadata.name NotIn nodes` field requirement. The terms are alternatives, so each must
// exclude the nodes; what else the template asks of a node stays as it is.
void AvoidNodes(const std::vector<std::string>& nodes, nlohmann::json* pod);

}  // namespace cohort::controller
