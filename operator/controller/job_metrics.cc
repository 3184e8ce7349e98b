// The operator's per-job metrics (docs/metrics.md), from the CoordinatedJob cache.
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "operator/controller/job_controller.h"
#include "operator/plan/policies.h"

namespace cohort::controller {

std::vector<CollectedFamily> JobController::CollectJobMetrics() const {
  static const char* kPhases[] = {api::phase::kPending,    api::phase::kRunning,
                                  api::phase::kRestarting, api::phase::kSucceeded,
                                  api::phase::kFailed,     api::phase::kSuspended};
  CollectedFamily by_phase{"cohort_operator_jobs", "CoordinatedJobs by phase.", "gauge", {}};
  CollectedFamily job_phase{"cohort_operator_job_phase",
                            "1 for the phase each CoordinatedJob is in, 0 for the others.",
                            "gauge",
                            {}};
  CollectedFamily restarts{"cohort_operator_job_restarts",
                           "Gang restarts of each CoordinatedJob (status.restarts).",
                           "gauge",
                           {}};
  CollectedFamily coordinator_restarts{
      "cohort_operator_job_coordinator_restarts",
      "Coordinator restarts of each CoordinatedJob that kept its gang "
      "(status.coordinatorRestarts).",
      "gauge",
      {}};
  CollectedFamily straggler{
      "cohort_task_straggler_score",
      "Each running worker's busy seconds per step over the median of the rest of its gang's "
      "(1: keeps up; 2: its steps take it twice as long); failurePolicy.stragglers.",
      "gauge",
      {}};
  CollectedFamily watched{"cohort_operator_coordinators_watched",
                          "Coordinators the operator follows through cluster snapshots.",
                          "gauge",
                          {}};
  std::map<std::string, int> counts;
  if (jobs_) {
    for (const auto& o : jobs_->All()) {
      std::string p = o.value("/status/phase"_json_pointer, std::string(api::phase::kPending));
      counts[p]++;
      const std::string ns = kube::Namespace(o), name = kube::Name(o);
      for (const char* candidate : kPhases) {
        job_phase.samples.push_back({{{"namespace", ns}, {"cjob", name}, {"phase", candidate}},
                                     p == candidate ? 1.0 : 0.0});
      }
      restarts.samples.push_back(
          {{{"namespace", ns}, {"cjob", name}},
           static_cast<double>(o.value("/status/restarts"_json_pointer, 0))});
      coordinator_restarts.samples.push_back(
          {{{"namespace", ns}, {"cjob", name}},
           static_cast<double>(o.value("/status/coordinatorRestarts"_json_pointer, 0))});
      if (p != api::phase::kRunning) continue;
      const int gang = o.value("/status/restarts"_json_pointer, 0) +
                       o.value("/status/uncountedRestarts"_json_pointer, 0);
      const std::optional<CoordinatorView> view = watcher_.View(JobKey(ns, name), gang);
      if (!view) continue;
      for (const planning::StragglerScore& s :
           planning::StragglerScores(*view, o.value("/spec/replicas"_json_pointer, 1))) {
        straggler.samples.push_back(
            {{{"namespace", ns}, {"cjob", name}, {"worker", absl::StrCat(s.worker)}}, s.score});
      }
    }
  }
  for (const char* p : kPhases) {
    by_phase.samples.push_back({{{"phase", p}}, static_cast<double>(counts[p])});
  }
  watched.samples.push_back({{}, static_cast<double>(watcher_.Watched())});
  queue_depth_->Set(static_cast<double>(queue_.Depth()));
  return {by_phase, job_phase, restarts, coordinator_restarts, straggler, watched};
}

}  // namespace cohort::controller
