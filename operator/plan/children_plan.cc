// The objects every job needs before its workers (planner.h, PlanChildren): the token Secret
// (with certificates), the NetworkPolicy, the coordinator's ConfigMap, Services and state
// claim, and the coordinator pod.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "operator/plan/planner.h"

namespace cohort::controller {

namespace planning {

ChildrenState PlanChildren(Planner& P, const OperatorSettings& settings,
                           const ObservedPod* coordinator, bool recreate_coordinator, bool on_claim,
                           int gang) {
  const Observed& observed = P.observed;
  const api::CoordinatedJob& job = P.job;
  JobTls tls = observed.token_secret_tls;
  if (!observed.token_secret) {
    tls = NewJobTls(settings);
    if (tls == JobTls::kOperator && !observed.fresh_certificates) tls = JobTls::kNone;
    P.plan.create.push_back(
        TokenSecret(job, observed.fresh_token,
                    tls == JobTls::kOperator ? &*observed.fresh_certificates : nullptr, tls));
  }
  // cert-manager's certificates: asked for (again, harmlessly, while they are not issued:
  // creating one that exists changes nothing), and waited for.
  const bool certificates_ready = tls != JobTls::kCertManager || observed.certificates_issued;
  if (!certificates_ready) {
    for (json& certificate : CertManagerCertificates(job, settings)) {
      P.plan.create.push_back(std::move(certificate));
    }
    P.Requeue(absl::Seconds(5));
  }
  bool policy_in_place = true;
  if (settings.network_policy) {
    json want = NetworkPolicy(job, settings);
    if (!observed.network_policy) {
      P.plan.create.push_back(std::move(want));
      policy_in_place = false;
    } else if (observed.network_policy->value("spec", json()) != want["spec"]) {
      // Changed by someone, or made under other settings (a chart upgrade): put ours back.
      want["metadata"]["resourceVersion"] =
          observed.network_policy->value("/metadata/resourceVersion"_json_pointer, std::string());
      P.plan.update.push_back(std::move(want));
      P.Event("Warning", "NetworkPolicyRestored",
              absl::StrCat("NetworkPolicy ", NetworkPolicyName(job),
                           " differed from the operator's; its spec is written back"));
    }
  } else if (observed.network_policy) {
    P.plan.delete_network_policy = true;
  }
  // A claim being deleted is not used; the next one gets the pod.
  const bool coordinator_pod_exists =
      std::any_of(observed.pods.begin(), observed.pods.end(),
                  [&](const ObservedPod& p) { return p.name == CoordinatorName(job); });
  // The coordinator's configuration follows the spec: written anew between gangs (before the
  // next coordinator starts) when the spec it was written from changed.
  if (!observed.coordinator_config_map) {
    P.plan.create.push_back(CoordinatorConfigMap(job, tls));
  } else if (observed.coordinator_config_hash != SpecHash(job) && !coordinator_pod_exists) {
    json config = CoordinatorConfigMap(job, tls);
    config["metadata"]["resourceVersion"] = observed.coordinator_config_version;
    P.plan.update.push_back(std::move(config));
  }
  if (!observed.coordinator_service) P.plan.create.push_back(CoordinatorService(job));
  if (!observed.workers_service) P.plan.create.push_back(WorkersService(job));
  if (on_claim && !observed.coordinator_state_claim) {
    P.plan.create.push_back(CoordinatorStateClaim(job));
  }
  if (recreate_coordinator && coordinator && Finished(*coordinator) && !coordinator->terminating) {
    P.plan.delete_pods.push_back(coordinator->name);  // evicted: make room for the new one
  }
  if (!coordinator_pod_exists && !observed.coordinator_state_claim_terminating && policy_in_place &&
      certificates_ready) {
    P.plan.create.push_back(
        CoordinatorPod(job, gang, *P.st().start_time, settings, tls, P.placement));
  }
  return {tls, policy_in_place, certificates_ready};
}

}  // namespace planning

}  // namespace cohort::controller
