// A failure rule's RestartWorker: the failed workers' pods made again while the rest of the gang
// runs on, their tasks registering again with the coordinator (spec.coordinator.recoverable:
// cohort-coordinator --recoverable-job), and status.restartingWorkers followed until they have.
#include <algorithm>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/plan/planner.h"

namespace cohort::controller::planning {

WorkerRestarts FollowWorkerRestarts(Planner& P, std::vector<const ObservedPod*>& workers) {
  WorkerRestarts out;
  out.restarting.assign(workers.size(), false);
  std::vector<api::RestartingWorker> still;
  const std::optional<CoordinatorView>& view = P.observed.coordinator;
  for (const api::RestartingWorker& r : P.st().restarting_workers) {
    if (r.index < 0 || r.index >= static_cast<int>(workers.size()) || out.Skips(r.index)) {
      continue;
    }
    const ObservedPod* w = workers[r.index];
    bool settled = false;   // no longer restarting
    bool rejoined = false;  // and back in the gang, connected anew
    if (w && w->uid == r.uid) {
      // The pod that failed: no worker of the gang any more, and going.
      if (!w->terminating) P.plan.delete_pods.push_back(w->name);
      workers[r.index] = nullptr;
    } else if (w && (w->phase == "Running" || Finished(*w)) && view) {
      const auto it = view->workload_incarnations.find(r.index);
      uint64_t failed_incarnation = 0;
      const bool known = absl::SimpleAtoi(r.incarnation, &failed_incarnation);
      const bool connected_anew =
          it != view->workload_incarnations.end() && (!known || it->second != failed_incarnation);
      const bool in_error =
          std::any_of(view->errors.begin(), view->errors.end(),
                      [&](const auto& e) { return CoordinatorView::TaskIndex(e.task) == r.index; });
      rejoined = connected_anew && !in_error && w->phase != "Failed";
      // A successor whose workload already ended is the gang's again: its exit decides (a
      // failed one is no rejoining).
      settled = rejoined || Finished(*w);
    }
    if (settled) {
      if (rejoined) {
        P.Event(
            "Normal", "WorkerRejoined",
            absl::StrCat("worker ", r.index, " (pod ", w->name, ") has rejoined the running gang"));
      }
      continue;
    }
    out.restarting[r.index] = true;
    still.push_back(r);
  }
  P.st().restarting_workers = std::move(still);
  if (!P.st().restarting_workers.empty()) P.Requeue(absl::Seconds(2));
  return out;
}

void RestartWorkers(Planner& P, const std::vector<const ObservedPod*>& workers,
                    const std::vector<int>& failed, const std::string& by,
                    const std::string& what) {
  const api::FailurePolicy& policy = P.job.spec.failure_policy;
  api::JobStatus& st = P.st();
  const int used = st.restarts + st.worker_restarts;
  const int more = static_cast<int>(failed.size());
  if (used + more > policy.max_restarts) {
    P.Finish(false, "MaxRestartsExceeded",
             absl::StrCat("restarting ", more == 1 ? "a worker" : absl::StrCat(more, " workers"),
                          " would pass failurePolicy.maxRestarts (", policy.max_restarts,
                          "; used: ", st.restarts, " gang and ", st.worker_restarts,
                          " worker restarts); last failure: ", what));
    return;
  }
  std::vector<std::string> names;
  for (int i : failed) {
    api::RestartingWorker entry{i, "", ""};
    if (const ObservedPod* w = workers[i]) {
      entry.uid = w->uid;
      if (!w->terminating) P.plan.delete_pods.push_back(w->name);
    }
    if (P.observed.coordinator) {
      const auto& incarnations = P.observed.coordinator->workload_incarnations;
      if (auto it = incarnations.find(i); it != incarnations.end()) {
        entry.incarnation = absl::StrCat(it->second);
      }
    }
    st.restarting_workers.push_back(entry);
    names.push_back(absl::StrCat(i));
  }
  st.worker_restarts += more;
  // Handled: the gang goes on, so nothing of this failure is left to settle.
  P.plan.failure_seen = false;
  P.plan.failure_reasons.clear();
  P.Requeue(absl::Seconds(2));
  P.Event("Warning", "WorkerRestart",
          absl::StrCat(more == 1 ? "worker " : "workers ", absl::StrJoin(names, ", "),
                       " restarted alone (", used + more, " of at most ", policy.max_restarts,
                       " restarts) by ", by, ": ", what, "; the rest of the gang runs on"));
}

}  // namespace cohort::controller::planning
