// Goodput (policies.h): how long a failure took to be found and recovered from, and how much of
// the job's time its gang was training. status.lastFailure keeps the last failure's timeline
// (failed, detected, decided, recovered: what `kubectl describe cjob` shows); status.goodput
// the time every task of a gang was registered. The operator's metrics read both
// (controller/job_metrics.cc).
#include <algorithm>

#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// The status keeps times to the millisecond.
absl::Time Millis(absl::Time t) {
  return absl::UnixEpoch() + absl::Floor(t - absl::UnixEpoch(), absl::Milliseconds(1));
}

// Longest message kept in status.lastFailure; the Events have the whole of it.
constexpr size_t kMaxFailureMessage = 300;

}  // namespace

void NoteRegistration(Planner& P) {
  api::JobStatus& st = P.st();
  if (st.phase != api::phase::kRunning || st.tasks.registered < P.job.spec.replicas) return;
  const absl::Time now = Millis(P.now());
  if (!st.goodput.gang_registered_time) {
    st.goodput.gang_registered_time = now;
    if (!st.goodput.startup_seconds && P.job.object.is_object()) {
      const nlohmann::json& created_at = P.job.object.value("metadata", nlohmann::json::object())
                                             .value("creationTimestamp", nlohmann::json());
      const std::optional<absl::Time> created =
          created_at.is_string() ? api::ParseRfc3339(created_at.get<std::string>()) : std::nullopt;
      if (created)
        st.goodput.startup_seconds = std::max(0.0, absl::ToDoubleSeconds(now - *created));
    }
  }
  // A later plan than the one that decided: the gang after the failure (or the worker made
  // again) has every task back.
  if (st.last_failure && !st.last_failure->recovered_at && now > st.last_failure->decided_at) {
    st.last_failure->recovered_at = now;
  }
}

void RecordFailure(Planner& P, const std::string& cause, const std::vector<std::string>& reasons,
                   const std::string& what, absl::Time failed_at) {
  const absl::Time detected = P.observed.failure_first_seen.value_or(P.now());
  api::FailureTimeline t;
  t.cause = cause;
  t.reasons = reasons;
  t.message = what.substr(0, kMaxFailureMessage);
  t.detected_at = Millis(detected);
  t.failed_at = Millis(std::min(failed_at, detected));
  t.decided_at = Millis(P.now());
  // The gang trained until it failed, not until the failure was found.
  EndGangTime(P.st(), t.failed_at);
  P.st().last_failure = t;
}

std::optional<double> EffectiveTrainingRatio(const api::JobStatus& st, absl::Time now) {
  if (!st.start_time) return std::nullopt;
  const absl::Time end = st.completion_time.value_or(now);
  const double wall = absl::ToDoubleSeconds(end - *st.start_time);
  if (wall <= 0) return std::nullopt;
  double productive = st.goodput.productive_seconds;
  if (st.goodput.gang_registered_time) {
    productive += std::max(0.0, absl::ToDoubleSeconds(end - *st.goodput.gang_registered_time));
  }
  return std::clamp(productive / wall, 0.0, 1.0);
}

}  // namespace cohort::controller::planning
