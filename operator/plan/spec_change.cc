// A gang is made from one version of its job's spec (children.h, SpecHash), and a spec that
// changes under a running gang starts a new one from it (policies.h, PlanSpecChange).
#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"
#include "operator/plan/policies.h"

namespace cohort::controller {

std::string SpecHash(const api::CoordinatedJob& job) {
  json spec = job.object.value("spec", json::object());
  if (!spec.is_object()) spec = json::object();
  for (const char* takes_effect_as_is : {"failurePolicy", "successPolicy", "activeDeadlineSeconds",
                                         "ttlSecondsAfterFinished", "suspend"}) {
    spec.erase(takes_effect_as_is);
  }
  // nlohmann::json keeps an object's keys sorted: the same spec dumps the same bytes.
  const std::string text = spec.dump();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size))
      .substr(0, 16);
}

void StampSpecHash(const std::string& hash, json* object) {
  json& annotations = (*object)["metadata"]["annotations"];
  if (!annotations.is_object()) annotations = json::object();
  annotations[kSpecHashAnnotation] = hash;
}

}  // namespace cohort::controller

namespace cohort::controller::planning {

// Replicas, the template or the coordinator's settings changed: a clean new gang starts from
// the new spec. Not a failure, so not counted against maxRestarts. Pods made before operators
// marked them (no hash) are left alone.
bool PlanSpecChange(Planner& P, const JobPods& pods) {
  const api::CoordinatedJob& job = P.job;
  const std::string hash = SpecHash(job);
  const auto stale = [&hash](const ObservedPod* p) {
    return p && !p->spec_hash.empty() && p->spec_hash != hash;
  };
  bool changed = stale(pods.coordinator);
  for (const ObservedPod* w : pods.workers) changed = changed || stale(w);
  // A worker index past the new replicas (the gang shrank) was sorted out as a leftover.
  const int gang = P.st().Gang();
  for (const ObservedPod& p : P.observed.pods) {
    changed = changed || (p.restart == gang && p.role == "worker" && p.index >= job.spec.replicas);
  }
  if (!changed) return false;
  P.Restart("SpecChanged",
            absl::StrCat("the job's spec changed (generation ", job.generation,
                         "): a new gang starts from it; not counted against maxRestarts"),
            "the spec changed", /*counted=*/false);
  return true;
}

}  // namespace cohort::controller::planning
