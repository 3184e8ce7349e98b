// The plan of a job queued by Kueue (kueue.h): hold it until its Workload is admitted, run it
// with the admission's placement, stop it when evicted and give the quota back, and keep the
// Workload's PodsReady and Finished conditions.
#include "absl/strings/str_cat.h"
#include "operator/plan/kueue.h"
#include "operator/plan/planner.h"

namespace cohort::controller::planning {
namespace {

bool JobFinished(const api::JobStatus& st) {
  return st.phase == phase::kSucceeded || st.phase == phase::kFailed;
}

// Keeps the job suspended, without pods, for `reason`.
void Hold(Planner& P, const std::string& reason, const std::string& message) {
  api::JobStatus& st = P.st();
  P.DeletePods(/*include_finished=*/true);
  st.tasks.registered = st.tasks.ready = 0;
  st.coordinator_pod = api::CoordinatorPodStatus{};
  const api::Condition* c = api::FindCondition(st.conditions, kConditionSuspended);
  const bool news =
      st.phase != phase::kSuspended || !c || c->status != "True" || c->reason != reason;
  st.phase = phase::kSuspended;
  P.Condition(kConditionSuspended, true, reason, message);
  P.Condition(kConditionReady, false, reason, "the job waits for Kueue");
  if (news) P.Event("Normal", reason, message);
}

// The Workload says how the finished job ended, and lets go of its finalizer.
void FinishWorkload(Plan* plan, const json& workload, absl::Time now) {
  const bool succeeded = plan->status.phase == phase::kSucceeded;
  const api::Condition* c = api::FindCondition(plan->status.conditions,
                                               succeeded ? kConditionSucceeded : kConditionFailed);
  json w = workload;
  if (kueue::SetCondition(&w, "Finished", true, succeeded ? "Succeeded" : "Failed",
                          c ? c->message : plan->status.phase, now)) {
    plan->workload_status = std::move(w);
  }
  json held = workload;
  if (kueue::DropFinalizer(&held)) plan->release_workload = true;
}

// The admitted Workload of a job that runs: PodsReady, for Kueue's waitForPodsReady, says
// whether the whole gang is up (the job's Ready condition), and reclaimablePods gives back the
// quota of workers that already exited 0.
void FollowWorkload(Plan* plan, const json& workload, absl::Time now) {
  const api::Condition* ready = api::FindCondition(plan->status.conditions, kConditionReady);
  const bool up = ready && ready->status == "True";
  // Ready once in this admission: a gang that goes down waits for recovery, not for its start.
  const json* pods_ready = kueue::FindCondition(workload, "PodsReady");
  const bool was = pods_ready && (pods_ready->value("status", "") == "True" ||
                                  pods_ready->value("reason", "") == "WaitForRecovery");
  json w = workload;
  const bool changed =
      up ? kueue::SetCondition(&w, "PodsReady", true, "Started", "All pods reached readiness", now)
         : kueue::SetCondition(&w, "PodsReady", false, was ? "WaitForRecovery" : "WaitForStart",
                               was ? "At least one pod has failed, waiting for recovery"
                                   : "Not all pods are ready or succeeded",
                               now);
  // Workers whose workload already exited 0 while the rest run need their quota no more:
  // reclaimablePods lets Kueue give it to other Workloads (it only grows within an admission).
  bool reclaimed = false;
  if (const int done = plan->status.tasks.succeeded; done > 0) {
    const json want = json::array({{{"name", kueue::kWorkersPodSet}, {"count", done}}});
    json& status = w["status"];
    if (!status.is_object()) status = json::object();
    if (status.value("reclaimablePods", json()) != want) {
      status["reclaimablePods"] = want;
      reclaimed = true;
    }
  }
  if (changed || reclaimed) plan->workload_status = std::move(w);
}

}  // namespace

Plan PlanQueued(const api::CoordinatedJob& job, const Observed& observed,
                const OperatorSettings& settings) {
  const KueueObserved& kq = *observed.kueue;
  const json* workload = kq.workload ? &*kq.workload : nullptr;
  const std::string name = kueue::WorkloadName(job);

  if (JobFinished(job.status) || job.spec.suspend) {
    Plan plan = PlanRun(job, observed, settings);
    if (workload && JobFinished(plan.status)) FinishWorkload(&plan, *workload, observed.now);
    return plan;
  }

  Planner P{job, observed, Plan{}};
  api::JobStatus& st = P.plan.status = job.status;
  st.observed_generation = job.generation;
  st.tasks.total = job.spec.replicas;
  st.coordinator_address = CoordinatorAddress(job);
  const json desired = kueue::DesiredWorkload(job, settings);
  const std::string queue = kueue::QueueName(job);

  if (!workload) {
    if (!kq.priority.error.empty()) {
      // Kueue's integrations make no Workload for a job whose priority class is missing.
      Hold(P, "PriorityClassNotFound",
           absl::StrCat("no Workload yet: ", kq.priority.error, "; the job waits for it"));
      P.Requeue(absl::Seconds(10));
      return std::move(P.plan);
    }
    P.plan.create.push_back(kueue::DesiredWorkload(job, settings, &kq.priority));
    Hold(P, "Queued",
         absl::StrCat("waiting for Kueue to admit Workload ", name, " (LocalQueue ", queue, ")"));
    return std::move(P.plan);
  }
  if (workload->contains("/metadata/deletionTimestamp"_json_pointer)) {
    Hold(P, "WorkloadDeleted",
         absl::StrCat("Workload ", name, " is being deleted; the job waits for a new one"));
    if (observed.pods.empty()) P.plan.release_workload = true;
    return std::move(P.plan);
  }
  if (!kueue::Equivalent(*workload, desired)) {
    // The job changed (its replicas, its pods' resources): the Workload no longer says what
    // it needs. The pods go, then the Workload; a new one is queued.
    Hold(P, "WorkloadReplaced",
         absl::StrCat("the job's pods changed, so Workload ", name,
                      " is replaced by one that asks for them"));
    if (observed.pods.empty()) P.plan.delete_workload = P.plan.release_workload = true;
    return std::move(P.plan);
  }
  if (kueue::IsTrue(*workload, "Evicted")) {
    const json* evicted = kueue::FindCondition(*workload, "Evicted");
    const std::string why = evicted->value("reason", "");
    const std::string what = evicted->value("message", "");
    Hold(P, "Evicted",
         absl::StrCat("Kueue evicted Workload ", name, " (", why, what.empty() ? "" : ": ", what,
                      "); its pods are deleted and it waits to be admitted again"));
    if (observed.pods.empty()) {
      json w = *workload;
      if (kueue::ClearAdmission(&w, observed.now)) P.plan.workload_status = std::move(w);
    }
    return std::move(P.plan);
  }
  if (!kueue::IsTrue(*workload, "Admitted")) {
    Hold(P, "Queued",
         absl::StrCat("waiting for Kueue to admit Workload ", name, " (LocalQueue ", queue, ")"));
    return std::move(P.plan);
  }
  kueue::AdmissionOrError admission = kueue::ReadAdmission(*workload, kq.flavors);
  if (!admission.admission) {
    Hold(P, "AdmissionUnusable", admission.error);
    P.Requeue(absl::Seconds(5));
    return std::move(P.plan);
  }

  if (const std::string error = kueue::CheckAdmission(job, settings, *admission.admission);
      !error.empty()) {
    // Kueue's own integrations end such a job too (its Workload: Finished, FailedToStart).
    P.Finish(false, "AdmissionConflict",
             absl::StrCat("the admission of Workload ", name, " cannot be applied: ", error));
    FinishWorkload(&P.plan, *workload, observed.now);
    return std::move(P.plan);
  }

  Plan plan =
      PlanRun(job, observed, settings,
              Resume{"Admitted", absl::StrCat("Kueue admitted Workload ", name, " in ClusterQueue ",
                                              admission.admission->cluster_queue)},
              &admission.admission->pod_sets);
  if (JobFinished(plan.status)) {
    FinishWorkload(&plan, *workload, observed.now);
    return plan;
  }
  FollowWorkload(&plan, *workload, observed.now);
  return plan;
}

}  // namespace cohort::controller::planning
