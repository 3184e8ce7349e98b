#include "operator/api/coordinated_job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "operator/plan/children.h"

namespace cohort::api {
namespace {

const absl::Time kStarted = absl::FromUnixSeconds(1'800'000'000);  // 2027-01-15 08:00 UTC

json Minimal() {
  return json::parse(R"({
    "apiVersion": "cohort.dev/v1alpha1", "kind": "CoordinatedJob",
    "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "generation": 3,
                 "resourceVersion": "42"},
    "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}}
  })");
}

TEST(CoordinatedJobTest, DefaultsApplyWhenTheSpecLeavesThemOut) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "train");
  EXPECT_EQ(job->generation, 3);
  EXPECT_EQ(job->spec.replicas, 2);
  EXPECT_EQ(job->spec.framework, Framework::kGeneric);
  EXPECT_EQ(job->spec.failure_policy.max_restarts, 3);
  EXPECT_EQ(job->spec.success_policy, SuccessPolicy::kAllWorkers);
  EXPECT_EQ(job->spec.coordinator.heartbeat_timeout, "30s");
  EXPECT_EQ(job->spec.failure_policy.progress_timeout, "");
  EXPECT_FALSE(job->spec.sidecar.stack_dumps);
  EXPECT_FALSE(job->spec.suspend);
  // volume Auto: the operator chooses (controller::ChooseStateVolume); an emptyDir until it has.
  EXPECT_TRUE(job->spec.coordinator.state.volume_auto);
  EXPECT_EQ(job->spec.coordinator.state.volume, StateVolume::kEmptyDir);
  EXPECT_EQ(job->spec.coordinator.state.size, "1Gi");
  EXPECT_EQ(job->spec.coordinator.state.storage_class_name, "");
  EXPECT_EQ(job->status.phase, "");
  EXPECT_EQ(job->status.coordinator_restarts, 0);
}

TEST(CoordinatedJobTest, ReadsTheCoordinatorsStateAndPodTemplate) {
  json object = Minimal();
  object["spec"]["coordinator"] = json::parse(R"({
    "state": {"volume": "PersistentVolumeClaim", "storageClassName": "fast", "size": "2.5Gi"},
    "podTemplate": {"metadata": {"labels": {"team": "ml"}},
                    "spec": {"priorityClassName": "high"}}})");
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.coordinator.state.volume, StateVolume::kPersistentVolumeClaim);
  EXPECT_EQ(job->spec.coordinator.state.storage_class_name, "fast");
  EXPECT_EQ(job->spec.coordinator.state.size, "2.5Gi");
  EXPECT_EQ(job->spec.coordinator.pod_template["spec"]["priorityClassName"], "high");
}

TEST(CoordinatedJobTest, FieldsOfUnexpectedTypesAreAClearErrorNotAnException) {
  // The coordinated_job fuzzer's find: metadata that is a number threw out of the parser.
  for (const char* text :
       {R"({"metadata": 5})", R"({"metadata": {"name": "a", "generation": "x"}})"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<CoordinatedJob> job;
    EXPECT_NO_THROW(job = ParseCoordinatedJob(json::parse(text)));
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(CoordinatedJobTest, TemplateFieldsTheOperatorAddsToMustHaveTheirTypes) {
  // The coordinated_job fuzzer's find: a container's volumeMounts that was an object threw
  // out of WorkerPod (the operator would have died on such a job). The API server does not
  // check the template inside a CoordinatedJob; the parser names the field instead.
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["spec"]["template"] = json::array(); }, "spec.template: must be a pod"},
      {[](json& j) { j["spec"]["template"]["metadata"] = 3; }, "spec.template.metadata: must be"},
      {[](json& j) { j["spec"]["template"]["metadata"]["labels"] = "a"; },
       "spec.template.metadata.labels: must be an object"},
      {[](json& j) { j["spec"]["template"]["spec"]["volumes"] = json::object(); },
       "spec.template.spec.volumes: must be a list"},
      {[](json& j) { j["spec"]["template"]["spec"]["initContainers"] = "x"; },
       "spec.template.spec.initContainers: must be a list"},
      {[](json& j) {
         j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = {{"a", 1}};
       },
       "spec.template.spec.containers[0].volumeMounts: must be a list"},
      {[](json& j) { j["spec"]["template"]["spec"]["containers"][0]["env"] = 7; },
       "spec.template.spec.containers[0].env: must be a list"},
      {[](json& j) { j["spec"]["template"]["spec"]["containers"].push_back(4); },
       "spec.template.spec.containers[1]: must be a container"},
  };
  for (const auto& [mutate, want] : cases) {
    json object = Minimal();
    mutate(object);
    absl::StatusOr<CoordinatedJob> job;
    ASSERT_NO_THROW(job = ParseCoordinatedJob(object));
    ASSERT_FALSE(job.ok()) << want;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(job.status().message()).find(want), std::string::npos) << job.status();
  }
}

TEST(CoordinatedJobTest, CountsTheApiServerKeepsAreReadOnlyWhenTheyAreWholeNumbers) {
  // The coordinated_job fuzzer's find: a generation of 1e126 was converted to an integer
  // (undefined behaviour). Metadata and status come from the API server; anything but a
  // whole number there reads as 0.
  json object = Minimal();
  object["metadata"]["generation"] = 1e126;
  object["status"] = {{"restarts", 1e300},
                      {"observedGeneration", 18446744073709551615ULL},
                      {"tasks", {{"total", -3}, {"ready", 2.5}, {"registered", 4}}}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->generation, 0);
  EXPECT_EQ(job->status.restarts, 0);
  EXPECT_EQ(job->status.observed_generation, 0);
  EXPECT_EQ(job->status.tasks.total, 0);
  EXPECT_EQ(job->status.tasks.ready, 0);
  EXPECT_EQ(job->status.tasks.registered, 4);
}

TEST(CoordinatedJobTest, BadFieldsAreNamedInTheError) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["spec"]["replicas"] = 0; }, "spec.replicas"},
      {[](json& j) { j["spec"]["framework"] = "mxnet"; }, "spec.framework"},
      {[](json& j) {
         j["spec"]["pytorch"] = {{"nprocPerNode", 2}};
       },
       "spec.pytorch"},
      {[](json& j) {
         j["spec"]["framework"] = "pytorch";
         j["spec"]["pytorch"] = {{"nprocPerNode", 0}};
       },
       "spec.pytorch.nprocPerNode"},
      {[](json& j) { j["spec"]["template"]["spec"]["containers"] = json::array(); },
       "spec.template.spec.containers"},
      {[](json& j) { j["spec"]["coordinator"]["heartbeatTimeout"] = "soon"; },
       "spec.coordinator.heartbeatTimeout"},
      {[](json& j) { j["spec"]["coordinator"]["outageTolerance"] = "a while"; },
       "spec.coordinator.outageTolerance"},
      {[](json& j) {
         j["spec"]["failurePolicy"]["retryableExitCodes"] = {3};
         j["spec"]["failurePolicy"]["permanentExitCodes"] = {3};
       },
       "cannot be both"},
      {[](json& j) { j["spec"]["successPolicy"] = "Majority"; }, "spec.successPolicy"},
      {[](json& j) { j["metadata"]["name"] = std::string(43, 'a'); }, "metadata.name"},
      {[](json& j) { j["metadata"]["name"] = "1st"; }, "lower-case letter"},
      {[](json& j) { j["spec"]["template"]["spec"]["containers"][0]["name"] = "cohort-sidecar"; },
       "cohort-sidecar"},
      {[](json& j) { j["spec"]["template"]["spec"]["hostNetwork"] = true; },
       "spec.template.spec.hostNetwork: hostNetwork is not allowed: the workload's sidecar"},
      {[](json& j) {
         j["spec"]["tasks"] = json::parse(R"({"driver": {"template": {"spec": {
             "hostNetwork": true, "containers": [{"name": "d", "image": "i"}]}}}})");
       },
       "spec.tasks.driver.template.spec.hostNetwork: hostNetwork is not allowed"},
      {[](json& j) { j["spec"]["coordinator"]["state"]["volume"] = "HostPath"; },
       "spec.coordinator.state.volume: \"HostPath\" is not Auto, EmptyDir, PersistentVolumeClaim "
       "or None"},
      {[](json& j) {
         j["spec"]["coordinator"]["state"] = {{"volume", "EmptyDir"}, {"storageClassName", "fast"}};
       },
       "spec.coordinator.state.storageClassName: applies only to volume PersistentVolumeClaim or "
       "Auto, not EmptyDir"},
      {[](json& j) { j["spec"]["coordinator"]["state"]["size"] = "lots"; },
       "spec.coordinator.state.size: \"lots\" is not a size such as 1Gi or 500Mi"},
      {[](json& j) { j["spec"]["coordinator"]["state"]["size"] = "0Gi"; },
       "spec.coordinator.state.size"},
      {[](json& j) { j["spec"]["coordinator"]["state"]["size"] = "1GB"; },
       "spec.coordinator.state.size"},
      {[](json& j) {
         j["spec"]["coordinator"]["state"] = {{"volume", "None"}, {"size", "1Gi"}};
       },
       "spec.coordinator.state.size: volume None keeps no state to size"},
      {[](json& j) { j["spec"]["coordinator"]["podTemplate"]["spec"]["hostNetwork"] = true; },
       "spec.coordinator.podTemplate.spec.hostNetwork: the coordinator's pod takes only"},
      {[](json& j) {
         j["spec"]["coordinator"]["podTemplate"]["metadata"]["labels"]["replicas"] = 3;
       },
       "spec.coordinator.podTemplate.metadata.labels.replicas: must be a string"},
      {[](json& j) { j["spec"]["coordinator"]["podTemplate"]["metadata"]["name"] = "x"; },
       "spec.coordinator.podTemplate.metadata.name: only labels and annotations"},
      {[](json& j) { j["spec"]["coordinator"]["resources"]["requests"] = "1 cpu"; },
       "spec.coordinator.resources.requests"},
      // Numbers that are not whole, or do not fit: named, never converted.
      {[](json& j) { j["spec"]["activeDeadlineSeconds"] = 1.5; }, "spec.activeDeadlineSeconds"},
      {[](json& j) { j["spec"]["activeDeadlineSeconds"] = 1e300; }, "spec.activeDeadlineSeconds"},
      {[](json& j) { j["spec"]["activeDeadlineSeconds"] = 0; }, "spec.activeDeadlineSeconds"},
      {[](json& j) { j["spec"]["ttlSecondsAfterFinished"] = 1e12; },
       "spec.ttlSecondsAfterFinished"},
      {[](json& j) { j["spec"]["failurePolicy"]["maxRestarts"] = 1e300; },
       "spec.failurePolicy.maxRestarts: must be a whole number"},
      {[](json& j) { j["spec"]["failurePolicy"]["maxRestarts"] = -1; },
       "spec.failurePolicy.maxRestarts: must not be negative"},
      // 2^32 + 1 is no exit code 1.
      {[](json& j) { j["spec"]["failurePolicy"]["retryableExitCodes"] = {4294967297LL}; },
       "4294967297 is not an exit code"},
      {[](json& j) { j["spec"]["sidecar"]["gpuHealth"]["ignoredXids"] = {4294967375LL}; },
       "spec.sidecar.gpuHealth.ignoredXids"},
      {[](json& j) { j["spec"]["sidecar"]["stackDumps"] = "yes"; },
       "spec.sidecar.stackDumps: must be true or false"},
  };
  for (const auto& [mutate, expected] : cases) {
    json object = Minimal();
    mutate(object);
    auto job = ParseCoordinatedJob(object);
    ASSERT_FALSE(job.ok()) << expected;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(job.status().message().find(expected), std::string::npos) << job.status();
  }
}

TEST(CoordinatedJobTest, StatusRoundTripsThroughJson) {
  JobStatus st;
  st.phase = phase::kRestarting;
  st.restarts = 2;
  st.coordinator_restarts = 3;
  st.coordinator_pod = {"c-1", 2, absl::FromUnixSeconds(1'800'000'050)};
  st.tasks = {4, 3, 2, 1, 1};
  st.coordinator_address = "train-coordinator.ml.svc:8476";
  st.start_time = absl::FromUnixSeconds(1'800'000'000);
  st.observed_generation = 3;
  SetCondition(&st.conditions, "Ready", "False", "WorkerFailed", "worker 1 exited",
               absl::FromUnixSeconds(1'800'000'100), 3);
  json object = Minimal();
  object["status"] = StatusToJson(st);
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->status, st);
}

TEST(CoordinatedJobTest, SetConditionKeepsTheTransitionTimeWhileTheStatusHolds) {
  std::vector<Condition> conditions;
  SetCondition(&conditions, "Ready", "False", "A", "a", absl::FromUnixSeconds(100), 1);
  SetCondition(&conditions, "Ready", "False", "B", "b", absl::FromUnixSeconds(200), 1);
  EXPECT_EQ(conditions[0].last_transition_time, FormatRfc3339(absl::FromUnixSeconds(100)));
  EXPECT_EQ(conditions[0].reason, "B");
  SetCondition(&conditions, "Ready", "True", "C", "c", absl::FromUnixSeconds(300), 1);
  EXPECT_EQ(conditions[0].last_transition_time, FormatRfc3339(absl::FromUnixSeconds(300)));
}

TEST(CoordinatedJobTest, ExitCodesAboveOneHundredTwentySevenAreRetryableByDefault) {
  FailurePolicy policy;
  EXPECT_FALSE(IsRetryableExitCode(policy, 1));
  EXPECT_FALSE(IsRetryableExitCode(policy, 127));
  EXPECT_TRUE(IsRetryableExitCode(policy, 128));
  EXPECT_TRUE(IsRetryableExitCode(policy, 137));
  EXPECT_TRUE(IsRetryableExitCode(policy, -1));  // lost without an exit code
}

TEST(ChildrenTest, WorkerPodsCarryTheEnvContractAndTheSidecar) {
  json object = Minimal();
  object["spec"]["framework"] = "jax";
  object["spec"]["template"]["spec"]["containers"][0]["env"] = {{{"name", "LR"}, {"value", "1"}}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  controller::OperatorSettings settings;
  json pod = controller::WorkerPod(*job, 1, 2, settings);
  EXPECT_EQ(pod["metadata"]["name"], "train-worker-1");
  EXPECT_EQ(pod["spec"]["hostname"], "train-worker-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "train-workers");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["shareProcessNamespace"], true);
  EXPECT_EQ(pod["metadata"]["labels"]["cohort.dev/restart"], "2");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "u-1");
  std::map<std::string, std::string> env;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e.contains("value")) env[e["name"]] = e["value"];
  }
  // The workload reaches the coordinator through its sidecar's proxy on the pod's loopback.
  EXPECT_EQ(env["COHORT_COORDINATOR_ADDRESS"], "127.0.0.1:8476");
  EXPECT_EQ(env["COHORT_JOB_NAME"], "jax_worker");
  EXPECT_EQ(env["COHORT_TASK_ID"], "1");
  EXPECT_EQ(env["COHORT_NUM_TASKS"], "2");
  EXPECT_EQ(env["JAX_COORDINATOR_ADDRESS"], "127.0.0.1:8476");
  EXPECT_EQ(env["JAX_COORDINATOR_BIND_ADDRESS"], "127.0.0.1:18476");
  EXPECT_EQ(env["JAX_NUM_PROCESSES"], "2");
  EXPECT_EQ(env["JAX_PROCESS_ID"], "1");
  EXPECT_EQ(env["LR"], "1");
  const json& sidecar = pod["spec"]["initContainers"].back();
  EXPECT_EQ(sidecar["name"], "cohort-sidecar");
  EXPECT_EQ(sidecar["restartPolicy"], "Always");
  EXPECT_EQ(sidecar["image"], settings.sidecar_image);
  // The sidecar talks to the coordinator itself, and serves the workload's endpoint.
  std::map<std::string, std::string> sidecar_env;
  for (const auto& e : sidecar["env"]) {
    if (e.contains("value")) sidecar_env[e["name"]] = e["value"];
  }
  EXPECT_EQ(sidecar_env["COHORT_COORDINATOR_ADDRESS"], "train-coordinator.ml.svc:8476");
  EXPECT_EQ(sidecar_env.count("JAX_COORDINATOR_BIND_ADDRESS"), 0u);
  std::vector<std::string> args = sidecar["args"];
  auto flag = [&args](const std::string& name) {
    auto it = std::find(args.begin(), args.end(), name);
    return it == args.end() || it + 1 == args.end() ? std::string("<absent>") : *(it + 1);
  };
  EXPECT_EQ(flag("--proxy-listen"), "127.0.0.1:8476");
  EXPECT_EQ(flag("--outage-tolerance"), "60s");
}

TEST(ChildrenTest, TensorflowWorkersGetTfConfig) {
  json object = Minimal();
  object["spec"]["framework"] = "tensorflow";
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  json pod = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{});
  std::string tf_config;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "TF_CONFIG") tf_config = e["value"];
  }
  EXPECT_EQ(json::parse(tf_config),
            json::parse(R"({"cluster": {"worker": ["train-worker-0.train-workers.ml.svc:2222",
                            "train-worker-1.train-workers.ml.svc:2222"]},
                            "task": {"type": "worker", "index": 0}})"));
}

// What torchrun and a plain init_process_group(init_method="env://") read (docs/pytorch.md):
// tests/compat/test_torch_store.py runs both with exactly these variables through sidecars.
TEST(ChildrenTest, PytorchWorkersGetTheirStoreAtTheirSidecarAndTorchrunsOptions) {
  json object = Minimal();
  object["spec"]["framework"] = "pytorch";
  object["spec"]["template"]["spec"]["containers"][0]["resources"] = {
      {"limits", {{"nvidia.com/gpu", 4}}}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  auto env_of = [](const json& container) {
    std::map<std::string, std::string> env;
    for (const auto& e : container["env"]) {
      if (e.contains("value")) env[e["name"]] = e["value"];
    }
    return env;
  };
  json pod = controller::WorkerPod(*job, 1, 3, controller::OperatorSettings{});
  std::map<std::string, std::string> env = env_of(pod["spec"]["containers"][0]);
  const std::map<std::string, std::string> want = {
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"WORLD_SIZE", "8"},  // 2 pods of 4 processes (the template's GPUs)
      {"RANK", "4"},        // the pod's first process
      {"LOCAL_RANK", "0"},
      {"NODE_RANK", "1"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"PET_NNODES", "2"},
      {"PET_NPROC_PER_NODE", "4"},
      {"PET_NODE_RANK", "1"},
      {"PET_MASTER_ADDR", "127.0.0.1"},
      {"PET_MASTER_PORT", "29500"},
      {"PET_RDZV_ENDPOINT", "127.0.0.1:29500"},
      {"PET_RDZV_CONF", "is_host=false"},
      {"PET_RDZV_ID", "train-3"},                   // the job and its gang attempt
      {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"},  // read by the c10d rendezvous only
  };
  for (const auto& [name, value] : want) EXPECT_EQ(env[name], value) << name;
  EXPECT_EQ(env.count("PET_RDZV_BACKEND"), 0u) << "torchrun's static rendezvous by default";
  EXPECT_EQ(env.count("PET_MAX_RESTARTS"), 0u);
  bool local_addr = false;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    local_addr = local_addr || (e["name"] == "PET_LOCAL_ADDR" &&
                                e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP");
  }
  EXPECT_TRUE(local_addr) << "c10d's rank-0 agent publishes the pod's IP";
  EXPECT_EQ(env["COHORT_COORDINATOR_ADDRESS"], "127.0.0.1:8476");
  // The sidecar serves the store there; torch's variables are the workload's alone.
  const json& sidecar = pod["spec"]["initContainers"].back();
  std::vector<std::string> args = sidecar["args"];
  auto it = std::find(args.begin(), args.end(), "--torch-store-proxy-listen");
  ASSERT_NE(it, args.end());
  EXPECT_EQ(*(it + 1), "127.0.0.1:29500");
  EXPECT_EQ(env_of(sidecar).count("MASTER_PORT"), 0u);

  // spec.pytorch.nprocPerNode wins over the GPUs; without either, one process per pod.
  object["spec"]["pytorch"] = {{"nprocPerNode", 2}};
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  env = env_of(
      controller::WorkerPod(*job, 1, 0, controller::OperatorSettings{})["spec"]["containers"][0]);
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["PET_NPROC_PER_NODE"], "2");
  object["spec"].erase("pytorch");
  object["spec"]["template"]["spec"]["containers"][0].erase("resources");
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  env = env_of(
      controller::WorkerPod(*job, 1, 0, controller::OperatorSettings{})["spec"]["containers"][0]);
  EXPECT_EQ(env["WORLD_SIZE"], "2");
  EXPECT_EQ(env["RANK"], "1");
  // Other frameworks get none of it.
  object["spec"]["framework"] = "generic";
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  pod = controller::WorkerPod(*job, 1, 0, controller::OperatorSettings{});
  EXPECT_EQ(env_of(pod["spec"]["containers"][0]).count("MASTER_ADDR"), 0u);
  args = pod["spec"]["initContainers"].back()["args"].get<std::vector<std::string>>();
  EXPECT_EQ(std::find(args.begin(), args.end(), "--torch-store-proxy-listen"), args.end());
}

TEST(ChildrenTest, ElasticPytorchJobsRendezvousWithC10dAndRestartALostWorkerAlone) {
  json object = Minimal();
  object["spec"]["framework"] = "pytorch";
  object["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 4}, {"maxRestarts", 5}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->spec.elastic.has_value());
  EXPECT_TRUE(job->spec.coordinator.recoverable) << "a worker's sidecar may register again";
  ASSERT_FALSE(job->spec.failure_policy.rules.empty());
  const api::FailureRule& implied = job->spec.failure_policy.rules.back();
  EXPECT_EQ(implied.action, FailureAction::kRestartWorker);
  EXPECT_EQ(implied.on_reasons,
            (std::vector<std::string>{"PodDeleted", "Evicted", "NodeLost", "Preempted"}));
  std::map<std::string, std::string> env;
  const json pod = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{});
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e.contains("value")) env[e["name"]] = e["value"];
  }
  EXPECT_EQ(env["PET_NNODES"], "1:4");
  EXPECT_EQ(env["PET_RDZV_BACKEND"], "c10d");
  EXPECT_EQ(env["PET_MAX_RESTARTS"], "5");
  // The job's own rules come first.
  object["spec"]["coordinator"]["recoverable"] = true;
  object["spec"]["failurePolicy"]["rules"] = {
      {{"action", "FailJob"}, {"onReasons", {"OOMKilled"}}}};
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->spec.failure_policy.rules.size(), 2u);
  EXPECT_EQ(job->spec.failure_policy.rules[0].action, FailureAction::kFailJob);

  // A RestartWorker rule without spec.elastic: the same rendezvous, the world's size fixed.
  object["spec"].erase("elastic");
  object["spec"]["failurePolicy"]["rules"] = {
      {{"action", "RestartWorker"}, {"onReasons", {"PodDeleted"}}}};
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  env.clear();
  const json restarted_alone = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{});
  for (const auto& e : restarted_alone["spec"]["containers"][0]["env"]) {
    if (e.contains("value")) env[e["name"]] = e["value"];
  }
  EXPECT_EQ(env["PET_NNODES"], "2");
  EXPECT_EQ(env["PET_RDZV_BACKEND"], "c10d");
  EXPECT_EQ(env["PET_MAX_RESTARTS"], "3");
}

TEST(ChildrenTest, ABadElasticSpecIsRefusedWithItsField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"minReplicas", 0}}, "spec.elastic.minReplicas"},
      {{{"maxReplicas", "4"}}, "spec.elastic.maxReplicas"},
      {{{"maxRestarts", -1}}, "spec.elastic.maxRestarts"},
      {{{"minReplicas", 3}, {"maxReplicas", 4}}, "must lie from minReplicas (3)"},
      {json::array(), "spec.elastic"},
  };
  for (const auto& [elastic, want] : cases) {
    json object = Minimal();
    object["spec"]["framework"] = "pytorch";
    object["spec"]["elastic"] = elastic;
    auto job = ParseCoordinatedJob(object);
    ASSERT_FALSE(job.ok()) << elastic.dump();
    EXPECT_TRUE(absl::StrContains(job.status().message(), want))
        << elastic.dump() << ": " << job.status();
  }
  json object = Minimal();
  object["spec"]["elastic"] = {{"minReplicas", 1}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "framework: pytorch")) << job.status();
}

TEST(ChildrenTest, TheCoordinatorConfigDeclaresTheWorkloadAndSidecarJobs) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const std::string config =
      controller::CoordinatorConfigMap(*job)["data"]["coordinator.yaml"].get<std::string>();
  EXPECT_NE(config.find("job: [\"worker=2\"]"), std::string::npos) << config;
  EXPECT_NE(config.find("auxiliary-job: [\"sidecar=2\"]"), std::string::npos);
  EXPECT_NE(config.find("heartbeat-timeout: 30s"), std::string::npos);
}

TEST(ChildrenTest, TheCoordinatorConfigNamesTheStateDirUnlessTheJobKeepsNoState) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  auto config = [&] {
    return controller::CoordinatorConfigMap(*job)["data"]["coordinator.yaml"].get<std::string>();
  };
  EXPECT_NE(config().find("state-dir: /var/lib/cohort/state\n"), std::string::npos) << config();
  job->spec.coordinator.state.volume = StateVolume::kNone;
  EXPECT_EQ(config().find("state-dir"), std::string::npos) << config();
}

TEST(ChildrenTest, TheCoordinatorTakesTheWorkersSchedulingFields) {
  json object = Minimal();
  object["spec"]["template"]["spec"].update(json::parse(R"({
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {}},
    "priorityClassName": "training",
    "imagePullSecrets": [{"name": "registry"}],
    "schedulerName": "gang",
    "runtimeClassName": "nvidia",
    "shareProcessNamespace": true})"));
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  const json spec = controller::CoordinatorPod(*job, 0, kStarted, {})["spec"];
  for (const char* field : kCoordinatorSchedulingFields) {
    EXPECT_EQ(spec[field], object["spec"]["template"]["spec"][field]) << field;
  }
  // What only the workload needs stays with the workers.
  EXPECT_FALSE(spec.contains("runtimeClassName"));
  EXPECT_FALSE(spec.contains("shareProcessNamespace"));
}

TEST(ChildrenTest, TheCoordinatorsPodTemplateOverridesTheWorkersFields) {
  json object = Minimal();
  object["spec"]["template"]["spec"]["nodeSelector"] = {{"pool", "gpu"}};
  object["spec"]["template"]["spec"]["priorityClassName"] = "training";
  object["spec"]["coordinator"]["podTemplate"] = json::parse(R"({
    "metadata": {"labels": {"team": "ml", "cohort.dev/job": "other"},
                 "annotations": {"note": "small"}},
    "spec": {"nodeSelector": {"pool": "cpu"}}})");
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  const json pod = controller::CoordinatorPod(*job, 0, kStarted, {});
  EXPECT_EQ(pod["spec"]["nodeSelector"], (json{{"pool", "cpu"}}));
  EXPECT_EQ(pod["spec"]["priorityClassName"], "training");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ(pod["metadata"]["labels"]["cohort.dev/job"], "train");  // the operator's win
  EXPECT_EQ(pod["metadata"]["labels"]["cohort.dev/role"], "coordinator");
  EXPECT_EQ(pod["metadata"]["annotations"]["note"], "small");
}

TEST(ChildrenTest, TheCoordinatorIsGuaranteedUnlessTheJobSaysOtherwise) {
  using controller::CoordinatorResources;
  EXPECT_EQ(CoordinatorResources(json::object()), json::parse(R"({
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"}})"));
  EXPECT_EQ(CoordinatorResources(json::parse(R"({"requests": {"cpu": "2", "memory": "1Gi"}})")),
            json::parse(R"({"requests": {"cpu": "2", "memory": "1Gi"},
                            "limits": {"cpu": "2", "memory": "1Gi"}})"));
  EXPECT_EQ(CoordinatorResources(json::parse(R"({"limits": {"memory": "2Gi"}})")),
            json::parse(R"({"requests": {"cpu": "500m", "memory": "2Gi"},
                            "limits": {"cpu": "500m", "memory": "2Gi"}})"));
  // Both given: the job's choice, even a Burstable one.
  const json burstable = json::parse(R"({"requests": {"cpu": "1", "memory": "1Gi"},
                                         "limits": {"cpu": "4", "memory": "1Gi"}})");
  EXPECT_EQ(CoordinatorResources(burstable), burstable);

  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(controller::CoordinatorPod(*job, 0, kStarted, {})["spec"]["containers"][0]["resources"],
            CoordinatorResources(json::object()));
}

TEST(CoordinatedJobTest, StateVolumeAutoWithAStorageClassIsAClaimOfItAndANamedVolumeIsNotAuto) {
  json object = Minimal();
  object["spec"]["coordinator"]["state"] = {{"volume", "Auto"}, {"storageClassName", "fast"}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->spec.coordinator.state.volume_auto);
  EXPECT_EQ(job->spec.coordinator.state.volume, StateVolume::kPersistentVolumeClaim);
  EXPECT_EQ(job->spec.coordinator.state.storage_class_name, "fast");
  for (const char* named : {"EmptyDir", "PersistentVolumeClaim", "None"}) {
    object["spec"]["coordinator"]["state"] = {{"volume", named}};
    job = ParseCoordinatedJob(object);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_FALSE(job->spec.coordinator.state.volume_auto) << named;
    EXPECT_EQ(StateVolumeName(job->spec.coordinator.state.volume), named);
  }
  // The operator's choice round-trips through the status.
  object["status"] = {{"coordinatorStateVolume", "PersistentVolumeClaim"}};
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->status.state_volume, "PersistentVolumeClaim");
  EXPECT_EQ(StatusToJson(job->status).value("coordinatorStateVolume", ""), "PersistentVolumeClaim");
}

TEST(ChildrenTest, TheCoordinatorKeepsEachGangsStateOnAnEmptyDirAndRestartsInPlace) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const json spec = controller::CoordinatorPod(*job, 2, kStarted, {})["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Always");
  EXPECT_EQ(spec["securityContext"]["fsGroup"], 65532);
  EXPECT_EQ(spec["volumes"][1],
            json::parse(R"({"name": "state", "emptyDir": {"sizeLimit": "1Gi"}})"));
  EXPECT_EQ(spec["containers"][0]["volumeMounts"][1],
            json::parse(R"({"name": "state", "mountPath": "/var/lib/cohort/state",
                            "subPath": "20270115T080000Z-gang-2"})"));
  EXPECT_EQ(spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(spec["containers"][0]["args"],
            json::parse(R"(["--config", "/etc/cohort/coordinator.yaml"])"))
      << "an emptyDir holds one gang's state only: nothing to remove";
}

TEST(ChildrenTest, TheCoordinatorKeepsItsStateOnTheJobsClaim) {
  json object = Minimal();
  object["spec"]["coordinator"]["state"] = {
      {"volume", "PersistentVolumeClaim"}, {"storageClassName", "fast"}, {"size", "5Gi"}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  const json claim = controller::CoordinatorStateClaim(*job);
  EXPECT_EQ(claim["metadata"]["name"], "train-coordinator-state");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], "u-1");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(claim["spec"], json::parse(R"({"accessModes": ["ReadWriteOnce"],
                                           "resources": {"requests": {"storage": "5Gi"}},
                                           "storageClassName": "fast"})"));
  const json spec = controller::CoordinatorPod(*job, 0, kStarted, {})["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Always");
  EXPECT_EQ(spec["volumes"][1], json::parse(R"({"name": "state",
                            "persistentVolumeClaim": {"claimName": "train-coordinator-state"}})"));
  // The gang's own directory on it, and the whole claim, where the earlier gangs' go.
  EXPECT_EQ(spec["containers"][0]["volumeMounts"][1],
            json::parse(R"({"name": "state", "mountPath": "/var/lib/cohort/state",
                            "subPath": "20270115T080000Z-gang-0"})"));
  EXPECT_EQ(spec["containers"][0]["volumeMounts"][2],
            json::parse(R"({"name": "state", "mountPath": "/var/lib/cohort/state-volume"})"));
  EXPECT_EQ(spec["containers"][0]["args"],
            json::parse(R"(["--config", "/etc/cohort/coordinator.yaml", "--state-prune-before",
                            "/var/lib/cohort/state-volume/20270115T080000Z-gang-0"])"));

  object["spec"]["coordinator"]["state"].erase("storageClassName");
  job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(controller::CoordinatorStateClaim(*job)["spec"].contains("storageClassName"));
}

TEST(ChildrenTest, ACoordinatorWithoutStateHasNoVolumeForItAndNeverRestarts) {
  json object = Minimal();
  object["spec"]["coordinator"]["state"] = {{"volume", "None"}};
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  const json spec = controller::CoordinatorPod(*job, 0, kStarted, {})["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Never");
  std::vector<std::string> volumes, mounts;
  for (const auto& v : spec["volumes"]) volumes.push_back(v["name"]);
  for (const auto& m : spec["containers"][0]["volumeMounts"]) mounts.push_back(m["name"]);
  EXPECT_EQ(volumes, (std::vector<std::string>{"config", "cohort-token"}));
  EXPECT_EQ(mounts, (std::vector<std::string>{"config", "cohort-token"}));
}

TEST(ChildrenTest, TheTokenSecretBelongsToTheJobAndHoldsItsToken) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const json secret = controller::TokenSecret(*job, "0123abcd");
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["metadata"]["name"], "train-token");
  EXPECT_EQ(secret["metadata"]["namespace"], "ml");
  EXPECT_EQ(secret["metadata"]["ownerReferences"], json::array({controller::OwnerReference(*job)}));
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(secret["metadata"]["labels"]["app.kubernetes.io/managed-by"], "cohort-operator");
  EXPECT_EQ(secret["metadata"]["labels"]["cohort.dev/job"], "train");
  EXPECT_EQ(secret["immutable"], true);
  EXPECT_EQ(secret["data"], (json{{"token", "MDEyM2FiY2Q="}}));  // base64 of the token
  EXPECT_EQ(controller::TokenOf(secret), "0123abcd");
  EXPECT_EQ(controller::TokenOf(json::object()), "");
}

json Named(const json& list, const std::string& name) {
  for (const auto& item : list) {
    if (item.value("name", "") == name) return item;
  }
  return nullptr;
}

const json kTokenVolume = json::parse(R"({"name": "cohort-token",
    "secret": {"secretName": "train-token", "items": [{"key": "token", "path": "token"}],
               "defaultMode": 292}})");  // 0444
const json kTokenMount = json::parse(
    R"({"name": "cohort-token", "mountPath": "/var/run/secrets/cohort", "readOnly": true})");

TEST(ChildrenTest, TheCoordinatorReadsTheJobsTokenFromItsSecret) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const std::string config =
      controller::CoordinatorConfigMap(*job)["data"]["coordinator.yaml"].get<std::string>();
  EXPECT_NE(config.find("auth-token-file: /var/run/secrets/cohort/token\n"), std::string::npos)
      << config;
  const json spec = controller::CoordinatorPod(*job, 0, kStarted, {})["spec"];
  EXPECT_EQ(Named(spec["volumes"], "cohort-token"), kTokenVolume);
  EXPECT_EQ(Named(spec["containers"][0]["volumeMounts"], "cohort-token"), kTokenMount);
}

controller::JobCertificates FakeCertificates() {
  return {"-----BEGIN CERTIFICATE-----ca", "-----BEGIN CERTIFICATE-----coordinator",
          "-----BEGIN PRIVATE KEY-----coordinator", "-----BEGIN CERTIFICATE-----client",
          "-----BEGIN PRIVATE KEY-----client"};
}

std::vector<std::string> VolumeKeys(const json& volume) {
  std::vector<std::string> keys;
  for (const auto& item : volume["secret"]["items"]) keys.push_back(item["key"]);
  return keys;
}

TEST(ChildrenTest, WithTlsTheSecretHoldsTheJobsCertificatesToo) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const controller::JobCertificates certs = FakeCertificates();
  const json secret = controller::TokenSecret(*job, "0123abcd", &certs);
  std::vector<std::string> keys;
  for (const auto& [key, value] : secret["data"].items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"ca.crt", "client.crt", "client.key", "coordinator.crt",
                                            "coordinator.key", "token"}));
  auto back = controller::CertificatesOf(secret);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->coordinator_key, certs.coordinator_key);
  EXPECT_EQ(back->client_cert, certs.client_cert);
  EXPECT_EQ(controller::TokenOf(secret), "0123abcd");
  // A Secret made without TLS, or missing a part, holds no certificates.
  EXPECT_FALSE(controller::CertificatesOf(controller::TokenSecret(*job, "0123abcd")));
  json partial = secret;
  partial["data"].erase("client.key");
  EXPECT_FALSE(controller::CertificatesOf(partial));
}

TEST(ChildrenTest, WithTlsTheCoordinatorServesMutualTlsWithItsOwnKeyOnly) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const std::string config = controller::CoordinatorConfigMap(
                                 *job, controller::JobTls::kOperator)["data"]["coordinator.yaml"]
                                 .get<std::string>();
  EXPECT_NE(config.find("tls-cert: /var/run/secrets/cohort/coordinator.crt\n"
                        "tls-key: /var/run/secrets/cohort/coordinator.key\n"
                        "tls-client-ca: /var/run/secrets/cohort/ca.crt\n"),
            std::string::npos)
      << config;
  const std::string plain =
      controller::CoordinatorConfigMap(*job)["data"]["coordinator.yaml"].get<std::string>();
  EXPECT_EQ(plain.find("tls-"), std::string::npos) << plain;
  const json spec =
      controller::CoordinatorPod(*job, 0, kStarted, {}, controller::JobTls::kOperator)["spec"];
  EXPECT_EQ(VolumeKeys(Named(spec["volumes"], "cohort-token")),
            (std::vector<std::string>{"token", "ca.crt", "coordinator.crt", "coordinator.key"}));
  EXPECT_EQ(controller::CoordinatorDnsNames(*job),
            (std::vector<std::string>{"train-coordinator", "train-coordinator.ml",
                                      "train-coordinator.ml.svc",
                                      "train-coordinator.ml.svc.cluster.local"}));
  // What the sidecars dial is a name in the certificate.
  EXPECT_EQ(controller::CoordinatorAddress(*job),
            controller::CoordinatorServerName(*job) + ":8476");
}

TEST(ChildrenTest, WithTlsTheSidecarPresentsTheClientCertificate) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const json spec = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{},
                                          controller::JobTls::kOperator)["spec"];
  EXPECT_EQ(VolumeKeys(Named(spec["volumes"], "cohort-token")),
            (std::vector<std::string>{"token", "ca.crt", "client.crt", "client.key"}));
  const json args = spec["initContainers"].back()["args"];
  std::string joined;
  for (const auto& a : args) joined += a.get<std::string>() + " ";
  EXPECT_NE(joined.find("--tls-ca /var/run/secrets/cohort/ca.crt --tls-cert "
                        "/var/run/secrets/cohort/client.crt --tls-key "
                        "/var/run/secrets/cohort/client.key"),
            std::string::npos)
      << joined;
  const json plain = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{})["spec"];
  EXPECT_EQ(plain["initContainers"].back()["args"].dump().find("--tls"), std::string::npos);
}

TEST(ChildrenTest, WithCertManagerTheJobAsksForTwoCertificatesOfTheIssuer) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  controller::OperatorSettings settings;
  settings.job_tls = "cert-manager";
  settings.job_tls_issuer = "ClusterIssuer/cohort-ca";
  const std::vector<json> certificates = controller::CertManagerCertificates(*job, settings);
  ASSERT_EQ(certificates.size(), 2u);
  const json& server = certificates[0];
  const json& client = certificates[1];
  EXPECT_EQ(server["apiVersion"], "cert-manager.io/v1");
  EXPECT_EQ(server["kind"], "Certificate");
  EXPECT_EQ(server["metadata"]["name"], "train-coordinator-tls");
  EXPECT_EQ(server["metadata"]["ownerReferences"][0]["uid"], job->uid);
  EXPECT_EQ(server["spec"]["secretName"], "train-coordinator-tls");
  EXPECT_EQ(server["spec"]["issuerRef"],
            json({{"group", "cert-manager.io"}, {"kind", "ClusterIssuer"}, {"name", "cohort-ca"}}));
  EXPECT_EQ(server["spec"]["dnsNames"], json(controller::CoordinatorDnsNames(*job)));
  EXPECT_EQ(server["spec"]["usages"], json({"digital signature", "server auth"}));
  EXPECT_EQ(client["metadata"]["name"], "train-client-tls");
  EXPECT_EQ(client["spec"]["dnsNames"], json({"train.ml.client.cohort.dev"}));
  EXPECT_EQ(client["spec"]["usages"], json({"digital signature", "client auth"}));
  for (const json& c : certificates) {
    EXPECT_EQ(c["spec"]["privateKey"]["rotationPolicy"], "Always");
    // cert-manager's Secret carries the job's labels: the operator's cache sees it.
    EXPECT_EQ(c["spec"]["secretTemplate"]["labels"]["cohort.dev/job"], "train");
    EXPECT_EQ(c["spec"]["secretTemplate"]["labels"]["app.kubernetes.io/managed-by"],
              "cohort-operator");
  }
  // The token Secret remembers the mode; the coordinator requires the job's client name.
  const json secret =
      controller::TokenSecret(*job, "0123abcd", nullptr, controller::JobTls::kCertManager);
  EXPECT_EQ(controller::TlsModeOf(secret), controller::JobTls::kCertManager);
  EXPECT_EQ(controller::TlsModeOf(controller::TokenSecret(*job, "0123abcd")),
            controller::JobTls::kNone);
  const controller::JobCertificates certs = FakeCertificates();
  EXPECT_EQ(controller::TlsModeOf(controller::TokenSecret(*job, "0123abcd", &certs)),
            controller::JobTls::kOperator);
  const std::string config = controller::CoordinatorConfigMap(
                                 *job, controller::JobTls::kCertManager)["data"]["coordinator.yaml"]
                                 .get<std::string>();
  EXPECT_NE(config.find("tls-client-ca: /var/run/secrets/cohort/ca.crt\n"
                        "tls-client-name: train.ml.client.cohort.dev\n"),
            std::string::npos)
      << config;
}

TEST(ChildrenTest, WithCertManagerItsSecretsAreProjectedUnderTheSameNames) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const auto sources = [](const json& spec) {
    std::vector<std::string> out;
    const json volume = Named(spec["volumes"], "cohort-token");
    for (const json& source : volume["projected"]["sources"]) {
      for (const json& item : source["secret"]["items"]) {
        out.push_back(absl::StrCat(source["secret"]["name"].get<std::string>(), ":",
                                   item["key"].get<std::string>(), ">",
                                   item["path"].get<std::string>()));
      }
    }
    return out;
  };
  const json coordinator =
      controller::CoordinatorPod(*job, 0, kStarted, {}, controller::JobTls::kCertManager)["spec"];
  EXPECT_EQ(
      sources(coordinator),
      (std::vector<std::string>{"train-token:token>token", "train-coordinator-tls:ca.crt>ca.crt",
                                "train-coordinator-tls:tls.crt>coordinator.crt",
                                "train-coordinator-tls:tls.key>coordinator.key"}));
  const json worker = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{},
                                            controller::JobTls::kCertManager)["spec"];
  EXPECT_EQ(sources(worker),
            (std::vector<std::string>{"train-token:token>token", "train-client-tls:ca.crt>ca.crt",
                                      "train-client-tls:tls.crt>client.crt",
                                      "train-client-tls:tls.key>client.key"}));
  // The sidecar's flags are those of the operator's mode.
  EXPECT_EQ(worker["initContainers"].back()["args"],
            controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{},
                                  controller::JobTls::kOperator)["spec"]["initContainers"]
                .back()["args"]);
  // What cert-manager issued, read back; a Secret missing its CA is not issued yet.
  json issued = {{"data",
                  {{"ca.crt", absl::Base64Escape("CA")},
                   {"tls.crt", absl::Base64Escape("CERT")},
                   {"tls.key", absl::Base64Escape("KEY")}}}};
  auto read = controller::IssuedOf(issued);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->ca + read->cert + read->key, "CACERTKEY");
  issued["data"].erase("ca.crt");
  EXPECT_FALSE(controller::IssuedOf(issued));
}

TEST(ChildrenTest, OnlyTheSidecarOfAWorkerGetsTheToken) {
  json object = Minimal();
  object["spec"]["template"]["spec"]["containers"].push_back({{"name", "helper"}, {"image", "h"}});
  auto job = ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok());
  const json spec = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{})["spec"];
  EXPECT_EQ(Named(spec["volumes"], "cohort-token"), kTokenVolume);
  const json& sidecar = spec["initContainers"].back();
  EXPECT_EQ(Named(sidecar["volumeMounts"], "cohort-token"), kTokenMount);
  std::vector<std::string> args = sidecar["args"];
  auto it = std::find(args.begin(), args.end(), "--auth-token-file");
  ASSERT_NE(it, args.end());
  ASSERT_NE(it + 1, args.end());
  EXPECT_EQ(*(it + 1), "/var/run/secrets/cohort/token");
  // The workload's containers call their sidecar's proxy, which adds the token.
  ASSERT_EQ(spec["containers"].size(), 2u);
  for (const auto& container : spec["containers"]) {
    EXPECT_TRUE(Named(container["volumeMounts"], "cohort-token").is_null()) << container["name"];
    EXPECT_EQ(container.dump().find("token"), std::string::npos) << container.dump();
  }
}

// The restricted Pod Security Standard for a container: what PodSecurity admission checks,
// container by container, when the pod sets nothing (the worker pod's level is the template's).
void ExpectRestricted(const json& container) {
  const json& sc = container["securityContext"];
  SCOPED_TRACE(container["name"].get<std::string>());
  EXPECT_EQ(sc["runAsNonRoot"], true);
  ASSERT_TRUE(sc["runAsUser"].is_number_integer());
  EXPECT_NE(sc["runAsUser"].get<int>(), 0);
  EXPECT_EQ(sc["allowPrivilegeEscalation"], false);
  EXPECT_EQ(sc["capabilities"], json::parse(R"({"drop": ["ALL"]})"));
  EXPECT_EQ(sc["seccompProfile"], json::parse(R"({"type": "RuntimeDefault"})"));
  EXPECT_FALSE(sc.contains("privileged"));
}

TEST(ChildrenTest, TheSidecarAndTheCoordinatorPassTheRestrictedPodSecurityStandard) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  const json worker = controller::WorkerPod(*job, 0, 0, controller::OperatorSettings{})["spec"];
  const json& sidecar = worker["initContainers"].back();
  ASSERT_EQ(sidecar["name"], "cohort-sidecar");
  ExpectRestricted(sidecar);
  EXPECT_EQ(sidecar["securityContext"]["runAsUser"], 65532);
  EXPECT_EQ(sidecar["securityContext"]["runAsGroup"], 65532);
  EXPECT_EQ(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
  for (const char* state : {"EmptyDir", "None", "PersistentVolumeClaim"}) {
    json object = Minimal();
    object["spec"]["coordinator"]["state"] = {{"volume", state}};
    auto with_state = ParseCoordinatedJob(object);
    ASSERT_TRUE(with_state.ok());
    const json spec = controller::CoordinatorPod(*with_state, 0, kStarted, {})["spec"];
    ASSERT_EQ(spec["containers"].size(), 1u);
    ExpectRestricted(spec["containers"][0]);
    EXPECT_FALSE(spec.contains("initContainers"));
    // No host namespace, and only the volume types the standard allows.
    for (const char* host : {"hostNetwork", "hostPID", "hostIPC"})
      EXPECT_FALSE(spec.contains(host));
    for (const auto& v : spec["volumes"]) {
      EXPECT_TRUE(v.contains("configMap") || v.contains("secret") || v.contains("emptyDir") ||
                  v.contains("persistentVolumeClaim"))
          << v.dump();
    }
  }
  // The operator adds no volume of another type to a worker pod either.
  for (const auto& v : worker["volumes"]) {
    EXPECT_TRUE(v.contains("secret") || v.contains("emptyDir")) << v.dump();
  }
}

TEST(ChildrenTest, TheNetworkPolicyLetsInTheJobsPodsTheOperatorAndTheMetricsNamespace) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  controller::OperatorSettings settings;
  settings.operator_namespace = "cohort-system";
  settings.operator_pod_labels = {{"app.kubernetes.io/name", "cohort"},
                                  {"app.kubernetes.io/component", "operator"}};
  settings.metrics_namespace = "monitoring";
  const json policy = controller::NetworkPolicy(*job, settings);
  EXPECT_EQ(policy["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(policy["kind"], "NetworkPolicy");
  EXPECT_EQ(policy["metadata"]["name"], "train-isolation");
  EXPECT_EQ(policy["metadata"]["namespace"], "ml");
  EXPECT_EQ(policy["metadata"]["ownerReferences"], json::array({controller::OwnerReference(*job)}));
  EXPECT_EQ(policy["metadata"]["labels"]["app.kubernetes.io/managed-by"], "cohort-operator");
  EXPECT_EQ(policy["metadata"]["labels"]["cohort.dev/job"], "train");
  EXPECT_EQ(policy["spec"], json::parse(R"({
    "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "cohort-operator",
                                    "cohort.dev/job": "train"}},
    "policyTypes": ["Ingress"],
    "ingress": [
      {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "cohort-operator",
                                                 "cohort.dev/job": "train"}}}]},
      {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "cohort-system"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "cohort",
                                                 "app.kubernetes.io/component": "operator"}}}],
       "ports": [{"protocol": "TCP", "port": 8476}]},
      {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
       "ports": [{"protocol": "TCP", "port": 8477}, {"protocol": "TCP", "port": 9477}]}
    ]})"));
  // The pods it selects: every pod the operator makes for the job, coordinator and workers.
  const json selector = policy["spec"]["podSelector"]["matchLabels"];
  for (const json& pod : {controller::CoordinatorPod(*job, 0, kStarted, settings),
                          controller::WorkerPod(*job, 1, 0, settings)}) {
    for (const auto& [k, v] : selector.items()) {
      EXPECT_EQ(pod["metadata"]["labels"][k], v) << pod["metadata"]["name"] << " " << k;
    }
  }
}

TEST(ChildrenTest, TheNetworkPolicyLeavesOutTheRulesWhoseNamespaceIsNotKnown) {
  auto job = ParseCoordinatedJob(Minimal());
  ASSERT_TRUE(job.ok());
  controller::OperatorSettings outside;  // an operator outside the cluster, no metrics
  json ingress = controller::NetworkPolicy(*job, outside)["spec"]["ingress"];
  ASSERT_EQ(ingress.size(), 1u) << ingress.dump();
  EXPECT_FALSE(ingress[0].contains("ports"));  // the job's own pods, every port

  controller::OperatorSettings unlabelled;
  unlabelled.operator_namespace = "ops";
  ingress = controller::NetworkPolicy(*job, unlabelled)["spec"]["ingress"];
  ASSERT_EQ(ingress.size(), 2u) << ingress.dump();
  // No labels: every pod of that namespace, written as the API server stores it.
  EXPECT_EQ(ingress[1]["from"][0]["podSelector"], json::object());
}

}  // namespace
}  // namespace cohort::api
