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
  CollectedFamily avoided{
      "cohort_cjob_avoided_node_until_seconds",
      "Each node a CoordinatedJob's workers keep off after a GPU fault there, and until when "
      "(Unix time; status.avoidedNodes, failurePolicy.avoidNodeAfterGPUFault).",
      "gauge",
      {}};
  CollectedFamily startup{
      "cohort_cjob_startup_seconds",
      "Seconds from each CoordinatedJob's creation to every task of its first gang registered "
      "(status.goodput.startupSeconds).",
      "gauge",
      {}};
  CollectedFamily detection{
      "cohort_cjob_failure_detection_seconds",
      "The last failure of each CoordinatedJob: seconds from when it failed (a worker's exit, "
      "a hung task's last progress) to when the operator saw it (status.lastFailure).",
      "gauge",
      {}};
  CollectedFamily downtime{
      "cohort_cjob_restart_downtime_seconds",
      "The last failure of each CoordinatedJob: seconds from when it failed to every task of "
      "the gang after it registered again (status.lastFailure).",
      "gauge",
      {}};
  CollectedFamily ratio{
      "cohort_cjob_effective_training_ratio",
      "The share of each CoordinatedJob's time since it started during which every task of its "
      "gang was registered (status.goodput): 1 for a job that never lost time.",
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
      if (const auto job = api::ParseCoordinatedJob(o); job.ok()) {
        const api::JobStatus& st = job->status;
        const std::vector<std::pair<std::string, std::string>> labels = {{"namespace", ns},
                                                                         {"cjob", name}};
        if (st.goodput.startup_seconds)
          startup.samples.push_back({labels, *st.goodput.startup_seconds});
        if (const auto& f = st.last_failure) {
          detection.samples.push_back(
              {labels, absl::ToDoubleSeconds(f->detected_at - f->failed_at)});
          if (f->recovered_at) {
            downtime.samples.push_back(
                {labels, absl::ToDoubleSeconds(*f->recovered_at - f->failed_at)});
          }
        }
        if (const auto r = planning::EffectiveTrainingRatio(st, absl::Now())) {
          ratio.samples.push_back({labels, *r});
        }
        for (const api::AvoidedNode& a : st.avoided_nodes) {
          avoided.samples.push_back({{{"namespace", ns}, {"cjob", name}, {"node", a.node}},
                                     absl::ToDoubleSeconds(a.until - absl::UnixEpoch())});
        }
      }
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
  return {by_phase,  job_phase, restarts, coordinator_restarts,
          straggler, avoided,   startup,  detection,
          downtime,  ratio,     watched};
}

}  // namespace cohort::controller
