// The names of a job's children, what marks them as its own, and the job-wide NetworkPolicy.
#include "operator/plan/children.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "operator/plan/children_internal.h"

namespace cohort::controller {
namespace internal {

json Labels(const api::CoordinatedJob& job, const std::string& role) {
  json labels = {
      {kManagedByLabel, kManagedBy}, {"app.kubernetes.io/name", "cohort"}, {kJobLabel, job.name}};
  if (!role.empty()) labels[kRoleLabel] = role;
  return labels;
}

json Metadata(const api::CoordinatedJob& job, const std::string& name, json labels) {
  return {{"name", name},
          {"namespace", job.namespace_name},
          {"labels", std::move(labels)},
          {"ownerReferences", json::array({OwnerReference(job)})}};
}

std::string SecretFile(const char* key) { return absl::StrCat(kTokenDir, "/", key); }

}  // namespace internal

using internal::Labels;
using internal::Metadata;

std::string CoordinatorName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-coordinator");
}
std::string WorkersServiceName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-workers");
}
std::string WorkerPodName(const api::CoordinatedJob& job, int index) {
  return absl::StrCat(job.name, "-worker-", index);
}
std::string CoordinatorAddress(const api::CoordinatedJob& job) {
  return absl::StrCat(CoordinatorName(job), ".", job.namespace_name, ".svc:", kCoordinatorGrpcPort);
}
std::vector<std::string> CoordinatorDnsNames(const api::CoordinatedJob& job) {
  const std::string name = CoordinatorName(job);
  return {name, absl::StrCat(name, ".", job.namespace_name), CoordinatorServerName(job),
          absl::StrCat(CoordinatorServerName(job), ".cluster.local")};
}
std::string CoordinatorServerName(const api::CoordinatedJob& job) {
  return absl::StrCat(CoordinatorName(job), ".", job.namespace_name, ".svc");
}
std::string CoordinatorStateClaimName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-coordinator-state");
}
std::string TokenSecretName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-token");
}
std::string NetworkPolicyName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-isolation");
}
std::string CoordinatorTlsName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-coordinator-tls");
}
std::string ClientTlsName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-client-tls");
}
std::string ClientIdentity(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, ".", job.namespace_name, ".client.cohort.dev");
}

JobTls NewJobTls(const OperatorSettings& settings) {
  if (settings.job_tls == "operator") return JobTls::kOperator;
  if (settings.job_tls == "cert-manager") return JobTls::kCertManager;
  return JobTls::kNone;
}

json OwnerReference(const api::CoordinatedJob& job) {
  return {{"apiVersion", api::kApiVersion},
          {"kind", api::kKind},
          {"name", job.name},
          {"uid", job.uid},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

json NetworkPolicy(const api::CoordinatedJob& job, const OperatorSettings& settings) {
  // Every field as the API server stores it (protocols given, policyTypes given), so that
  // the operator's comparison with what it reads back sees no difference that is not one.
  const json job_pods = {{"matchLabels", {{kManagedByLabel, kManagedBy}, {kJobLabel, job.name}}}};
  const auto tcp = [](int port) { return json{{"protocol", "TCP"}, {"port", port}}; };
  json ingress = json::array({{{"from", json::array({{{"podSelector", job_pods}}})}}});
  if (!settings.operator_namespace.empty()) {
    // No labels: every pod of the operator's namespace (the API server stores `{}` for that).
    json operator_pods = json::object();
    for (const auto& [k, v] : settings.operator_pod_labels) operator_pods["matchLabels"][k] = v;
    ingress.push_back(
        {{"from",
          json::array({{{"namespaceSelector",
                         {{"matchLabels", {{kNamespaceNameLabel, settings.operator_namespace}}}}},
                        {"podSelector", operator_pods}}})},
         {"ports", json::array({tcp(kCoordinatorGrpcPort)})}});
  }
  if (!settings.metrics_namespace.empty()) {
    ingress.push_back(
        {{"from", json::array({{{"namespaceSelector",
                                 {{"matchLabels",
                                   {{kNamespaceNameLabel, settings.metrics_namespace}}}}}}})},
         {"ports", json::array({tcp(kCoordinatorHttpPort), tcp(kSidecarHttpPort)})}});
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", Metadata(job, NetworkPolicyName(job), Labels(job, ""))},
          {"spec",
           {{"podSelector", job_pods},
            {"policyTypes", json::array({"Ingress"})},
            {"ingress", ingress}}}};
}

}  // namespace cohort::controller
