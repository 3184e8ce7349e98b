#include "operator/controller/children.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace cohort::controller {
namespace {

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

json FieldEnv(const std::string& name, const std::string& path) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", path}}}}}};
}

json Env(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

// The env contract. The workload's containers reach the coordinator through their pod's
// sidecar (`for_workload`); the sidecar itself gets the coordinator's own address.
json ContractEnv(const api::CoordinatedJob& job, int index, int restart, bool for_workload) {
  const std::string address = for_workload ? kSidecarProxyAddress : CoordinatorAddress(job);
  json env = json::array({
      Env("COHORT_COORDINATOR_ADDRESS", address),
      Env("COHORT_JOB_NAME", api::WorkloadJobName(job.spec.framework)),
      Env("COHORT_TASK_ID", absl::StrCat(index)),
      Env("COHORT_NUM_TASKS", absl::StrCat(job.spec.replicas)),
      Env("COHORT_RESTART_COUNT", absl::StrCat(restart)),
      Env("COHORT_HANDOFF_DIR", kHandoffDir),
      FieldEnv("POD_NAME", "metadata.name"),
      FieldEnv("POD_NAMESPACE", "metadata.namespace"),
      FieldEnv("POD_IP", "status.podIP"),
  });
  // The workload may leave and register again (a worker restarted alone rejoins the gang).
  if (job.spec.coordinator.recoverable) env.push_back(Env("COHORT_RECOVERABLE", "true"));
  if (job.spec.framework == api::Framework::kJax) {
    env.push_back(Env("JAX_COORDINATOR_ADDRESS", address));
    if (for_workload) env.push_back(Env("JAX_COORDINATOR_BIND_ADDRESS", kJaxUnusedServiceAddress));
    env.push_back(Env("JAX_NUM_PROCESSES", absl::StrCat(job.spec.replicas)));
    env.push_back(Env("JAX_PROCESS_ID", absl::StrCat(index)));
  } else if (job.spec.framework == api::Framework::kTensorflow) {
    json workers = json::array();
    for (int i = 0; i < job.spec.replicas; ++i) {
      workers.push_back(absl::StrCat(WorkerPodName(job, i), ".", WorkersServiceName(job), ".",
                                     job.namespace_name, ".svc:", kTensorflowPort));
    }
    json tf_config = {{"cluster", {{"worker", workers}}},
                      {"task", {{"type", "worker"}, {"index", index}}}};
    env.push_back(Env("TF_CONFIG", tf_config.dump()));
  }
  return env;
}

json HandoffMount() { return {{"name", "cohort-handoff"}, {"mountPath", kHandoffDir}}; }

json TokenMount() { return {{"name", kTokenVolume}, {"mountPath", kTokenDir}, {"readOnly", true}}; }

std::string SecretFile(const char* key) { return absl::StrCat(kTokenDir, "/", key); }

// Readable by the coordinator's and the sidecar's user (a secret volume's files belong to root
// unless the pod has an fsGroup, and a worker pod's fsGroup is the template's to choose): only
// the containers that mount it see it, and the workload's containers do not. With TLS the
// coordinator gets its certificate and key, a sidecar the client's, both the job's CA: from
// the token Secret, or from cert-manager's Secret projected next to the token under the same
// names (a projected volume follows its Secrets: a renewal reaches the files).
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

std::string WorkloadProcessPattern(const json& pod_template) {
  const std::string annotated = pod_template.value(
      json::json_pointer("/metadata/annotations/cohort.dev~1workload-process"), std::string());
  // Anything in the shared process namespace but the sidecar and the pause process.
  return annotated.empty() ? "^(?!.*(cohort-sidecar|/pause)).+" : annotated;
}

// The GPUs the sidecar is given to see (docs/sidecar.md, "Seeing the pod's GPUs").
void ShareGpus(const api::CoordinatedJob& job, const OperatorSettings& settings, json* container) {
  const TemplateGpus gpus = TemplateGpusOf(job.spec.pod_template);
  if (!gpus.claims.empty()) {
    // DRA: the pod's claims, shared: the sidecar sees exactly their devices.
    json& resources = (*container)["resources"];
    if (!resources.is_object()) resources = json::object();
    json claims = resources.value("claims", json::array());
    for (const json& c : gpus.claims) {
      if (std::find(claims.begin(), claims.end(), c) == claims.end()) claims.push_back(c);
    }
    resources["claims"] = claims;
    return;
  }
  (*container)["env"].push_back(Env("COHORT_EXPECTED_GPUS", absl::StrCat(gpus.count)));
  if (settings.sidecar_gpu_access != "visible-devices" || gpus.count == 0) return;
  (*container)["env"].push_back(Env("NVIDIA_VISIBLE_DEVICES", "all"));
  (*container)["env"].push_back(Env("NVIDIA_DRIVER_CAPABILITIES", "utility"));
  (*container)["env"].push_back(
      Env("COHORT_POD_RESOURCES_SOCKET", absl::StrCat(kPodResourcesDir, "/kubelet.sock")));
  (*container)["volumeMounts"].push_back(
      {{"name", "cohort-pod-resources"}, {"mountPath", kPodResourcesDir}, {"readOnly", true}});
  // The kubelet's socket is root's alone.
  json& security = (*container)["securityContext"];
  security["runAsUser"] = 0;
  security["runAsGroup"] = 0;
  security["runAsNonRoot"] = false;
}

json SidecarContainer(const api::CoordinatedJob& job, int index, int restart,
                      const OperatorSettings& settings, JobTls tls) {
  json args = json::array(
      {"--handoff-dir", kHandoffDir, "--http-listen", absl::StrCat("0.0.0.0:", kSidecarHttpPort),
       "--heartbeat-timeout", job.spec.coordinator.heartbeat_timeout, "--workload-liveness",
       settings.workload_liveness, "--proxy-listen", kSidecarProxyAddress, "--outage-tolerance",
       job.spec.coordinator.outage_tolerance, "--auth-token-file", kTokenFile});
  if (settings.workload_liveness == "process") {
    args.push_back("--workload-process");
    args.push_back(WorkloadProcessPattern(job.spec.pod_template));
  } else if (settings.workload_liveness == "file") {
    args.push_back("--liveness-file");
    args.push_back(absl::StrCat(kHandoffDir, "/alive"));
  }
  if (job.spec.sidecar.ignored_xids) {
    std::vector<std::string> xids;
    for (int x : *job.spec.sidecar.ignored_xids) xids.push_back(absl::StrCat(x));
    args.push_back("--ignore-xids");
    args.push_back(absl::StrJoin(xids, ","));
  }
  if (job.spec.sidecar.dcgm_metrics) args.push_back("--dcgm-metrics");
  if (tls != JobTls::kNone) {
    for (const std::string& arg :
         {std::string("--tls-ca"), SecretFile(kCaCertKey), std::string("--tls-cert"),
          SecretFile(kClientCertKey), std::string("--tls-key"), SecretFile(kClientKeyKey)}) {
      args.push_back(arg);
    }
  }
  json container = {
      {"name", kSidecarContainer},
      {"image", job.spec.sidecar.image.empty() ? settings.sidecar_image : job.spec.sidecar.image},
      {"restartPolicy", "Always"},  // a native sidecar: starts first, stops after the workload
      {"args", args},
      {"env", ContractEnv(job, index, restart, /*for_workload=*/false)},
      {"ports",
       json::array(
           {{{"name", "metrics"}, {"containerPort", kSidecarHttpPort}, {"protocol", "TCP"}}})},
      {"volumeMounts", json::array({HandoffMount(), TokenMount()})},
      {"startupProbe",
       {{"httpGet", {{"path", "/healthz"}, {"port", kSidecarHttpPort}}},
        {"periodSeconds", 1},
        {"failureThreshold", 60}}},
      // The restricted Pod Security Standard, whatever the workload's template says: the
      // sidecar reads its workload's command line in /proc and waits on its pidfd, which
      // needs no privilege, and writes only the hand-off volume.
      {"securityContext",
       {{"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"runAsNonRoot", true},
        {"runAsUser", kSidecarUser},
        {"runAsGroup", kSidecarUser},
        {"capabilities", {{"drop", json::array({"ALL"})}}},
        {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
  };
  if (!job.spec.sidecar.resources.empty()) container["resources"] = job.spec.sidecar.resources;
  ShareGpus(job, settings, &container);
  return container;
}

}  // namespace

TemplateGpus TemplateGpusOf(const json& pod_template) {
  TemplateGpus out;
  if (!pod_template.is_object()) return out;
  const json spec = pod_template.value("spec", json::object());
  const json containers = spec.is_object() ? spec.value("containers", json::array()) : json();
  if (!containers.is_array()) return out;
  for (const json& c : containers) {
    if (!c.is_object()) continue;
    const json resources = c.value("resources", json::object());
    if (!resources.is_object()) continue;
    const json limits = resources.value("limits", json::object());
    if (limits.is_object()) {
      for (const auto& [name, value] : limits.items()) {
        if (name != "nvidia.com/gpu" && name.rfind("nvidia.com/mig-", 0) != 0) continue;
        int64_t n = 0;
        if (value.is_number_integer()) {
          n = value.get<int64_t>();
        } else if (value.is_string() && !absl::SimpleAtoi(value.get<std::string>(), &n)) {
          n = 0;
        }
        // No node has more; the bound keeps a nonsense quantity from overflowing the sum.
        constexpr int64_t kMostGpus = 1 << 16;
        if (n > 0) out.count = static_cast<int>(std::min(kMostGpus, out.count + n));
      }
    }
    const json claims = resources.value("claims", json::array());
    if (!claims.is_array()) continue;
    for (const json& claim : claims) {
      if (claim.is_object() &&
          std::find(out.claims.begin(), out.claims.end(), claim) == out.claims.end()) {
        out.claims.push_back(claim);
      }
    }
  }
  return out;
}

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

json CoordinatorConfigMap(const api::CoordinatedJob& job, JobTls tls) {
  const auto& c = job.spec.coordinator;
  const std::string workload = api::WorkloadJobName(job.spec.framework);
  // Read by cohort-coordinator --config; keys are its flags.
  std::string config = absl::StrCat(
      "# cohort-coordinator settings for CoordinatedJob ", job.namespace_name, "/", job.name,
      " (written by cohort-operator)\n", "listen: 0.0.0.0:", kCoordinatorGrpcPort, "\n",
      "http-listen: 0.0.0.0:", kCoordinatorHttpPort, "\n", "job: [\"", workload, "=",
      job.spec.replicas, "\"]\n", "auxiliary-job: [\"sidecar=", job.spec.replicas, "\"]\n",
      "default-job: ", workload, "\n", "heartbeat-timeout: ", c.heartbeat_timeout, "\n",
      "register-timeout: ", c.register_timeout, "\n",
      "shutdown-barrier-timeout: ", c.shutdown_barrier_timeout, "\n",
      "auth-token-file: ", kTokenFile, "\n");
  if (c.recoverable) {
    // Workers restarted alone (RestartWorker) register again, with their sidecars.
    absl::StrAppend(&config, "recoverable-job: [\"", workload, "\", \"sidecar\"]\n");
  }
  if (c.state.volume != api::StateVolume::kNone) {
    absl::StrAppend(&config, "state-dir: ", kCoordinatorStateDir, "\n");
  }
  if (job.spec.tasks) {
    absl::StrAppend(&config, "task-retries: ", job.spec.tasks->task_retries, "\n",
                    "task-liveness-timeout: ", job.spec.tasks->task_liveness_timeout, "\n");
  }
  if (tls != JobTls::kNone) {
    absl::StrAppend(&config, "tls-cert: ", SecretFile(kCoordinatorCertKey), "\n",
                    "tls-key: ", SecretFile(kCoordinatorKeyKey), "\n",
                    "tls-client-ca: ", SecretFile(kCaCertKey), "\n");
  }
  if (tls == JobTls::kCertManager) {
    absl::StrAppend(&config, "tls-client-name: ", ClientIdentity(job), "\n");
  }
  json config_map = {{"apiVersion", "v1"},
                     {"kind", "ConfigMap"},
                     {"metadata", Metadata(job, CoordinatorName(job), Labels(job, "coordinator"))},
                     {"data", {{"coordinator.yaml", config}}}};
  StampSpecHash(SpecHash(job), &config_map);
  return config_map;
}

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

json CoordinatorService(const api::CoordinatedJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(job, CoordinatorName(job), Labels(job, "coordinator"))},
          {"spec",
           {{"selector", {{kJobLabel, job.name}, {kRoleLabel, "coordinator"}}},
            {"ports", json::array({{{"name", "grpc"},
                                    {"port", kCoordinatorGrpcPort},
                                    {"targetPort", kCoordinatorGrpcPort}},
                                   {{"name", "http"},
                                    {"port", kCoordinatorHttpPort},
                                    {"targetPort", kCoordinatorHttpPort}}})}}}};
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

json WorkersService(const api::CoordinatedJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(job, WorkersServiceName(job), Labels(job, "worker"))},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},  // peers find each other before they are ready
            {"selector", {{kJobLabel, job.name}, {kRoleLabel, "worker"}}}}}};
}

json CoordinatorStateClaim(const api::CoordinatedJob& job) {
  const auto& state = job.spec.coordinator.state;
  json spec = {{"accessModes", json::array({"ReadWriteOnce"})},
               {"resources", {{"requests", {{"storage", state.size}}}}}};
  if (!state.storage_class_name.empty()) spec["storageClassName"] = state.storage_class_name;
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", Metadata(job, CoordinatorStateClaimName(job), Labels(job, "coordinator"))},
          {"spec", spec}};
}

json CoordinatorResources(const json& given) {
  json out = given.is_object() ? given : json::object();
  json requests = out.value("requests", json::object());
  json limits = out.value("limits", json::object());
  for (const auto& [name, fallback] :
       {std::pair{"cpu", kCoordinatorDefaultCpu}, std::pair{"memory", kCoordinatorDefaultMemory}}) {
    if (!requests.contains(name) && !limits.contains(name)) {
      requests[name] = limits[name] = fallback;
    }
  }
  for (const auto& [name, value] : requests.items()) {
    if (!limits.contains(name)) limits[name] = value;
  }
  for (const auto& [name, value] : limits.items()) {
    if (!requests.contains(name)) requests[name] = value;
  }
  out["requests"] = requests;
  out["limits"] = limits;
  return out;
}

std::string CoordinatorStateSubPath(absl::Time started, int restart) {
  return absl::StrCat(absl::FormatTime("%Y%m%dT%H%M%SZ", started, absl::UTCTimeZone()), "-gang-",
                      restart);
}

json CoordinatorPod(const api::CoordinatedJob& job, int restart, absl::Time started,
                    const OperatorSettings& settings, JobTls tls) {
  const auto& state = job.spec.coordinator.state;
  const bool keeps_state = state.volume != api::StateVolume::kNone;
  const json& own = job.spec.coordinator.pod_template;
  json labels = own.value(json::json_pointer("/metadata/labels"), json::object());
  const json ours = Labels(job, "coordinator");
  for (const auto& [k, v] : ours.items()) labels[k] = v;
  labels[kRestartLabel] = absl::StrCat(restart);
  json metadata = Metadata(job, CoordinatorName(job), labels);
  if (own.contains(json::json_pointer("/metadata/annotations"))) {
    metadata["annotations"] = own[json::json_pointer("/metadata/annotations")];
  }
  json mounts =
      json::array({{{"name", "config"}, {"mountPath", "/etc/cohort"}, {"readOnly", true}}});
  json volumes =
      json::array({{{"name", "config"}, {"configMap", {{"name", CoordinatorName(job)}}}}});
  if (keeps_state) {
    // A directory per gang and run: a gang restart or a resume starts from no state, even
    // on the same claim.
    mounts.push_back({{"name", "state"},
                      {"mountPath", kCoordinatorStateDir},
                      {"subPath", CoordinatorStateSubPath(started, restart)}});
    if (state.volume == api::StateVolume::kPersistentVolumeClaim) {
      volumes.push_back(
          {{"name", "state"},
           {"persistentVolumeClaim", {{"claimName", CoordinatorStateClaimName(job)}}}});
    } else {
      volumes.push_back({{"name", "state"}, {"emptyDir", {{"sizeLimit", state.size}}}});
    }
  }
  mounts.push_back(TokenMount());  // the config's auth-token-file (and TLS files)
  volumes.push_back(TokenVolume(job, /*coordinator=*/true, tls));
  json container = {
      {"name", "coordinator"},
      {"image", job.spec.coordinator.image.empty() ? settings.coordinator_image
                                                   : job.spec.coordinator.image},
      {"args", json::array({"--config", "/etc/cohort/coordinator.yaml"})},
      {"ports", json::array({{{"name", "grpc"}, {"containerPort", kCoordinatorGrpcPort}},
                             {{"name", "http"}, {"containerPort", kCoordinatorHttpPort}}})},
      {"readinessProbe",
       {{"httpGet", {{"path", "/readyz"}, {"port", kCoordinatorHttpPort}}},
        {"periodSeconds", 1},
        {"failureThreshold", 3}}},
      {"livenessProbe",
       {{"httpGet", {{"path", "/healthz"}, {"port", kCoordinatorHttpPort}}},
        {"periodSeconds", 10},
        {"failureThreshold", 6}}},
      {"volumeMounts", mounts},
      {"resources", CoordinatorResources(job.spec.coordinator.resources)},
      {"securityContext",
       {{"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"runAsNonRoot", true},
        {"runAsUser", kCoordinatorUser},
        {"capabilities", {{"drop", json::array({"ALL"})}}},
        {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
  };
  json spec = {
      // With its state on a volume a crashed coordinator restarts in place and keeps the gang;
      // without, a lost coordinator restarts the whole gang.
      {"restartPolicy", keeps_state ? "Always" : "Never"},
      {"terminationGracePeriodSeconds", 5},
      {"enableServiceLinks", false},
      {"containers", json::array({container})},
      {"volumes", volumes}};
  if (keeps_state) {
    spec["securityContext"] = {{"fsGroup", kCoordinatorUser},
                               {"fsGroupChangePolicy", "OnRootMismatch"}};
  }
  // It must fit where the workers fit (tainted nodes, a priority no lower than theirs).
  const json workers = job.spec.pod_template.value("spec", json::object());
  const json overrides = own.value("spec", json::object());
  for (const char* field : api::kCoordinatorSchedulingFields) {
    if (overrides.contains(field)) {
      spec[field] = overrides[field];
    } else if (workers.contains(field)) {
      spec[field] = workers[field];
    }
  }
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", metadata}, {"spec", spec}};
  StampSpecHash(SpecHash(job), &pod);
  return pod;
}

json WorkerPod(const api::CoordinatedJob& job, int index, int restart,
               const OperatorSettings& settings, JobTls tls) {
  const json& tmpl = job.spec.pod_template;
  json metadata = tmpl.value("metadata", json::object());
  json labels = metadata.value("labels", json::object());
  const json ours = Labels(job, "worker");
  for (const auto& [k, v] : ours.items()) labels[k] = v;
  labels[kRestartLabel] = absl::StrCat(restart);
  labels[kIndexLabel] = absl::StrCat(index);
  json pod_metadata = Metadata(job, WorkerPodName(job, index), labels);
  if (metadata.contains("annotations")) pod_metadata["annotations"] = metadata["annotations"];

  json spec = tmpl.value("spec", json::object());
  spec["hostname"] = WorkerPodName(job, index);
  spec["subdomain"] = WorkersServiceName(job);
  // The operator restarts the gang, or (RestartWorker) makes one worker's pod again.
  spec["restartPolicy"] = "Never";
  if (settings.workload_liveness == "process") spec["shareProcessNamespace"] = true;

  const json contract = ContractEnv(job, index, restart, /*for_workload=*/true);
  for (auto& container : spec["containers"]) {
    json env = contract;
    for (const auto& e : container.value("env", json::array())) env.push_back(e);  // user wins
    container["env"] = env;
    json mounts = container.value("volumeMounts", json::array());
    mounts.push_back(HandoffMount());
    container["volumeMounts"] = mounts;
  }
  json init = spec.value("initContainers", json::array());
  init.push_back(SidecarContainer(job, index, restart, settings, tls));
  spec["initContainers"] = init;
  json volumes = spec.value("volumes", json::array());
  volumes.push_back({{"name", "cohort-handoff"}, {"emptyDir", json::object()}});
  volumes.push_back(TokenVolume(job, /*coordinator=*/false, tls));  // the sidecar's alone
  if (settings.sidecar_gpu_access == "visible-devices" &&
      TemplateGpusOf(job.spec.pod_template).claims.empty() &&
      TemplateGpusOf(job.spec.pod_template).count > 0) {
    volumes.push_back({{"name", "cohort-pod-resources"},
                       {"hostPath", {{"path", kPodResourcesDir}, {"type", "Directory"}}}});
  }
  spec["volumes"] = volumes;

  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", pod_metadata}, {"spec", spec}};
  if (job.spec.tasks) AddTaskRuntime(job, &pod);
  StampSpecHash(SpecHash(job), &pod);
  return pod;
}

}  // namespace cohort::controller
