// Task runtime jobs (spec.tasks): the spec as read, the pods made for it, and PlanJob's
// decisions for them (a worker pod that ends is replaced alone; the driver's exit decides).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "operator/plan/job_plan.h"

namespace cohort::controller {
// Its own namespace: the unity builds compile this file with others of its test.
namespace task_runtime_plan_test {
namespace {

using json = nlohmann::json;
namespace phase = api::phase;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

json TasksObject(int replicas = 2) {
  return {
      {"apiVersion", "cohort.dev/v1alpha1"},
      {"kind", "CoordinatedJob"},
      {"metadata", {{"name", "mr"}, {"namespace", "ml"}, {"uid", "u1"}, {"generation", 1}}},
      {"spec",
       {{"replicas", replicas},
        {"template",
         {{"spec",
           {{"containers",
             json::array({{{"name", "workers"},
                           {"image", "example/tasks:1"},
                           {"command", json::array({"python3", "-m", "cohort.worker"})},
                           {"env", json::array({{{"name", "MINE"}, {"value", "1"}}})},
                           {"resources", {{"limits", {{"memory", "1Gi"}}}}}}})}}}}},
        {"tasks",
         {{"workersPerPod", 3},
          {"driver",
           {{"template",
             {{"spec",
               {{"containers",
                 json::array({{{"name", "driver"},
                               {"image", "example/tasks:1"},
                               {"resources", {{"requests", {{"memory", "100Mi"}}}}}}})}}}}}}}}}}}};
}

api::CoordinatedJob TasksJob(int replicas = 2, const std::string& status_phase = "") {
  json object = TasksObject(replicas);
  if (!status_phase.empty()) {
    object["status"] = {{"phase", status_phase},
                        {"startTime", api::FormatRfc3339(kNow - absl::Minutes(1))}};
  }
  auto job = api::ParseCoordinatedJob(object);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

ObservedPod Pod(const std::string& name, const std::string& role, int index,
                const std::string& pod_phase = "Running") {
  ObservedPod p;
  p.name = name;
  p.role = role;
  p.index = index;
  p.restart = 0;
  p.phase = pod_phase;
  p.ready = pod_phase == "Running";
  return p;
}
ObservedPod Coordinator() { return Pod("mr-coordinator", "coordinator", -1); }
ObservedPod Worker(int i) { return Pod("mr-worker-" + std::to_string(i), "worker", i); }
ObservedPod Driver() { return Pod("mr-driver", "driver", -1); }
ObservedPod Ended(ObservedPod p, int code) {
  p.phase = code == 0 ? "Succeeded" : "Failed";
  p.ready = false;
  p.exit_code = code;
  p.finished_at = kNow - absl::Seconds(2);
  return p;
}

// Its own name: plan_fixtures.h has an Everything for gang jobs, which argument-dependent
// lookup finds too when a unity batch includes both.
Observed TasksObserved(std::vector<ObservedPod> pods) {
  Observed o;
  o.pods = std::move(pods);
  o.token_secret = o.coordinator_config_map = o.coordinator_service = o.workers_service = true;
  o.network_policy = NetworkPolicy(TasksJob(), OperatorSettings{});
  o.now = kNow;
  return o;
}

std::vector<std::string> Names(const std::vector<json>& objects) {
  std::vector<std::string> out;
  for (const auto& o : objects) {
    out.push_back(o["kind"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>());
  }
  return out;
}

const json* Container(const json& pod, const char* list, const std::string& name) {
  for (const json& c : pod["spec"][list]) {
    if (c["name"] == name) return &c;
  }
  return nullptr;
}

std::string EnvValue(const json& container, const std::string& name) {
  for (const json& e : container["env"]) {
    if (e["name"] == name) return e.value("value", "");
  }
  return "<none>";
}

int EnvIndex(const json& container, const std::string& name) {
  int i = 0;
  for (const json& e : container["env"]) {
    if (e["name"] == name) return i;
    ++i;
  }
  return -1;
}

TEST(TaskRuntimeSpecTest, ReadsSpecTasksWithDefaults) {
  api::CoordinatedJob job = TasksJob();
  ASSERT_TRUE(job.spec.tasks.has_value());
  EXPECT_EQ(job.spec.tasks->workers_per_pod, 3);
  EXPECT_EQ(job.spec.tasks->task_retries, 3);
  EXPECT_EQ(job.spec.tasks->task_liveness_timeout, "5s");
  EXPECT_EQ(job.spec.tasks->driver_template["spec"]["containers"][0]["name"], "driver");
  json plain = TasksObject();
  plain["spec"].erase("tasks");
  EXPECT_FALSE(api::ParseCoordinatedJob(plain)->spec.tasks.has_value());
}

TEST(TaskRuntimeSpecTest, BadTaskRuntimeSpecsAreRefusedNamingTheField) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& o) { o["spec"]["framework"] = "jax"; }, "spec.framework"},
      {[](json& o) { o["spec"]["tasks"]["workersPerPod"] = 0; }, "spec.tasks.workersPerPod"},
      {[](json& o) { o["spec"]["tasks"]["workersPerPod"] = 300; }, "spec.tasks.workersPerPod"},
      {[](json& o) { o["spec"]["tasks"]["objectStoreMemory"] = "lots"; },
       "spec.tasks.objectStoreMemory"},
      {[](json& o) { o["spec"]["tasks"]["objectStoreMemory"] = "1Mi"; },
       "spec.tasks.objectStoreMemory: must be at least 16Mi"},
      {[](json& o) { o["spec"]["tasks"]["taskRetries"] = -1; }, "spec.tasks.taskRetries"},
      {[](json& o) { o["spec"]["tasks"]["taskLivenessTimeout"] = "soon"; },
       "spec.tasks.taskLivenessTimeout"},
      {[](json& o) { o["spec"]["tasks"].erase("driver"); }, "spec.tasks.driver.template"},
      {[](json& o) {
         o["spec"]["tasks"]["driver"]["template"]["spec"]["containers"] = json::array();
       },
       "spec.tasks.driver.template.spec.containers"},
      {[](json& o) {
         o["spec"]["tasks"]["driver"]["template"]["spec"]["containers"][0]["name"] =
             "cohort-sidecar";
       },
       "spec.tasks.driver.template.spec.containers"},
      {[](json& o) { o["spec"]["tasks"]["driver"]["template"]["spec"]["volumes"] = "x"; },
       "spec.tasks.driver.template.spec.volumes"},
      {[](json& o) { o["spec"]["tasks"] = "yes"; }, "spec.tasks"},
  };
  for (const auto& [change, field] : cases) {
    json object = TasksObject();
    change(object);
    auto job = api::ParseCoordinatedJob(object);
    ASSERT_FALSE(job.ok()) << field;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(job.status().message()).find(field), std::string::npos)
        << job.status().message();
  }
}

TEST(TaskRuntimeSpecTest, QuantitiesAndTheObjectStoreSizingRule) {
  EXPECT_EQ(api::QuantityBytes("2Gi"), uint64_t{2} << 30);
  EXPECT_EQ(api::QuantityBytes("512M"), uint64_t{512'000'000});
  EXPECT_EQ(api::QuantityBytes("1.5Gi"), uint64_t{3} << 29);
  EXPECT_EQ(api::QuantityBytes("1000"), uint64_t{1000});
  EXPECT_FALSE(api::QuantityBytes("lots").has_value());
  EXPECT_FALSE(api::QuantityBytes("1Xi").has_value());
  EXPECT_FALSE(api::QuantityBytes("").has_value());
  api::TaskRuntimeSpec tasks;
  // 30% of the first container's limit, else its request; at least 64 MiB; else 1 GiB.
  EXPECT_EQ(api::ObjectStoreBytes(tasks, json::parse(R"({"spec": {"containers": [
      {"resources": {"limits": {"memory": "10Gi"}, "requests": {"memory": "1Gi"}}}]}})")),
            (uint64_t{10} << 30) / 10 * 3);
  EXPECT_EQ(api::ObjectStoreBytes(tasks, json::parse(R"({"spec": {"containers": [
      {"resources": {"requests": {"memory": "1Gi"}}}]}})")),
            (uint64_t{1} << 30) / 10 * 3);
  EXPECT_EQ(api::ObjectStoreBytes(tasks, json::parse(R"({"spec": {"containers": [
      {"resources": {"limits": {"memory": "100Mi"}}}]}})")),
            uint64_t{64} << 20);
  EXPECT_EQ(api::ObjectStoreBytes(tasks, json::parse(R"({"spec": {"containers": [{}]}})")),
            uint64_t{1} << 30);
  tasks.object_store_memory = "2Gi";
  EXPECT_EQ(api::ObjectStoreBytes(tasks, json::object()), uint64_t{2} << 30);
}

TEST(TaskRuntimePodsTest, AWorkerPodsSidecarHostsTheObjectStoreSharedWithTheWorkload) {
  api::CoordinatedJob job = TasksJob();
  json pod = WorkerPod(job, 1, 0, OperatorSettings{}, JobTls::kOperator);
  const json* sidecar = Container(pod, "initContainers", "cohort-sidecar");
  ASSERT_NE(sidecar, nullptr);
  const std::string args = (*sidecar)["args"].dump();
  const std::string bytes = std::to_string((uint64_t{1} << 30) / 10 * 3);
  for (const std::string& want :
       {std::string("\"--task-runtime\""), std::string("\"--objstore-listen\",\"0.0.0.0:9478\""),
        "\"--objstore-capacity\",\"" + bytes + "\"",
        std::string("\"--objstore-shm-dir\",\"/dev/shm\""), std::string("\"--tls-ca\"")}) {
    EXPECT_NE(args.find(want), std::string::npos) << want << " in " << args;
  }
  const json* workers = Container(pod, "containers", "workers");
  ASSERT_NE(workers, nullptr);
  EXPECT_EQ(EnvValue(*workers, "COHORT_SCHEDULER"), "127.0.0.1:8476");
  EXPECT_EQ(EnvValue(*workers, "COHORT_OBJSTORE"), "$(POD_IP):9478");
  EXPECT_EQ(EnvValue(*workers, "COHORT_NODE_IP"), "$(POD_IP)");
  EXPECT_EQ(EnvValue(*workers, "COHORT_TASK_WORKERS"), "3");
  // After POD_IP, which they expand; before the template's own, which wins.
  EXPECT_GT(EnvIndex(*workers, "COHORT_OBJSTORE"), EnvIndex(*workers, "POD_IP"));
  EXPECT_LT(EnvIndex(*workers, "COHORT_OBJSTORE"), EnvIndex(*workers, "MINE"));
  // One memory-backed volume, at /dev/shm in both containers.
  json volume;
  for (const json& v : pod["spec"]["volumes"]) {
    if (v["name"] == "cohort-objects") volume = v;
  }
  EXPECT_EQ(volume["emptyDir"], json({{"medium", "Memory"}, {"sizeLimit", bytes}}));
  for (const json* c : {sidecar, workers}) {
    EXPECT_NE(
        (*c)["volumeMounts"].dump().find(R"({"mountPath":"/dev/shm","name":"cohort-objects"})"),
        std::string::npos)
        << (*c)["name"];
  }
  // The workers serve on the pod's IP and require the job's token: the workload gets the
  // token alone, read-only; the certificates (cohort-token, with --job-tls) stay the sidecar's.
  EXPECT_EQ(EnvValue(*workers, "COHORT_AUTH_TOKEN_FILE"), "/var/run/secrets/cohort/token");
  EXPECT_EQ((*workers)["volumeMounts"].dump().find("\"cohort-token\""), std::string::npos);
  EXPECT_NE(
      (*workers)["volumeMounts"].dump().find(
          R"({"mountPath":"/var/run/secrets/cohort","name":"cohort-workload-token","readOnly":true})"),
      std::string::npos)
      << (*workers)["volumeMounts"].dump();
  json token;
  for (const json& v : pod["spec"]["volumes"]) {
    if (v["name"] == "cohort-workload-token") token = v;
  }
  EXPECT_EQ(token["secret"]["secretName"], "mr-token");
  EXPECT_EQ(token["secret"]["items"], json::parse(R"([{"key": "token", "path": "token"}])"));
}

TEST(TaskRuntimePodsTest, TheDriverPodComesFromItsOwnTemplate) {
  api::CoordinatedJob job = TasksJob();
  json pod = DriverPod(job, 0, OperatorSettings{}, JobTls::kNone);
  EXPECT_EQ(pod["metadata"]["name"], "mr-driver");
  EXPECT_EQ(pod["metadata"]["labels"]["cohort.dev/role"], "driver");
  EXPECT_FALSE(pod["metadata"]["labels"].contains("cohort.dev/task-index"));
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  const json* driver = Container(pod, "containers", "driver");
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(Container(pod, "containers", "workers"), nullptr);
  EXPECT_EQ(EnvValue(*driver, "COHORT_SCHEDULER"), "127.0.0.1:8476");
  // Its store is sized from its own template: 30% of its 100Mi request is below the floor.
  const json* sidecar = Container(pod, "initContainers", "cohort-sidecar");
  ASSERT_NE(sidecar, nullptr);
  EXPECT_NE((*sidecar)["args"].dump().find("\"--objstore-capacity\",\"" +
                                           std::to_string(uint64_t{64} << 20) + "\""),
            std::string::npos)
      << (*sidecar)["args"].dump();
}

TEST(TaskRuntimePlanTest, WorkersAndTheDriverStartOnceTheCoordinatorIsReady) {
  Observed o = TasksObserved({Coordinator()});
  o.pods[0].ready = false;
  Plan waiting = PlanJob(TasksJob(2, phase::kPending), o, OperatorSettings{});
  EXPECT_TRUE(waiting.create.empty()) << ::testing::PrintToString(Names(waiting.create));
  o.pods[0].ready = true;
  Plan plan = PlanJob(TasksJob(2, phase::kPending), o, OperatorSettings{});
  EXPECT_EQ(Names(plan.create),
            (std::vector<std::string>{"Pod/mr-worker-0", "Pod/mr-worker-1", "Pod/mr-driver"}));
  // The coordinator's config carries the runtime's settings.
  Observed fresh;
  fresh.now = kNow;
  fresh.fresh_token = "t";
  Plan first = PlanJob(TasksJob(), fresh, OperatorSettings{});
  std::string config;
  for (const json& c : first.create) {
    if (c["kind"] == "ConfigMap") config = c["data"]["coordinator.yaml"];
  }
  EXPECT_NE(config.find("task-retries: 3\ntask-liveness-timeout: 5s\n"), std::string::npos)
      << config;
}

TEST(TaskRuntimePlanTest, RunningOnceTheDriverRunsAndTheSchedulersCountsInTheStatus) {
  Observed o = TasksObserved({Coordinator(), Worker(0), Worker(1), Driver()});
  o.coordinator = CoordinatorView{};
  o.coordinator->task_runtime = api::TaskRuntimeStatus{120, 1, 4};
  Plan plan = PlanJob(TasksJob(2, phase::kPending), o, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  ASSERT_TRUE(plan.status.task_runtime.has_value());
  EXPECT_EQ(*plan.status.task_runtime, (api::TaskRuntimeStatus{120, 1, 4}));
  EXPECT_EQ(api::StatusToJson(plan.status)["taskRuntime"],
            json({{"succeeded", 120}, {"failed", 1}, {"running", 4}}));
  EXPECT_TRUE(plan.create.empty());
  EXPECT_TRUE(plan.delete_pods.empty());
}

TEST(TaskRuntimePlanTest, AWorkerPodThatEndsIsReplacedAloneWithoutARestart) {
  Observed o = TasksObserved({Coordinator(), Ended(Worker(0), 137), Worker(1), Driver()});
  Plan plan = PlanJob(TasksJob(2, phase::kRunning), o, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.delete_pods, std::vector<std::string>{"mr-worker-0"});
  EXPECT_TRUE(plan.create.empty());  // once it is gone
  ASSERT_FALSE(plan.events.empty());
  EXPECT_EQ(plan.events.back().reason, "WorkerReplaced");
  // Gone (deleted by someone, or by the plan): made again.
  Observed gone = TasksObserved({Coordinator(), Worker(1), Driver()});
  Plan again = PlanJob(TasksJob(2, phase::kRunning), gone, OperatorSettings{});
  EXPECT_EQ(Names(again.create), std::vector<std::string>{"Pod/mr-worker-0"});
  EXPECT_EQ(again.status.phase, phase::kRunning);
}

TEST(TaskRuntimePlanTest, ThePoolFollowsSpecReplicas) {
  Observed grow = TasksObserved({Coordinator(), Worker(0), Worker(1), Driver()});
  Plan up = PlanJob(TasksJob(4, phase::kRunning), grow, OperatorSettings{});
  EXPECT_EQ(Names(up.create), (std::vector<std::string>{"Pod/mr-worker-2", "Pod/mr-worker-3"}));
  Observed shrink = TasksObserved({Coordinator(), Worker(0), Worker(1), Worker(2), Driver()});
  Plan down = PlanJob(TasksJob(1, phase::kRunning), shrink, OperatorSettings{});
  std::vector<std::string> deleted = down.delete_pods;
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, (std::vector<std::string>{"mr-worker-1", "mr-worker-2"}));
  EXPECT_EQ(down.status.phase, phase::kRunning);
  EXPECT_EQ(down.status.restarts, 0);
}

TEST(TaskRuntimePlanTest, TheDriversExitDecidesTheJob) {
  Plan ok = PlanJob(TasksJob(2, phase::kRunning),
                    TasksObserved({Coordinator(), Worker(0), Worker(1), Ended(Driver(), 0)}),
                    OperatorSettings{});
  EXPECT_EQ(ok.status.phase, phase::kSucceeded);
  EXPECT_EQ(api::FindCondition(ok.status.conditions, kConditionSucceeded)->reason,
            "DriverSucceeded");
  // The workers still running go; the coordinator once no workload runs.
  std::vector<std::string> deleted = ok.delete_pods;
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, (std::vector<std::string>{"mr-worker-0", "mr-worker-1"}));

  Plan bad = PlanJob(TasksJob(2, phase::kRunning),
                     TasksObserved({Coordinator(), Worker(0), Worker(1), Ended(Driver(), 3)}),
                     OperatorSettings{});
  EXPECT_EQ(bad.status.phase, phase::kFailed);
  const api::Condition* failed = api::FindCondition(bad.status.conditions, kConditionFailed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "DriverFailed");
  EXPECT_EQ(failed->message, "the driver exited with code 3");

  Plan lost = PlanJob(TasksJob(2, phase::kRunning),
                      TasksObserved({Coordinator(), Worker(0), Worker(1)}), OperatorSettings{});
  EXPECT_EQ(lost.status.phase, phase::kFailed);
  EXPECT_EQ(api::FindCondition(lost.status.conditions, kConditionFailed)->reason, "DriverLost");
  // Worker exits never fail the job.
  Plan workers =
      PlanJob(TasksJob(2, phase::kRunning),
              TasksObserved({Coordinator(), Ended(Worker(0), 1), Ended(Worker(1), 1), Driver()}),
              OperatorSettings{});
  EXPECT_EQ(workers.status.phase, phase::kRunning);
}

TEST(TaskRuntimePlanTest, ALostCoordinatorWithoutStateStartsTheJobAgain) {
  api::CoordinatedJob job = TasksJob(2, phase::kRunning);
  job.spec.coordinator.state.volume = api::StateVolume::kNone;
  Observed o = TasksObserved({Worker(0), Worker(1), Driver()});
  o.failure_first_seen = kNow - absl::Minutes(1);
  Plan plan = PlanJob(job, o, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  std::vector<std::string> deleted = plan.delete_pods;
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, (std::vector<std::string>{"mr-driver", "mr-worker-0", "mr-worker-1"}));
}

// The task runtime's policy (PlanTaskRuntime) as a table: the pool's size, the job's phase and
// its pods -> what the plan makes and deletes, the phase, and the condition that says why.
ObservedPod NotReady(ObservedPod p) {
  p.ready = false;
  return p;
}

struct TaskRuntimeCase {
  const char* name;
  int replicas;
  const char* job_phase;
  std::vector<ObservedPod> pods;
  // What the plan does.
  const char* phase;
  std::vector<std::string> creates;  // "Kind/name", in order
  std::vector<std::string> deletes;  // pod names, sorted
  int restarts;
  const char* condition;  // a condition it must set ("": none asked), and its reason
  const char* reason;
};

// clang-format off: a row per case, its fields in the order of the struct.
const TaskRuntimeCase kCases[] = {
    {"NothingStartsBeforeTheCoordinatorIsReady",
     2,
     phase::kPending,
     {NotReady(Coordinator())},
     phase::kPending,
     {},
     {},
     0,
     "",
     ""},
    {"TheWorkersThenTheDriverStartOnceItIs",
     2,
     phase::kPending,
     {Coordinator()},
     phase::kPending,
     {"Pod/mr-worker-0", "Pod/mr-worker-1", "Pod/mr-driver"},
     {},
     0,
     "",
     ""},
    {"RunningOnceTheDriverRuns",
     2,
     phase::kPending,
     {Coordinator(), Worker(0), Worker(1), Driver()},
     phase::kRunning,
     {},
     {},
     0,
     "",
     ""},
    {"AWorkerPodThatEndsIsDeletedAloneWithoutARestart",
     2,
     phase::kRunning,
     {Coordinator(), Ended(Worker(0), 137), Worker(1), Driver()},
     phase::kRunning,
     {},
     {"mr-worker-0"},
     0,
     "",
     ""},
    {"AMissingWorkerPodIsMadeAgain",
     2,
     phase::kRunning,
     {Coordinator(), Worker(1), Driver()},
     phase::kRunning,
     {"Pod/mr-worker-0"},
     {},
     0,
     "",
     ""},
    {"ThePoolGrowsWithSpecReplicas",
     4,
     phase::kRunning,
     {Coordinator(), Worker(0), Worker(1), Driver()},
     phase::kRunning,
     {"Pod/mr-worker-2", "Pod/mr-worker-3"},
     {},
     0,
     "",
     ""},
    {"ThePoolShrinksWithSpecReplicas",
     1,
     phase::kRunning,
     {Coordinator(), Worker(0), Worker(1), Worker(2), Driver()},
     phase::kRunning,
     {},
     {"mr-worker-1", "mr-worker-2"},
     0,
     "",
     ""},
    {"WorkerExitsNeverFailTheJob",
     2,
     phase::kRunning,
     {Coordinator(), Ended(Worker(0), 1), Ended(Worker(1), 1), Driver()},
     phase::kRunning,
     {},
     {"mr-worker-0", "mr-worker-1"},
     0,
     "",
     ""},
    {"TheDriverExitingZeroSucceedsAndStopsTheWorkers",
     2,
     phase::kRunning,
     {Coordinator(), Worker(0), Worker(1), Ended(Driver(), 0)},
     phase::kSucceeded,
     {},
     {"mr-worker-0", "mr-worker-1"},
     0,
     kConditionSucceeded,
     "DriverSucceeded"},
    {"TheDriverFailingFailsTheJob",
     2,
     phase::kRunning,
     {Coordinator(), Worker(0), Worker(1), Ended(Driver(), 3)},
     phase::kFailed,
     {},
     {"mr-worker-0", "mr-worker-1"},
     0,
     kConditionFailed,
     "DriverFailed"},
    {"TheDriverGoneFailsTheJob",
     2,
     phase::kRunning,
     {Coordinator(), Worker(0), Worker(1)},
     phase::kFailed,
     {},
     {"mr-worker-0", "mr-worker-1"},
     0,
     kConditionFailed,
     "DriverLost"},
};
// clang-format on

void PrintTo(const TaskRuntimeCase& c, std::ostream* os) { *os << c.name; }

class TaskRuntimePolicyTest : public ::testing::TestWithParam<TaskRuntimeCase> {};

TEST_P(TaskRuntimePolicyTest, Decides) {
  const TaskRuntimeCase& c = GetParam();
  const Plan plan =
      PlanJob(TasksJob(c.replicas, c.job_phase), TasksObserved(c.pods), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, c.phase);
  EXPECT_EQ(Names(plan.create), c.creates);
  std::vector<std::string> deleted = plan.delete_pods;
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, c.deletes);
  EXPECT_EQ(plan.status.restarts, c.restarts);
  if (!std::string(c.condition).empty()) {
    const api::Condition* why = api::FindCondition(plan.status.conditions, c.condition);
    ASSERT_NE(why, nullptr) << c.condition;
    EXPECT_EQ(why->reason, c.reason);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, TaskRuntimePolicyTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace task_runtime_plan_test
}  // namespace cohort::controller
