// spec.pytorch and spec.elastic of a CoordinatedJob (coordinated_job.h), both for framework:
// pytorch (docs/pytorch.md).
#include <utility>

#include "absl/strings/str_cat.h"
#include "operator/api/coordinated_job_internal.h"

namespace cohort::api::internal {

namespace {

absl::Status InvalidField(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

absl::Status ParsePytorch(const json& spec, JobSpec* s) {
  if (!spec.contains("pytorch") || spec["pytorch"].is_null()) return absl::OkStatus();
  if (s->framework != Framework::kPytorch) {
    return InvalidField("spec.pytorch", "is for framework: pytorch");
  }
  const json& pytorch = spec["pytorch"];
  if (!pytorch.is_object()) return InvalidField("spec.pytorch", "must be an object");
  if (pytorch.contains("nprocPerNode") && !pytorch["nprocPerNode"].is_null()) {
    const auto n = Whole(pytorch, "nprocPerNode", 1, 1, 1024);
    if (!n) {
      return InvalidField("spec.pytorch.nprocPerNode", "must be a whole number from 1 to 1024");
    }
    s->pytorch.nproc_per_node = static_cast<int>(*n);
  }
  return absl::OkStatus();
}

absl::Status ParseElastic(const json& spec, JobSpec* s) {
  if (!spec.contains("elastic") || spec["elastic"].is_null()) return absl::OkStatus();
  if (s->framework != Framework::kPytorch) {
    return InvalidField("spec.elastic", "is for framework: pytorch (torchrun's elastic agents)");
  }
  const json& elastic = spec["elastic"];
  if (!elastic.is_object()) return InvalidField("spec.elastic", "must be an object");
  const auto lo = Whole(elastic, "minReplicas", s->replicas, 1, 16384);
  const auto hi = Whole(elastic, "maxReplicas", s->replicas, 1, 16384);
  const auto restarts = Whole(elastic, "maxRestarts", 3, 0, 1000);
  if (!lo)
    return InvalidField("spec.elastic.minReplicas", "must be a whole number from 1 to 16384");
  if (!hi)
    return InvalidField("spec.elastic.maxReplicas", "must be a whole number from 1 to 16384");
  if (!restarts) {
    return InvalidField("spec.elastic.maxRestarts", "must be a whole number from 0 to 1000");
  }
  if (!(*lo <= s->replicas && s->replicas <= *hi)) {
    return InvalidField("spec.elastic", absl::StrCat("spec.replicas (", s->replicas,
                                                     ") must lie from minReplicas (", *lo,
                                                     ") to maxReplicas (", *hi, ")"));
  }
  ElasticSpec e;
  e.min_replicas = static_cast<int>(*lo);
  e.max_replicas = static_cast<int>(*hi);
  e.max_restarts = static_cast<int>(*restarts);
  s->elastic = e;
  // A lost worker's pod is made again alone, and the coordinator lets its sidecar register
  // again: the implied rule comes after the job's own.
  s->coordinator.recoverable = true;
  FailureRule rejoin;
  rejoin.action = FailureAction::kRestartWorker;
  rejoin.on_reasons = {failure_reason::kPodDeleted, failure_reason::kEvicted,
                       failure_reason::kNodeLost, failure_reason::kPreempted};
  s->failure_policy.rules.push_back(std::move(rejoin));
  return absl::OkStatus();
}

}  // namespace cohort::api::internal
