// A failure of the gang and its verdict (policies.h; job_plan.h says how a gang ends): what the
// pods and the coordinator show, the settling wait, which failure came first, then
// failurePolicy.rules, a permanent exit, maxRestarts, or a gang restart (not counted after a GPU
// fault, whose node the next gang avoids: avoided_nodes.cc).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// What the pods and the coordinator show of a failure of the gang.
struct Signals {
  std::vector<std::string> described;     // each failure, in words; none: no failure
  std::string cause = "WorkerFailed";     // the Restarting condition's reason
  std::vector<const ObservedPod*> exits;  // workers whose workload exited non-zero
  std::vector<int> lost;                  // workers of a running gang whose pods are gone
  std::string lost_what;                  // the first of them, in words
  // When the first of them was deleted, where a pod still shows it (deletionTimestamp).
  std::optional<absl::Time> deleted_at;
  // The tasks the coordinator holds in error, but those of workers restarted alone.
  std::vector<CoordinatorView::TaskError> errors;
};

Signals Gather(Planner& P, const JobPods& pods, const WorkerRestarts& restarts,
               const CoordinatorFate& coordinator) {
  const api::CoordinatedJob& job = P.job;
  Signals s;
  for (const ObservedPod* w : pods.workers) {
    if (w && w->exit_code && *w->exit_code != 0) s.exits.push_back(w);
  }
  for (const ObservedPod* w : s.exits) s.described.push_back(DescribeExit(*w));
  // Pods made earlier for this gang that are gone: deleted by someone, or evicted.
  if (P.st().phase == phase::kRunning) {
    for (int i = 0; i < job.spec.replicas; ++i) {
      const ObservedPod* w = pods.workers[i];
      if (restarts.Skips(i) || (w && !(w->terminating && !w->exit_code))) continue;
      s.lost.push_back(i);
      if (w && w->deletion_requested_at) {
        s.deleted_at =
            std::min(s.deleted_at.value_or(absl::InfiniteFuture()), *w->deletion_requested_at);
      }
      s.described.push_back(
          absl::StrCat("worker ", i, " pod ", WorkerPodName(job, i), " was deleted"));
      if (s.lost_what.empty()) s.lost_what = s.described.back();
      if (s.exits.empty()) s.cause = "WorkerLost";
    }
  }
  if (coordinator.lost) {
    s.described.push_back(coordinator.loss);
    if (s.exits.empty()) s.cause = "CoordinatorLost";
  }
  if (P.observed.coordinator) {
    for (const auto& e : P.observed.coordinator->errors) {
      if (!restarts.SkipsError(e)) s.errors.push_back(e);
    }
  }
  for (const auto& e : s.errors) s.described.push_back(e.Describe());
  if (!s.errors.empty() && s.exits.empty() && s.described.size() == s.errors.size()) {
    s.cause = "TaskError";
  }
  return s;
}

// What ended the gang as failure rules name it, as far as the pods show it now (an evicted
// pod may be gone by the time the failure settles: the controller keeps what was seen).
FailureFacts Reasons(const Planner& P, const JobPods& pods, const Signals& s,
                     const CoordinatorFate& coordinator) {
  FailureFacts facts;
  facts.reasons = P.observed.failure_reasons;
  const auto note = [&facts](const std::string& r) {
    if (!r.empty() &&
        std::find(facts.reasons.begin(), facts.reasons.end(), r) == facts.reasons.end()) {
      facts.reasons.push_back(r);
    }
  };
  for (const ObservedPod* w : s.exits) note(FailureReasonOf(*w));
  for (const int i : s.lost) {
    const ObservedPod* w = pods.workers[i];
    const std::string r = w ? FailureReasonOf(*w) : "";
    note(r.empty() ? api::failure_reason::kPodDeleted : r);
  }
  if (coordinator.lost) {
    note(api::failure_reason::kCoordinatorLost);
    if (coordinator.pod) note(FailureReasonOf(*coordinator.pod));
  }
  for (const auto& e : s.errors) {
    if (!e.IsWorkloadExitReport()) note(TaskErrorReason(e));
  }
  return facts;
}

// When the gang failed, as far as the operator can tell: its first worker's exit, or a hung
// task's last progress (its sidecar reported it failurePolicy.progressTimeout after), else
// when the failure was first seen.
absl::Time FailedAt(const Planner& P, const Signals& s) {
  const absl::Time seen = P.observed.failure_first_seen.value_or(P.now());
  absl::Time at = seen;
  for (const ObservedPod* w : s.exits) {
    if (w->finished_at) at = std::min(at, *w->finished_at);
  }
  absl::Duration timeout;
  if (!P.job.spec.failure_policy.progress_timeout.empty() &&
      absl::ParseDuration(P.job.spec.failure_policy.progress_timeout, &timeout)) {
    for (const auto& e : s.errors) {
      if (e.reason == FailureReason::kHang) at = std::min(at, seen - timeout);
    }
  }
  return at;
}

// Which failure came first, and whether it is permanent.
struct Verdict {
  bool permanent = false;
  std::string cause;
  std::string what;  // the failure, in words
  // The workers that exited first (within a second of the earliest exit).
  std::vector<const ObservedPod*> first_exits;
};

// The workers that exited first decide: one retryable exit among them, or a failure that is
// not an exit at all, restarts the gang.
Verdict Judge(const Planner& P, const Signals& s, const CoordinatorFate& coordinator,
              absl::Time first_seen) {
  const api::CoordinatedJob& job = P.job;
  Verdict v;
  v.cause = s.cause;
  std::string first_exit;
  absl::Time earliest = absl::InfiniteFuture();
  for (const ObservedPod* w : s.exits)
    earliest = std::min(earliest, w->finished_at.value_or(P.now()));
  for (const ObservedPod* w : s.exits) {
    if (w->finished_at.value_or(P.now()) <= earliest + absl::Seconds(1)) v.first_exits.push_back(w);
  }
  v.permanent = !s.exits.empty();
  for (const ObservedPod* w : v.first_exits) {
    if (first_exit.empty()) first_exit = DescribeExit(*w);
    if (api::IsRetryableExitCode(job.spec.failure_policy, *w->exit_code)) {
      v.permanent = false;
      first_exit = DescribeExit(*w);
      break;
    }
  }
  // An error the coordinator holds that is not a workload's exit came first: the exits that
  // follow are the tasks stopping because of it. So did a lost coordinator, unless the exits
  // came well before it: workers whose coordinator goes away stop with an error of their own
  // (jaxlib and the agent exit 1).
  std::string infra;
  if (coordinator.lost &&
      (s.exits.empty() || earliest + absl::Seconds(1) >= coordinator.LostAt(first_seen))) {
    infra = coordinator.loss;
    v.cause = "CoordinatorLost";
    v.permanent = false;
  }
  // So did a worker's pod deleted (by someone, a drain, the node's loss), unless the exits came
  // well before it: its peers stop with errors of their own when the job's coordinator tells
  // them a task failed. A pod already gone shows no deletion time: the failure's first sight
  // stands in for it.
  if (infra.empty() && !s.lost.empty()) {
    const absl::Time lost_at = std::min(s.deleted_at.value_or(first_seen), first_seen);
    if (s.exits.empty() || earliest + absl::Seconds(1) >= lost_at) {
      infra = s.lost_what;
      v.cause = "WorkerLost";
      v.permanent = false;
    }
  }
  // Workers whose coordinator restarted under them may stop too (until the sidecar proxy
  // rides out the outage, jaxlib does): from a second before until a heartbeat timeout after,
  // an exit that would fail the job is the coordinator's doing.
  if (v.permanent && infra.empty() && coordinator.went_away) {
    // A valid duration: ParseCoordinatedJob refuses any other.
    absl::Duration heartbeat;
    (void)absl::ParseDuration(job.spec.coordinator.heartbeat_timeout, &heartbeat);
    if (earliest + absl::Seconds(1) >= *coordinator.went_away &&
        earliest <= *coordinator.went_away + heartbeat) {
      infra = absl::StrCat(first_exit, " after the coordinator restarted");
      v.cause = "CoordinatorRestarted";
      v.permanent = false;
    }
  }
  for (const auto& e : s.errors) {
    if (e.IsWorkloadExitReport() || !infra.empty()) continue;
    infra = e.Describe();
    v.cause = "TaskError";
    v.permanent = false;
    break;
  }
  v.what = !infra.empty() ? infra : first_exit.empty() ? s.described.front() : first_exit;
  return v;
}

// RestartWorker: the failed workers alone, when the coordinator is still there for the rest
// of the gang. False when there is none to restart alone (the gang restarts, counted).
bool RestartFailedWorkers(Planner& P, const JobPods& pods, const Signals& s, const std::string& by,
                          const std::string& what) {
  std::vector<int> failed;
  for (int i = 0; i < P.job.spec.replicas; ++i) {
    const ObservedPod* w = pods.workers[i];
    const bool exited = std::find(s.exits.begin(), s.exits.end(), w) != s.exits.end();
    const bool lost = std::find(s.lost.begin(), s.lost.end(), i) != s.lost.end();
    const bool in_error = std::any_of(s.errors.begin(), s.errors.end(), [i](const auto& e) {
      return CoordinatorView::TaskIndex(e.task) == i;
    });
    if (exited || lost || in_error) failed.push_back(i);
  }
  if (failed.empty()) return false;
  RestartWorkers(P, pods.workers, failed, by, what);
  return true;
}

// failurePolicy.rules, matched in order before the exit code rule: true when a rule decided
// the plan; a RestartGang rule (or a RestartWorker one that cannot apply) makes the failure
// not permanent. `matched`: whether a rule matched at all.
bool ApplyRules(Planner& P, const JobPods& pods, const Signals& s, FailureFacts facts,
                const CoordinatorFate& coordinator, Verdict* v, bool* matched) {
  for (const ObservedPod* w : v->first_exits) {
    if (*w->exit_code > 0) facts.exit_codes.push_back(*w->exit_code);
  }
  const RuleMatch m = MatchFailureRule(P.job.spec.failure_policy, facts);
  *matched = m.rule != nullptr;
  if (!m.rule) return false;
  const std::string by =
      absl::StrCat("failurePolicy.rules[", m.index, "] (", api::FailureActionName(m.rule->action),
                   " on ", m.matched, ")");
  switch (m.rule->action) {
    case api::FailureAction::kFailJob:
      P.Finish(false, "FailureRule", absl::StrCat(v->what, "; ", by, " fails the job"));
      return true;
    case api::FailureAction::kRestartGangUncounted:
      P.Restart(
          v->cause,
          absl::StrCat("gang restart, not counted against maxRestarts by ", by, ": ", v->what),
          v->what, /*counted=*/false);
      return true;
    case api::FailureAction::kRestartGang:
      v->permanent = false;
      return false;
    case api::FailureAction::kRestartWorker:
      if (!coordinator.lost && RestartFailedWorkers(P, pods, s, by, v->what)) return true;
      v->permanent = false;
      return false;
  }
  return false;
}

// No rule decided: a permanent failure fails the job; else the gang restarts, up to
// maxRestarts (workers restarted alone count too).
void FailOrRestart(Planner& P, const Verdict& v) {
  const api::CoordinatedJob& job = P.job;
  const api::JobStatus& st = P.st();
  if (v.permanent) {
    P.Finish(false, "WorkerFailed",
             absl::StrCat(v.what, ", which failurePolicy counts as permanent"));
    return;
  }
  const int counted = st.restarts + st.worker_restarts;
  const int max_restarts = job.spec.failure_policy.max_restarts;
  if (counted >= max_restarts) {
    P.Finish(
        false, "MaxRestartsExceeded",
        absl::StrCat("the gang failed after ", counted, " restart", counted == 1 ? "" : "s",
                     st.worker_restarts > 0
                         ? absl::StrCat(" (", st.worker_restarts, " of single workers)")
                         : "",
                     " (failurePolicy.maxRestarts ", max_restarts, "); last failure: ", v.what));
    return;
  }
  P.Restart(v.cause,
            absl::StrCat("gang restart ", counted + 1, " of at most ", max_restarts, ": ", v.what),
            v.what);
}

}  // namespace

bool FailureSettling(Planner& P, const OperatorSettings& settings) {
  P.plan.failure_seen = true;
  const absl::Time first = P.observed.failure_first_seen.value_or(P.now());
  if (P.now() >= first + settings.failure_settle) return false;
  P.Requeue(first + settings.failure_settle - P.now());
  return true;
}

bool PlanGangFailure(Planner& P, const OperatorSettings& settings, const JobPods& pods,
                     const WorkerRestarts& restarts, const CoordinatorFate& coordinator) {
  const Signals s = Gather(P, pods, restarts, coordinator);
  if (s.described.empty()) return false;
  const FailureFacts facts = Reasons(P, pods, s, coordinator);
  P.plan.failure_reasons = facts.reasons;
  if (FailureSettling(P, settings)) return true;
  const bool gpu_fault = NoteGpuFaults(P, pods, s.errors);
  Verdict v = Judge(P, s, coordinator, P.observed.failure_first_seen.value_or(P.now()));
  RecordFailure(P, v.cause, facts.reasons, v.what, FailedAt(P, s));
  bool ruled = false;
  if (ApplyRules(P, pods, s, facts, coordinator, &v, &ruled)) return true;
  // The hardware failed, not the job: unless a rule said otherwise, its restart is free.
  if (gpu_fault && !v.permanent && !ruled) {
    P.Restart(v.cause,
              absl::StrCat("gang restart, not counted against maxRestarts (a GPU fault; a "
                           "failure rule on GPUFault may count it): ",
                           v.what),
              v.what, /*counted=*/false);
    return true;
  }
  FailOrRestart(P, v);
  return true;
}

}  // namespace cohort::controller::planning
