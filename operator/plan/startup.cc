// Startup (policies.h): the workers made once the coordinator is ready (so that they find it),
// Running once all of them run, the startup deadline, and the Ready condition.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// A gang that does not start in time (pods the cluster cannot place, images that do not pull)
// fails the job, saying what it waited for. True when it did.
bool StartupDeadline(Planner& P, const JobPods& pods) {
  const api::CoordinatedJob& job = P.job;
  const api::JobStatus& st = P.st();
  const std::optional<int64_t> startup = job.spec.failure_policy.startup_deadline_seconds;
  if (st.phase == phase::kRunning || !startup || !st.gang_start_time) return false;
  const absl::Time deadline = *st.gang_start_time + absl::Seconds(*startup);
  if (P.now() < deadline) {
    P.Requeue(deadline - P.now());
    return false;
  }
  std::vector<std::string> waiting;
  const auto why = [](const ObservedPod* p, const std::string& name) {
    if (!p) return absl::StrCat(name, " was not made yet");
    return absl::StrCat(name, " is ", p->phase.empty() ? "Pending" : p->phase,
                        p->unschedulable.empty() ? "" : absl::StrCat(": ", p->unschedulable));
  };
  if (!pods.coordinator || pods.coordinator->phase != "Running") {
    waiting.push_back(why(pods.coordinator, "the coordinator"));
  }
  for (int i = 0; i < job.spec.replicas && waiting.size() < 3; ++i) {
    const ObservedPod* w = pods.workers[i];
    if (!w || (w->phase != "Running" && !Finished(*w))) {
      waiting.push_back(why(w, absl::StrCat("worker ", i)));
    }
  }
  P.Finish(
      false, "StartupDeadlineExceeded",
      absl::StrCat("gang ", st.Gang(), " did not start within ", *startup,
                   " s (failurePolicy.startupDeadlineSeconds): ", absl::StrJoin(waiting, "; ")));
  return true;
}

}  // namespace

std::optional<std::string> WaitingForCoordinator(const Planner& P, const OperatorSettings& settings,
                                                 const ObservedPod* coordinator,
                                                 const ChildrenState& children) {
  const api::CoordinatedJob& job = P.job;
  if (!children.policy_in_place && !coordinator) {
    return absl::StrCat("waiting for the NetworkPolicy ", NetworkPolicyName(job));
  }
  if (!children.certificates_ready && !coordinator) {
    return absl::StrCat("waiting for cert-manager to issue Secrets ", CoordinatorTlsName(job),
                        " and ", ClientTlsName(job), " (Certificates of the same names, from ",
                        settings.job_tls_issuer, ")");
  }
  if (!coordinator || !coordinator->ready) return "waiting for the coordinator pod to be ready";
  return std::nullopt;
}

void PlanStartup(Planner& P, const OperatorSettings& settings, const JobPods& pods,
                 const GangCounts& counts, const ChildrenState& children) {
  const api::CoordinatedJob& job = P.job;
  api::JobStatus& st = P.st();
  const int replicas = job.spec.replicas;
  const int gang = st.Gang();
  const ObservedPod* coordinator = pods.coordinator;
  if (coordinator && coordinator->ready) {
    for (int i = 0; i < replicas; ++i) {
      if (!pods.by_name.count(WorkerPodName(job, i))) {
        P.plan.create.push_back(WorkerPod(job, i, gang, settings, children.tls, P.placement));
      }
    }
  }

  if (counts.running == replicas && coordinator && coordinator->phase == "Running" &&
      st.phase != phase::kRunning) {
    if (st.phase == phase::kRestarting) {
      P.Condition(kConditionRestarting, false, "Recovered",
                  absl::StrCat("gang ", gang, " is running"));
    }
    st.phase = phase::kRunning;
    P.Event("Normal", "Running", absl::StrCat("all ", replicas, " workers are running"));
  }
  if (StartupDeadline(P, pods)) return;
  if (counts.ready == replicas) {
    P.Condition(kConditionReady, true, "AllWorkersReady",
                absl::StrCat("all ", replicas, " workers are ready"));
    return;
  }
  // The kube-scheduler's reason for a gang it cannot place (podGroup Kubernetes): the Ready
  // condition's, and an Event each time it changes.
  if (const std::optional<std::string> unschedulable = GangUnschedulable(P, pods)) {
    const auto* ready = api::FindCondition(st.conditions, kConditionReady);
    if (!ready || ready->reason != "Unschedulable" || ready->message != *unschedulable) {
      P.Event("Warning", "Unschedulable", *unschedulable);
    }
    P.Condition(kConditionReady, false, "Unschedulable", *unschedulable);
    return;
  }
  P.Condition(kConditionReady, false, "WaitingForWorkers",
              WaitingForCoordinator(P, settings, coordinator, children)
                  .value_or(absl::StrCat(counts.ready, " of ", replicas, " workers are ready")));
}

}  // namespace cohort::controller::planning
