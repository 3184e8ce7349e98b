// The pods of a job's current gang (policies.h): sorted by role, the rest deleted, and how far
// the gang's workers got.
#include "operator/plan/policies.h"

namespace cohort::controller {

namespace {

bool IsGangCoordinator(const api::CoordinatedJob& job, int gang, const ObservedPod& p) {
  return p.restart == gang && p.role == "coordinator" && p.name == CoordinatorName(job);
}

}  // namespace

const ObservedPod* GangCoordinator(const api::CoordinatedJob& job,
                                   const std::vector<ObservedPod>& pods) {
  for (const ObservedPod& p : pods) {
    if (IsGangCoordinator(job, job.status.Gang(), p)) return &p;
  }
  return nullptr;
}

namespace planning {

JobPods SortPods(Planner& P, bool with_driver) {
  const api::CoordinatedJob& job = P.job;
  const int replicas = job.spec.replicas;
  const int gang = P.st().Gang();
  JobPods pods;
  pods.workers.assign(replicas, nullptr);
  for (const ObservedPod& p : P.observed.pods) {
    pods.by_name[p.name] = &p;
    const bool current = p.restart == gang;
    if (IsGangCoordinator(job, gang, p)) {
      pods.coordinator = &p;
    } else if (with_driver && current && p.role == "driver" && p.name == DriverPodName(job)) {
      pods.driver = &p;
    } else if (current && p.role == "worker" && p.index >= 0 && p.index < replicas &&
               p.name == WorkerPodName(job, p.index)) {
      pods.workers[p.index] = &p;
    } else if (!p.terminating) {
      P.plan.delete_pods.push_back(p.name);
    }
  }
  return pods;
}

GangCounts CountGang(Planner& P, const JobPods& pods) {
  GangCounts counts;
  for (const ObservedPod* w : pods.workers) {
    if (!w) continue;
    ++counts.created;
    if (w->phase == "Running" || Finished(*w)) ++counts.running;
    if (w->ready) ++counts.ready;
    if (w->exit_code && *w->exit_code == 0) ++counts.succeeded;
    if (w->exit_code && *w->exit_code != 0) ++counts.failed;
  }
  api::JobStatus& st = P.st();
  st.tasks.ready = counts.ready;
  st.tasks.succeeded = counts.succeeded;
  st.tasks.failed = counts.failed;
  st.tasks.registered = P.observed.coordinator ? P.observed.coordinator->registered : 0;
  return counts;
}

}  // namespace planning

}  // namespace cohort::controller
