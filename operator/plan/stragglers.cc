// Stragglers (policies.h): the running gang's task whose steps take it longest against the
// rest of the gang. Each sidecar sends its task's busy seconds per step (the time a step
// takes it, its waits at barriers for its peers left out: sidecar/step_pace.h) on its
// heartbeats, and the coordinator's snapshot carries them. In a gang that synchronises each
// step, every task moves at the straggler's pace, but only the straggler is busy all of it.
// A failure rule on `Straggler` acts once the straggler is named (ActOnStraggler).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "operator/plan/planner.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {
namespace {

// How often a running gang whose sidecars send a pace is looked at again: its scores change
// without waking the controller (the watcher counts only the first pace of each task as a
// change of the coordinator's view). A gang without paces is not looked at for them.
constexpr absl::Duration kRecheck = absl::Seconds(15);

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// failurePolicy.rules on Straggler, once the straggler is named: true when a rule restarted
// the gang or the worker, or failed the job. A restart the job has none left for is not made:
// a slow gang still trains, so the job runs on, and an Event says so.
bool ActOnStraggler(Planner& P, const JobPods& pods, int worker, const std::string& what) {
  FailureFacts facts;
  facts.reasons = {api::failure_reason::kStraggler};
  const RuleMatch m = MatchFailureRule(P.job.spec.failure_policy, facts);
  if (!m.rule) return false;
  const std::string by =
      absl::StrCat("failurePolicy.rules[", m.index, "] (", api::FailureActionName(m.rule->action),
                   " on ", m.matched, ")");
  api::JobStatus& st = P.st();
  const int used = st.restarts + st.worker_restarts;
  const int max_restarts = P.job.spec.failure_policy.max_restarts;
  // Every restart counts: RestartGangUncounted on Straggler is refused by the parser (a slow
  // node would restart the job without end).
  if (m.rule->action != api::FailureAction::kFailJob && used >= max_restarts) {
    P.Event("Warning", "StragglerKept",
            absl::StrCat(by, " would restart ",
                         m.rule->action == api::FailureAction::kRestartWorker
                             ? absl::StrCat("worker ", worker)
                             : std::string("the gang"),
                         ", but the job has used its ", max_restarts,
                         " restarts (failurePolicy.maxRestarts): it runs on with the straggler"));
    return false;
  }
  const absl::Time since = st.straggler ? st.straggler->since : P.now();
  RecordFailure(P, "Straggler", facts.reasons, what, since);
  switch (m.rule->action) {
    case api::FailureAction::kFailJob:
      P.Finish(false, "FailureRule", absl::StrCat(what, "; ", by, " fails the job"));
      return true;
    case api::FailureAction::kRestartGangUncounted:
    case api::FailureAction::kRestartGang:
      P.Restart("Straggler",
                absl::StrCat("gang restart ", used + 1, " of at most ", max_restarts, " by ", by,
                             ": ", what),
                what);
      return true;
    case api::FailureAction::kRestartWorker:
      // The API takes RestartWorker only where the coordinator lets a worker register again.
      RestartWorkers(P, pods.workers, {worker}, by, what);
      return true;
  }
  return false;
}

}  // namespace

std::vector<StragglerScore> StragglerScores(const CoordinatorView& view, int replicas) {
  std::map<int, double> busy;  // by worker
  for (const auto& [task, progress] : view.progress) {
    const int worker = CoordinatorView::TaskIndex(task);
    if (worker < 0 || worker >= replicas || !progress.busy_seconds_per_step) continue;
    busy[worker] = *progress.busy_seconds_per_step;
  }
  // Against the rest of the gang: at least two others, and half the gang heard from.
  std::vector<StragglerScore> scores;
  if (busy.size() < 3 || static_cast<int>(busy.size()) * 2 < replicas) return scores;
  for (const auto& [worker, mine] : busy) {
    std::vector<double> others;
    for (const auto& [other, theirs] : busy) {
      if (other != worker) others.push_back(theirs);
    }
    const double median = Median(others);
    if (median <= 0) continue;
    scores.push_back({worker, mine / median, mine, median});
  }
  return scores;
}

bool PlanStragglers(Planner& P, const JobPods& pods) {
  api::JobStatus& st = P.st();
  const api::FailurePolicy::Stragglers& policy = P.job.spec.failure_policy.stragglers;
  // A straggler of an earlier gang is not this one's.
  if (st.straggler && st.gang_start_time && st.straggler->since < *st.gang_start_time) {
    st.straggler.reset();
  }
  std::vector<StragglerScore> scores;
  if (st.phase == api::phase::kRunning && P.observed.coordinator) {
    scores = StragglerScores(*P.observed.coordinator, P.job.spec.replicas);
  }
  if (st.phase == api::phase::kRunning && P.observed.coordinator &&
      !P.observed.coordinator->PacedTasks().empty()) {
    P.Requeue(kRecheck);
  }
  auto slowest = std::max_element(
      scores.begin(), scores.end(),
      [](const StragglerScore& a, const StragglerScore& b) { return a.score < b.score; });
  if (slowest == scores.end() || slowest->score < policy.ratio) {
    if (st.straggler && st.straggler->reported && st.phase == api::phase::kRunning) {
      P.Event("Normal", "StragglerRecovered",
              absl::StrCat("worker ", st.straggler->worker, " keeps up with the gang again"));
    }
    st.straggler.reset();
    return false;
  }
  // Rounded, so that the status written back does not change with each reading.
  const double score = std::round(slowest->score * 100) / 100;
  if (!st.straggler || st.straggler->worker != slowest->worker) {
    st.straggler = api::StragglerStatus{slowest->worker, score,
                                        absl::FromUnixSeconds(absl::ToUnixSeconds(P.now())), false};
  }
  if (st.straggler->reported) return false;
  const absl::Time due = st.straggler->since + policy.after;
  if (P.now() < due) {
    P.Requeue(due - P.now());
    return false;
  }
  st.straggler->reported = true;
  st.straggler->score = score;
  const ObservedPod* pod = slowest->worker < static_cast<int>(pods.workers.size())
                               ? pods.workers[slowest->worker]
                               : nullptr;
  const std::string what = absl::StrFormat(
      "worker %d%s is a straggler: its steps take it %.2f times as long as the rest of the "
      "gang's (%.3f s busy a step against a median of %.3f s) for %s",
      slowest->worker, pod && !pod->node.empty() ? absl::StrCat(" (node ", pod->node, ")") : "",
      slowest->score, slowest->busy, slowest->median,
      absl::FormatDuration(absl::Trunc(P.now() - st.straggler->since, absl::Seconds(1))));
  P.Event("Warning", "Straggler", absl::StrCat(what, " (failurePolicy.stragglers)"));
  return ActOnStraggler(P, pods, slowest->worker, what);
}

}  // namespace cohort::controller::planning
