// The job's token Secret and TLS certificates (its own or cert-manager's), and their volume.
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"
#include "operator/plan/children_internal.h"

namespace cohort::controller {
namespace {

using internal::Labels;
using internal::Metadata;

// Decodes each key of a Secret's data into its string; false when one is missing, not base64
// or empty.
bool ReadSecretKeys(const json& secret,
                    std::initializer_list<std::pair<const char*, std::string*>> keys) {
  const json data = secret.value("data", json::object());
  for (const auto& [key, out] : keys) {
    const json& value = data.value(key, json());
    if (!value.is_string() || !absl::Base64Unescape(value.get<std::string>(), out) ||
        out->empty()) {
      return false;
    }
  }
  return true;
}

}  // namespace

namespace internal {

json TokenMount() { return {{"name", kTokenVolume}, {"mountPath", kTokenDir}, {"readOnly", true}}; }

json TokenVolume(const api::CoordinatedJob& job, bool coordinator, JobTls tls) {
  const auto items = [](const std::vector<std::pair<const char*, const char*>>& keys) {
    json out = json::array();
    for (const auto& [key, path] : keys) out.push_back({{"key", key}, {"path", path}});
    return out;
  };
  if (tls == JobTls::kCertManager) {
    const json issued =
        items({{kCertManagerCaKey, kCaCertKey},
               {kCertManagerCertKey, coordinator ? kCoordinatorCertKey : kClientCertKey},
               {kCertManagerKeyKey, coordinator ? kCoordinatorKeyKey : kClientKeyKey}});
    return {
        {"name", kTokenVolume},
        {"projected",
         {{"defaultMode", 0444},
          {"sources",
           json::array(
               {{{"secret",
                  {{"name", TokenSecretName(job)}, {"items", items({{kTokenKey, kTokenKey}})}}}},
                {{"secret",
                  {{"name", coordinator ? CoordinatorTlsName(job) : ClientTlsName(job)},
                   {"items", issued}}}}})}}}};
  }
  std::vector<std::pair<const char*, const char*>> keys = {{kTokenKey, kTokenKey}};
  if (tls == JobTls::kOperator) {
    for (const char* key : {kCaCertKey, coordinator ? kCoordinatorCertKey : kClientCertKey,
                            coordinator ? kCoordinatorKeyKey : kClientKeyKey}) {
      keys.emplace_back(key, key);
    }
  }
  return {{"name", kTokenVolume},
          {"secret",
           {{"secretName", TokenSecretName(job)}, {"items", items(keys)}, {"defaultMode", 0444}}}};
}

}  // namespace internal

json TokenSecret(const api::CoordinatedJob& job, const std::string& token,
                 const JobCertificates* certificates, JobTls tls) {
  json data = {{kTokenKey, absl::Base64Escape(token)}};
  if (certificates) {
    data[kCaCertKey] = absl::Base64Escape(certificates->ca_cert);
    data[kCoordinatorCertKey] = absl::Base64Escape(certificates->coordinator_cert);
    data[kCoordinatorKeyKey] = absl::Base64Escape(certificates->coordinator_key);
    data[kClientCertKey] = absl::Base64Escape(certificates->client_cert);
    data[kClientKeyKey] = absl::Base64Escape(certificates->client_key);
  }
  json metadata = Metadata(job, TokenSecretName(job), Labels(job, ""));
  if (tls == JobTls::kCertManager) metadata["annotations"] = {{kTlsModeAnnotation, "cert-manager"}};
  return {{"apiVersion", "v1"}, {"kind", "Secret"},  {"metadata", metadata},
          {"type", "Opaque"},   {"immutable", true}, {"data", data}};
}

std::optional<JobCertificates> CertificatesOf(const json& secret) {
  JobCertificates out;
  if (!ReadSecretKeys(secret, {{kCaCertKey, &out.ca_cert},
                               {kCoordinatorCertKey, &out.coordinator_cert},
                               {kCoordinatorKeyKey, &out.coordinator_key},
                               {kClientCertKey, &out.client_cert},
                               {kClientKeyKey, &out.client_key}})) {
    return std::nullopt;
  }
  return out;
}

JobTls TlsModeOf(const json& secret) {
  if (CertificatesOf(secret)) return JobTls::kOperator;
  const json annotations =
      secret.value(json::json_pointer("/metadata/annotations"), json::object());
  return annotations.is_object() && annotations.value(kTlsModeAnnotation, "") == "cert-manager"
             ? JobTls::kCertManager
             : JobTls::kNone;
}

std::vector<json> CertManagerCertificates(const api::CoordinatedJob& job,
                                          const OperatorSettings& settings) {
  const auto slash = settings.job_tls_issuer.find('/');
  const json issuer = {
      {"group", "cert-manager.io"},
      {"kind", settings.job_tls_issuer.substr(0, slash)},
      {"name",
       slash == std::string::npos ? std::string() : settings.job_tls_issuer.substr(slash + 1)}};
  const auto certificate = [&](const std::string& name, json spec) {
    spec["secretName"] = name;
    spec["issuerRef"] = issuer;
    // A fresh key at every renewal; cert-manager's Secret is one of the job's children, so
    // that the operator's cache (its label selector) sees it.
    spec["privateKey"] = {{"algorithm", "ECDSA"}, {"size", 256}, {"rotationPolicy", "Always"}};
    spec["secretTemplate"] = {{"labels", Labels(job, "")}};
    return json{{"apiVersion", "cert-manager.io/v1"},
                {"kind", "Certificate"},
                {"metadata", Metadata(job, name, Labels(job, ""))},
                {"spec", std::move(spec)}};
  };
  const std::vector<std::string> dns = CoordinatorDnsNames(job);
  return {certificate(CoordinatorTlsName(job),
                      {{"commonName", CoordinatorServerName(job)},
                       {"dnsNames", dns},
                       {"usages", json::array({"digital signature", "server auth"})}}),
          certificate(ClientTlsName(job),
                      {{"commonName", ClientIdentity(job)},
                       {"dnsNames", json::array({ClientIdentity(job)})},
                       {"usages", json::array({"digital signature", "client auth"})}})};
}

std::optional<IssuedCertificate> IssuedOf(const json& secret) {
  IssuedCertificate out;
  if (!ReadSecretKeys(secret, {{kCertManagerCaKey, &out.ca},
                               {kCertManagerCertKey, &out.cert},
                               {kCertManagerKeyKey, &out.key}})) {
    return std::nullopt;
  }
  return out;
}

std::string TokenOf(const json& secret) {
  std::string token;
  const std::string encoded =
      secret.value(json::json_pointer(absl::StrCat("/data/", kTokenKey)), std::string());
  if (!absl::Base64Unescape(encoded, &token)) return "";
  return token;
}

}  // namespace cohort::controller
