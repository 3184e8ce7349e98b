// The workers' objects: their headless Service and their Pods, with the env contract and sidecar.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/plan/children.h"
#include "operator/plan/children_internal.h"

namespace cohort::controller {
namespace {

using internal::Labels;
using internal::Metadata;
using internal::SecretFile;
using internal::TokenMount;
using internal::TokenVolume;

json FieldEnv(const std::string& name, const std::string& path) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", path}}}}}};
}

json Env(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

// framework: pytorch. What torchrun and a plain init_process_group(init_method="env://") need,
// the store being the pod's sidecar (docs/pytorch.md, "On Kubernetes"): RANK and WORLD_SIZE
// count `nproc` processes per pod (torchrun sets each process's own); TORCHELASTIC_USE_AGENT_STORE
// "True" makes every rank of a plain script a client of MASTER_ADDR:MASTER_PORT (no rank binds
// it), and torchrun's node-0 agent, whose static rendezvous tries to bind MASTER_PORT, go on as a
// client when the sidecar holds it (torch 2.7 and later). The PET_* variables are torchrun's
// defaults: static rendezvous over the same store, or c10d (every agent a client: is_host=false)
// when a worker may be made again alone (below) or the user sets PET_RDZV_BACKEND=c10d; the
// rendezvous id is the job's and its gang attempt's, so a gang restart does not meet the keys
// of the one before.
constexpr int kRejoinAgentRestarts = 3;  // torchrun's --max-restarts for a RestartWorker rule

void PytorchEnv(const api::CoordinatedJob& job, int index, int restart, json* env) {
  const int nproc = job.spec.pytorch.nproc_per_node.value_or(
      std::max(1, TemplateGpusOf(job.spec.pod_template).count));
  const std::string store_port = absl::StrCat(kSidecarTorchStorePort);
  const std::string endpoint = absl::StrCat(kSidecarTorchStoreHost, ":", store_port);
  for (const auto& [name, value] : std::vector<std::pair<const char*, std::string>>{
           {"MASTER_ADDR", kSidecarTorchStoreHost},
           {"MASTER_PORT", store_port},
           {"WORLD_SIZE", absl::StrCat(int64_t{job.spec.replicas} * nproc)},
           {"RANK", absl::StrCat(int64_t{index} * nproc)},
           {"LOCAL_RANK", "0"},
           {"NODE_RANK", absl::StrCat(index)},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
           {"PET_NNODES", job.spec.elastic ? absl::StrCat(job.spec.elastic->min_replicas, ":",
                                                          job.spec.elastic->max_replicas)
                                           : absl::StrCat(job.spec.replicas)},
           {"PET_NPROC_PER_NODE", absl::StrCat(nproc)},
           {"PET_NODE_RANK", absl::StrCat(index)},
           {"PET_MASTER_ADDR", kSidecarTorchStoreHost},
           {"PET_MASTER_PORT", store_port},
           {"PET_RDZV_ENDPOINT", endpoint},
           {"PET_RDZV_CONF", "is_host=false"},
           {"PET_RDZV_ID", absl::StrCat(job.name, "-", restart)},
       }) {
    env->push_back(Env(name, value));
  }
  // A worker made again alone (spec.elastic, or a RestartWorker rule) meets the others' agents
  // in a new round of the c10d rendezvous, which a static one does not have; each agent whose
  // processes failed with the lost one restarts them, up to PET_MAX_RESTARTS times.
  const bool rejoins =
      job.spec.elastic ||
      std::any_of(
          job.spec.failure_policy.rules.begin(), job.spec.failure_policy.rules.end(),
          [](const api::FailureRule& r) { return r.action == api::FailureAction::kRestartWorker; });
  if (rejoins) {
    env->push_back(Env("PET_RDZV_BACKEND", "c10d"));
    env->push_back(Env(
        "PET_MAX_RESTARTS",
        absl::StrCat(job.spec.elastic ? job.spec.elastic->max_restarts : kRejoinAgentRestarts)));
  }
  // The c10d rendezvous (those, or a user's PET_RDZV_BACKEND=c10d) then gives each round's
  // workers a store of their own, hosted by that round's rank 0 and published in the round's
  // keys. torch's default shares one store, hosted by the first round's rank-0 agent, for
  // every round: once that agent's pod is gone, the agents that were not rank 0 keep its
  // address and the new round never starts (torch 2.15, three nodes). The static rendezvous
  // does not read it.
  env->push_back(Env("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"));
  // What a c10d rendezvous's rank-0 agent publishes for its workers' store (else its FQDN,
  // which a cluster without pod DNS does not resolve).
  env->push_back(FieldEnv("PET_LOCAL_ADDR", "status.podIP"));
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
      // The workload's progress reports (cohort.progress.report), read by the sidecar.
      Env("COHORT_PROGRESS_FILE", absl::StrCat(kHandoffDir, "/progress")),
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
  } else if (job.spec.framework == api::Framework::kPytorch && for_workload) {
    PytorchEnv(job, index, restart, &env);
  }
  return env;
}

json HandoffMount() { return {{"name", "cohort-handoff"}, {"mountPath", kHandoffDir}}; }

std::string WorkloadProcessPattern(const json& pod_template) {
  const std::string annotated = pod_template.value(
      json::json_pointer("/metadata/annotations/cohort.dev~1workload-process"), std::string());
  // Anything in the shared process namespace but the sidecar and the pause process.
  return annotated.empty() ? "^(?!.*(cohort-sidecar|/pause)).+" : annotated;
}

// The GPUs the sidecar is given to see (docs/sidecar.md, "Seeing the pod's GPUs").
void ShareGpus(const TemplateGpus& gpus, const OperatorSettings& settings, json* container) {
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

// `gpus`: TemplateGpusOf the job's pod template.
json SidecarContainer(const api::CoordinatedJob& job, int index, int restart,
                      const OperatorSettings& settings, JobTls tls, const TemplateGpus& gpus) {
  json args = json::array(
      {"--handoff-dir", kHandoffDir, "--http-listen", absl::StrCat("0.0.0.0:", kSidecarHttpPort),
       "--heartbeat-timeout", job.spec.coordinator.heartbeat_timeout, "--workload-liveness",
       settings.workload_liveness, "--proxy-listen", kSidecarProxyAddress, "--outage-tolerance",
       job.spec.coordinator.outage_tolerance, "--auth-token-file", kTokenFile});
  if (job.spec.framework == api::Framework::kPytorch) {
    args.push_back("--torch-store-proxy-listen");
    args.push_back(absl::StrCat(kSidecarTorchStoreHost, ":", kSidecarTorchStorePort));
  }
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
  if (!job.spec.failure_policy.progress_timeout.empty()) {
    args.push_back("--progress-timeout");
    args.push_back(job.spec.failure_policy.progress_timeout);
  }
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
  if (job.spec.sidecar.stack_dumps) {
    // Tracing another container's process (py-spy, gdb) takes root and SYS_PTRACE, whoever
    // the workload runs as.
    json& security = container["securityContext"];
    security["runAsUser"] = 0;
    security["runAsGroup"] = 0;
    security["runAsNonRoot"] = false;
    security["capabilities"]["add"] = json::array({"SYS_PTRACE"});
  }
  ShareGpus(gpus, settings, &container);
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

json WorkersService(const api::CoordinatedJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(job, WorkersServiceName(job), Labels(job, "worker"))},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},  // peers find each other before they are ready
            {"selector", {{kJobLabel, job.name}, {kRoleLabel, "worker"}}}}}};
}

json WorkerPod(const api::CoordinatedJob& job, int index, int restart,
               const OperatorSettings& settings, JobTls tls, const Placement& placement) {
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
  const TemplateGpus gpus = TemplateGpusOf(job.spec.pod_template);
  json init = spec.value("initContainers", json::array());
  init.push_back(SidecarContainer(job, index, restart, settings, tls, gpus));
  spec["initContainers"] = init;
  json volumes = spec.value("volumes", json::array());
  volumes.push_back({{"name", "cohort-handoff"}, {"emptyDir", json::object()}});
  volumes.push_back(TokenVolume(job, /*coordinator=*/false, tls));  // the sidecar's alone
  if (settings.sidecar_gpu_access == "visible-devices" && gpus.claims.empty() && gpus.count > 0) {
    volumes.push_back({{"name", "cohort-pod-resources"},
                       {"hostPath", {{"path", kPodResourcesDir}, {"type", "Directory"}}}});
  }
  spec["volumes"] = volumes;

  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", pod_metadata}, {"spec", spec}};
  if (job.spec.tasks) AddTaskRuntime(job, &pod);
  StampSpecHash(SpecHash(job), &pod);
  Place(job, placement, &pod);
  AvoidNodes(placement.avoided_nodes, &pod);
  return pod;
}

}  // namespace cohort::controller
