// FailureReporter: a GPU fault, the workload's exit or its hang, reported to the coordinator.
#include "sidecar/failure_reporter.h"

#include "absl/strings/str_cat.h"
#include "agent/grpc_status.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

const char* ProblemReason(gpu::HealthProblem problem) {
  switch (problem) {
    case gpu::HealthProblem::kCriticalXid:
      return "xid";
    case gpu::HealthProblem::kDoubleBitEcc:
      return "double_bit_ecc";
    case gpu::HealthProblem::kGpuLost:
      return "gpu_lost";
  }
  return "gpu";
}

}  // namespace

FailureReporter::FailureReporter(TaskIdentity task, CoordinationAgent* agent,
                                 MetricsRegistry* registry)
    : task_(std::move(task)), agent_(agent), registry_(registry) {}

void FailureReporter::Report(Failure failure) {
  const std::string message(failure.error.message());
  {
    absl::MutexLock lock(&mu_);
    last_error_reason_ = failure.label;
    last_error_ = message;
    last_error_at_ = absl::Now();
    if (agent_->state() != AgentState::kConnected) {
      if (!pending_) pending_ = std::move(failure);
      spdlog::error("{} (not connected yet: reported once connected)", message);
      return;
    }
  }
  spdlog::error("reporting to the coordinator ({}): {}", FailureReasonName(failure.reason),
                message);
  reported_->WithLabels({failure.label}).Increment();
  if (auto s = agent_->ReportError(failure.error, failure.reason); !s.ok()) {
    spdlog::error("the report did not reach the coordinator: {}", DescribeStatus(s));
  }
}

void FailureReporter::SendPending() {
  std::optional<Failure> pending;
  {
    absl::MutexLock lock(&mu_);
    pending.swap(pending_);
  }
  if (pending) Report(*std::move(pending));
}

void FailureReporter::OnWorkloadExit(const std::string& what) {
  // A workload that shut down through the coordinator is done, not failed. Only one whose
  // task is still connected died on us.
  auto states = agent_->GetTaskState({{task_.workload_job, task_.task_id}});
  if (states.ok() && states->size() == 1 && (*states)[0].state != tensorflow::TASKSTATE_CONNECTED) {
    spdlog::info("{}; its task is {}, so this is not a failure", what,
                 tensorflow::CoordinatedTaskState_Name((*states)[0].state));
    return;
  }
  Report({"workload_exit",
          absl::UnavailableError(
              absl::StrCat(task_.Describe(), " failed: ", what, " without shutting down")),
          FailureReason::kWorkloadExit});
}

void FailureReporter::OnGpuProblem(const gpu::HealthEvent& event) {
  Report({ProblemReason(event.problem),
          absl::InternalError(absl::StrCat("GPU ", event.gpu_index, " (", event.gpu_uuid, ") of ",
                                           task_.Describe(), " is unhealthy: ", event.reason)),
          FailureReason::kGpuFault});
}

void FailureReporter::OnHang(const std::string& description) {
  Report({"hang",
          absl::DeadlineExceededError(absl::StrCat(task_.Describe(), " is hung: ", description)),
          FailureReason::kHang});
}

void FailureReporter::RegisterMetrics() {
  reported_ = &registry_->AddCounter(
      "cohort_sidecar_errors_reported_total",
      "Errors this sidecar reported to the coordinator, by reason (xid, double_bit_ecc, "
      "gpu_lost, workload_exit, hang).",
      {"reason"});
  registry_->AddCollector([this] { return CollectMetrics(); });
}

std::vector<CollectedFamily> FailureReporter::CollectMetrics() const {
  CollectedFamily last{"cohort_sidecar_last_error_timestamp_seconds",
                       "When this sidecar last found an error to report (Unix time).",
                       "gauge",
                       {}};
  CollectedFamily last_info{"cohort_sidecar_last_error_info",
                            "1, labelled with the reason and message of the last error found.",
                            "gauge",
                            {}};
  absl::MutexLock lock(&mu_);
  if (last_error_at_ != absl::InfinitePast()) {
    last.samples.push_back({{}, absl::ToDoubleSeconds(last_error_at_ - absl::UnixEpoch())});
    last_info.samples.push_back(
        {{{"reason", last_error_reason_}, {"message", last_error_.substr(0, 200)}}, 1});
  }
  return {last, last_info};
}

}  // namespace cohort
