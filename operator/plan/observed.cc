// What the operator reads from the API server's pods (job_plan.h: ObservePod), and what ended
// a pod as failure rules name it.
#include "operator/plan/observed.h"

#include "absl/strings/str_cat.h"
#include "operator/plan/planner.h"

namespace cohort::controller {

using planning::Field;
using planning::Int;
using planning::IntLabel;
using planning::Items;
using planning::Text;
using json = nlohmann::json;

std::string CoordinatorView::TaskError::Describe() const {
  return absl::StrCat(auxiliary ? "the sidecar task " : "task ", task, " is in error: ", message);
}

std::vector<std::string> CoordinatorView::PacedTasks() const {
  std::vector<std::string> paced;
  for (const auto& [task, p] : progress) {
    if (p.busy_seconds_per_step) paced.push_back(task);
  }
  return paced;
}

int CoordinatorView::TaskIndex(const std::string& task) {
  const size_t at = task.rfind("/task:");
  int index = -1;
  if (at == std::string::npos || !absl::SimpleAtoi(task.substr(at + 6), &index) || index < 0) {
    return -1;
  }
  return index;
}

std::optional<PodGroupScheduled> ObservePodGroupScheduled(const json& group) {
  for (const json& c : Items(Field(Field(group, "status"), "conditions"))) {
    const std::string type = Text(Field(c, "type"));
    if (type != "PodGroupInitiallyScheduled" && type != "PodGroupScheduled") continue;
    return PodGroupScheduled{Text(Field(c, "status")) == "True", Text(Field(c, "reason")),
                             Text(Field(c, "message"))};
  }
  return std::nullopt;
}

ObservedPod ObservePod(const json& pod) {
  // The API server hands out well-formed pods, but nothing here trusts a shape: a field of
  // an unexpected type reads as absent, never as an exception.
  ObservedPod p;
  const json& metadata = Field(pod, "metadata");
  p.name = Text(Field(metadata, "name"));
  p.uid = Text(Field(metadata, "uid"));
  const json& labels = Field(metadata, "labels");
  p.role = Text(Field(labels, kRoleLabel));
  p.index = IntLabel(labels, kIndexLabel);
  p.restart = IntLabel(labels, kRestartLabel);
  const json& deletion = Field(metadata, "deletionTimestamp");
  p.terminating = !deletion.is_null();
  if (deletion.is_string()) {
    // The API server sets deletionTimestamp to the request's time plus the grace period.
    std::optional<absl::Time> deadline = api::ParseRfc3339(deletion.get<std::string>());
    const json& grace = Field(metadata, "deletionGracePeriodSeconds");
    if (deadline && grace.is_number_integer()) {
      p.deletion_requested_at = *deadline - absl::Seconds(grace.get<int64_t>());
    }
  }
  p.node = Text(Field(Field(pod, "spec"), "nodeName"));
  const json& status = Field(pod, "status");
  p.phase = Text(Field(status, "phase"));
  p.pod_ip = Text(Field(status, "podIP"));
  for (const auto& c : Items(Field(status, "conditions"))) {
    const std::string type = Text(Field(c, "type"));
    const bool is_true = Text(Field(c, "status")) == "True";
    if (type == "Ready") p.ready = is_true;
    if (type == "DisruptionTarget" && is_true) p.disruption = Text(Field(c, "reason"));
    if (type == "PodScheduled" && !is_true) p.unschedulable = Text(Field(c, "message"));
  }
  p.pod_reason = Text(Field(status, "reason"));
  p.spec_hash = Text(Field(Field(metadata, "annotations"), kSpecHashAnnotation));
  // Kubernetes' default restartPolicy is Always.
  const json& policy = Field(Field(pod, "spec"), "restartPolicy");
  p.restarts_in_place = !policy.is_string() || policy.get<std::string>() == "Always";
  // The workload: the coordinator's container, or a worker's first container.
  std::string workload;
  const json& containers = Field(Field(pod, "spec"), "containers");
  if (containers.is_array() && !containers.empty()) workload = Text(Field(containers[0], "name"));
  for (const auto& cs : Items(Field(status, "containerStatuses"))) {
    if (Text(Field(cs, "name")) != workload) continue;
    p.restart_count = static_cast<int>(Int(Field(cs, "restartCount"), 0));
    const json& terminated = Field(Field(cs, "state"), "terminated");
    const json& last = Field(Field(cs, "lastState"), "terminated");
    if (p.restarts_in_place) {
      // Between a crash and its restart the state is terminated (then waiting, with the exit
      // as the last state); either way the container starts again.
      const json& exit = terminated.is_object() ? terminated : last;
      if (exit.is_object()) p.last_exit_at = api::ParseRfc3339(Text(Field(exit, "finishedAt")));
    } else if (terminated.is_object()) {
      p.exit_code = static_cast<int>(Int(Field(terminated, "exitCode"), -1));
      p.finished_at = api::ParseRfc3339(Text(Field(terminated, "finishedAt")));
      p.reason = Text(Field(terminated, "reason"));
    }
  }
  if (!p.exit_code && p.phase == "Failed") {
    p.exit_code = -1;
    p.reason = Text(Field(status, "reason"), Text(Field(status, "message")));
  }
  if (!p.exit_code && p.phase == "Succeeded") p.exit_code = 0;
  return p;
}

std::string FailureReasonOf(const ObservedPod& p) {
  namespace reason = api::failure_reason;
  // The disruption first: a container that exits while its pod is evicted exits because of it.
  if (p.disruption == "PreemptionByScheduler") return reason::kPreempted;
  if (p.disruption == "EvictionByEvictionAPI" || p.pod_reason == "Evicted") return reason::kEvicted;
  if (p.disruption == "DeletionByTaintManager" || p.disruption == "DeletionByPodGC" ||
      p.disruption == "TerminationByKubelet" || p.pod_reason == "NodeLost" ||
      p.pod_reason == "NodeShutdown" || p.pod_reason == "Shutdown" ||
      p.pod_reason == "Terminated") {
    return reason::kNodeLost;
  }
  if (p.reason == "OOMKilled") return reason::kOOMKilled;
  if (!p.disruption.empty()) return reason::kEvicted;
  return "";
}

}  // namespace cohort::controller
