// A gang is made from one version of its job's spec (children.h, SpecHash).
#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "operator/plan/children.h"

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
