// PlanJob: a job's plan, from the policies of policies.h in order (the first that decides
// the plan ends it), then the job's PodGroup.
#include "operator/plan/job_plan.h"

#include "absl/strings/str_cat.h"
#include "operator/plan/kueue.h"
#include "operator/plan/policies.h"

namespace cohort::controller {

Plan PlanJob(const api::CoordinatedJob& job, const Observed& observed,
             const OperatorSettings& settings) {
  const std::string queue = kueue::QueueName(job);
  Plan plan = !queue.empty() && observed.kueue ? planning::PlanQueued(job, observed, settings)
                                               : planning::PlanRun(job, observed, settings);
  if (!queue.empty() && !observed.kueue && job.status.phase.empty()) {
    plan.events.push_back(
        {"Warning", "QueueIgnored",
         absl::StrCat("the job names LocalQueue ", queue, " (label ", kueue::kQueueNameLabel,
                      "), but this operator runs without Kueue (--kueue): it starts now")});
  }
  planning::PlanPodGroup(job, settings, &plan);
  return plan;
}

namespace planning {

Plan PlanRun(const api::CoordinatedJob& job, const Observed& observed,
             const OperatorSettings& settings, const Resume& resume,
             const std::map<std::string, kueue::PodSetInfo>* pod_sets) {
  Planner P{job, observed, Plan{}, PlacementOf(job, pod_sets)};
  P.plan.status = job.status;
  if (PlanLifecycle(P, resume)) return std::move(P.plan);
  if (KubernetesGangSchedulingUnavailable(P, settings)) return std::move(P.plan);
  if (job.spec.tasks) return PlanTaskRuntime(P, settings);

  PlanAvoidedNodes(P);
  JobPods pods = SortPods(P, /*with_driver=*/false);
  const WorkerRestarts restarts = FollowWorkerRestarts(P, pods.workers);
  if (PlanSpecChange(P, pods)) return std::move(P.plan);
  const GangCounts counts = CountGang(P, pods);
  const bool started = P.st().phase == phase::kRunning || counts.created > 0;
  const CoordinatorFate coordinator = FollowCoordinator(P, pods.coordinator, started);
  if (PlanSuccess(P, pods, counts)) return std::move(P.plan);
  if (PlanGangFailure(P, settings, pods, restarts, coordinator)) return std::move(P.plan);
  if (PlanStragglers(P, pods)) return std::move(P.plan);

  // Create what is missing: the token, the NetworkPolicy, services and config, the
  // coordinator (once the policy exists, so that no pod of the job runs unprotected), then
  // (once it is ready, so workers find it) the workers.
  const ChildrenState children = PlanChildren(P, settings, pods.coordinator, coordinator.recreate,
                                              coordinator.on_claim, P.st().Gang());
  PlanStartup(P, settings, pods, counts, children);
  NoteRegistration(P);
  return std::move(P.plan);
}

}  // namespace planning

}  // namespace cohort::controller
