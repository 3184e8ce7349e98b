// The PodGroup of a job with spec.gangScheduling (children.h): what makes a worker pod a member
// (JoinPodGroup, applied by placement.h's Place), and the group made with the first workers
// (policies.h, PlanPodGroup).
#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"
#include "operator/plan/policies.h"

namespace cohort::controller {

std::optional<json> PodGroup(const api::CoordinatedJob& job) {
  if (!job.spec.gang_scheduling) return std::nullopt;
  const api::GangSchedulingSpec& gang = *job.spec.gang_scheduling;
  json group = {{"kind", "PodGroup"},
                {"metadata",
                 {{"name", job.name},
                  {"namespace", job.namespace_name},
                  {"labels", {{kManagedByLabel, kManagedBy}, {kJobLabel, job.name}}},
                  {"ownerReferences", json::array({OwnerReference(job)})}}},
                {"spec", {{"minMember", job.spec.replicas}}}};
  if (gang.pod_group == api::PodGroupKind::kVolcano) {
    group["apiVersion"] = "scheduling.volcano.sh/v1beta1";
    if (!gang.queue.empty()) group["spec"]["queue"] = gang.queue;
  } else {
    group["apiVersion"] = "scheduling.x-k8s.io/v1alpha1";
    if (gang.schedule_timeout_seconds) {
      group["spec"]["scheduleTimeoutSeconds"] = *gang.schedule_timeout_seconds;
    }
  }
  return group;
}

void JoinPodGroup(const api::CoordinatedJob& job, json* pod) {
  if (!job.spec.gang_scheduling) return;
  if (pod->value("/metadata/labels/cohort.dev~1role"_json_pointer, "") != "worker") return;
  const api::GangSchedulingSpec& gang = *job.spec.gang_scheduling;
  json& metadata = (*pod)["metadata"];
  if (gang.pod_group == api::PodGroupKind::kVolcano) {
    metadata["annotations"][kVolcanoPodGroupAnnotation] = job.name;
  } else {
    metadata["labels"][kSchedulerPluginsPodGroupLabel] = job.name;
  }
  const std::string scheduler = !gang.scheduler_name.empty() ? gang.scheduler_name
                                : gang.pod_group == api::PodGroupKind::kVolcano
                                    ? kVolcanoScheduler
                                    : kSchedulerPluginsScheduler;
  (*pod)["spec"]["schedulerName"] = scheduler;
}

}  // namespace cohort::controller

namespace cohort::controller::planning {

void PlanPodGroup(const api::CoordinatedJob& job, Plan* plan) {
  std::optional<json> group = PodGroup(job);
  if (!group) return;
  // The workers were made members as they were built (placement.h); the group comes first.
  for (const json& object : plan->create) {
    if (object.value("kind", "") == "Pod" &&
        object.value("/metadata/labels/cohort.dev~1role"_json_pointer, "") == "worker") {
      plan->create.insert(plan->create.begin(), std::move(*group));
      return;
    }
  }
}

}  // namespace cohort::controller::planning
