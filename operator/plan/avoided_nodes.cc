// Faults blamed on hardware (policies.h): a worker's GPU fault puts its node in
// status.avoidedNodes for failurePolicy.avoidNodeAfterGPUFault, and the workers made while it
// lasts keep off it. The node is the pod's, as the API server has it: the sidecar's report
// names the GPU, and the pod says where it ran.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// Longest message kept with an avoided node; the Event has the whole of it.
constexpr size_t kMaxAvoidedMessage = 300;

// Adds or extends `node`'s entry; when the list is full, the entry that ends first makes room.
void Avoid(api::JobStatus& st, const std::string& node, absl::Time until,
           const std::string& message) {
  const std::string kept = message.substr(0, kMaxAvoidedMessage);
  for (api::AvoidedNode& a : st.avoided_nodes) {
    if (a.node != node) continue;
    a.until = std::max(a.until, until);
    a.reason = api::failure_reason::kGPUFault;
    a.message = kept;
    return;
  }
  if (st.avoided_nodes.size() >= api::kMaxAvoidedNodes) {
    st.avoided_nodes.erase(std::min_element(
        st.avoided_nodes.begin(), st.avoided_nodes.end(),
        [](const api::AvoidedNode& a, const api::AvoidedNode& b) { return a.until < b.until; }));
  }
  st.avoided_nodes.push_back({node, until, api::failure_reason::kGPUFault, kept});
}

}  // namespace

bool NoteGpuFaults(Planner& P, const JobPods& pods,
                   const std::vector<CoordinatorView::TaskError>& errors) {
  const absl::Duration avoid_for = P.job.spec.failure_policy.avoid_node_after_gpu_fault;
  bool any = false;
  for (const CoordinatorView::TaskError& e : errors) {
    if (e.reason != FailureReason::kGpuFault) continue;
    any = true;
    const int index = CoordinatorView::TaskIndex(e.task);
    const ObservedPod* pod =
        index >= 0 && index < static_cast<int>(pods.workers.size()) ? pods.workers[index] : nullptr;
    const std::string node = pod ? pod->node : "";
    std::string message =
        absl::StrCat("worker ", index, node.empty() ? "" : " on node ", node, ": ", e.message);
    if (node.empty()) {
      absl::StrAppend(&message, "; its node is not known, so no node is avoided");
    } else if (avoid_for == absl::ZeroDuration()) {
      absl::StrAppend(&message,
                      "; the node is not avoided (failurePolicy.avoidNodeAfterGPUFault 0s)");
    } else {
      const absl::Time until = P.now() + avoid_for;
      Avoid(P.st(), node, until, e.message);
      absl::StrAppend(&message, "; the gang's workers keep off node ", node, " until ",
                      api::FormatRfc3339(until), " (failurePolicy.avoidNodeAfterGPUFault ",
                      absl::FormatDuration(avoid_for), ")");
    }
    P.Event("Warning", "GPUFault", message);
  }
  return any;
}

void PlanAvoidedNodes(Planner& P) {
  std::vector<api::AvoidedNode>& avoided = P.st().avoided_nodes;
  avoided.erase(std::remove_if(avoided.begin(), avoided.end(),
                               [&P](const api::AvoidedNode& a) { return a.until <= P.now(); }),
                avoided.end());
  P.placement.avoided_nodes.clear();
  for (const api::AvoidedNode& a : avoided) {
    P.placement.avoided_nodes.push_back(a.node);
    // Planned again when it ends, to drop it from the status.
    P.Requeue(a.until - P.now());
  }
}

}  // namespace cohort::controller::planning
