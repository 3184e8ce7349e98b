// Lifecycle (policies.h): the status begun, a finished job kept until its TTL, suspension and
// resumption, and spec.activeDeadlineSeconds. The first policy of every running job's plan.
#include "absl/strings/str_cat.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// spec.suspend: no pods; the status says so once.
void Suspend(Planner& P) {
  api::JobStatus& st = P.st();
  P.DeletePods(/*include_finished=*/true);
  if (st.phase != phase::kSuspended) {
    st.phase = phase::kSuspended;
    P.Condition(kConditionSuspended, true, "Suspended", "spec.suspend is true; pods deleted");
    P.Condition(kConditionReady, false, "Suspended", "the job is suspended");
    P.Event("Normal", "Suspended", "the job is suspended: its pods are deleted");
  }
  st.tasks.registered = st.tasks.ready = 0;
  st.coordinator_pod = api::CoordinatorPodStatus{};
  st.restarting_workers.clear();
}

}  // namespace

bool PlanLifecycle(Planner& P, const Resume& resume) {
  const api::CoordinatedJob& job = P.job;
  const absl::Time now = P.now();
  api::JobStatus& st = P.st();
  st.observed_generation = job.generation;
  st.tasks.total = job.spec.replicas;
  st.coordinator_address = CoordinatorAddress(job);
  if (st.phase.empty()) {
    st.phase = phase::kPending;
    P.Event("Normal", "Pending",
            absl::StrCat("starting a coordinator and ", job.spec.replicas, " workers"));
  }

  // Finished jobs keep their status; only leftovers and the TTL remain.
  if (st.phase == phase::kSucceeded || st.phase == phase::kFailed) {
    P.DeletePods(/*include_finished=*/false, /*coordinator_last=*/true);
    P.ScheduleTtl();
    return true;
  }

  // Suspended: no pods. Resuming starts a gang as if new.
  if (job.spec.suspend) {
    Suspend(P);
    return true;
  }
  if (st.phase == phase::kSuspended) {
    st.phase = phase::kPending;
    st.start_time = now;  // the deadline counts from the resume
    st.gang_start_time = now;
    P.Condition(kConditionSuspended, false, resume.reason, resume.message);
    P.Event("Normal", resume.reason, absl::StrCat(resume.message, ": starting its pods"));
  }
  if (!st.start_time) st.start_time = now;
  if (!st.gang_start_time) st.gang_start_time = now;

  if (job.spec.active_deadline_seconds) {
    const absl::Time end = *st.start_time + absl::Seconds(*job.spec.active_deadline_seconds);
    if (now >= end) {
      P.Finish(false, "DeadlineExceeded",
               absl::StrCat("the job ran longer than activeDeadlineSeconds (",
                            *job.spec.active_deadline_seconds, ")"));
      return true;
    }
    P.Requeue(end - now);
  }
  return false;
}

}  // namespace cohort::controller::planning
