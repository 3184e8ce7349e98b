// failurePolicy.rules: matching what ended a gang (planner.h: MatchFailureRule), and the
// coordinator's errors as failure reasons.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "operator/plan/planner.h"

namespace cohort::controller::planning {

std::string TaskErrorReason(const CoordinatorView::TaskError& e) {
  // By the type the coordinator gave the error alone: its code and text are the reporter's
  // to choose and say nothing reliable.
  switch (e.reason) {
    case FailureReason::kGpuFault:
      return api::failure_reason::kGPUFault;
    case FailureReason::kHeartbeatTimeout:
      return api::failure_reason::kHeartbeatTimeout;
    case FailureReason::kHang:
      return api::failure_reason::kHang;
    default:
      return api::failure_reason::kTaskError;
  }
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
