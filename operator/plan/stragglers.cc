// Stragglers (policies.h): the running gang's task whose steps take it longest against the
// rest of the gang. Each sidecar sends its task's busy seconds per step (the time a step
// takes it, its waits at barriers for its peers left out: sidecar/step_pace.h) on its
// heartbeats, and the coordinator's snapshot carries them. In a gang that synchronises each
// step, every task moves at the straggler's pace, but only the straggler is busy all of it.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

void PlanStragglers(Planner& P) {
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
    return;
  }
  // Rounded, so that the status written back does not change with each reading.
  const double score = std::round(slowest->score * 100) / 100;
  if (!st.straggler || st.straggler->worker != slowest->worker) {
    st.straggler = api::StragglerStatus{slowest->worker, score,
                                        absl::FromUnixSeconds(absl::ToUnixSeconds(P.now())), false};
  }
  if (st.straggler->reported) return;
  const absl::Time due = st.straggler->since + policy.after;
  if (P.now() < due) {
    P.Requeue(due - P.now());
    return;
  }
  st.straggler->reported = true;
  st.straggler->score = score;
  P.Event("Warning", "Straggler",
          absl::StrFormat(
              "worker %d is a straggler: its steps take it %.2f times as long as the "
              "rest of the gang's (%.3f s busy a step against a median of %.3f s) "
              "for %s (failurePolicy.stragglers)",
              slowest->worker, slowest->score, slowest->busy, slowest->median,
              absl::FormatDuration(absl::Trunc(P.now() - st.straggler->since, absl::Seconds(1)))));
}

}  // namespace cohort::controller::planning
