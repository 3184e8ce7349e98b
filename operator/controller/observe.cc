#include "operator/controller/observe.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "operator/controller/certificates.h"
#include "operator/plan/kueue.h"

namespace cohort::controller {

namespace {

void ObserveKueue(const api::CoordinatedJob& job, const JobCaches& caches,
                  const std::function<KueueObserved::Priority()>& priority, Observed* observed) {
  if (!caches.workloads) return;
  KueueObserved kq;
  kq.workload = caches.workloads->Get(job.namespace_name, kueue::WorkloadName(job));
  for (const auto& flavor : caches.flavors->All()) kq.flavors[kube::Name(flavor)] = flavor;
  if (!kq.workload && !kueue::QueueName(job).empty()) kq.priority = priority();
  observed->kueue = std::move(kq);
}

void ObserveChildren(const api::CoordinatedJob& job, const JobCaches& caches, Observed* observed) {
  const std::string& ns = job.namespace_name;
  for (const auto& pod : caches.pods->ByIndex(ns, job.name)) {
    observed->pods.push_back(ObservePod(pod));
  }
  if (auto config = caches.config_maps->Get(ns, CoordinatorName(job))) {
    observed->coordinator_config_map = true;
    observed->coordinator_config_hash = config->value(
        json::json_pointer("/metadata/annotations/cohort.dev~1spec-hash"), std::string());
    observed->coordinator_config_version = kube::ResourceVersion(*config);
  }
  observed->coordinator_service = caches.services->Get(ns, CoordinatorName(job)).has_value();
  observed->workers_service = caches.services->Get(ns, WorkersServiceName(job)).has_value();
  observed->network_policy = caches.network_policies->Get(ns, NetworkPolicyName(job));
  if (caches.pod_groups && job.spec.gang_scheduling &&
      job.spec.gang_scheduling->pod_group == api::PodGroupKind::kKubernetes) {
    if (auto group = caches.pod_groups->Get(ns, job.name)) {
      observed->pod_group_scheduled = ObservePodGroupScheduled(*group);
    }
  }
  if (auto claim = caches.claims->Get(ns, CoordinatorStateClaimName(job))) {
    observed->coordinator_state_claim = true;
    observed->coordinator_state_claim_terminating =
        claim->contains("/metadata/deletionTimestamp"_json_pointer);
  }
}

// The token made when the job was first seen (or after its Secret was deleted), never another
// while the Secret lives: an operator restarted finds it here.
absl::Status ObserveCredentials(const api::CoordinatedJob& job, const JobCaches& caches,
                                const OperatorSettings& settings, Observation* out) {
  const std::string& ns = job.namespace_name;
  Observed& observed = out->observed;
  CoordinatorCredentials& credentials = out->credentials;
  credentials.server_name = CoordinatorServerName(job);
  if (auto secret = caches.secrets->Get(ns, TokenSecretName(job))) {
    observed.token_secret = true;
    credentials.token = TokenOf(*secret);
    observed.token_secret_tls = TlsModeOf(*secret);
    if (observed.token_secret_tls == JobTls::kOperator) {
      credentials.tls = CertificatesOf(*secret);
    } else if (observed.token_secret_tls == JobTls::kCertManager) {
      // cert-manager's Secrets (labelled as the job's children, so cached here). The client
      // one is what the operator dials with; a renewal changes it, and the watcher dials again.
      auto server = caches.secrets->Get(ns, CoordinatorTlsName(job));
      auto client = caches.secrets->Get(ns, ClientTlsName(job));
      auto issued = client ? IssuedOf(*client) : std::nullopt;
      observed.certificates_issued = server && IssuedOf(*server) && issued;
      if (observed.certificates_issued) {
        JobCertificates tls;
        tls.ca_cert = issued->ca;
        tls.client_cert = issued->cert;
        tls.client_key = issued->key;
        credentials.tls = std::move(tls);
      }
    }
    return absl::OkStatus();
  }
  auto fresh = NewJobToken();
  if (!fresh.ok()) return fresh.status();
  observed.fresh_token = *fresh;
  if (settings.job_tls == "operator") {
    CertificateRequest request;
    request.job = absl::StrCat(ns, "/", job.name);
    request.dns_names = CoordinatorDnsNames(job);
    request.now = observed.now;
    auto issued = IssueJobCertificates(request);
    if (!issued.ok()) return issued.status();
    observed.fresh_certificates = std::move(*issued);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> NewJobToken() {
  char bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

absl::StatusOr<Observation> Observe(const api::CoordinatedJob& job, const JobCaches& caches,
                                    const OperatorSettings& settings, absl::Time now,
                                    const std::function<KueueObserved::Priority()>& priority) {
  Observation out;
  out.observed.now = now;
  ObserveKueue(job, caches, priority, &out.observed);
  ObserveChildren(job, caches, &out.observed);
  if (absl::Status s = ObserveCredentials(job, caches, settings, &out); !s.ok()) return s;
  return out;
}

}  // namespace cohort::controller
