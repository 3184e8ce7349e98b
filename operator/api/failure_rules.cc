// spec.failurePolicy of a CoordinatedJob (coordinated_job.h): maxRestarts, the exit code
// lists, rules, startupDeadlineSeconds and progressTimeout.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "operator/api/coordinated_job.h"
#include "operator/api/coordinated_job_internal.h"

namespace cohort::api {
namespace {

absl::Status InvalidPolicy(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("spec.failurePolicy", field, ": ", why));
}

const std::vector<std::string>& KnownReasons() {
  static const std::vector<std::string> kReasons = {
      failure_reason::kEvicted,          failure_reason::kPreempted,
      failure_reason::kOOMKilled,        failure_reason::kNodeLost,
      failure_reason::kPodDeleted,       failure_reason::kGPUFault,
      failure_reason::kHeartbeatTimeout, failure_reason::kCoordinatorLost,
      failure_reason::kTaskError,        failure_reason::kHang,
      failure_reason::kStraggler};
  return kReasons;
}

// failurePolicy.stragglers: {ratio, for}; absent fields keep their defaults.
absl::Status ParseStragglers(const json& failure_policy, FailurePolicy::Stragglers* out) {
  if (!failure_policy.contains("stragglers") || failure_policy["stragglers"].is_null()) {
    return absl::OkStatus();
  }
  const json& s = failure_policy["stragglers"];
  if (!s.is_object()) return InvalidPolicy(".stragglers", "must be an object {ratio, for}");
  if (s.contains("ratio")) {
    if (!s["ratio"].is_number() || !(s["ratio"].get<double>() > 1.0) ||
        s["ratio"].get<double>() > 1000) {
      return InvalidPolicy(".stragglers.ratio", "must be a number above 1 (2: twice as slow)");
    }
    out->ratio = s["ratio"].get<double>();
  }
  if (s.contains("for")) {
    absl::Duration d;
    if (!s["for"].is_string() || !absl::ParseDuration(s["for"].get<std::string>(), &d) ||
        d < absl::ZeroDuration()) {
      return InvalidPolicy(".stragglers.for", "must be a duration such as 2m");
    }
    out->after = d;
  }
  return absl::OkStatus();
}

}  // namespace

std::string FailureActionName(FailureAction action) {
  switch (action) {
    case FailureAction::kFailJob:
      return "FailJob";
    case FailureAction::kRestartGang:
      return "RestartGang";
    case FailureAction::kRestartGangUncounted:
      return "RestartGangUncounted";
    case FailureAction::kRestartWorker:
      return "RestartWorker";
  }
  return "RestartGang";
}

absl::Status ParseFailureRules(const json& failure_policy, FailurePolicy* out) {
  if (failure_policy.contains("startupDeadlineSeconds") &&
      !failure_policy["startupDeadlineSeconds"].is_null()) {
    const json& d = failure_policy["startupDeadlineSeconds"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1) {
      return InvalidPolicy(".startupDeadlineSeconds", "must be a whole number above 0");
    }
    out->startup_deadline_seconds = d.get<int64_t>();
  }
  if (failure_policy.contains("progressTimeout") && !failure_policy["progressTimeout"].is_null()) {
    const json& t = failure_policy["progressTimeout"];
    absl::Duration d;
    if (!t.is_string() || !absl::ParseDuration(t.get<std::string>(), &d) ||
        d <= absl::ZeroDuration()) {
      return InvalidPolicy(".progressTimeout", "must be a duration above 0 such as 90s or 10m");
    }
    out->progress_timeout = t.get<std::string>();
  }
  if (auto s = ParseStragglers(failure_policy, &out->stragglers); !s.ok()) return s;
  if (failure_policy.contains("avoidNodeAfterGPUFault") &&
      !failure_policy["avoidNodeAfterGPUFault"].is_null()) {
    const json& t = failure_policy["avoidNodeAfterGPUFault"];
    absl::Duration d;
    if (!t.is_string() || !absl::ParseDuration(t.get<std::string>(), &d) ||
        d < absl::ZeroDuration() || d > absl::Hours(24 * 30)) {
      return InvalidPolicy(".avoidNodeAfterGPUFault",
                           "must be a duration from 0s (never avoid) to 720h, such as 1h");
    }
    out->avoid_node_after_gpu_fault = d;
  }
  if (!failure_policy.contains("rules") || failure_policy["rules"].is_null()) {
    return absl::OkStatus();
  }
  const json& rules = failure_policy["rules"];
  if (!rules.is_array()) return InvalidPolicy(".rules", "must be a list");
  if (rules.size() > 20) return InvalidPolicy(".rules", "at most 20 rules");
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string field = absl::StrCat(".rules[", i, "]");
    const json& r = rules[i];
    if (!r.is_object()) return InvalidPolicy(field, "must be an object");
    FailureRule rule;
    const json action = r.value("action", json());
    if (action == "FailJob") {
      rule.action = FailureAction::kFailJob;
    } else if (action == "RestartGang") {
      rule.action = FailureAction::kRestartGang;
    } else if (action == "RestartGangUncounted") {
      rule.action = FailureAction::kRestartGangUncounted;
    } else if (action == "RestartWorker") {
      rule.action = FailureAction::kRestartWorker;
    } else {
      return InvalidPolicy(field + ".action",
                           absl::StrCat(action.dump(),
                                        " is not FailJob, RestartGang, "
                                        "RestartGangUncounted or RestartWorker"));
    }
    if (r.contains("onExitCodes")) {
      const json& codes = r["onExitCodes"];
      if (!codes.is_array()) return InvalidPolicy(field + ".onExitCodes", "must be a list");
      for (const json& c : codes) {
        if (!c.is_number_integer() || c.get<int64_t>() < 1 || c.get<int64_t>() > 255) {
          return InvalidPolicy(field + ".onExitCodes",
                               absl::StrCat(c.dump(), " is not an exit code from 1 to 255"));
        }
        rule.on_exit_codes.push_back(c.get<int>());
      }
    }
    if (r.contains("onReasons")) {
      const json& reasons = r["onReasons"];
      if (!reasons.is_array()) return InvalidPolicy(field + ".onReasons", "must be a list");
      for (const json& reason : reasons) {
        const std::string text = reason.is_string() ? reason.get<std::string>() : reason.dump();
        if (std::find(KnownReasons().begin(), KnownReasons().end(), text) == KnownReasons().end()) {
          return InvalidPolicy(
              field + ".onReasons",
              absl::StrCat("\"", text, "\" is not one of ", absl::StrJoin(KnownReasons(), ", ")));
        }
        rule.on_reasons.push_back(text);
      }
    }
    // Uncounted, a restart for a straggler that is one again in the next gang (a slow node,
    // say) would restart the job forever: maxRestarts must bound it.
    if (rule.action == FailureAction::kRestartGangUncounted &&
        std::find(rule.on_reasons.begin(), rule.on_reasons.end(), failure_reason::kStraggler) !=
            rule.on_reasons.end()) {
      return InvalidPolicy(field + ".onReasons",
                           "RestartGangUncounted on Straggler would restart the gang without "
                           "end while the straggler's cause (a slow node, say) stays; use "
                           "RestartGang, which maxRestarts bounds");
    }
    if (rule.on_exit_codes.empty() && rule.on_reasons.empty()) {
      return InvalidPolicy(field, "names no onExitCodes and no onReasons: it would match nothing");
    }
    out->rules.push_back(std::move(rule));
  }
  return absl::OkStatus();
}

namespace internal {

namespace {

absl::StatusOr<std::vector<int>> ExitCodes(const json& o, const char* key,
                                           const std::string& field) {
  std::vector<int> out;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return out;
  if (!it->is_array()) return InvalidPolicy(field, "must be a list of exit codes");
  for (const auto& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 255) {
      return InvalidPolicy(field, absl::StrCat(v.dump(), " is not an exit code from 1 to 255"));
    }
    out.push_back(static_cast<int>(v.get<int64_t>()));
  }
  return out;
}

// A RestartWorker rule needs a job whose coordinator lets a worker register again, and
// clients that rejoin: not jaxlib's, not the task runtime's pool.
absl::Status CheckRestartWorker(const json& spec, const JobSpec& s) {
  for (size_t i = 0; i < s.failure_policy.rules.size(); ++i) {
    if (s.failure_policy.rules[i].action != FailureAction::kRestartWorker) continue;
    const std::string field = absl::StrCat(".rules[", i, "].action");
    if (!s.coordinator.recoverable) {
      return InvalidPolicy(field,
                           "RestartWorker needs spec.coordinator.recoverable: true (a worker "
                           "restarted alone registers again with the running job, which must "
                           "allow it)");
    }
    if (s.framework == Framework::kJax) {
      return InvalidPolicy(field,
                           "RestartWorker is for generic and tensorflow jobs: jaxlib's clients "
                           "do not rejoin a running job");
    }
    if (spec.contains("tasks") && !spec["tasks"].is_null()) {
      return InvalidPolicy(field,
                           "RestartWorker is for gangs: the task runtime (spec.tasks) replaces "
                           "its worker pods itself");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseFailurePolicy(const json& spec, JobSpec* s) {
  const json failure = spec.value("failurePolicy", json::object());
  const std::optional<int64_t> max_restarts = Whole(failure, "maxRestarts", 3);
  if (!max_restarts || *max_restarts < 0 || *max_restarts > std::numeric_limits<int>::max()) {
    return InvalidPolicy(".maxRestarts", max_restarts && *max_restarts < 0
                                             ? "must not be negative"
                                             : "must be a whole number");
  }
  s->failure_policy.max_restarts = static_cast<int>(*max_restarts);
  auto retryable = ExitCodes(failure, "retryableExitCodes", ".retryableExitCodes");
  if (!retryable.ok()) return retryable.status();
  auto permanent = ExitCodes(failure, "permanentExitCodes", ".permanentExitCodes");
  if (!permanent.ok()) return permanent.status();
  for (int c : *retryable) {
    if (std::find(permanent->begin(), permanent->end(), c) != permanent->end()) {
      return InvalidPolicy(
          "", absl::StrCat("exit code ", c, " cannot be both retryable and permanent"));
    }
  }
  s->failure_policy.retryable_exit_codes = *retryable;
  s->failure_policy.permanent_exit_codes = *permanent;
  if (auto r = ParseFailureRules(failure, &s->failure_policy); !r.ok()) return r;
  return CheckRestartWorker(spec, *s);
}

}  // namespace internal

}  // namespace cohort::api
