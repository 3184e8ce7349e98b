// The pods of a task runtime job (spec.tasks): worker pods as children.cc makes them, with the
// object store in the sidecar and the shared memory volume; and the driver's pod.
#include <string>

#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"

namespace cohort::controller {

namespace {

using json = nlohmann::json;

json TaskEnv(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

json ObjectStoreMount() { return {{"name", kObjectStoreVolume}, {"mountPath", kObjectStoreDir}}; }

void Append(json* list, json item) {
  if (!list->is_array()) *list = json::array();
  list->push_back(std::move(item));
}

}  // namespace

std::string DriverPodName(const api::CoordinatedJob& job) {
  return absl::StrCat(job.name, "-driver");
}

void AddTaskRuntime(const api::CoordinatedJob& job, json* pod) {
  const api::TaskRuntimeSpec& tasks = *job.spec.tasks;
  const uint64_t bytes = api::ObjectStoreBytes(tasks, job.spec.pod_template);
  json& spec = (*pod)["spec"];
  for (json& sidecar : spec["initContainers"]) {
    if (sidecar.value("name", "") != kSidecarContainer) continue;
    for (const std::string& arg :
         {std::string("--task-runtime"), std::string("--objstore-listen"),
          absl::StrCat("0.0.0.0:", kObjectStorePort), std::string("--objstore-capacity"),
          absl::StrCat(bytes), std::string("--objstore-shm-dir"), std::string(kObjectStoreDir)}) {
      sidecar["args"].push_back(arg);
    }
    Append(&sidecar["volumeMounts"], ObjectStoreMount());
    Append(&sidecar["ports"],
           {{"name", "objstore"}, {"containerPort", kObjectStorePort}, {"protocol", "TCP"}});
  }
  // After POD_IP (which they expand) and before the template's own env (which wins).
  const json ours =
      json::array({TaskEnv("COHORT_SCHEDULER", kSidecarProxyAddress),
                   TaskEnv("COHORT_OBJSTORE", absl::StrCat("$(POD_IP):", kObjectStorePort)),
                   TaskEnv("COHORT_NODE_IP", "$(POD_IP)"),
                   TaskEnv("COHORT_TASK_WORKERS", absl::StrCat(tasks.workers_per_pod)),
                   TaskEnv("COHORT_AUTH_TOKEN_FILE", kTokenFile)});
  for (json& container : spec["containers"]) {
    json env = json::array();
    bool added = false;
    for (const json& e : container.value("env", json::array())) {
      env.push_back(e);
      if (!added && e.value("name", "") == "POD_IP") {
        for (const json& o : ours) env.push_back(o);
        added = true;
      }
    }
    if (!added) {
      for (const json& o : ours) env.push_back(o);
    }
    container["env"] = env;
    Append(&container["volumeMounts"], ObjectStoreMount());
    Append(&container["volumeMounts"],
           {{"name", kWorkloadTokenVolume}, {"mountPath", kTokenDir}, {"readOnly", true}});
  }
  Append(&spec["volumes"], {{"name", kWorkloadTokenVolume},
                            {"secret",
                             {{"secretName", TokenSecretName(job)},
                              {"items", json::array({{{"key", kTokenKey}, {"path", kTokenKey}}})},
                              {"defaultMode", 0444}}}});
  // Memory-backed: what the store holds counts against the pod's memory (the sizing rule in
  // api::ObjectStoreBytes leaves the rest to the workload).
  Append(&spec["volumes"],
         {{"name", kObjectStoreVolume},
          {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", absl::StrCat(bytes)}}}});
}

json DriverPod(const api::CoordinatedJob& job, int restart, const OperatorSettings& settings,
               JobTls tls, const Placement& placement) {
  api::CoordinatedJob driver = job;
  driver.spec.pod_template = job.spec.tasks->driver_template;
  json pod = WorkerPod(driver, 0, restart, settings, tls);
  const std::string name = DriverPodName(job);
  pod["metadata"]["name"] = name;
  json& labels = pod["metadata"]["labels"];
  labels[kRoleLabel] = "driver";
  labels.erase(kIndexLabel);
  pod["spec"]["hostname"] = name;
  Place(job, placement, &pod);  // as a driver: the worker's pod above is not placed
  return pod;
}

}  // namespace cohort::controller
