// spec.failurePolicy.rules and startupDeadlineSeconds: the spec as read, what ended a pod as
// rules name it, and PlanJob's decisions with them.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/failure_reason.h"
#include "operator/plan/job_plan.h"
#include "operator/plan/planner.h"

namespace cohort::controller {
// Its own namespace: the unity builds compile this file with others of its test.
namespace failure_rules_test {
namespace {

using json = nlohmann::json;
namespace phase = api::phase;
namespace reason = api::failure_reason;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

json JobObject(json failure_policy) {
  return {
      {"apiVersion", "cohort.dev/v1alpha1"},
      {"kind", "CoordinatedJob"},
      {"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "u1"}, {"generation", 1}}},
      {"spec",
       {{"replicas", 2},
        {"failurePolicy", failure_policy},
        {"template",
         {{"spec", {{"containers", json::array({{{"name", "w"}, {"image", "example/w:1"}}})}}}}}}}};
}

api::CoordinatedJob Running(json failure_policy, int restarts = 0, int uncounted = 0) {
  json object = JobObject(std::move(failure_policy));
  object["status"] = {{"phase", phase::kRunning},
                      {"restarts", restarts},
                      {"uncountedRestarts", uncounted},
                      {"startTime", api::FormatRfc3339(kNow - absl::Minutes(5))},
                      {"gangStartTime", api::FormatRfc3339(kNow - absl::Minutes(5))}};
  auto job = api::ParseCoordinatedJob(object);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

ObservedPod Pod(const std::string& name, const std::string& role, int index, int gang = 0) {
  ObservedPod p;
  p.name = name;
  p.role = role;
  p.index = index;
  p.restart = gang;
  p.phase = "Running";
  p.ready = true;
  p.pod_ip = "10.0.0.2";
  return p;
}

// The gang with worker 1 ended as `worker1` says.
Observed Gang(ObservedPod worker1, int gang = 0) {
  Observed o;
  o.pods = {Pod("train-coordinator", "coordinator", -1, gang),
            Pod("train-worker-0", "worker", 0, gang), std::move(worker1)};
  o.token_secret = o.coordinator_config_map = o.coordinator_service = o.workers_service = true;
  o.network_policy =
      NetworkPolicy(*api::ParseCoordinatedJob(JobObject(json::object())), OperatorSettings{});
  o.now = kNow;
  o.failure_first_seen = kNow - absl::Seconds(10);  // settled
  return o;
}

ObservedPod Exited(int code, const std::string& why = "Error", int gang = 0) {
  ObservedPod p = Pod("train-worker-1", "worker", 1, gang);
  p.phase = "Failed";
  p.ready = false;
  p.exit_code = code;
  p.reason = why;
  p.finished_at = kNow - absl::Seconds(5);
  return p;
}

const api::Condition* Find(const Plan& plan, const char* type) {
  return api::FindCondition(plan.status.conditions, type);
}

TEST(FailureRulesTest, RulesAreReadAndBadOnesRefusedNamingTheField) {
  auto job = api::ParseCoordinatedJob(
      JobObject({{"startupDeadlineSeconds", 600},
                 {"rules", json::array({{{"action", "RestartGangUncounted"},
                                         {"onReasons", json::array({"Evicted", "Preempted"})}},
                                        {{"action", "FailJob"}, {"onExitCodes", {3}}}})}}));
  ASSERT_TRUE(job.ok()) << job.status();
  const api::FailurePolicy& policy = job->spec.failure_policy;
  ASSERT_EQ(policy.rules.size(), 2u);
  EXPECT_EQ(policy.rules[0].action, api::FailureAction::kRestartGangUncounted);
  EXPECT_EQ(policy.rules[0].on_reasons, (std::vector<std::string>{"Evicted", "Preempted"}));
  EXPECT_EQ(policy.rules[1].on_exit_codes, std::vector<int>{3});
  EXPECT_EQ(policy.startup_deadline_seconds, 600);
  EXPECT_EQ(policy.progress_timeout, "");
  auto hangs = api::ParseCoordinatedJob(JobObject({{"progressTimeout", "2m30s"}}));
  ASSERT_TRUE(hangs.ok()) << hangs.status();
  EXPECT_EQ(hangs->spec.failure_policy.progress_timeout, "2m30s");

  const std::vector<std::pair<json, std::string>> bad = {
      {{{"rules", {{{"action", "Retry"}, {"onExitCodes", {1}}}}}},
       "spec.failurePolicy.rules[0].action"},
      {{{"rules", {{{"action", "FailJob"}}}}}, "spec.failurePolicy.rules[0]"},
      {{{"rules", {{{"action", "FailJob"}, {"onReasons", {"Sunspots"}}}}}},
       "spec.failurePolicy.rules[0].onReasons"},
      {{{"rules", {{{"action", "FailJob"}, {"onExitCodes", {0}}}}}},
       "spec.failurePolicy.rules[0].onExitCodes"},
      {{{"rules", "FailJob"}}, "spec.failurePolicy.rules"},
      {{{"startupDeadlineSeconds", 0}}, "spec.failurePolicy.startupDeadlineSeconds"},
      {{{"progressTimeout", "soon"}}, "spec.failurePolicy.progressTimeout"},
      {{{"progressTimeout", "0s"}}, "spec.failurePolicy.progressTimeout"},
      {{{"progressTimeout", 90}}, "spec.failurePolicy.progressTimeout"},
  };
  for (const auto& [policy_json, field] : bad) {
    auto parsed = api::ParseCoordinatedJob(JobObject(policy_json));
    ASSERT_FALSE(parsed.ok()) << policy_json.dump();
    EXPECT_EQ(parsed.status().message().substr(0, field.size()), field) << parsed.status();
  }
}

TEST(FailureRulesTest, WhatEndedAPodIsNamedAsRulesNameIt) {
  ObservedPod p;
  EXPECT_EQ(FailureReasonOf(p), "");
  p.reason = "OOMKilled";
  EXPECT_EQ(FailureReasonOf(p), reason::kOOMKilled);
  p.disruption = "PreemptionByScheduler";
  EXPECT_EQ(FailureReasonOf(p), reason::kPreempted) << "the disruption explains the exit";
  p.disruption = "EvictionByEvictionAPI";
  EXPECT_EQ(FailureReasonOf(p), reason::kEvicted);
  p.disruption = "DeletionByTaintManager";
  EXPECT_EQ(FailureReasonOf(p), reason::kNodeLost);
  p = ObservedPod{};
  p.pod_reason = "Evicted";  // the kubelet, under node pressure
  EXPECT_EQ(FailureReasonOf(p), reason::kEvicted);

  // A pod read from the API server as it carries them.
  ObservedPod read = ObservePod(
      {{"metadata", {{"name", "train-worker-1"}, {"labels", {{"cohort.dev/role", "worker"}}}}},
       {"spec", {{"restartPolicy", "Never"}}},
       {"status",
        {{"phase", "Pending"},
         {"conditions", json::array({{{"type", "DisruptionTarget"},
                                      {"status", "True"},
                                      {"reason", "PreemptionByScheduler"}},
                                     {{"type", "PodScheduled"},
                                      {"status", "False"},
                                      {"message", "0/1 nodes are available"}}})}}}});
  EXPECT_EQ(FailureReasonOf(read), reason::kPreempted);
  EXPECT_EQ(read.unschedulable, "0/1 nodes are available");
}

TEST(FailureRulesTest, AnEvictionRestartsTheGangWithoutCountingIt) {
  const json policy = {{"maxRestarts", 1},
                       {"rules", json::array({{{"action", "RestartGangUncounted"},
                                               {"onReasons", {"Evicted", "Preempted"}}}})}};
  ObservedPod evicted = Exited(-1, "Evicted", /*gang=*/1);
  evicted.pod_reason = "Evicted";
  // Already at maxRestarts: only an uncounted restart keeps the job going.
  Plan plan = PlanJob(Running(policy, /*restarts=*/1), Gang(evicted, 1), OperatorSettings{});
  ASSERT_EQ(plan.status.phase, phase::kRestarting)
      << (Find(plan, kConditionFailed) ? Find(plan, kConditionFailed)->message : "");
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  EXPECT_EQ(plan.status.Gang(), 2);
  EXPECT_EQ(plan.status.gang_start_time, kNow);
  EXPECT_NE(Find(plan, kConditionRestarting)->message.find("failurePolicy.rules[0]"),
            std::string::npos)
      << Find(plan, kConditionRestarting)->message;

  // The same failure without the rule counts, and maxRestarts ends the job.
  plan = PlanJob(Running({{"maxRestarts", 1}}, 1), Gang(evicted, 1), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Find(plan, kConditionFailed)->reason, "MaxRestartsExceeded");

  // The next gang's pods carry the gang number, counted and uncounted restarts together.
  api::CoordinatedJob restarted = Running(policy, 1, 1);
  Observed next = Gang(Pod("train-worker-1", "worker", 1, 2), 2);
  next.failure_first_seen.reset();
  plan = PlanJob(restarted, next, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_TRUE(plan.delete_pods.empty());
}

TEST(FailureRulesTest, AnEvictionSeenWhileThePodWasThereStillCountsOnceItIsGone) {
  const json policy = {
      {"maxRestarts", 0},
      {"rules", json::array({{{"action", "RestartGangUncounted"}, {"onReasons", {"Evicted"}}}})}};
  // First sight: the worker is being evicted (the eviction API marked it, then deleted it).
  ObservedPod leaving = Pod("train-worker-1", "worker", 1);
  leaving.terminating = true;
  leaving.disruption = "EvictionByEvictionAPI";
  Observed first = Gang(leaving);
  first.failure_first_seen.reset();
  Plan settling = PlanJob(Running(policy), first, OperatorSettings{});
  EXPECT_TRUE(settling.failure_seen);
  EXPECT_EQ(settling.failure_reasons, std::vector<std::string>{reason::kEvicted});
  EXPECT_EQ(settling.status.phase, phase::kRunning) << "it settles first";

  // Settled, the pod is gone: what the controller kept decides.
  Observed later = Gang(Pod("train-worker-1", "worker", 1));
  later.pods.pop_back();
  later.failure_reasons = settling.failure_reasons;
  Plan plan = PlanJob(Running(policy), later, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  EXPECT_EQ(plan.status.restarts, 0);

  // Without the memory, the pod's loss is all there is: PodDeleted, counted, and maxRestarts 0.
  later.failure_reasons.clear();
  plan = PlanJob(Running(policy), later, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
}

TEST(FailureRulesTest, RulesMatchInOrderOnExitCodesAndReasons) {
  const json policy = {
      {"rules", json::array({{{"action", "FailJob"}, {"onExitCodes", {42}}},
                             {{"action", "RestartGang"}, {"onExitCodes", {1}}},
                             {{"action", "FailJob"}, {"onReasons", {"OOMKilled"}}}})}};
  Plan plan = PlanJob(Running(policy), Gang(Exited(42)), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Find(plan, kConditionFailed)->reason, "FailureRule");
  EXPECT_NE(Find(plan, kConditionFailed)->message.find("rules[0] (FailJob on exit code 42)"),
            std::string::npos)
      << Find(plan, kConditionFailed)->message;

  // Exit 1 is permanent by default; the rule makes it restart the gang, counted.
  plan = PlanJob(Running(policy), Gang(Exited(1)), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.uncounted_restarts, 0);

  // 137 from the OOM killer is retryable by default; the rule fails the job.
  plan = PlanJob(Running(policy), Gang(Exited(137, "OOMKilled")), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_NE(Find(plan, kConditionFailed)->message.find("OOMKilled"), std::string::npos);

  // No rule matches: the exit code rule decides, as without rules.
  plan = PlanJob(Running(policy), Gang(Exited(137)), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
}

TEST(FailureRulesTest, ErrorsAtTheCoordinatorAreNamedByWhatTheyAre) {
  const json policy = {
      {"rules", json::array({{{"action", "RestartGangUncounted"}, {"onReasons", {"GPUFault"}}},
                             {{"action", "FailJob"}, {"onReasons", {"HeartbeatTimeout"}}}})}};
  Observed gpu = Gang(Pod("train-worker-1", "worker", 1));
  CoordinatorView view;
  view.registered = 2;
  view.errors.push_back({"/job:cohort_sidecar/task:1", true, 13,
                         "GPU 0 (GPU-1) of worker 1 is unhealthy: XID 79",
                         FailureReason::kGpuFault});
  gpu.coordinator = view;
  Plan plan = PlanJob(Running(policy), gpu, OperatorSettings{});
  EXPECT_EQ(plan.status.uncounted_restarts, 1);

  Observed silent = Gang(Pod("train-worker-1", "worker", 1));
  view.errors = {{"/job:worker/task:1", false, 14,
                  "/job:worker/task:1 (incarnation 7) sent no heartbeat for 31s, over the "
                  "heartbeat timeout of 30s",
                  FailureReason::kHeartbeatTimeout}};
  silent.coordinator = view;
  plan = PlanJob(Running(policy), silent, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Find(plan, kConditionFailed)->reason, "FailureRule");
}

TEST(FailureRulesTest, ATaskErrorIsTheFailureReasonOfItsTypeAlone) {
  const std::vector<std::pair<FailureReason, std::string>> cases = {
      {FailureReason::kGpuFault, api::failure_reason::kGPUFault},
      {FailureReason::kHeartbeatTimeout, api::failure_reason::kHeartbeatTimeout},
      {FailureReason::kHang, api::failure_reason::kHang},
      {FailureReason::kUnspecified, api::failure_reason::kTaskError},
      {FailureReason::kReportedError, api::failure_reason::kTaskError},
      {FailureReason::kWorkloadExit, api::failure_reason::kTaskError},
      {FailureReason::kTaskRestarted, api::failure_reason::kTaskError},
      {FailureReason::kRegisterTimeout, api::failure_reason::kTaskError},
      {FailureReason::kShutdownTimeout, api::failure_reason::kTaskError},
  };
  for (const auto& [reason, expected] : cases) {
    CoordinatorView::TaskError e{"/job:worker/task:1", false, 2, "something", reason};
    EXPECT_EQ(planning::TaskErrorReason(e), expected) << FailureReasonName(reason);
  }
  // Every reason has its case above.
  EXPECT_EQ(cases.size(), static_cast<size_t>(kLastFailureReason) + 1);
}

TEST(FailureRulesTest, NeitherTheCodeNorTheTextOfATaskErrorNamesItsReason) {
  // What the coordinator and the sidecar said before errors had types: now only a TaskError.
  const CoordinatorView::TaskError untyped[] = {
      {"/job:worker/task:1", false, 14,
       "/job:worker/task:1 (incarnation 7) sent no heartbeat for 31s, over the heartbeat "
       "timeout of 30s"},
      {"/job:sidecar/task:1", true, 13, "GPU 0 (GPU-1) of worker 1 is unhealthy: XID 79"},
  };
  for (const auto& e : untyped) {
    EXPECT_EQ(planning::TaskErrorReason(e), api::failure_reason::kTaskError) << e.message;
  }
  // A sidecar's UNAVAILABLE error is its workload's exit only when typed so.
  CoordinatorView::TaskError report{"/job:sidecar/task:1", true, 14, "worker 1 failed: exited"};
  EXPECT_FALSE(report.IsWorkloadExitReport());
  report.reason = FailureReason::kWorkloadExit;
  EXPECT_TRUE(report.IsWorkloadExitReport());
  CoordinatorView::TaskError silent_sidecar{"/job:sidecar/task:1", true, 14, "sent no heartbeat",
                                            FailureReason::kHeartbeatTimeout};
  EXPECT_FALSE(silent_sidecar.IsWorkloadExitReport());
}

TEST(FailureRulesTest, AHangAtTheCoordinatorMatchesARuleOnHang) {
  const json policy = {
      {"rules", json::array({{{"action", "RestartGangUncounted"}, {"onReasons", {"Hang"}}}})}};
  Observed hung = Gang(Pod("train-worker-1", "worker", 1));
  CoordinatorView view;
  view.registered = 2;
  view.errors.push_back({"/job:sidecar/task:1", true, 4,
                         "worker 1 made no progress: no progress for 10m", FailureReason::kHang});
  hung.coordinator = view;
  Plan plan = PlanJob(Running(policy), hung, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  EXPECT_EQ(plan.status.restarts, 0);
}

TEST(FailureRulesTest, RulesMayNameHangAndStraggler) {
  const json policy = {
      {"rules", json::array({{{"action", "FailJob"}, {"onReasons", {"Hang", "Straggler"}}}})}};
  auto job = api::ParseCoordinatedJob(JobObject(policy));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.failure_policy.rules[0].on_reasons,
            (std::vector<std::string>{"Hang", "Straggler"}));
}

TEST(FailureRulesTest, AGangThatDoesNotStartInTimeFailsTheJobSayingWhy) {
  json object = JobObject({{"startupDeadlineSeconds", 60}});
  object["status"] = {{"phase", phase::kPending},
                      {"startTime", api::FormatRfc3339(kNow - absl::Seconds(30))},
                      {"gangStartTime", api::FormatRfc3339(kNow - absl::Seconds(30))}};
  api::CoordinatedJob job = *api::ParseCoordinatedJob(object);
  ObservedPod pending = Pod("train-worker-1", "worker", 1);
  pending.phase = "Pending";
  pending.ready = false;
  pending.unschedulable = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.";
  Observed o = Gang(pending);
  o.failure_first_seen.reset();

  Plan early = PlanJob(job, o, OperatorSettings{});
  EXPECT_EQ(early.status.phase, phase::kPending);
  ASSERT_TRUE(early.requeue_after.has_value());
  EXPECT_LE(*early.requeue_after, absl::Seconds(30));

  o.now = kNow + absl::Seconds(31);
  Plan late = PlanJob(job, o, OperatorSettings{});
  EXPECT_EQ(late.status.phase, phase::kFailed);
  EXPECT_EQ(Find(late, kConditionFailed)->reason, "StartupDeadlineExceeded");
  EXPECT_NE(Find(late, kConditionFailed)
                ->message.find("worker 1 is Pending: 0/1 nodes are "
                               "available: 1 Insufficient nvidia.com/gpu"),
            std::string::npos)
      << Find(late, kConditionFailed)->message;

  // A running gang has no deadline any more.
  api::CoordinatedJob running = Running({{"startupDeadlineSeconds", 60}});
  Plan fine = PlanJob(running, Gang(Pod("train-worker-1", "worker", 1)), OperatorSettings{});
  EXPECT_EQ(fine.status.phase, phase::kRunning);
}

// A recoverable job whose rule restarts a failed worker alone (RestartWorker).
api::CoordinatedJob Recoverable(int max_restarts) {
  json object = JobObject({{"maxRestarts", max_restarts},
                           {"rules", json::array({{{"action", "RestartWorker"},
                                                   {"onExitCodes", {3}},
                                                   {"onReasons", {"Evicted"}}}})}});
  object["spec"]["coordinator"] = {{"recoverable", true}};
  object["status"] = {{"phase", phase::kRunning},
                      {"restarts", 0},
                      {"startTime", api::FormatRfc3339(kNow - absl::Minutes(5))},
                      {"gangStartTime", api::FormatRfc3339(kNow - absl::Minutes(5))}};
  auto job = api::ParseCoordinatedJob(object);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

TEST(FailureRulesTest, RestartWorkerNeedsARecoverableGangOfAFrameworkThatRejoins) {
  json object =
      JobObject({{"rules", json::array({{{"action", "RestartWorker"}, {"onExitCodes", {3}}}})}});
  auto parsed = api::ParseCoordinatedJob(object);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("spec.coordinator.recoverable"), std::string::npos)
      << parsed.status();
  object["spec"]["coordinator"] = {{"recoverable", true}};
  EXPECT_TRUE(api::ParseCoordinatedJob(object).ok());
  object["spec"]["framework"] = "jax";
  parsed = api::ParseCoordinatedJob(object);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("jaxlib"), std::string::npos) << parsed.status();
  object["spec"]["framework"] = "generic";
  object["spec"]["coordinator"]["recoverable"] = "yes";
  parsed = api::ParseCoordinatedJob(object);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message().substr(0, 27), "spec.coordinator.recoverabl");

  // The coordinator lets the workload's and the sidecars' tasks register again, and the
  // workload is told it may.
  api::CoordinatedJob job = Recoverable(3);
  const std::string config = CoordinatorConfigMap(job)["data"]["coordinator.yaml"];
  EXPECT_NE(config.find("recoverable-job: [\"worker\", \"sidecar\"]"), std::string::npos) << config;
  bool told = false;
  const json pod = WorkerPod(job, 0, 0, OperatorSettings{});
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "COHORT_RECOVERABLE") told = e["value"] == "true";
  }
  EXPECT_TRUE(told);
}

TEST(FailureRulesTest, AWorkerRestartedAloneIsReplacedWhileTheGangRunsOnUntilItRejoins) {
  api::CoordinatedJob job = Recoverable(2);
  ObservedPod failed = Exited(3);
  failed.uid = "old-1";
  Observed o = Gang(failed);
  o.coordinator = CoordinatorView{
      1,
      {{"/job:sidecar/task:1", true, 14, "workload exited", FailureReason::kWorkloadExit}},
      std::nullopt,
      {{0, 100}, {1, 111}},
      {}};
  Plan plan = PlanJob(job, o, OperatorSettings{});
  ASSERT_EQ(plan.status.phase, phase::kRunning)
      << (Find(plan, kConditionFailed) ? Find(plan, kConditionFailed)->message : "");
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.worker_restarts, 1);
  EXPECT_EQ(plan.status.Gang(), 0) << "the gang is the same";
  ASSERT_EQ(plan.status.restarting_workers.size(), 1u);
  EXPECT_EQ(plan.status.restarting_workers[0], (api::RestartingWorker{1, "old-1", "111"}));
  EXPECT_EQ(plan.delete_pods, std::vector<std::string>{"train-worker-1"})
      << "worker 0 and the coordinator stay";
  EXPECT_FALSE(plan.failure_seen);
  ASSERT_FALSE(plan.events.empty());
  EXPECT_EQ(plan.events.back().reason, "WorkerRestart");
  EXPECT_NE(
      plan.events.back().message.find("failurePolicy.rules[0] (RestartWorker on exit code 3)"),
      std::string::npos)
      << plan.events.back().message;
  // The status survives its round trip through the API server.
  json written = job.object;
  written["status"] = api::StatusToJson(plan.status);
  EXPECT_EQ(api::ParseCoordinatedJob(written)->status, plan.status);

  // The failed pod going, then gone: no failure of the gang, and its successor is made with the
  // same name, in the same gang.
  job.status = plan.status;
  Observed going = Gang(failed);
  going.pods[2].terminating = true;
  going.failure_first_seen.reset();
  going.coordinator = o.coordinator;
  plan = PlanJob(job, going, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_FALSE(plan.failure_seen);
  EXPECT_TRUE(plan.create.empty()) << "not while the old pod is there";
  Observed gone = going;
  gone.pods.pop_back();
  plan = PlanJob(job, gone, OperatorSettings{});
  EXPECT_FALSE(plan.failure_seen);
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  ASSERT_EQ(plan.create.size(), 1u);
  EXPECT_EQ(plan.create[0]["metadata"]["name"], "train-worker-1");
  EXPECT_EQ(plan.create[0]["metadata"]["labels"]["cohort.dev/restart"], "0");

  // The successor runs; until its task is connected anew the entry stays (the old incarnation
  // is still connected, the sidecar's report still there).
  ObservedPod successor = Pod("train-worker-1", "worker", 1);
  successor.uid = "new-1";
  Observed back = Gang(successor);
  back.failure_first_seen.reset();
  back.coordinator = o.coordinator;
  plan = PlanJob(job, back, OperatorSettings{});
  EXPECT_FALSE(plan.failure_seen) << "the old task's error is the restart's";
  EXPECT_EQ(plan.status.restarting_workers.size(), 1u);
  back.coordinator = CoordinatorView{2, {}, std::nullopt, {{0, 100}, {1, 222}}, {}};
  plan = PlanJob(job, back, OperatorSettings{});
  EXPECT_TRUE(plan.status.restarting_workers.empty());
  EXPECT_EQ(plan.events.back().reason, "WorkerRejoined");
  EXPECT_EQ(plan.status.worker_restarts, 1);
  {
    // A successor that failed before it connected anew is no longer restarting, but it did
    // not rejoin: no such Event (its exit is the gang's failure to handle).
    ObservedPod failed_successor = successor;
    failed_successor.phase = "Failed";
    Observed ended = Gang(failed_successor);
    ended.coordinator = CoordinatorView{2, {}, std::nullopt, {{0, 100}, {1, 111}}, {}};
    ASSERT_EQ(job.status.restarting_workers.size(), 1u);
    auto failed_plan = PlanJob(job, ended, OperatorSettings{});
    EXPECT_TRUE(failed_plan.status.restarting_workers.empty());
    for (const auto& event : failed_plan.events) EXPECT_NE(event.reason, "WorkerRejoined");
  }

  // Worker restarts count against maxRestarts: a second and a third failure pass it.
  job.status = plan.status;
  ObservedPod again = Exited(3);
  again.uid = "new-1";
  plan = PlanJob(job, Gang(again), OperatorSettings{});
  EXPECT_EQ(plan.status.worker_restarts, 2);
  job.status = plan.status;
  job.status.restarting_workers.clear();
  plan = PlanJob(job, Gang(again), OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Find(plan, kConditionFailed)->reason, "MaxRestartsExceeded");

  // A lost coordinator is no worker's failure: the gang restarts.
  Observed lost = Gang(Exited(3));
  lost.pods.erase(lost.pods.begin());
  plan = PlanJob(Recoverable(2), lost, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.worker_restarts, 0);
}

TEST(SpecChangeTest, AChangedSpecMakesACleanNewGangAndANewConfiguration) {
  api::CoordinatedJob old_job = Running(json::object());
  const std::string old_hash = SpecHash(old_job);
  // Pods and the configuration carry the spec they are made from.
  EXPECT_EQ(
      WorkerPod(old_job, 0, 0, OperatorSettings{})["metadata"]["annotations"][kSpecHashAnnotation],
      old_hash);
  EXPECT_EQ(CoordinatorConfigMap(old_job)["metadata"]["annotations"][kSpecHashAnnotation],
            old_hash);

  json changed = JobObject(json::object());
  changed["spec"]["replicas"] = 3;
  changed["status"] = old_job.object["status"];
  api::CoordinatedJob job = *api::ParseCoordinatedJob(changed);
  EXPECT_NE(SpecHash(job), old_hash);
  // What takes effect as it is leaves the hash alone.
  json policy_only = JobObject({{"maxRestarts", 9}});
  EXPECT_EQ(SpecHash(*api::ParseCoordinatedJob(policy_only)), old_hash);

  Observed o = Gang(Pod("train-worker-1", "worker", 1));
  for (ObservedPod& p : o.pods) p.spec_hash = old_hash;
  o.failure_first_seen.reset();
  o.coordinator_config_hash = old_hash;
  o.coordinator_config_version = "41";
  Plan plan = PlanJob(job, o, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Find(plan, kConditionRestarting)->reason, "SpecChanged");
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.uncounted_restarts, 1);
  EXPECT_EQ(plan.delete_pods.size(), 3u);
  EXPECT_TRUE(plan.update.empty()) << "not while the old coordinator runs";

  // The old gang gone: the configuration is written anew, then the next coordinator made.
  api::CoordinatedJob restarting = job;
  restarting.status = plan.status;
  Observed between = o;
  between.pods.clear();
  plan = PlanJob(restarting, between, OperatorSettings{});
  ASSERT_EQ(plan.update.size(), 1u);
  EXPECT_EQ(plan.update[0]["kind"], "ConfigMap");
  EXPECT_EQ(plan.update[0]["metadata"]["resourceVersion"], "41");
  EXPECT_NE(plan.update[0]["data"]["coordinator.yaml"].get<std::string>().find("worker=3"),
            std::string::npos);
  bool coordinator = false;
  for (const json& c : plan.create) {
    if (c["kind"] == "Pod") {
      coordinator = true;
      EXPECT_EQ(c["metadata"]["labels"]["cohort.dev/restart"], "1");
    }
  }
  EXPECT_TRUE(coordinator);

  // Pods made before operators marked them are left alone.
  Observed unmarked = Gang(Pod("train-worker-1", "worker", 1));
  unmarked.failure_first_seen.reset();
  unmarked.coordinator_config_hash = SpecHash(job);
  plan = PlanJob(Running(json::object()), unmarked, OperatorSettings{});
  EXPECT_EQ(plan.status.phase, phase::kRunning);
}

}  // namespace
}  // namespace failure_rules_test
}  // namespace cohort::controller
