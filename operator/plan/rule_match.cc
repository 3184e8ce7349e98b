// failurePolicy.rules: matching what ended a gang (planner.h: MatchFailureRule), and the
// coordinator's errors as failure reasons.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "operator/plan/planner.h"

namespace cohort::controller::planning {

std::string TaskErrorReason(const CoordinatorView::TaskError& e) {
  // The sidecar reports its GPU health check's findings as INTERNAL errors of its own task;
  // the coordinator marks a task that stopped sending heartbeats UNAVAILABLE, saying so.
  if (e.auxiliary && e.code == 13) return api::failure_reason::kGPUFault;
  if (e.code == 14 && absl::StrContains(e.message, "sent no heartbeat")) {
    return api::failure_reason::kHeartbeatTimeout;
  }
  return api::failure_reason::kTaskError;
}

RuleMatch MatchFailureRule(const api::FailurePolicy& policy, const FailureFacts& facts) {
  for (size_t i = 0; i < policy.rules.size(); ++i) {
    const api::FailureRule& rule = policy.rules[i];
    for (int code : rule.on_exit_codes) {
      if (std::find(facts.exit_codes.begin(), facts.exit_codes.end(), code) !=
          facts.exit_codes.end()) {
        return {&rule, static_cast<int>(i), absl::StrCat("exit code ", code)};
      }
    }
    for (const std::string& reason : rule.on_reasons) {
      if (std::find(facts.reasons.begin(), facts.reasons.end(), reason) != facts.reasons.end()) {
        return {&rule, static_cast<int>(i), reason};
      }
    }
  }
  return {};
}

}  // namespace cohort::controller::planning
