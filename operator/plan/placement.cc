// Placement (placement.h): a pod joins its job's PodGroup, and gets its pod set's admission.
#include "operator/plan/placement.h"

#include "operator/plan/children.h"
#include "operator/plan/kueue.h"

namespace cohort::controller {

Placement PlacementOf(const api::CoordinatedJob& job,
                      const std::map<std::string, kueue::PodSetInfo>* pod_sets) {
  Placement placement;
  placement.pod_group = job.spec.gang_scheduling.has_value();
  placement.pod_sets = pod_sets;
  return placement;
}

void AvoidNodes(const std::vector<std::string>& nodes, nlohmann::json* pod) {
  if (nodes.empty()) return;
  const nlohmann::json requirement = {
      {"key", "metadata.name"}, {"operator", "NotIn"}, {"values", nodes}};
  nlohmann::json& selector =
      (*pod)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  nlohmann::json& terms = selector["nodeSelectorTerms"];
  if (!terms.is_array() || terms.empty()) terms = nlohmann::json::array({nlohmann::json::object()});
  for (nlohmann::json& term : terms) {
    if (!term.is_object()) term = nlohmann::json::object();
    nlohmann::json& fields = term["matchFields"];
    if (!fields.is_array()) fields = nlohmann::json::array();
    fields.push_back(requirement);
  }
}

void Place(const api::CoordinatedJob& job, const Placement& placement, nlohmann::json* pod) {
  if (placement.pod_group) JoinPodGroup(job, pod);
  if (placement.pod_sets) {
    auto it = placement.pod_sets->find(kueue::PodSetOf(*pod));
    if (it != placement.pod_sets->end()) kueue::ApplyPodSetInfo(it->second, pod);
  }
}

}  // namespace cohort::controller
