// successPolicy (policies.h): AllWorkers, every worker's workload exited 0; Worker0, worker 0's.
#include "absl/strings/str_cat.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

bool PlanSuccess(Planner& P, const JobPods& pods, const GangCounts& counts) {
  const api::CoordinatedJob& job = P.job;
  const ObservedPod* worker0 = pods.workers.empty() ? nullptr : pods.workers[0];
  const bool worker0_done = worker0 && worker0->exit_code && *worker0->exit_code == 0;
  if (job.spec.success_policy == api::SuccessPolicy::kWorker0 && worker0_done) {
    P.Finish(true, "Worker0Succeeded", "worker 0 exited 0 (successPolicy Worker0)");
    return true;
  }
  if (counts.succeeded == job.spec.replicas) {
    P.Finish(true, "AllWorkersSucceeded",
             absl::StrCat("all ", job.spec.replicas, " workers exited 0"));
    return true;
  }
  return false;
}

}  // namespace cohort::controller::planning
