// spec.gangScheduling: the spec as read, and the PodGroup and pods PlanJob makes for it.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "operator/plan/job_plan.h"

// Its own namespace: the unity builds compile this file with others of its test.
namespace cohort::controller::pod_group_test {
namespace {

using json = nlohmann::json;

json JobObject(const json& gang) {
  json object = {
      {"apiVersion", "cohort.dev/v1alpha1"},
      {"kind", "CoordinatedJob"},
      {"metadata", {{"name", "gang"}, {"namespace", "ml"}, {"uid", "u1"}, {"generation", 1}}},
      {"spec",
       {{"replicas", 3},
        {"template",
         {{"spec", {{"containers", json::array({{{"name", "w"}, {"image", "example/w:1"}}})}}}}}}}};
  if (!gang.is_null()) object["spec"]["gangScheduling"] = gang;
  return object;
}

// Everything but the workers exists, and the coordinator is ready: the plan makes the workers.
Observed Ready() {
  Observed o;
  ObservedPod coordinator;
  coordinator.name = "gang-coordinator";
  coordinator.role = "coordinator";
  coordinator.restart = 0;
  coordinator.phase = "Running";
  coordinator.ready = true;
  coordinator.pod_ip = "10.0.0.1";
  o.pods.push_back(coordinator);
  o.token_secret = o.coordinator_config_map = o.coordinator_service = o.workers_service = true;
  auto job = api::ParseCoordinatedJob(JobObject(nullptr));
  o.network_policy = NetworkPolicy(*job, OperatorSettings{});
  o.now = absl::FromUnixSeconds(1'800'000'000);
  return o;
}

TEST(GangSchedulingTest, ReadsTheSpecAndRefusesWhatDoesNotFit) {
  auto job = api::ParseCoordinatedJob(
      JobObject({{"podGroup", "SchedulerPlugins"}, {"scheduleTimeoutSeconds", 30}}));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->spec.gang_scheduling.has_value());
  EXPECT_EQ(job->spec.gang_scheduling->pod_group, api::PodGroupKind::kSchedulerPlugins);
  EXPECT_EQ(job->spec.gang_scheduling->schedule_timeout_seconds, 30);
  EXPECT_FALSE(api::ParseCoordinatedJob(JobObject(nullptr))->spec.gang_scheduling.has_value());

  const std::vector<std::pair<json, std::string>> bad = {
      {{{"podGroup", "Kube"}}, "spec.gangScheduling.podGroup"},
      {{{"podGroup", "Kubernetes"}, {"queue", "q"}}, "spec.gangScheduling.queue"},
      {{{"podGroup", "Kubernetes"}, {"scheduleTimeoutSeconds", 30}},
       "spec.gangScheduling.scheduleTimeoutSeconds"},
      {json::object(), "spec.gangScheduling.podGroup"},
      {{{"podGroup", "Volcano"}, {"scheduleTimeoutSeconds", 30}},
       "spec.gangScheduling.scheduleTimeoutSeconds"},
      {{{"podGroup", "SchedulerPlugins"}, {"queue", "q"}}, "spec.gangScheduling.queue"},
      {{{"podGroup", "SchedulerPlugins"}, {"scheduleTimeoutSeconds", 0}},
       "spec.gangScheduling.scheduleTimeoutSeconds"},
      {{{"podGroup", "SchedulerPlugins"}, {"schedulerName", ""}},
       "spec.gangScheduling.schedulerName"},
      {"SchedulerPlugins", "spec.gangScheduling"},
  };
  for (const auto& [gang, field] : bad) {
    auto parsed = api::ParseCoordinatedJob(JobObject(gang));
    ASSERT_FALSE(parsed.ok()) << gang.dump();
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_EQ(parsed.status().message().substr(0, field.size()), field) << parsed.status();
  }
}

TEST(GangSchedulingTest, TheGangsPodsJoinOnePodGroupOfTheWholeGang) {
  auto job = api::ParseCoordinatedJob(
      JobObject({{"podGroup", "SchedulerPlugins"}, {"scheduleTimeoutSeconds", 30}}));
  Plan plan = PlanJob(*job, Ready(), OperatorSettings{});
  ASSERT_FALSE(plan.create.empty());
  const json& group = plan.create[0];
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(group["metadata"]["name"], "gang");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], "u1");
  EXPECT_EQ(group["spec"]["minMember"], 3) << "the workers";
  EXPECT_EQ(group["spec"]["scheduleTimeoutSeconds"], 30);
  int pods = 0;
  for (const json& o : plan.create) {
    if (o["kind"] != "Pod") continue;
    ++pods;
    EXPECT_EQ(o["metadata"]["labels"][kSchedulerPluginsPodGroupLabel], "gang");
    EXPECT_EQ(o["spec"]["schedulerName"], kSchedulerPluginsScheduler);
  }
  EXPECT_EQ(pods, 3);

  // Volcano's: an annotation, its scheduler, its queue.
  job = api::ParseCoordinatedJob(
      JobObject({{"podGroup", "Volcano"}, {"queue", "research"}, {"schedulerName", "vc"}}));
  plan = PlanJob(*job, Ready(), OperatorSettings{});
  EXPECT_EQ(plan.create[0]["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(plan.create[0]["spec"]["queue"], "research");
  for (const json& o : plan.create) {
    if (o["kind"] != "Pod") continue;
    EXPECT_EQ(o["metadata"]["annotations"][kVolcanoPodGroupAnnotation], "gang");
    EXPECT_EQ(o["spec"]["schedulerName"], "vc");
  }

  // The coordinator is placed on its own: the first plan makes it, and no PodGroup yet.
  Observed fresh = Ready();
  fresh.pods.clear();
  plan = PlanJob(*job, fresh, OperatorSettings{});
  int made = 0;
  for (const json& o : plan.create) {
    EXPECT_NE(o["kind"], "PodGroup");
    if (o["kind"] != "Pod") continue;
    ++made;
    EXPECT_EQ(o["metadata"]["labels"]["cohort.dev/role"], "coordinator");
    EXPECT_FALSE(o["spec"].contains("schedulerName"));
  }
  EXPECT_EQ(made, 1);

  // Without spec.gangScheduling, no PodGroup at all.
  job = api::ParseCoordinatedJob(JobObject(nullptr));
  plan = PlanJob(*job, Ready(), OperatorSettings{});
  for (const json& o : plan.create) {
    EXPECT_NE(o["kind"], "PodGroup");
    if (o["kind"] == "Pod") {
      EXPECT_FALSE(o["spec"].contains("schedulerName"));
    }
  }
}

// The PodGroup policy as a table: spec.gangScheduling and how far the job got -> the PodGroup
// the plan makes and how the workers it makes join it.
struct PodGroupCase {
  const char* name;
  json gang;               // spec.gangScheduling (null: none)
  bool coordinator_ready;  // false: a new job, nothing made yet
  // The PodGroup made first ("" apiVersion: none), and its spec.
  const char* api_version;
  json group_spec;
  // The pods made: how many, the scheduler the workers name ("": none), and where they say
  // which group they join (a label or an annotation).
  int pods;
  const char* scheduler;
  const char* label;
  const char* annotation;
};

// clang-format off: a row per case, its fields in the order of the struct.
const PodGroupCase kCases[] = {
    {"SchedulerPluginsWorkersJoinOneGroupOfTheWholeGang",
     {{"podGroup", "SchedulerPlugins"}, {"scheduleTimeoutSeconds", 30}},
     true,
     "scheduling.x-k8s.io/v1alpha1",
     {{"minMember", 3}, {"scheduleTimeoutSeconds", 30}},
     3,
     kSchedulerPluginsScheduler,
     kSchedulerPluginsPodGroupLabel,
     ""},
    {"SchedulerPluginsWithoutATimeoutLeavesItToTheScheduler",
     {{"podGroup", "SchedulerPlugins"}},
     true,
     "scheduling.x-k8s.io/v1alpha1",
     {{"minMember", 3}},
     3,
     kSchedulerPluginsScheduler,
     kSchedulerPluginsPodGroupLabel,
     ""},
    {"VolcanoWorkersNameTheGroupInAnAnnotationWithTheirQueue",
     {{"podGroup", "Volcano"}, {"queue", "research"}},
     true,
     "scheduling.volcano.sh/v1beta1",
     {{"minMember", 3}, {"queue", "research"}},
     3,
     kVolcanoScheduler,
     "",
     kVolcanoPodGroupAnnotation},
    {"ASchedulerNameOverridesTheDefault",
     {{"podGroup", "Volcano"}, {"schedulerName", "vc"}},
     true,
     "scheduling.volcano.sh/v1beta1",
     {{"minMember", 3}},
     3,
     "vc",
     "",
     kVolcanoPodGroupAnnotation},
    {"TheCoordinatorIsPlacedAloneBeforeAnyGroup",
     {{"podGroup", "SchedulerPlugins"}},
     false,
     "",
     nullptr,
     1,
     "",
     "",
     ""},
    {"WithoutGangSchedulingThereIsNoGroup", nullptr, true, "", nullptr, 3, "", "", ""},
};
// clang-format on

void PrintTo(const PodGroupCase& c, std::ostream* os) { *os << c.name; }

class PodGroupPolicyTest : public ::testing::TestWithParam<PodGroupCase> {};

TEST_P(PodGroupPolicyTest, Decides) {
  const PodGroupCase& c = GetParam();
  auto job = api::ParseCoordinatedJob(JobObject(c.gang));
  ASSERT_TRUE(job.ok()) << job.status();
  Observed observed = Ready();
  if (!c.coordinator_ready) observed.pods.clear();
  const Plan plan = PlanJob(*job, observed, OperatorSettings{});

  ASSERT_FALSE(plan.create.empty());
  const json& first = plan.create[0];
  if (std::string(c.api_version).empty()) {
    for (const json& o : plan.create) EXPECT_NE(o["kind"], "PodGroup");
  } else {
    EXPECT_EQ(first["kind"], "PodGroup");
    EXPECT_EQ(first["apiVersion"], c.api_version);
    EXPECT_EQ(first["metadata"]["name"], "gang");
    EXPECT_EQ(first["metadata"]["ownerReferences"][0]["uid"], "u1");
    EXPECT_EQ(first["spec"], c.group_spec);
  }
  int pods = 0;
  for (const json& o : plan.create) {
    if (o["kind"] != "Pod") continue;
    ++pods;
    const json& metadata = o["metadata"];
    const bool worker = metadata["labels"]["cohort.dev/role"] == "worker";
    // Only workers join: the coordinator is placed on its own, by the default scheduler.
    const std::string scheduler = worker ? c.scheduler : "";
    EXPECT_EQ(o["spec"].value("schedulerName", ""), scheduler) << metadata["name"];
    const std::string label = worker ? c.label : "";
    const std::string annotation = worker ? c.annotation : "";
    EXPECT_EQ(metadata["labels"].contains(kSchedulerPluginsPodGroupLabel), !label.empty());
    if (!label.empty()) {
      EXPECT_EQ(metadata["labels"][label], "gang");
    }
    EXPECT_EQ(metadata.contains("annotations") &&
                  metadata["annotations"].contains(kVolcanoPodGroupAnnotation),
              !annotation.empty());
    if (!annotation.empty()) {
      EXPECT_EQ(metadata["annotations"][annotation], "gang");
    }
  }
  EXPECT_EQ(pods, c.pods);
}

INSTANTIATE_TEST_SUITE_P(Table, PodGroupPolicyTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// podGroup Kubernetes: the cluster's own gang scheduling (scheduling.k8s.io).
OperatorSettings Serving(const std::string& api) {
  OperatorSettings settings;
  settings.kubernetes_scheduling_api = api;
  return settings;
}

std::vector<json> Workers(const Plan& plan) {
  std::vector<json> workers;
  for (const json& o : plan.create) {
    if (o["kind"] == "Pod" && o["metadata"]["labels"]["cohort.dev/role"] == "worker") {
      workers.push_back(o);
    }
  }
  return workers;
}

TEST(KubernetesGangSchedulingTest, AWorkloadAndItsPodGroupComeBeforeTheWorkersThatJoinIt) {
  auto job = api::ParseCoordinatedJob(JobObject({{"podGroup", "Kubernetes"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.gang_scheduling->pod_group, api::PodGroupKind::kKubernetes);
  const Plan plan = PlanJob(*job, Ready(), Serving("scheduling.k8s.io/v1beta1"));
  ASSERT_GE(plan.create.size(), 5u);
  const json& workload = plan.create[0];
  EXPECT_EQ(workload["apiVersion"], "scheduling.k8s.io/v1beta1");
  EXPECT_EQ(workload["kind"], "Workload");
  EXPECT_EQ(workload["metadata"]["name"], "gang");
  EXPECT_EQ(workload["metadata"]["ownerReferences"][0]["uid"], "u1");
  EXPECT_EQ(workload["spec"]["controllerRef"],
            json({{"apiGroup", "cohort.dev"}, {"kind", "CoordinatedJob"}, {"name", "gang"}}));
  EXPECT_EQ(
      workload["spec"]["podGroupTemplates"],
      json::array({{{"name", "workers"}, {"schedulingPolicy", {{"gang", {{"minCount", 3}}}}}}}));
  const json& group = plan.create[1];
  EXPECT_EQ(group["apiVersion"], "scheduling.k8s.io/v1beta1");
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["metadata"]["name"], "gang");
  EXPECT_EQ(group["metadata"]["labels"]["cohort.dev/job"], "gang") << "the operator watches it";
  EXPECT_EQ(group["spec"],
            json({{"workloadRef", {{"workloadName", "gang"}, {"templateName", "workers"}}},
                  {"schedulingPolicy", {{"gang", {{"minCount", 3}}}}}}));
  const std::vector<json> workers = Workers(plan);
  ASSERT_EQ(workers.size(), 3u);
  for (const json& w : workers) {
    EXPECT_EQ(w["spec"]["schedulingGroup"], json({{"podGroupName", "gang"}}));
    EXPECT_FALSE(w["spec"].contains("schedulerName")) << "the kube-scheduler, the template's";
  }
}

TEST(KubernetesGangSchedulingTest, TheGroupHasTheWorkersPriorityAndASchedulerNameIsKept) {
  json object = JobObject({{"podGroup", "Kubernetes"}, {"schedulerName", "second-scheduler"}});
  object["spec"]["template"]["spec"]["priorityClassName"] = "high";
  auto job = api::ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  Plan plan = PlanJob(*job, Ready(), Serving("scheduling.k8s.io/v1beta1"));
  EXPECT_EQ(plan.create[0]["spec"]["podGroupTemplates"][0]["priorityClassName"], "high");
  EXPECT_EQ(plan.create[1]["spec"]["priorityClassName"], "high")
      << "the kube-scheduler places a gang only when its pods' priority is the group's";
  for (const json& w : Workers(plan)) EXPECT_EQ(w["spec"]["schedulerName"], "second-scheduler");

  // 1.36's version: its own reference to the template, and no priority class (refused there
  // without the WorkloadAwarePreemption gate).
  plan = PlanJob(*job, Ready(), Serving("scheduling.k8s.io/v1alpha2"));
  EXPECT_EQ(plan.create[0]["apiVersion"], "scheduling.k8s.io/v1alpha2");
  EXPECT_FALSE(plan.create[0]["spec"]["podGroupTemplates"][0].contains("priorityClassName"));
  EXPECT_EQ(plan.create[1]["apiVersion"], "scheduling.k8s.io/v1alpha2");
  EXPECT_EQ(plan.create[1]["spec"],
            json({{"podGroupTemplateRef",
                   {{"workload", {{"workloadName", "gang"}, {"podGroupTemplateName", "workers"}}}}},
                  {"schedulingPolicy", {{"gang", {{"minCount", 3}}}}}}));
}

TEST(KubernetesGangSchedulingTest, AClusterThatServesNoWorkloadApiFailsTheJobSayingWhy) {
  auto job = api::ParseCoordinatedJob(JobObject({{"podGroup", "Kubernetes"}}));
  Observed fresh = Ready();
  fresh.pods.clear();
  const Plan plan = PlanJob(*job, fresh, OperatorSettings{});
  EXPECT_TRUE(plan.create.empty()) << plan.create.size();
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  const auto* failed = api::FindCondition(plan.status.conditions, kConditionFailed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "GangSchedulingUnavailable");
  EXPECT_NE(failed->message.find("GenericWorkload feature gate"), std::string::npos)
      << failed->message;
}

TEST(KubernetesGangSchedulingTest, TheSchedulersReasonForAGangItCannotPlaceIsTheJobsOnce) {
  auto job = api::ParseCoordinatedJob(JobObject({{"podGroup", "Kubernetes"}}));
  Observed o = Ready();
  for (int i = 0; i < 3; ++i) {
    ObservedPod w;
    w.name = "gang-worker-" + std::to_string(i);
    w.role = "worker";
    w.index = i;
    w.restart = 0;
    w.phase = "Pending";
    o.pods.push_back(w);
  }
  o.pod_group_scheduled = PodGroupScheduled{
      false, "Unschedulable", "minCount (3) cannot be satisfied: 2 scheduled, 1 remaining"};
  Plan plan = PlanJob(*job, o, Serving("scheduling.k8s.io/v1beta1"));
  const auto* ready = api::FindCondition(plan.status.conditions, kConditionReady);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, "Unschedulable");
  EXPECT_EQ(ready->message,
            "the kube-scheduler cannot place the gang (PodGroup gang, Unschedulable): minCount (3) "
            "cannot be satisfied: 2 scheduled, 1 remaining");
  const auto unschedulable = [](const Plan& p) {
    int n = 0;
    for (const PlannedEvent& e : p.events) {
      if (e.reason == "Unschedulable") {
        EXPECT_EQ(e.type, "Warning");
        ++n;
      }
    }
    return n;
  };
  EXPECT_EQ(unschedulable(plan), 1);

  job->status = plan.status;
  plan = PlanJob(*job, o, Serving("scheduling.k8s.io/v1beta1"));
  EXPECT_EQ(unschedulable(plan), 0) << "said once while the reason stays";

  o.pod_group_scheduled = PodGroupScheduled{true, "Scheduled", ""};
  plan = PlanJob(*job, o, Serving("scheduling.k8s.io/v1beta1"));
  EXPECT_EQ(api::FindCondition(plan.status.conditions, kConditionReady)->reason,
            "WaitingForWorkers");

  // A later gang: the group's condition stays True (it was placed once), and the scheduler's
  // verdict is on each pod that it does not place.
  for (ObservedPod& p : o.pods) {
    if (p.role == "worker")
      p.unschedulable = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.";
  }
  job->status = plan.status;
  plan = PlanJob(*job, o, Serving("scheduling.k8s.io/v1beta1"));
  ready = api::FindCondition(plan.status.conditions, kConditionReady);
  EXPECT_EQ(ready->reason, "Unschedulable");
  EXPECT_EQ(ready->message,
            "the kube-scheduler cannot place the gang (PodGroup gang; its worker gang-worker-0): "
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.");
  EXPECT_EQ(unschedulable(plan), 1);
}

TEST(KubernetesGangSchedulingTest, ThePodGroupsConditionIsReadInEitherVersion) {
  EXPECT_FALSE(ObservePodGroupScheduled(json::object()).has_value());
  EXPECT_FALSE(ObservePodGroupScheduled({{"status", {{"conditions", json::array()}}}}).has_value());
  auto got = ObservePodGroupScheduled(
      {{"status",
        {{"conditions", json::array({{{"type", "DisruptionTarget"}, {"status", "False"}},
                                     {{"type", "PodGroupInitiallyScheduled"},
                                      {"status", "False"},
                                      {"reason", "Unschedulable"},
                                      {"message", "minCount (5) cannot be satisfied"}}})}}}});
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->scheduled);
  EXPECT_EQ(got->reason, "Unschedulable");
  EXPECT_EQ(got->message, "minCount (5) cannot be satisfied");
  got = ObservePodGroupScheduled({{"status",
                                   {{"conditions", json::array({{{"type", "PodGroupScheduled"},
                                                                 {"status", "True"},
                                                                 {"reason", "Scheduled"}}})}}}});
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->scheduled) << "1.36's condition";
}

}  // namespace
}  // namespace cohort::controller::pod_group_test
