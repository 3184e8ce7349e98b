// The PodGroup of a job with spec.gangScheduling (children.h): what makes a worker pod a member
// (JoinPodGroup, applied by placement.h's Place), and the group made with the first workers
// (policies.h, PlanPodGroup), after its Workload for Kubernetes' own gang scheduling.
#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"
#include "operator/plan/json_fields.h"
#include "operator/plan/planner.h"
#include "operator/plan/policies.h"

namespace cohort::controller {

namespace {

json GroupMetadata(const api::CoordinatedJob& job) {
  return {{"name", job.name},
          {"namespace", job.namespace_name},
          {"labels", {{kManagedByLabel, kManagedBy}, {kJobLabel, job.name}}},
          {"ownerReferences", json::array({OwnerReference(job)})}};
}

// The workers' priority class, which a Kubernetes PodGroup must have too; "" for none.
std::string WorkersPriorityClass(const api::CoordinatedJob& job) {
  return planning::Text(
      planning::Field(planning::Field(job.spec.pod_template, "spec"), "priorityClassName"));
}

json GangPolicy(const api::CoordinatedJob& job) {
  return {{"gang", {{"minCount", job.spec.replicas}}}};
}

}  // namespace

std::optional<json> PodGroup(const api::CoordinatedJob& job, const std::string& api) {
  if (!job.spec.gang_scheduling) return std::nullopt;
  const api::GangSchedulingSpec& gang = *job.spec.gang_scheduling;
  if (gang.pod_group == api::PodGroupKind::kKubernetes) {
    json group = {{"apiVersion", api},
                  {"kind", "PodGroup"},
                  {"metadata", GroupMetadata(job)},
                  {"spec", {{"schedulingPolicy", GangPolicy(job)}}}};
    if (api == kKubernetesSchedulingApiV1Alpha2) {
      // 1.36: its own reference to the template, and no priority class without the
      // WorkloadAwarePreemption gate.
      group["spec"]["podGroupTemplateRef"] = {
          {"workload", {{"workloadName", job.name}, {"podGroupTemplateName", kWorkersTemplate}}}};
      return group;
    }
    group["spec"]["workloadRef"] = {{"workloadName", job.name}, {"templateName", kWorkersTemplate}};
    if (const std::string priority = WorkersPriorityClass(job); !priority.empty()) {
      group["spec"]["priorityClassName"] = priority;
    }
    return group;
  }
  json group = {{"kind", "PodGroup"},
                {"metadata", GroupMetadata(job)},
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

std::optional<json> KubernetesWorkload(const api::CoordinatedJob& job, const std::string& api) {
  if (!job.spec.gang_scheduling ||
      job.spec.gang_scheduling->pod_group != api::PodGroupKind::kKubernetes) {
    return std::nullopt;
  }
  json workers = {{"name", kWorkersTemplate}, {"schedulingPolicy", GangPolicy(job)}};
  if (const std::string priority = WorkersPriorityClass(job);
      !priority.empty() && api != kKubernetesSchedulingApiV1Alpha2) {
    workers["priorityClassName"] = priority;
  }
  return json{{"apiVersion", api},
              {"kind", "Workload"},
              {"metadata", GroupMetadata(job)},
              {"spec",
               {{"controllerRef",
                 {{"apiGroup", "cohort.dev"}, {"kind", "CoordinatedJob"}, {"name", job.name}}},
                {"podGroupTemplates", json::array({workers})}}}};
}

void JoinPodGroup(const api::CoordinatedJob& job, json* pod) {
  if (!job.spec.gang_scheduling) return;
  if (pod->value("/metadata/labels/cohort.dev~1role"_json_pointer, "") != "worker") return;
  const api::GangSchedulingSpec& gang = *job.spec.gang_scheduling;
  if (gang.pod_group == api::PodGroupKind::kKubernetes) {
    (*pod)["spec"]["schedulingGroup"] = {{"podGroupName", job.name}};
    if (!gang.scheduler_name.empty()) (*pod)["spec"]["schedulerName"] = gang.scheduler_name;
    return;
  }
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

void PlanPodGroup(const api::CoordinatedJob& job, const OperatorSettings& settings, Plan* plan) {
  const std::string api = settings.kubernetes_scheduling_api.empty()
                              ? std::string(kKubernetesSchedulingApi)
                              : settings.kubernetes_scheduling_api;
  std::optional<json> group = PodGroup(job, api);
  if (!group) return;
  // The workers were made members as they were built (placement.h); the group comes first,
  // after the Workload it is made from, if any.
  for (const json& object : plan->create) {
    if (object.value("kind", "") == "Pod" &&
        object.value("/metadata/labels/cohort.dev~1role"_json_pointer, "") == "worker") {
      plan->create.insert(plan->create.begin(), std::move(*group));
      if (std::optional<json> workload = KubernetesWorkload(job, api)) {
        plan->create.insert(plan->create.begin(), std::move(*workload));
      }
      return;
    }
  }
}

bool KubernetesGangSchedulingUnavailable(Planner& P, const OperatorSettings& settings) {
  const api::CoordinatedJob& job = P.job;
  if (!job.spec.gang_scheduling ||
      job.spec.gang_scheduling->pod_group != api::PodGroupKind::kKubernetes ||
      !settings.kubernetes_scheduling_api.empty()) {
    return false;
  }
  P.Finish(false, "GangSchedulingUnavailable",
           "spec.gangScheduling.podGroup Kubernetes needs the cluster's own gang scheduling: "
           "scheduling.k8s.io/v1beta1 (Kubernetes 1.37) or v1alpha2 (1.36) Workload and "
           "PodGroup, served with the GenericWorkload feature gate on in kube-apiserver, "
           "kube-scheduler and kube-controller-manager (1.36: GangScheduling too) and "
           "--runtime-config=scheduling.k8s.io/v1beta1=true; this cluster serves neither (as "
           "the operator found when it started). Use podGroup SchedulerPlugins or Volcano, or "
           "none");
  return true;
}

std::optional<std::string> GangUnschedulable(const Planner& P, const JobPods& pods) {
  const api::CoordinatedJob& job = P.job;
  if (!job.spec.gang_scheduling ||
      job.spec.gang_scheduling->pod_group != api::PodGroupKind::kKubernetes) {
    return std::nullopt;
  }
  const auto& group = P.observed.pod_group_scheduled;
  if (group && !group->scheduled) {
    return absl::StrCat("the kube-scheduler cannot place the gang (PodGroup ", job.name, ", ",
                        group->reason.empty() ? std::string("Unschedulable") : group->reason,
                        "): ", group->message);
  }
  // The group's condition says only whether its first gang was placed (it never turns False
  // again): a later gang's verdict is on its pods, each Unschedulable with the group's words.
  if (!group) return std::nullopt;
  for (const ObservedPod* w : pods.workers) {
    if (w && w->node.empty() && !w->unschedulable.empty()) {
      return absl::StrCat("the kube-scheduler cannot place the gang (PodGroup ", job.name,
                          "; its worker ", w->name, "): ", w->unschedulable);
    }
  }
  return std::nullopt;
}

}  // namespace cohort::controller::planning
