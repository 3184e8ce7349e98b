// The plan's building blocks, shared by the gang's plan (job_plan.cc) and the task
// runtime's (task_runtime_plan.cc). Internal to operator/plan.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "operator/plan/children.h"
#include "operator/plan/json_fields.h"
#include "operator/plan/observed.h"
#include "operator/plan/plan.h"

namespace cohort::controller::planning {

using json = nlohmann::json;
namespace phase = api::phase;

inline bool Finished(const ObservedPod& p) { return p.phase == "Succeeded" || p.phase == "Failed"; }

// "worker 2 exited with code 137 (signal 9)"; `who` names another pod's workload ("the
// driver").
inline std::string DescribeExit(const ObservedPod& p, const std::string& who = "") {
  const std::string name = who.empty() ? absl::StrCat("worker ", p.index) : who;
  if (*p.exit_code < 0) {
    return absl::StrCat(name, " failed without an exit code",
                        p.reason.empty() ? "" : absl::StrCat(" (", p.reason, ")"));
  }
  std::string text = absl::StrCat(name, " exited with code ", *p.exit_code);
  if (*p.exit_code > 128 && *p.exit_code < 160) {
    absl::StrAppend(&text, " (signal ", *p.exit_code - 128, ")");
  }
  if (!p.reason.empty() && p.reason != "Error" && p.reason != "Completed") {
    absl::StrAppend(&text, " (", p.reason, ")");
  }
  return text;
}

// Ends the current gang's training time (status.goodput) at `end`: the time since every one
// of its tasks registered counts as productive (goodput.cc).
inline void EndGangTime(api::JobStatus& st, absl::Time end) {
  std::optional<absl::Time>& registered = st.goodput.gang_registered_time;
  if (!registered) return;
  st.goodput.productive_seconds += std::max(0.0, absl::ToDoubleSeconds(end - *registered));
  registered.reset();
}

// The phase transition helpers below all act on the plan being built.
struct Planner {
  const api::CoordinatedJob& job;
  const Observed& observed;
  Plan plan;
  // Where the pods the plan makes are placed (placement.h).
  Placement placement = Placement{};

  api::JobStatus& st() { return plan.status; }
  absl::Time now() const { return observed.now; }

  void Event(const std::string& type, const std::string& reason, const std::string& message) {
    plan.events.push_back({type, reason, message});
  }
  void Requeue(absl::Duration d) {
    if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
    if (!plan.requeue_after || d < *plan.requeue_after) plan.requeue_after = d;
  }
  void Condition(const std::string& type, bool value, const std::string& reason,
                 const std::string& message) {
    api::SetCondition(&st().conditions, type, value ? "True" : "False", reason, message, now(),
                      job.generation);
  }
  // `coordinator_last`: the coordinator pod stays while a worker's workload still runs.
  // Workers reach the coordinator through their sidecars, which hold a call through a
  // coordinator outage (up to the outage tolerance); a coordinator stopped first would keep
  // a stopping workload's last calls (ShutdownTask) waiting for it instead of answered.
  void DeletePods(bool include_finished, bool coordinator_last = false) {
    bool workload_running = false;
    for (const auto& p : observed.pods) {
      if ((p.role == "worker" || p.role == "driver") && !Finished(p) && !p.exit_code) {
        workload_running = true;
      }
    }
    std::set<std::string> listed(plan.delete_pods.begin(), plan.delete_pods.end());
    for (const auto& p : observed.pods) {
      if (p.terminating) continue;
      // A worker whose workload exited is done even while its sidecar is still stopping.
      if (!include_finished &&
          (Finished(p) || ((p.role == "worker" || p.role == "driver") && p.exit_code))) {
        continue;
      }
      if (coordinator_last && workload_running && p.role == "coordinator") continue;
      // Once each: a leftover of another gang may be listed already.
      if (!listed.insert(p.name).second) continue;
      plan.delete_pods.push_back(p.name);
    }
  }
  void Finish(bool succeeded, const std::string& reason, const std::string& message) {
    EndGangTime(st(), now());
    st().phase = succeeded ? phase::kSucceeded : phase::kFailed;
    st().completion_time = now();
    st().restarting_workers.clear();
    Condition(succeeded ? kConditionSucceeded : kConditionFailed, true, reason, message);
    Condition(kConditionReady, false, "Finished", "the job has finished");
    if (const auto* c = api::FindCondition(st().conditions, kConditionRestarting);
        c && c->status == "True") {
      Condition(kConditionRestarting, false, "Finished", "the job has finished");
    }
    Event(succeeded ? "Normal" : "Warning", reason, message);
    // Finished workers stay for their logs; anything still running goes, the coordinator
    // once the workers' workloads have stopped.
    DeletePods(/*include_finished=*/false, /*coordinator_last=*/true);
    ScheduleTtl();
  }
  // Starts the job over (every pod deleted, the next gang made): status.restarts counts it,
  // or, `counted` false (a failure rule's RestartGangUncounted), status.uncountedRestarts.
  void Restart(const std::string& cause, const std::string& message, const std::string& what,
               bool counted = true) {
    (counted ? st().restarts : st().uncounted_restarts) += 1;
    EndGangTime(st(), now());
    st().gang_start_time = now();
    st().phase = phase::kRestarting;
    st().tasks.registered = st().tasks.ready = 0;
    st().coordinator_pod = api::CoordinatorPodStatus{};  // the next gang's coordinator is new
    st().restarting_workers.clear();                     // the next gang's workers are all new
    Condition(kConditionRestarting, true, cause, message);
    Condition(kConditionReady, false, cause, what);
    Event("Warning", "GangRestart", message);
    DeletePods(/*include_finished=*/true);
  }
  void ScheduleTtl() {
    if (!job.spec.ttl_seconds_after_finished || !st().completion_time) return;
    const absl::Time expiry =
        *st().completion_time + absl::Seconds(*job.spec.ttl_seconds_after_finished);
    if (now() >= expiry) {
      plan.delete_job = true;
    } else {
      Requeue(expiry - now());
    }
  }
};

// Why a suspended job starts again (the Suspended condition's False reason and message).
struct Resume {
  std::string reason = "Resumed";
  std::string message = "spec.suspend is false";
};

// The plan of a job that may run now: PlanJob for a job that is not queued, and for a queued
// one Kueue has admitted (`resume` then says so, and `pod_sets` is its checked admission).
Plan PlanRun(const api::CoordinatedJob& job, const Observed& observed,
             const OperatorSettings& settings, const Resume& resume = Resume{},
             const std::map<std::string, kueue::PodSetInfo>* pod_sets = nullptr);

// The plan of a job queued by Kueue (kueue_plan.cc).
Plan PlanQueued(const api::CoordinatedJob& job, const Observed& observed,
                const OperatorSettings& settings);

// What ended a gang, for failurePolicy.rules: the exit codes of the workers that exited first,
// and the failure reasons (api::failure_reason) of those exits, of lost pods, of a lost
// coordinator and of the errors the coordinator holds.
struct FailureFacts {
  std::vector<int> exit_codes;
  std::vector<std::string> reasons;
};
struct RuleMatch {
  const api::FailureRule* rule = nullptr;  // none matched
  int index = -1;
  std::string matched;  // "exit code 137", "Evicted"
};
// The first rule with an exit code or a reason among the facts.
RuleMatch MatchFailureRule(const api::FailurePolicy& policy, const FailureFacts& facts);
// A task error as a failure reason, by its typed reason: GPUFault, HeartbeatTimeout, Hang or
// TaskError.
std::string TaskErrorReason(const CoordinatorView::TaskError& e);

// Workers being restarted alone (status.restartingWorkers, a RestartWorker rule;
// worker_restart.cc). While a worker is, its failed pod is no worker of the gang, its missing
// pod and its tasks' errors at the coordinator are no failure of the gang.
struct WorkerRestarts {
  std::vector<bool> restarting;  // by worker index
  bool Skips(int index) const {
    return index >= 0 && index < static_cast<int>(restarting.size()) && restarting[index];
  }
  bool SkipsError(const CoordinatorView::TaskError& e) const {
    return Skips(CoordinatorView::TaskIndex(e.task));
  }
};
// Follows status.restartingWorkers: takes each failed pod out of `workers` (deleting it if it
// is not yet going) and ends an entry once its successor runs and its task has rejoined the
// coordinator (connected with another incarnation, nothing of it in error).
WorkerRestarts FollowWorkerRestarts(Planner& P, std::vector<const ObservedPod*>& workers);
// RestartWorker: deletes the pods of the `failed` workers (their successors are made once they
// are gone) and counts them in status.workerRestarts; or fails the job when that would pass
// maxRestarts. `by` names the rule, `what` the failure.
void RestartWorkers(Planner& P, const std::vector<const ObservedPod*>& workers,
                    const std::vector<int>& failed, const std::string& by, const std::string& what);

// What PlanChildren found of the objects every job needs.
struct ChildrenState {
  JobTls tls = JobTls::kNone;
  bool policy_in_place = true;
  bool certificates_ready = true;
};

// Creates what is missing of the job's token Secret (with certificates), NetworkPolicy,
// coordinator ConfigMap and Services, state claim and coordinator pod (once the policy and
// the certificates are in place). Workers are the caller's.
ChildrenState PlanChildren(Planner& P, const OperatorSettings& settings,
                           const ObservedPod* coordinator, bool recreate_coordinator, bool on_claim,
                           int gang);

// The plan of a task runtime job (spec.tasks), from the point where PlanJob has dealt with
// finished, suspended and overdue jobs (task_runtime_plan.cc).
Plan PlanTaskRuntime(Planner& P, const OperatorSettings& settings);

}  // namespace cohort::controller::planning
