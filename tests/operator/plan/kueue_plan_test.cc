// Jobs queued by Kueue (kueue.h): the Workload a job gets, and PlanJob's decisions as Kueue
// admits, evicts and the job ends; the Workload status a real Kueue would read back.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "operator/plan/job_plan.h"
#include "operator/plan/kueue.h"

namespace cohort::controller {
// Its own namespace: the unity builds compile this file with others of its test.
namespace kueue_plan_test {
namespace {

using json = nlohmann::json;
namespace phase = api::phase;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

json JobObject(int replicas = 2, const std::string& queue = "team-a") {
  json labels = json::object();
  if (!queue.empty()) labels[kueue::kQueueNameLabel] = queue;
  return {{"apiVersion", "cohort.dev/v1alpha1"},
          {"kind", "CoordinatedJob"},
          {"metadata",
           {{"name", "train"},
            {"namespace", "ml"},
            {"uid", "00000000-0000-0000-0000-000000000001"},
            {"generation", 1},
            {"labels", labels}}},
          {"spec",
           {{"replicas", replicas},
            {"template",
             {{"spec",
               {{"containers",
                 json::array({{{"name", "trainer"},
                               {"image", "example/train:1"},
                               {"resources", {{"limits", {{"nvidia.com/gpu", 2}}}}}}})}}}}}}}};
}

api::CoordinatedJob Job(const json& object) {
  auto job = api::ParseCoordinatedJob(object);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

api::CoordinatedJob WithStatus(json object, const std::string& status_phase, int restarts = 0) {
  object["status"] = {{"phase", status_phase},
                      {"restarts", restarts},
                      {"startTime", api::FormatRfc3339(kNow - absl::Minutes(1))}};
  return Job(object);
}

ObservedPod Pod(const std::string& name, const std::string& role, int index,
                const std::string& pod_phase = "Running", bool ready = true) {
  ObservedPod p;
  p.name = name;
  p.role = role;
  p.index = index;
  p.restart = 0;
  p.phase = pod_phase;
  p.ready = ready;
  return p;
}
std::vector<ObservedPod> Gang(bool ready = true) {
  return {Pod("train-coordinator", "coordinator", -1, "Running", ready),
          Pod("train-worker-0", "worker", 0, "Running", ready),
          Pod("train-worker-1", "worker", 1, "Running", ready)};
}

json Flavor(const std::string& name, json node_labels, json tolerations = json::array()) {
  return {{"apiVersion", kueue::kApiVersion},
          {"kind", "ResourceFlavor"},
          {"metadata", {{"name", name}}},
          {"spec", {{"nodeLabels", node_labels}, {"tolerations", tolerations}}}};
}

json Condition(const std::string& type, const std::string& status, const std::string& reason,
               const std::string& message = "") {
  return {{"type", type},
          {"status", status},
          {"reason", reason},
          {"message", message},
          {"lastTransitionTime", "2026-11-25T00:00:00Z"}};
}

// The Workload as the operator made it, as Kueue then changed it.
json Created(const api::CoordinatedJob& job) {
  json w = kueue::DesiredWorkload(job, OperatorSettings{});
  w["metadata"]["resourceVersion"] = "7";
  w["metadata"]["generation"] = 1;
  return w;
}
json Admitted(json w, const std::string& flavor = "a100") {
  json assignments = json::array();
  for (const json& set : w["spec"]["podSets"]) {
    assignments.push_back({{"name", set["name"]},
                           {"flavors", {{"nvidia.com/gpu", flavor}, {"cpu", flavor}}},
                           {"count", set["count"]}});
  }
  w["status"] = {{"admission", {{"clusterQueue", "gpus"}, {"podSetAssignments", assignments}}},
                 {"conditions", json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                             Condition("Admitted", "True", "Admitted")})}};
  return w;
}
json Evicted(json w, const std::string& reason) {
  w["status"]["conditions"].push_back(
      Condition("Evicted", "True", reason, "Preempted to accommodate a higher priority Workload"));
  return w;
}

Observed With(std::vector<ObservedPod> pods, std::optional<json> workload,
              std::map<std::string, json> flavors = {}) {
  Observed o;
  o.pods = std::move(pods);
  o.token_secret = o.coordinator_config_map = o.coordinator_service = o.workers_service = true;
  o.network_policy = NetworkPolicy(Job(JobObject()), OperatorSettings{});
  o.now = kNow;
  KueueObserved kq;
  kq.workload = std::move(workload);
  kq.flavors = std::move(flavors);
  o.kueue = std::move(kq);
  return o;
}

std::map<std::string, json> A100() {
  return {
      {"a100",
       Flavor("a100", {{"gpu.example.com/model", "a100"}},
              json::array({{{"key", "gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}))}};
}

const api::Condition* Find(const Plan& plan, const char* type) {
  return api::FindCondition(plan.status.conditions, type);
}

std::vector<json> Pods(const Plan& plan) {
  std::vector<json> pods;
  for (const json& o : plan.create) {
    if (o["kind"] == "Pod") pods.push_back(o);
  }
  return pods;
}

TEST(KueueWorkloadTest, TheWorkloadIsNamedAsKueueNamesAJobsAndAsksForEveryRole) {
  api::CoordinatedJob job = Job(JobObject(3));
  EXPECT_EQ(kueue::WorkloadName(job),
            "coordinatedjob-train-" + kueue::WorkloadName(job).substr(21));
  EXPECT_EQ(kueue::WorkloadName(job).size(), std::string("coordinatedjob-train-").size() + 5);
  json other = JobObject(3);
  other["metadata"]["uid"] = "00000000-0000-0000-0000-000000000002";
  EXPECT_NE(kueue::WorkloadName(Job(other)), kueue::WorkloadName(job))
      << "a job made again under the same name gets another Workload";
  json long_name = JobObject(3);
  long_name["metadata"]["name"] = std::string(42, 'j');
  EXPECT_EQ(kueue::WorkloadName(Job(long_name)).size(), 15 + 42 + 1 + 5u);

  json w = kueue::DesiredWorkload(job, OperatorSettings{});
  EXPECT_EQ(w["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(w["metadata"]["namespace"], "ml");
  EXPECT_EQ(w["metadata"]["labels"][kueue::kJobUidLabel], job.uid);
  EXPECT_EQ(w["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(w["metadata"]["ownerReferences"][0]["uid"], job.uid);
  EXPECT_EQ(w["metadata"]["finalizers"], json::array({kueue::kResourceInUseFinalizer}));
  EXPECT_EQ(w["spec"]["queueName"], "team-a");
  ASSERT_EQ(w["spec"]["podSets"].size(), 2u);
  EXPECT_EQ(w["spec"]["podSets"][0]["name"], "coordinator");
  EXPECT_EQ(w["spec"]["podSets"][0]["count"], 1);
  EXPECT_EQ(w["spec"]["podSets"][1]["name"], "workers");
  EXPECT_EQ(w["spec"]["podSets"][1]["count"], 3);
  // Quota counts what the pods will ask for: the workload's GPUs and the injected sidecar (a
  // native sidecar: an init container that keeps running).
  const json& spec = w["spec"]["podSets"][1]["template"]["spec"];
  EXPECT_EQ(spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 2);
  EXPECT_TRUE(std::any_of(spec["initContainers"].begin(), spec["initContainers"].end(),
                          [](const json& c) { return c["name"] == kSidecarContainer; }));
  EXPECT_TRUE(kueue::Equivalent(w, kueue::DesiredWorkload(job, OperatorSettings{})));
  EXPECT_FALSE(kueue::Equivalent(w, kueue::DesiredWorkload(Job(JobObject(4)), OperatorSettings{})));
}

TEST(KueuePlanTest, AQueuedJobGetsItsWorkloadAndNoPod) {
  api::CoordinatedJob job = Job(JobObject());
  Plan plan = PlanJob(job, With({}, std::nullopt), OperatorSettings{});
  ASSERT_EQ(plan.create.size(), 1u);
  EXPECT_EQ(plan.create[0]["kind"], "Workload");
  EXPECT_EQ(plan.create[0]["metadata"]["name"], kueue::WorkloadName(job));
  EXPECT_EQ(plan.status.phase, phase::kSuspended);
  ASSERT_NE(Find(plan, kConditionSuspended), nullptr);
  EXPECT_EQ(Find(plan, kConditionSuspended)->reason, "Queued");
  EXPECT_NE(Find(plan, kConditionSuspended)->message.find("LocalQueue team-a"), std::string::npos);

  // Made, not admitted yet: nothing more.
  api::CoordinatedJob waiting = WithStatus(JobObject(), phase::kSuspended);
  waiting.status.conditions = plan.status.conditions;
  plan = PlanJob(waiting, With({}, Created(job)), OperatorSettings{});
  EXPECT_TRUE(plan.create.empty());
  EXPECT_FALSE(plan.workload_status.has_value());
  EXPECT_TRUE(plan.events.empty()) << plan.events[0].message;
}

TEST(KueuePlanTest, TheWorkloadTakesItsPriorityAsKueuesIntegrationsDo) {
  // Where it comes from: the job's label, else the pods' priorityClassName, else the default.
  json labelled = JobObject();
  labelled["metadata"]["labels"][kueue::kPriorityClassLabel] = "production";
  labelled["spec"]["template"]["spec"]["priorityClassName"] = "pods-high";
  kueue::PriorityClassSource source = kueue::PrioritySourceOf(Job(labelled));
  EXPECT_EQ(source.kind, kueue::PriorityClassSource::kWorkloadPriorityClass);
  EXPECT_EQ(source.name, "production");
  json pods_only = JobObject();
  pods_only["spec"]["template"]["spec"]["priorityClassName"] = "pods-high";
  source = kueue::PrioritySourceOf(Job(pods_only));
  EXPECT_EQ(source.kind, kueue::PriorityClassSource::kPriorityClass);
  EXPECT_EQ(source.name, "pods-high");
  EXPECT_EQ(kueue::PrioritySourceOf(Job(JobObject())).kind,
            kueue::PriorityClassSource::kGlobalDefault);

  // The class's value, and a reference to it, go into the Workload.
  const KueueObserved::Priority production =
      kueue::PriorityFrom({kueue::PriorityClassSource::kWorkloadPriorityClass, "production"},
                          json{{"metadata", {{"name", "production"}}}, {"value", 10000}});
  Observed o = With({}, std::nullopt);
  o.kueue->priority = production;
  Plan plan = PlanJob(Job(labelled), o, OperatorSettings{});
  ASSERT_EQ(plan.create.size(), 1u);
  EXPECT_EQ(plan.create[0]["spec"]["priority"], 10000);
  EXPECT_EQ(plan.create[0]["spec"]["priorityClassRef"], (json{{"group", "kueue.x-k8s.io"},
                                                              {"kind", "WorkloadPriorityClass"},
                                                              {"name", "production"}}));
  // No class applies: priority 0 and no reference; a default PriorityClass's value otherwise.
  EXPECT_FALSE(kueue::PriorityFrom({kueue::PriorityClassSource::kGlobalDefault, ""}, std::nullopt)
                   .ref.has_value());
  const KueueObserved::Priority default_class =
      kueue::PriorityFrom({kueue::PriorityClassSource::kGlobalDefault, ""},
                          json{{"metadata", {{"name", "normal"}}}, {"value", 100}});
  EXPECT_EQ(default_class.value, 100);
  EXPECT_EQ((*default_class.ref)["kind"], "PriorityClass");
  // A class the job names that does not exist: no Workload, the job says why and waits.
  o.kueue->priority = kueue::PriorityFrom(
      {kueue::PriorityClassSource::kWorkloadPriorityClass, "production"}, std::nullopt);
  plan = PlanJob(Job(labelled), o, OperatorSettings{});
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(Find(plan, kConditionSuspended)->reason, "PriorityClassNotFound");
  EXPECT_NE(Find(plan, kConditionSuspended)->message.find("WorkloadPriorityClass production"),
            std::string::npos);
  EXPECT_TRUE(plan.requeue_after.has_value());
}

TEST(KueuePlanTest, TopologyRequestsAndAssignmentsFollowKueuesTopologyAwareScheduling) {
  // The workers' pod set always names their index label; a TAS annotation on the template
  // asks for a topology, with a group that keeps the coordinator with them.
  json plain = kueue::DesiredWorkload(Job(JobObject()), OperatorSettings{});
  EXPECT_FALSE(plain["spec"]["podSets"][0].contains("topologyRequest")) << "the coordinator's";
  EXPECT_EQ(plain["spec"]["podSets"][1]["topologyRequest"],
            (json{{"podIndexLabel", "cohort.dev/task-index"}}));
  json object = JobObject();
  object["spec"]["template"]["metadata"]["annotations"] = {
      {"kueue.x-k8s.io/podset-required-topology", "cloud.example.com/rack"},
      {"kueue.x-k8s.io/podset-group-name", "gang"},
      {"kueue.x-k8s.io/podset-slice-required-topology", "kubernetes.io/hostname"},
      {"kueue.x-k8s.io/podset-slice-size", "2"}};
  object["spec"]["coordinator"]["podTemplate"]["metadata"]["annotations"] = {
      {"kueue.x-k8s.io/podset-preferred-topology", "cloud.example.com/rack"},
      {"kueue.x-k8s.io/podset-group-name", "gang"}};
  api::CoordinatedJob job = Job(object);
  json tas = kueue::DesiredWorkload(job, OperatorSettings{});
  EXPECT_EQ(tas["spec"]["podSets"][1]["topologyRequest"],
            (json{{"required", "cloud.example.com/rack"},
                  {"podSetGroupName", "gang"},
                  {"podSetSliceRequiredTopology", "kubernetes.io/hostname"},
                  {"podSetSliceSize", 2},
                  {"podIndexLabel", "cohort.dev/task-index"}}));
  EXPECT_EQ(tas["spec"]["podSets"][0]["topologyRequest"],
            (json{{"preferred", "cloud.example.com/rack"}, {"podSetGroupName", "gang"}}));

  // Admitted with a topology assignment for the workers: their pods wait behind Kueue's gate
  // (its TopologyUngater places each in its domain); the coordinator's set has none.
  json workload = Admitted(Created(job));
  workload["status"]["admission"]["podSetAssignments"][1]["topologyAssignment"] = {
      {"levels", {"kubernetes.io/hostname"}},
      {"slices", json::array({{{"domainCount", 1}, {"podCounts", {{"universal", 2}}}}})}};
  api::CoordinatedJob waiting = WithStatus(object, phase::kSuspended);
  Plan started = PlanJob(waiting, With({}, workload, A100()), OperatorSettings{});
  ASSERT_FALSE(Pods(started).empty());
  EXPECT_FALSE(Pods(started)[0]["spec"].contains("schedulingGates"))
      << Pods(started)[0]["metadata"]["name"];
  Plan workers = PlanJob(
      WithStatus(object, phase::kPending),
      With({Pod("train-coordinator", "coordinator", -1, "Running", true)}, workload, A100()),
      OperatorSettings{});
  ASSERT_EQ(Pods(workers).size(), 2u);
  for (const json& pod : Pods(workers)) {
    EXPECT_EQ(pod["spec"]["schedulingGates"], json::array({{{"name", "kueue.x-k8s.io/topology"}}}))
        << pod["metadata"]["name"];
  }
}

TEST(KueuePlanTest, AnAdmittedJobStartsWithTheFlavorsPlacement) {
  api::CoordinatedJob job = WithStatus(JobObject(), phase::kSuspended);
  // The flavor a100 is not there (yet): the job waits, and says which.
  Plan waiting = PlanJob(job, With({}, Admitted(Created(job)), {}), OperatorSettings{});
  EXPECT_EQ(waiting.status.phase, phase::kSuspended);
  EXPECT_EQ(Find(waiting, kConditionSuspended)->reason, "AdmissionUnusable");
  EXPECT_NE(Find(waiting, kConditionSuspended)->message.find("ResourceFlavor a100"),
            std::string::npos);
  EXPECT_TRUE(Pods(waiting).empty());
  EXPECT_TRUE(waiting.requeue_after.has_value());

  Plan started = PlanJob(job, With({}, Admitted(Created(job)), A100()), OperatorSettings{});
  EXPECT_EQ(Find(started, kConditionSuspended)->reason, "Admitted");
  EXPECT_NE(Find(started, kConditionSuspended)->message.find("ClusterQueue gpus"),
            std::string::npos);
  std::vector<json> pods = Pods(started);
  ASSERT_FALSE(pods.empty());
  for (const json& pod : pods) {
    const std::string set = kueue::PodSetOf(pod);
    EXPECT_EQ(pod["metadata"]["labels"][kueue::kPodSetLabel], set);
    EXPECT_EQ(pod["metadata"]["annotations"][kueue::kWorkloadAnnotation], kueue::WorkloadName(job));
    EXPECT_EQ(pod["spec"]["nodeSelector"]["gpu.example.com/model"], "a100");
    const json& tolerations = pod["spec"]["tolerations"];
    EXPECT_TRUE(std::any_of(tolerations.begin(), tolerations.end(), [](const json& t) {
      return t.value("key", "") == "gpu";
    })) << pod["metadata"]["name"];
  }
  ASSERT_TRUE(started.workload_status.has_value());
  const json* ready = kueue::FindCondition(*started.workload_status, "PodsReady");
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ((*ready)["status"], "False");
  EXPECT_EQ((*ready)["reason"], "WaitForStart");
}

TEST(KueuePlanTest, AnAdmittedJobUnderKubernetesGangSchedulingMakesItsGroupWithItsWorkers) {
  json object = JobObject();
  object["spec"]["gangScheduling"] = {{"podGroup", "Kubernetes"}};
  api::CoordinatedJob job = WithStatus(object, phase::kSuspended);
  OperatorSettings settings;
  settings.kubernetes_scheduling_api = "scheduling.k8s.io/v1beta1";
  // The Workload Kueue admits: its worker pod set's template is the one the workers get, so it
  // names the group too (Kueue compares only the quota's shape).
  json workload = Created(job);
  bool named = false;
  for (const json& set : workload["spec"]["podSets"]) {
    if (set["name"] == "workers") {
      named = set["template"]["spec"]["schedulingGroup"] == json({{"podGroupName", "train"}});
    }
  }
  EXPECT_TRUE(named) << workload["spec"]["podSets"].dump();
  // Admitted, its coordinator ready: the group comes with the workers, which join it.
  Plan plan =
      PlanJob(job, With({Pod("train-coordinator", "coordinator", -1)}, Admitted(workload), A100()),
              settings);
  ASSERT_GE(plan.create.size(), 4u);
  EXPECT_EQ(plan.create[0]["kind"], "Workload");
  EXPECT_EQ(plan.create[0]["apiVersion"], "scheduling.k8s.io/v1beta1");
  EXPECT_EQ(plan.create[1]["kind"], "PodGroup");
  int workers = 0;
  for (const json& pod : Pods(plan)) {
    if (pod["metadata"]["labels"]["cohort.dev/role"] != "worker") continue;
    ++workers;
    EXPECT_EQ(pod["spec"]["schedulingGroup"]["podGroupName"], "train");
    EXPECT_EQ(pod["spec"]["nodeSelector"]["gpu.example.com/model"], "a100") << "the admission's";
  }
  EXPECT_EQ(workers, 2);
}

TEST(KueuePlanTest, PodsReadyFollowsTheGang) {
  api::CoordinatedJob job = WithStatus(JobObject(), phase::kRunning);
  Plan plan = PlanJob(job, With(Gang(), Admitted(Created(job)), A100()), OperatorSettings{});
  ASSERT_TRUE(plan.workload_status.has_value());
  const json* ready = kueue::FindCondition(*plan.workload_status, "PodsReady");
  EXPECT_EQ((*ready)["status"], "True");
  EXPECT_EQ((*ready)["reason"], "Started");

  // Written once: the same state again writes nothing.
  Plan again = PlanJob(job, With(Gang(), *plan.workload_status, A100()), OperatorSettings{});
  EXPECT_FALSE(again.workload_status.has_value());

  // A worker not ready any more: waiting for recovery, and it stays that (not WaitForStart).
  std::vector<ObservedPod> down = Gang();
  down[2].ready = false;
  Plan lost = PlanJob(job, With(down, *plan.workload_status, A100()), OperatorSettings{});
  ASSERT_TRUE(lost.workload_status.has_value());
  EXPECT_EQ((*kueue::FindCondition(*lost.workload_status, "PodsReady"))["reason"],
            "WaitForRecovery");
  Plan still = PlanJob(job, With(down, *lost.workload_status, A100()), OperatorSettings{});
  EXPECT_FALSE(still.workload_status.has_value());
}

TEST(KueuePlanTest, AWorkerDoneBeforeTheRestGivesItsQuotaBack) {
  api::CoordinatedJob job = WithStatus(JobObject(), phase::kRunning);
  Plan plan = PlanJob(job, With(Gang(), Admitted(Created(job)), A100()), OperatorSettings{});
  const json running = *plan.workload_status;
  EXPECT_FALSE(running["status"].contains("reclaimablePods"));
  std::vector<ObservedPod> one_done = Gang();
  one_done[1].phase = "Succeeded";
  one_done[1].exit_code = 0;
  plan = PlanJob(job, With(one_done, running, A100()), OperatorSettings{});
  ASSERT_TRUE(plan.workload_status.has_value());
  EXPECT_EQ((*plan.workload_status)["status"]["reclaimablePods"],
            json::array({{{"name", "workers"}, {"count", 1}}}));
  // Said once; an eviction's cleared admission starts over with every pod needed.
  EXPECT_FALSE(PlanJob(job, With(one_done, *plan.workload_status, A100()), OperatorSettings{})
                   .workload_status.has_value());
  json evicted = *plan.workload_status;
  kueue::ClearAdmission(&evicted, kNow);
  EXPECT_FALSE(evicted["status"].contains("reclaimablePods"));
}

TEST(KueuePlanTest, AnEvictedJobStopsWithoutARestartAndGivesItsQuotaBackOnceItsPodsAreGone) {
  api::CoordinatedJob job = WithStatus(JobObject(), phase::kRunning, /*restarts=*/1);
  json evicted = Evicted(Admitted(Created(job)), "Preempted");
  Plan stopping = PlanJob(job, With(Gang(), evicted, A100()), OperatorSettings{});
  EXPECT_EQ(stopping.status.phase, phase::kSuspended);
  EXPECT_EQ(stopping.status.restarts, 1) << "an eviction is not a failure";
  EXPECT_EQ(Find(stopping, kConditionSuspended)->reason, "Evicted");
  EXPECT_NE(Find(stopping, kConditionSuspended)->message.find("Preempted"), std::string::npos);
  EXPECT_EQ(stopping.delete_pods.size(), 3u);
  EXPECT_TRUE(Pods(stopping).empty());
  EXPECT_FALSE(stopping.workload_status.has_value()) << "the quota is in use until the pods go";

  api::CoordinatedJob stopped = WithStatus(JobObject(), phase::kSuspended, 1);
  stopped.status.conditions = stopping.status.conditions;
  Plan done = PlanJob(stopped, With({}, evicted, A100()), OperatorSettings{});
  ASSERT_TRUE(done.workload_status.has_value());
  const json& w = *done.workload_status;
  EXPECT_FALSE(w["status"].contains("admission"));
  EXPECT_FALSE(kueue::IsTrue(w, "QuotaReserved"));
  EXPECT_FALSE(kueue::IsTrue(w, "Admitted"));
  EXPECT_TRUE(kueue::IsTrue(w, "Requeued")) << "preempted: queued again at once";
  EXPECT_TRUE(done.events.empty());

  // Evicted for its own doing (not ready in time): Kueue decides when it comes back.
  Plan timeout =
      PlanJob(stopped, With({}, Evicted(Admitted(Created(job)), "PodsReadyTimeout"), A100()),
              OperatorSettings{});
  ASSERT_TRUE(timeout.workload_status.has_value());
  const json* requeued = kueue::FindCondition(*timeout.workload_status, "Requeued");
  EXPECT_EQ((*requeued)["status"], "False");
  EXPECT_EQ((*requeued)["reason"], "PodsReadyTimeout");

  // Admitted again (Kueue turns Evicted False): a new gang, the restart count as it was.
  json back = Admitted(Created(job));
  back["status"]["conditions"].push_back(Condition("Evicted", "False", "QuotaReserved"));
  Plan resumed = PlanJob(stopped, With({}, back, A100()), OperatorSettings{});
  EXPECT_EQ(resumed.status.phase, phase::kPending);
  EXPECT_EQ(resumed.status.restarts, 1);
  EXPECT_FALSE(Pods(resumed).empty());
}

TEST(KueuePlanTest, AFinishedJobFinishesItsWorkloadAndReleasesIt) {
  api::CoordinatedJob job = WithStatus(JobObject(), phase::kRunning);
  std::vector<ObservedPod> pods = Gang();
  for (int i = 1; i <= 2; ++i) {
    pods[i].phase = "Succeeded";
    pods[i].exit_code = 0;
    pods[i].finished_at = kNow - absl::Seconds(1);
  }
  Plan plan = PlanJob(job, With(pods, Admitted(Created(job)), A100()), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kSucceeded);
  ASSERT_TRUE(plan.workload_status.has_value());
  EXPECT_TRUE(kueue::IsTrue(*plan.workload_status, "Finished"));
  EXPECT_EQ((*kueue::FindCondition(*plan.workload_status, "Finished"))["reason"], "Succeeded");
  EXPECT_TRUE(plan.release_workload);

  // Later reconciles of the finished job: written already, the finalizer gone.
  api::CoordinatedJob finished = WithStatus(JobObject(), phase::kSucceeded);
  finished.status.conditions = plan.status.conditions;
  json released = *plan.workload_status;
  released["metadata"]["finalizers"] = json::array();
  Plan later = PlanJob(finished, With({}, released, A100()), OperatorSettings{});
  EXPECT_FALSE(later.workload_status.has_value());
  EXPECT_FALSE(later.release_workload);
}

TEST(KueuePlanTest, AChangedJobStopsAndItsWorkloadIsReplaced) {
  api::CoordinatedJob job = WithStatus(JobObject(/*replicas=*/3), phase::kRunning);
  json old = Admitted(Created(Job(JobObject(2))));
  Plan plan = PlanJob(job, With(Gang(), old, A100()), OperatorSettings{});
  EXPECT_EQ(Find(plan, kConditionSuspended)->reason, "WorkloadReplaced");
  EXPECT_EQ(plan.delete_pods.size(), 3u);
  EXPECT_FALSE(plan.delete_workload) << "not before the pods are gone";
  plan = PlanJob(job, With({}, old, A100()), OperatorSettings{});
  EXPECT_TRUE(plan.delete_workload);
  EXPECT_TRUE(plan.release_workload);
}

TEST(KueuePlanTest, AnAdmissionThatContradictsThePodsFailsTheJob) {
  json object = JobObject();
  object["spec"]["template"]["spec"]["nodeSelector"] = {{"gpu.example.com/model", "h100"}};
  api::CoordinatedJob job = WithStatus(object, phase::kSuspended);
  Plan plan = PlanJob(job, With({}, Admitted(Created(job)), A100()), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Find(plan, kConditionFailed)->reason, "AdmissionConflict");
  EXPECT_NE(Find(plan, kConditionFailed)->message.find("gpu.example.com/model"), std::string::npos);
  EXPECT_TRUE(Pods(plan).empty());
  ASSERT_TRUE(plan.workload_status.has_value());
  EXPECT_TRUE(kueue::IsTrue(*plan.workload_status, "Finished"));
}

TEST(KueuePlanTest, AnAdmissionThatSetsTheOperatorsOwnLabelsFailsTheJobBeforeAnyPod) {
  api::CoordinatedJob job = WithStatus(JobObject(), phase::kSuspended);
  json workload = Admitted(Created(job));
  workload["status"]["admissionChecks"] = json::array(
      {{{"name", "prov"},
        {"state", "Ready"},
        {"podSetUpdates",
         json::array({{{"name", "workers"}, {"labels", {{"cohort.dev/task-index", "0"}}}}})}}});
  Plan plan = PlanJob(job, With({}, workload, A100()), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Find(plan, kConditionFailed)->message,
            "the admission of Workload " + kueue::WorkloadName(job) +
                " cannot be applied: pod set workers: label cohort.dev/task-index is the "
                "operator's");
  EXPECT_TRUE(plan.create.empty());
}

TEST(KueuePlanTest, WithoutKueueTheLabelIsIgnoredAndSaidSo) {
  api::CoordinatedJob job = Job(JobObject());
  Observed observed = With({}, std::nullopt);
  observed.kueue.reset();
  Plan plan = PlanJob(job, observed, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kPending);
  EXPECT_FALSE(Pods(plan).empty());
  EXPECT_TRUE(std::any_of(plan.events.begin(), plan.events.end(),
                          [](const PlannedEvent& e) { return e.reason == "QueueIgnored"; }));
  // A job without the label is not queued, with Kueue or without.
  Plan plain = PlanJob(Job(JobObject(2, "")), With({}, std::nullopt), OperatorSettings{});
  EXPECT_FALSE(Pods(plain).empty());
}

// The Kueue policy (PlanQueued) as a table: the job's phase, its pods and its Workload as Kueue
// left it -> what the plan makes, deletes and writes back, and the condition that says why.
enum class Wl {
  kNone,
  kCreated,
  kDeleting,
  kOldSpec,
  kAdmitted,
  kPreempted,
  kTimedOut,
  kReadmitted
};
enum class Gangs { kNone, kRunning, kWorkersSucceeded };

struct KueueCase {
  const char* name;
  // The job, its pods and its Workload.
  const char* job_phase;  // "": a new job
  Gangs pods;
  Wl workload;
  bool flavors;    // the admission's ResourceFlavor a100 exists
  bool h100_pods;  // the job's pods ask for another GPU model than the flavor's
  // What the plan does.
  const char* phase;
  const char* condition;  // the condition that explains it, and its reason
  const char* reason;
  bool makes_workload;
  bool makes_pods;
  size_t deletes_pods;
  bool writes_workload_status;
  bool releases_workload;
  bool deletes_workload;
  bool requeues;
};

// clang-format off: a row per case, its fields in the order of the struct.
const KueueCase kCases[] = {
    {"ANewJobGetsItsWorkloadAndWaits", "", Gangs::kNone, Wl::kNone, true, false, phase::kSuspended,
     kConditionSuspended, "Queued", true, false, 0, false, false, false, false},
    {"AWorkloadNotAdmittedYetKeepsTheJobQueued", phase::kSuspended, Gangs::kNone, Wl::kCreated,
     true, false, phase::kSuspended, kConditionSuspended, "Queued", false, false, 0, false, false,
     false, false},
    {"AWorkloadBeingDeletedIsWaitedOutAndReleased", phase::kSuspended, Gangs::kNone, Wl::kDeleting,
     true, false, phase::kSuspended, kConditionSuspended, "WorkloadDeleted", false, false, 0, false,
     true, false, false},
    {"AnAdmissionWhoseFlavorIsMissingWaitsForIt", phase::kSuspended, Gangs::kNone, Wl::kAdmitted,
     false, false, phase::kSuspended, kConditionSuspended, "AdmissionUnusable", false, false, 0,
     false, false, false, true},
    {"AnAdmittedJobStartsItsCoordinatorAndSaysPodsAreNotReady", phase::kSuspended, Gangs::kNone,
     Wl::kAdmitted, true, false, phase::kPending, kConditionSuspended, "Admitted", false, true, 0,
     true, false, false, false},
    {"AnAdmissionThatContradictsThePodsFailsTheJobAndFinishesTheWorkload", phase::kSuspended,
     Gangs::kNone, Wl::kAdmitted, true, true, phase::kFailed, kConditionFailed, "AdmissionConflict",
     false, false, 0, true, true, false, false},
    {"ARunningGangTellsKueueItsPodsAreReady", phase::kRunning, Gangs::kRunning, Wl::kAdmitted, true,
     false, phase::kRunning, kConditionReady, "AllWorkersReady", false, false, 0, true, false,
     false, false},
    {"AFinishedGangStopsItsCoordinatorAndFinishesAndReleasesItsWorkload", phase::kRunning,
     Gangs::kWorkersSucceeded, Wl::kAdmitted, true, false, phase::kSucceeded, kConditionSucceeded,
     "AllWorkersSucceeded", false, false, 1, true, true, false, false},
    {"AnEvictedGangIsStoppedWithoutARestart", phase::kRunning, Gangs::kRunning, Wl::kPreempted,
     true, false, phase::kSuspended, kConditionSuspended, "Evicted", false, false, 3, false, false,
     false, false},
    {"AnEvictedJobWithoutPodsGivesItsQuotaBack", phase::kSuspended, Gangs::kNone, Wl::kPreempted,
     true, false, phase::kSuspended, kConditionSuspended, "Evicted", false, false, 0, true, false,
     false, false},
    {"AJobEvictedForItsOwnTimeoutGivesItsQuotaBackToo", phase::kSuspended, Gangs::kNone,
     Wl::kTimedOut, true, false, phase::kSuspended, kConditionSuspended, "Evicted", false, false, 0,
     true, false, false, false},
    {"AJobAdmittedAgainStartsANewGang", phase::kSuspended, Gangs::kNone, Wl::kReadmitted, true,
     false, phase::kPending, kConditionSuspended, "Admitted", false, true, 0, true, false, false,
     false},
    {"AChangedJobStopsItsGangBeforeItsWorkloadIsReplaced", phase::kRunning, Gangs::kRunning,
     Wl::kOldSpec, true, false, phase::kSuspended, kConditionSuspended, "WorkloadReplaced", false,
     false, 3, false, false, false, false},
    {"AChangedJobWithoutPodsDeletesItsOldWorkload", phase::kSuspended, Gangs::kNone, Wl::kOldSpec,
     true, false, phase::kSuspended, kConditionSuspended, "WorkloadReplaced", false, false, 0,
     false, true, true, false},
};
// clang-format on

void PrintTo(const KueueCase& c, std::ostream* os) { *os << c.name; }

std::optional<json> WorkloadFor(const KueueCase& c, const api::CoordinatedJob& job) {
  json back;
  switch (c.workload) {
    case Wl::kNone:
      return std::nullopt;
    case Wl::kCreated:
      return Created(job);
    case Wl::kDeleting:
      back = Created(job);
      back["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z";
      return back;
    case Wl::kOldSpec:
      return Admitted(Created(Job(JobObject(/*replicas=*/1))));
    case Wl::kAdmitted:
      return Admitted(Created(job));
    case Wl::kPreempted:
      return Evicted(Admitted(Created(job)), "Preempted");
    case Wl::kTimedOut:
      return Evicted(Admitted(Created(job)), "PodsReadyTimeout");
    case Wl::kReadmitted:
      back = Admitted(Created(job));
      back["status"]["conditions"].push_back(Condition("Evicted", "False", "QuotaReserved"));
      return back;
  }
  return std::nullopt;
}

class KueuePolicyTest : public ::testing::TestWithParam<KueueCase> {};

TEST_P(KueuePolicyTest, Decides) {
  const KueueCase& c = GetParam();
  json object = JobObject();
  if (c.h100_pods) {
    object["spec"]["template"]["spec"]["nodeSelector"] = {{"gpu.example.com/model", "h100"}};
  }
  const api::CoordinatedJob job =
      std::string(c.job_phase).empty() ? Job(object) : WithStatus(object, c.job_phase);
  std::vector<ObservedPod> pods;
  if (c.pods != Gangs::kNone) pods = Gang();
  if (c.pods == Gangs::kWorkersSucceeded) {
    for (size_t i = 1; i < pods.size(); ++i) {
      pods[i].phase = "Succeeded";
      pods[i].exit_code = 0;
      pods[i].finished_at = kNow - absl::Seconds(1);
    }
  }
  const Plan plan = PlanJob(
      job, With(pods, WorkloadFor(c, job), c.flavors ? A100() : std::map<std::string, json>{}),
      OperatorSettings{});

  EXPECT_EQ(plan.status.phase, c.phase);
  const api::Condition* why = Find(plan, c.condition);
  ASSERT_NE(why, nullptr) << c.condition;
  EXPECT_EQ(why->reason, c.reason);
  const bool makes_workload = std::any_of(plan.create.begin(), plan.create.end(),
                                          [](const json& o) { return o["kind"] == "Workload"; });
  EXPECT_EQ(makes_workload, c.makes_workload);
  EXPECT_EQ(!Pods(plan).empty(), c.makes_pods);
  EXPECT_EQ(plan.delete_pods.size(), c.deletes_pods);
  EXPECT_EQ(plan.workload_status.has_value(), c.writes_workload_status);
  EXPECT_EQ(plan.release_workload, c.releases_workload);
  EXPECT_EQ(plan.delete_workload, c.deletes_workload);
  EXPECT_EQ(plan.requeue_after.has_value(), c.requeues);
}

INSTANTIATE_TEST_SUITE_P(Table, KueuePolicyTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kueue_plan_test
}  // namespace cohort::controller
