// PlanJob, the operator's decisions, as tables of (job, what exists) -> (what to do, status).
#include "operator/plan/job_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller {
namespace {

using json = nlohmann::json;
namespace phase = api::phase;

TEST(JobPlanTest, NewJobCreatesTokenPolicyConfigServicesThenTheCoordinatorButNoWorkersYet) {
  Observed o;
  o.now = kNow;
  o.fresh_token = "f00d";
  Plan plan = PlanJob(Job(), o, Settings());
  // No pod before the job's NetworkPolicy exists.
  EXPECT_EQ(Names(plan.create),
            (std::vector<std::string>{"Secret/train-token", "NetworkPolicy/train-isolation",
                                      "ConfigMap/train-coordinator", "Service/train-coordinator",
                                      "Service/train-workers"}));
  EXPECT_EQ(TokenOf(plan.create[0]), "f00d");
  EXPECT_EQ(plan.create[1], NetworkPolicy(Job(), Settings()));
  EXPECT_EQ(Cond(plan, kConditionReady)->message, "waiting for the NetworkPolicy train-isolation");
  // Once it does, the coordinator.
  Observed next = Everything({});
  Plan then = PlanJob(Job(3, phase::kPending), next, Settings());
  EXPECT_EQ(Names(then.create), (std::vector<std::string>{"Pod/train-coordinator"}));
  EXPECT_EQ(plan.status.phase, phase::kPending);
  EXPECT_EQ(plan.status.tasks.total, 3);
  EXPECT_EQ(plan.status.coordinator_address, "train-coordinator.ml.svc:8476");
  EXPECT_EQ(plan.status.start_time, kNow);
  EXPECT_EQ(plan.status.observed_generation, 2);
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "Pending");
}

TEST(JobPlanTest, AJobsTokenSecretIsKeptOnceItExistsAndMadeAgainIfDeleted) {
  // An operator restarted mid-job, or a gang restart: the Secret is there, nothing new is made
  // whatever fresh token the controller offers.
  Observed kept = Everything({Coordinator(), Worker(0), Worker(1), Worker(2)});
  kept.fresh_token = "unused";
  Plan plan = PlanJob(Job(3, phase::kRunning), kept, Settings());
  EXPECT_TRUE(plan.create.empty()) << ::testing::PrintToString(Names(plan.create));
  Plan restart = PlanJob(Job(3, phase::kRestarting, 1), kept, Settings());
  for (const auto& name : Names(restart.create)) EXPECT_NE(name, "Secret/train-token");

  Observed deleted = kept;
  deleted.token_secret = false;
  deleted.fresh_token = "beef";
  Plan again = PlanJob(Job(3, phase::kRunning), deleted, Settings());
  ASSERT_EQ(Names(again.create), (std::vector<std::string>{"Secret/train-token"}));
  EXPECT_EQ(TokenOf(again.create[0]), "beef");
}

TEST(JobPlanTest, AJobRunsWithTlsWhenItsSecretWasMadeWithCertificates) {
  JobCertificates certs{"-----BEGIN CERTIFICATE-----ca", "-----BEGIN CERTIFICATE-----c",
                        "-----BEGIN PRIVATE KEY-----c", "-----BEGIN CERTIFICATE-----l",
                        "-----BEGIN PRIVATE KEY-----l"};
  OperatorSettings off = Settings();
  off.network_policy = false;  // the coordinator pod in the first plan
  off.job_tls = "operator";
  Observed o;
  o.now = kNow;
  o.fresh_token = "f00d";
  o.fresh_certificates = certs;
  Plan plan = PlanJob(Job(), o, off);
  ASSERT_EQ(Names(plan.create),
            (std::vector<std::string>{"Secret/train-token", "ConfigMap/train-coordinator",
                                      "Service/train-coordinator", "Service/train-workers",
                                      "Pod/train-coordinator"}));
  EXPECT_EQ(CertificatesOf(plan.create[0])->ca_cert, certs.ca_cert);
  EXPECT_NE(plan.create[1]["data"]["coordinator.yaml"].get<std::string>().find("tls-client-ca"),
            std::string::npos);
  EXPECT_EQ(plan.create[4], CoordinatorPod(Job(), 0, kNow, off, JobTls::kOperator));

  // Later passes follow the Secret, whatever the controller offers.
  Observed with_tls = Everything({Coordinator()});
  with_tls.token_secret_tls = JobTls::kOperator;
  Plan workers = PlanJob(Job(3, phase::kPending), with_tls, Settings());
  ASSERT_FALSE(workers.create.empty());
  EXPECT_EQ(workers.create[0], WorkerPod(Job(), 0, 0, Settings(), JobTls::kOperator));
  Observed without = Everything({Coordinator()});
  without.fresh_certificates = certs;  // not used: the Secret exists, made without TLS
  Plan plain = PlanJob(Job(3, phase::kPending), without, Settings());
  ASSERT_FALSE(plain.create.empty());
  EXPECT_EQ(plain.create[0], WorkerPod(Job(), 0, 0, Settings()));
}

TEST(JobPlanTest, WithCertManagerNoPodStartsBeforeItsCertificatesAreIssued) {
  OperatorSettings settings = Settings();
  settings.network_policy = false;  // else the policy comes first
  settings.job_tls = "cert-manager";
  settings.job_tls_issuer = "ClusterIssuer/cohort-ca";
  Observed o;
  o.now = kNow;
  o.fresh_token = "f00d";
  Plan plan = PlanJob(Job(), o, settings);
  ASSERT_EQ(Names(plan.create),
            (std::vector<std::string>{"Secret/train-token", "Certificate/train-coordinator-tls",
                                      "Certificate/train-client-tls", "ConfigMap/train-coordinator",
                                      "Service/train-coordinator", "Service/train-workers"}));
  EXPECT_EQ(TlsModeOf(plan.create[0]), JobTls::kCertManager);
  EXPECT_FALSE(CertificatesOf(plan.create[0]));  // the Secret holds the token only
  EXPECT_NE(plan.create[3]["data"]["coordinator.yaml"].get<std::string>().find(
                "tls-client-name: train.ml.client.cohort.dev\n"),
            std::string::npos);
  ASSERT_TRUE(plan.requeue_after);
  const api::Condition* ready = Cond(plan, "Ready");
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->message,
            "waiting for cert-manager to issue Secrets train-coordinator-tls and "
            "train-client-tls (Certificates of the same names, from ClusterIssuer/cohort-ca)");

  // The Secret exists, cert-manager has not issued yet: still no pod; the Certificates are
  // asked for again (an existing one is left as it is).
  Observed waiting = o;
  waiting.token_secret = true;
  waiting.token_secret_tls = JobTls::kCertManager;
  waiting.coordinator_config_map = waiting.coordinator_service = waiting.workers_service = true;
  Plan still = PlanJob(Job(), waiting, settings);
  EXPECT_EQ(Names(still.create), (std::vector<std::string>{"Certificate/train-coordinator-tls",
                                                           "Certificate/train-client-tls"}));
  // Issued: the coordinator starts, with cert-manager's Secrets projected next to the token.
  Observed issued = waiting;
  issued.certificates_issued = true;
  Plan go = PlanJob(Job(), issued, settings);
  ASSERT_EQ(Names(go.create), (std::vector<std::string>{"Pod/train-coordinator"}));
  EXPECT_EQ(go.create[0], CoordinatorPod(Job(), 0, kNow, settings, JobTls::kCertManager));
  // A job made under another mode keeps it: the operator's switch to cert-manager changes
  // no running job.
  Observed plain = Everything({Coordinator()});
  Plan workers = PlanJob(Job(3, phase::kPending), plain, settings);
  ASSERT_FALSE(workers.create.empty());
  EXPECT_EQ(workers.create[0], WorkerPod(Job(), 0, 0, settings));
}

TEST(JobPlanTest, ANetworkPolicyChangedBySomeoneIsWrittenBack) {
  Observed changed = Everything({Coordinator(), Worker(0), Worker(1), Worker(2)});
  (*changed.network_policy)["spec"]["ingress"].push_back(json::object());  // "allow everything"
  Plan plan = PlanJob(Job(3, phase::kRunning), changed, Settings());
  ASSERT_EQ(plan.update.size(), 1u);
  json want = NetworkPolicy(Job(), Settings());
  want["metadata"]["resourceVersion"] = "7";  // conditional on the version it read
  EXPECT_EQ(plan.update[0], want);
  EXPECT_TRUE(plan.create.empty()) << ::testing::PrintToString(Names(plan.create));
  EXPECT_FALSE(plan.delete_network_policy);
  ASSERT_EQ(EventReasons(plan), (std::vector<std::string>{"NetworkPolicyRestored"}));
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_EQ(plan.events[0].message,
            "NetworkPolicy train-isolation differed from the operator's; its spec is written back");

  // Labels or annotations someone added are no reason to write it.
  Observed labelled = Everything({Coordinator(), Worker(0), Worker(1), Worker(2)});
  (*labelled.network_policy)["metadata"]["labels"]["team"] = "ml";
  EXPECT_TRUE(PlanJob(Job(3, phase::kRunning), labelled, Settings()).update.empty());
}

TEST(JobPlanTest, WithoutNetworkPoliciesNoneIsMadeAndTheOldOneIsDeleted) {
  OperatorSettings off;
  off.network_policy = false;
  Observed o;
  o.now = kNow;
  o.fresh_token = "f00d";
  Plan fresh = PlanJob(Job(), o, off);
  EXPECT_EQ(Names(fresh.create),
            (std::vector<std::string>{"Secret/train-token", "ConfigMap/train-coordinator",
                                      "Service/train-coordinator", "Service/train-workers",
                                      "Pod/train-coordinator"}));
  EXPECT_FALSE(fresh.delete_network_policy);

  Plan old = PlanJob(Job(3, phase::kRunning),
                     Everything({Coordinator(), Worker(0), Worker(1), Worker(2)}), off);
  EXPECT_TRUE(old.delete_network_policy);
  EXPECT_TRUE(old.create.empty());
  EXPECT_TRUE(old.update.empty());
}

TEST(JobPlanTest, NewOperatorSettingsReachTheNetworkPolicyOfARunningJob) {
  OperatorSettings moved;
  moved.metrics_namespace = "prometheus";
  Plan plan = PlanJob(Job(3, phase::kRunning),
                      Everything({Coordinator(), Worker(0), Worker(1), Worker(2)}), moved);
  ASSERT_EQ(plan.update.size(), 1u);
  EXPECT_EQ(plan.update[0]["spec"], NetworkPolicy(Job(), moved)["spec"]);
}

TEST(JobPlanTest, WorkersAreCreatedOnceTheCoordinatorIsReady) {
  Plan waiting = PlanJob(Job(3, phase::kPending), Everything({Coordinator(0, false)}), Settings());
  EXPECT_TRUE(waiting.create.empty());
  EXPECT_EQ(Cond(waiting, kConditionReady)->message, "waiting for the coordinator pod to be ready");

  Plan ready = PlanJob(Job(3, phase::kPending), Everything({Coordinator(), Worker(1)}), Settings());
  EXPECT_EQ(Names(ready.create),
            (std::vector<std::string>{"Pod/train-worker-0", "Pod/train-worker-2"}));
}

TEST(JobPlanTest, PlanningTwiceOnTheSameInputPlansTheSame) {
  const auto job = Job(3, phase::kPending);
  const auto observed = Everything({Coordinator(), Worker(0)});
  Plan a = PlanJob(job, observed, Settings());
  Plan b = PlanJob(job, observed, Settings());
  EXPECT_EQ(a.create, b.create);
  EXPECT_EQ(a.delete_pods, b.delete_pods);
  EXPECT_EQ(a.status, b.status);
}

TEST(JobPlanTest, AllWorkersRunningMakesTheJobRunning) {
  Plan plan = PlanJob(Job(2, phase::kPending), Everything({Coordinator(), Worker(0), Worker(1)}),
                      Settings());
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_EQ(Cond(plan, kConditionReady)->status, "True");
  EXPECT_EQ(plan.status.tasks.ready, 2);
}

TEST(JobPlanTest, CoordinatorViewGivesRegisteredTasks) {
  Observed o = Everything({Coordinator(), Worker(0), Worker(1)});
  o.coordinator = CoordinatorView{2, {}, std::nullopt, {}, {}};
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.tasks.registered, 2);
  EXPECT_FALSE(plan.failure_seen);
}

TEST(JobPlanTest, EveryWorkerExitingZeroSucceedsAndStopsTheCoordinatorOnly) {
  Plan plan = PlanJob(Job(2, phase::kRunning),
                      Everything({Coordinator(), Exited(0, 0), Exited(1, 0)}), Settings());
  EXPECT_EQ(plan.status.phase, phase::kSucceeded);
  EXPECT_EQ(plan.status.completion_time, kNow);
  EXPECT_EQ(Cond(plan, kConditionSucceeded)->reason, "AllWorkersSucceeded");
  EXPECT_EQ(plan.delete_pods, std::vector<std::string>{"train-coordinator"});
  EXPECT_EQ(plan.status.tasks.succeeded, 2);
}

TEST(JobPlanTest, Worker0PolicySucceedsWhenWorker0ExitsZero) {
  auto job = Job(3, phase::kRunning);
  job.spec.success_policy = api::SuccessPolicy::kWorker0;
  Plan plan =
      PlanJob(job, Everything({Coordinator(), Exited(0, 0), Worker(1), Worker(2)}), Settings());
  EXPECT_EQ(plan.status.phase, phase::kSucceeded);
  EXPECT_EQ(Cond(plan, kConditionSucceeded)->reason, "Worker0Succeeded");
  // The coordinator goes once the other workers have stopped.
  EXPECT_EQ(Sorted(plan.delete_pods),
            (std::vector<std::string>{"train-worker-1", "train-worker-2"}));
}

TEST(JobPlanTest, AFailureWaitsToSettleBeforeDeciding) {
  Observed o = Everything({Coordinator(), Exited(0, 137), Worker(1)});
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_TRUE(plan.failure_seen);
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_TRUE(plan.delete_pods.empty());
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_EQ(*plan.requeue_after, absl::Seconds(1));
}

TEST(JobPlanTest, ARetryableExitRestartsTheGang) {
  Observed o = Everything({Coordinator(), Exited(0, 137), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "WorkerFailed");
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: worker 0 exited with code 137 (signal 9)");
  EXPECT_EQ(Sorted(plan.delete_pods),
            (std::vector<std::string>{"train-coordinator", "train-worker-0", "train-worker-1"}));
  EXPECT_TRUE(plan.create.empty());
  ASSERT_FALSE(plan.events.empty());
  EXPECT_EQ(plan.events.back().reason, "GangRestart");
}

TEST(JobPlanTest, APermanentExitFailsTheJob) {
  Observed o = Everything({Coordinator(), Exited(0, 1), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Cond(plan, kConditionFailed)->reason, "WorkerFailed");
  EXPECT_EQ(Cond(plan, kConditionFailed)->message,
            "worker 0 exited with code 1, which failurePolicy counts as permanent");
  EXPECT_EQ(plan.status.restarts, 0);
  // The still running worker is stopped; the failed worker stays; the coordinator goes once
  // the running worker's workload has stopped (its sidecar would hold its last calls for a
  // coordinator that is gone).
  EXPECT_EQ(plan.delete_pods, (std::vector<std::string>{"train-worker-1"}));
  Observed later = Everything({Coordinator(), Exited(0, 1), Exited(1, 143)});
  plan = PlanJob(Job(2, phase::kFailed), later, Settings());
  EXPECT_EQ(plan.delete_pods, (std::vector<std::string>{"train-coordinator"}));
}

TEST(JobPlanTest, PeersExitingOneAfterAKilledWorkerStillRestart) {
  // Worker 1 was killed; within the same second its peers stop because their coordination
  // client told them a task failed, and exit 1 (what jaxlib and the cohort agent do).
  Observed o = Everything({Coordinator(), Exited(0, 1, kNow - absl::Milliseconds(4300)),
                           Exited(1, 137, kNow - absl::Seconds(5)),
                           Exited(2, 1, kNow - absl::Milliseconds(4200))});
  o.failure_first_seen = kNow - absl::Seconds(4);
  Plan plan = PlanJob(Job(3, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: worker 1 exited with code 137 (signal 9)");
}

TEST(JobPlanTest, AnExitLongAfterThePermanentOneDoesNotMatter) {
  Observed o = Everything({Coordinator(), Exited(0, 2, kNow - absl::Seconds(10)),
                           Exited(1, 143, kNow - absl::Seconds(3))});
  o.failure_first_seen = kNow - absl::Seconds(9);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kFailed);
}

TEST(JobPlanTest, ExitCodeListsOverrideTheDefaultRule) {
  auto job = Job(2, phase::kRunning);
  job.spec.failure_policy.retryable_exit_codes = {3};
  job.spec.failure_policy.permanent_exit_codes = {137};
  Observed retry = Everything({Coordinator(), Exited(0, 3), Worker(1)});
  retry.failure_first_seen = kNow - absl::Seconds(2);
  EXPECT_EQ(PlanJob(job, retry, Settings()).status.phase, phase::kRestarting);
  Observed fail = Everything({Coordinator(), Exited(0, 137), Worker(1)});
  fail.failure_first_seen = kNow - absl::Seconds(2);
  EXPECT_EQ(PlanJob(job, fail, Settings()).status.phase, phase::kFailed);
}

TEST(JobPlanTest, RestartsStopAtMaxRestarts) {
  auto job = Job(2, phase::kRunning, /*restarts=*/3);
  Observed o =
      Everything({Coordinator(3), Exited(0, 137, kNow - absl::Seconds(5), 3), Worker(1, 3)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(job, o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(plan.status.restarts, 3);
  EXPECT_EQ(Cond(plan, kConditionFailed)->reason, "MaxRestartsExceeded");
}

TEST(JobPlanTest, ATaskInErrorAtTheCoordinatorRestartsTheGang) {
  Observed o = Everything({Coordinator(), Worker(0), Worker(1)});
  o.coordinator = CoordinatorView{1,
                                  {{"/job:sidecar/task:1", true, 14, "sent no heartbeat for 30s",
                                    FailureReason::kHeartbeatTimeout}},
                                  std::nullopt,
                                  {},
                                  {}};
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "TaskError");
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: the sidecar task /job:sidecar/task:1 is in error: sent "
            "no heartbeat for 30s");
}

TEST(JobPlanTest, PeersExitingOneAfterAGpuFaultStillRestart) {
  // The coordinator told every task of the GPU fault; they all stopped with exit 1.
  Observed o = Everything({Coordinator(), Exited(0, 1), Exited(1, 1)});
  o.coordinator = CoordinatorView{
      0,
      {{"/job:sidecar/task:1", true, 13, "GPU 0 reported XID 79", FailureReason::kGpuFault}},
      std::nullopt,
      {},
      {}};
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "TaskError");
}

TEST(JobPlanTest, ASidecarsReportOfAPermanentExitStillFailsTheJob) {
  // The sidecar saw worker 0's workload exit 1 and reported it (reason workload_exit); the
  // exit code decides, not the report.
  Observed o = Everything({Coordinator(), Exited(0, 1), Exited(1, 1)});
  o.coordinator = CoordinatorView{
      0,
      {{"/job:sidecar/task:0", true, 14, "/job:worker/task:0 failed: workload exited",
        FailureReason::kWorkloadExit}},
      std::nullopt,
      {},
      {}};
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Cond(plan, kConditionFailed)->reason, "WorkerFailed");
}

TEST(JobPlanTest, ALostCoordinatorRestartsTheGang) {
  Observed o = Everything({Worker(0), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "CoordinatorLost");
}

TEST(JobPlanTest, WorkersExitingAfterTheirCoordinatorWasDeletedRestartTheGang) {
  // The coordinator pod is deleted; its workers lose their coordination service and exit 1,
  // which alone failurePolicy counts as permanent. The loss came first, so it decides.
  ObservedPod coordinator = Coordinator();
  coordinator.terminating = true;
  coordinator.deletion_requested_at = kNow - absl::Milliseconds(3000);
  Observed o = Everything({coordinator, Exited(0, 1, kNow - absl::Milliseconds(2900)),
                           Exited(1, 1, kNow - absl::Milliseconds(2800))});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "CoordinatorLost");
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: the coordinator pod train-coordinator was deleted");
}

TEST(JobPlanTest, WorkersExitingAfterTheirCoordinatorExitedRestartTheGang) {
  ObservedPod coordinator = Coordinator();
  coordinator.phase = "Failed";
  coordinator.exit_code = 137;
  coordinator.finished_at = kNow - absl::Seconds(3);
  Observed o = Everything({coordinator, Exited(0, 1, kNow - absl::Milliseconds(2500)), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: the coordinator exited with code 137");
}

TEST(JobPlanTest, APermanentExitWellBeforeTheCoordinatorWentAwayStillFailsTheJob) {
  ObservedPod coordinator = Coordinator();
  coordinator.terminating = true;
  coordinator.deletion_requested_at = kNow - absl::Seconds(4);
  Observed o = Everything({coordinator, Exited(0, 3, kNow - absl::Seconds(10)), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(9);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Cond(plan, kConditionFailed)->message,
            "worker 0 exited with code 3, which failurePolicy counts as permanent");
}

TEST(JobPlanTest, ADeletedWorkerRestartsTheGang) {
  ObservedPod deleted = Worker(1);
  deleted.terminating = true;
  Observed o = Everything({Coordinator(), Worker(0), deleted});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Job(2, phase::kRunning), o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "WorkerLost");
  // The pod already terminating is not deleted twice.
  EXPECT_EQ(Sorted(plan.delete_pods),
            (std::vector<std::string>{"train-coordinator", "train-worker-0"}));
}

TEST(JobPlanTest, TheNextGangStartsOnlyAfterTheOldPodsAreGone) {
  ObservedPod old_coordinator = Coordinator(0);
  old_coordinator.terminating = true;
  ObservedPod old_worker = Worker(0, 0);
  Plan plan =
      PlanJob(Job(2, phase::kRestarting, 1), Everything({old_coordinator, old_worker}), Settings());
  EXPECT_EQ(plan.delete_pods, std::vector<std::string>{"train-worker-0"});
  EXPECT_TRUE(plan.create.empty());  // the coordinator's name is still taken
  EXPECT_EQ(plan.status.phase, phase::kRestarting);

  Plan next = PlanJob(Job(2, phase::kRestarting, 1), Everything({}), Settings());
  ASSERT_EQ(Names(next.create), std::vector<std::string>{"Pod/train-coordinator"});
  EXPECT_EQ(next.create[0]["metadata"]["labels"]["cohort.dev/restart"], "1");
}

TEST(JobPlanTest, TheRestartedGangRunningClearsRestarting) {
  auto job = Job(1, phase::kRestarting, 1);
  api::SetCondition(&job.status.conditions, kConditionRestarting, "True", "WorkerFailed", "x",
                    kNow - absl::Minutes(1), 2);
  Plan plan = PlanJob(job, Everything({Coordinator(1), Worker(0, 1)}), Settings());
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->status, "False");
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "Recovered");
}

TEST(JobPlanTest, TheDeadlineFailsTheJob) {
  auto job = Job(1, phase::kRunning);
  job.spec.active_deadline_seconds = 30;  // started a minute ago
  Plan plan = PlanJob(job, Everything({Coordinator(), Worker(0)}), Settings());
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Cond(plan, kConditionFailed)->reason, "DeadlineExceeded");
  EXPECT_EQ(Sorted(plan.delete_pods), (std::vector<std::string>{"train-worker-0"}));

  job.spec.active_deadline_seconds = 90;
  Plan later = PlanJob(job, Everything({Coordinator(), Worker(0)}), Settings());
  EXPECT_EQ(later.status.phase, phase::kRunning);
  ASSERT_TRUE(later.requeue_after.has_value());
  EXPECT_EQ(*later.requeue_after, absl::Seconds(30));
}

TEST(JobPlanTest, SuspendDeletesEveryPodAndResumeStartsAgain) {
  auto job = Job(2, phase::kRunning);
  job.spec.suspend = true;
  Plan plan = PlanJob(job, Everything({Coordinator(), Worker(0), Exited(1, 0)}), Settings());
  EXPECT_EQ(plan.status.phase, phase::kSuspended);
  EXPECT_EQ(Cond(plan, kConditionSuspended)->status, "True");
  EXPECT_EQ(plan.delete_pods.size(), 3u);
  EXPECT_TRUE(plan.create.empty());

  auto resumed = Job(2, phase::kSuspended);
  Plan resume = PlanJob(resumed, Everything({}), Settings());
  EXPECT_EQ(resume.status.phase, phase::kPending);
  EXPECT_EQ(resume.status.start_time, kNow);
  EXPECT_EQ(Names(resume.create), std::vector<std::string>{"Pod/train-coordinator"});
}

TEST(JobPlanTest, TtlDeletesTheFinishedJobWhenItExpires) {
  auto job = Job(1, phase::kSucceeded);
  job.spec.ttl_seconds_after_finished = 60;
  job.status.completion_time = kNow - absl::Seconds(20);
  Plan waiting = PlanJob(job, Everything({}), Settings());
  EXPECT_FALSE(waiting.delete_job);
  EXPECT_EQ(*waiting.requeue_after, absl::Seconds(40));
  job.status.completion_time = kNow - absl::Seconds(61);
  EXPECT_TRUE(PlanJob(job, Everything({}), Settings()).delete_job);
}

TEST(JobPlanTest, FinishedJobsChangeNothing) {
  auto job = Job(2, phase::kFailed);
  Plan plan = PlanJob(job, Everything({Exited(0, 1), Exited(1, 1)}), Settings());
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_TRUE(plan.create.empty());
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_TRUE(plan.events.empty());
}

TEST(JobPlanTest, PodsOfAnotherGangOrIndexAreDeleted) {
  ObservedPod stray = Worker(5);  // replicas went down to 2
  Plan plan = PlanJob(Job(2, phase::kRunning, 1),
                      Everything({Coordinator(1), Worker(0, 1), Worker(1, 0), stray}), Settings());
  EXPECT_EQ(Sorted(plan.delete_pods),
            (std::vector<std::string>{"train-worker-1", "train-worker-5"}));
}

TEST(JobPlanTest, ACoordinatorRestartedInPlaceIsCountedWithoutAGangRestart) {
  const auto job = Known(Job(2, phase::kRunning));
  Observed o = Everything({KnownCoordinator(1, kNow - absl::Seconds(4)), Worker(0), Worker(1)});
  Plan plan = PlanJob(job, o, Settings());
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.coordinator_restarts, 1);
  EXPECT_EQ(plan.status.coordinator_pod.container_restarts, 1);
  EXPECT_EQ(plan.status.coordinator_pod.last_restart_time, kNow - absl::Seconds(4));
  EXPECT_FALSE(plan.failure_seen);
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_TRUE(plan.create.empty());
  ASSERT_EQ(EventReasons(plan), std::vector<std::string>{"CoordinatorRestarted"});
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_EQ(plan.events[0].message,
            "the coordinator's container restarted in place (1 time in pod train-coordinator) "
            "and keeps its state on its EmptyDir volume; the gang goes on");

  // Reconciled again with that status written: counted once.
  auto written = job;
  written.status = plan.status;
  Plan again = PlanJob(written, o, Settings());
  EXPECT_EQ(again.status.coordinator_restarts, 1);
  EXPECT_TRUE(again.events.empty());
}

TEST(JobPlanTest, ACoordinatorBetweenACrashAndItsRestartInPlaceIsNotLost) {
  ObservedPod down = KnownCoordinator();
  down.ready = false;
  down.last_exit_at = kNow - absl::Seconds(1);  // terminated, waiting for its restart
  Plan plan =
      PlanJob(Known(Job(2, phase::kRunning)), Everything({down, Worker(0), Worker(1)}), Settings());
  EXPECT_FALSE(plan.failure_seen);
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(plan.status.coordinator_restarts, 0);  // counted once the restart count says so
}

TEST(JobPlanTest, ANewCoordinatorPodIsRememberedWithTheRestartsItHadAlready) {
  ObservedPod fresh = KnownCoordinator(0);
  fresh.uid = "c2";
  Plan plan =
      PlanJob(Known(Job(1, phase::kRunning), 3), Everything({fresh, Worker(0)}), Settings());
  EXPECT_EQ(plan.status.coordinator_pod.uid, "c2");
  EXPECT_EQ(plan.status.coordinator_pod.container_restarts, 0);
  EXPECT_EQ(plan.status.coordinator_restarts, 0);
  EXPECT_TRUE(plan.events.empty());

  fresh.restart_count = 2;  // restarted twice before the operator first saw it
  Plan missed = PlanJob(Known(Job(1, phase::kRunning)), Everything({fresh, Worker(0)}), Settings());
  EXPECT_EQ(missed.status.coordinator_restarts, 2);
}

TEST(JobPlanTest, ACoordinatorPodDeletedWithItsStateOnAClaimIsMadeAgainOnIt) {
  const auto job =
      Known(WithState(Job(2, phase::kRunning), api::StateVolume::kPersistentVolumeClaim));
  ObservedPod deleting = KnownCoordinator();
  deleting.terminating = true;
  deleting.deletion_requested_at = kNow - absl::Seconds(1);
  Observed o = Everything({deleting, Worker(0), Worker(1)});
  o.coordinator_state_claim = true;
  Plan plan = PlanJob(job, o, Settings());
  EXPECT_FALSE(plan.failure_seen);
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.coordinator_restarts, 1);
  EXPECT_EQ(plan.status.coordinator_pod.uid, "");
  EXPECT_EQ(plan.status.coordinator_pod.last_restart_time, kNow - absl::Seconds(1));
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_TRUE(plan.create.empty());  // its name is still taken
  ASSERT_EQ(EventReasons(plan), std::vector<std::string>{"CoordinatorRestarted"});
  EXPECT_EQ(plan.events[0].message,
            "the coordinator pod train-coordinator was deleted; a new one starts on "
            "PersistentVolumeClaim train-coordinator-state, which holds its state; the gang "
            "goes on");

  // Gone: the same gang's coordinator is made again, and the restart is not counted twice.
  auto written = job;
  written.status = plan.status;
  Observed gone = Everything({Worker(0), Worker(1)});
  gone.coordinator_state_claim = true;
  Plan next = PlanJob(written, gone, Settings());
  EXPECT_FALSE(next.failure_seen);
  EXPECT_EQ(next.status.coordinator_restarts, 1);
  ASSERT_EQ(Names(next.create), std::vector<std::string>{"Pod/train-coordinator"});
  EXPECT_EQ(next.create[0]["metadata"]["labels"]["cohort.dev/restart"], "0");
  EXPECT_EQ(next.create[0]["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"],
            "train-coordinator-state");
  EXPECT_TRUE(next.events.empty());
}

std::string StateSubPath(const Plan& plan) {
  for (const auto& o : plan.create) {
    if (o["kind"] != "Pod" || o["metadata"]["name"] != "train-coordinator") continue;
    for (const auto& m : o["spec"]["containers"][0]["volumeMounts"]) {
      if (m["name"] == "state") return m["subPath"];
    }
  }
  return "";
}

TEST(JobPlanTest, EachGangAndEachResumeKeepsItsStateApartWithinTheGangItStays) {
  auto job = WithState(Job(1, phase::kRunning), api::StateVolume::kPersistentVolumeClaim);
  Observed o = Everything({Worker(0)});
  o.coordinator_state_claim = true;
  // Started a minute ago (Job()); the same gang's pod made again finds the same directory.
  EXPECT_EQ(StateSubPath(PlanJob(job, o, Settings())),
            CoordinatorStateSubPath(kNow - absl::Minutes(1), 0));
  EXPECT_EQ(CoordinatorStateSubPath(kNow, 3), "20270115T080000Z-gang-3");

  auto restarted =
      WithState(Job(1, phase::kRestarting, 1), api::StateVolume::kPersistentVolumeClaim);
  Observed none = Everything({});
  none.coordinator_state_claim = true;
  EXPECT_EQ(StateSubPath(PlanJob(restarted, none, Settings())),
            CoordinatorStateSubPath(kNow - absl::Minutes(1), 1));

  auto resumed = WithState(Job(1, phase::kSuspended), api::StateVolume::kPersistentVolumeClaim);
  EXPECT_EQ(StateSubPath(PlanJob(resumed, none, Settings())), CoordinatorStateSubPath(kNow, 0));
}

TEST(JobPlanTest, AnEvictedCoordinatorOnAClaimIsDeletedAndMadeAgain) {
  ObservedPod evicted = KnownCoordinator();
  evicted.phase = "Failed";
  evicted.exit_code = -1;
  evicted.reason = "Evicted";
  Observed o = Everything({evicted, Worker(0)});
  o.coordinator_state_claim = true;
  Plan plan =
      PlanJob(Known(WithState(Job(1, phase::kRunning), api::StateVolume::kPersistentVolumeClaim)),
              o, Settings());
  EXPECT_FALSE(plan.failure_seen);
  EXPECT_EQ(plan.status.coordinator_restarts, 1);
  EXPECT_EQ(plan.delete_pods, std::vector<std::string>{"train-coordinator"});
  EXPECT_EQ(plan.events[0].message.rfind("the coordinator pod train-coordinator failed;", 0), 0u)
      << plan.events[0].message;
}

TEST(JobPlanTest, ALostCoordinatorPodWithItsStateInAnEmptyDirRestartsTheGang) {
  ObservedPod deleting = KnownCoordinator();
  deleting.terminating = true;
  Observed o = Everything({deleting, Worker(0), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Known(Job(2, phase::kRunning)), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.coordinator_restarts, 0);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "CoordinatorLost");
  // The next gang's coordinator is a new pod.
  EXPECT_EQ(plan.status.coordinator_pod, api::CoordinatorPodStatus{});
}

TEST(JobPlanTest, ALostCoordinatorWhoseClaimIsGoneTooRestartsTheGang) {
  Observed o = Everything({Worker(0), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan =
      PlanJob(Known(WithState(Job(2, phase::kRunning), api::StateVolume::kPersistentVolumeClaim)),
              o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.coordinator_restarts, 0);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: the coordinator pod train-coordinator was deleted and "
            "its PersistentVolumeClaim train-coordinator-state is gone");
}

TEST(JobPlanTest, ANewJobWithItsStateOnAClaimCreatesTheClaimBeforeTheCoordinator) {
  Observed o;
  o.now = kNow;
  o.network_policy = NetworkPolicy(Job(), Settings());
  Plan plan = PlanJob(WithState(Job(), api::StateVolume::kPersistentVolumeClaim), o, Settings());
  EXPECT_EQ(Names(plan.create),
            (std::vector<std::string>{"Secret/train-token", "ConfigMap/train-coordinator",
                                      "Service/train-coordinator", "Service/train-workers",
                                      "PersistentVolumeClaim/train-coordinator-state",
                                      "Pod/train-coordinator"}));

  o.coordinator_state_claim = o.coordinator_state_claim_terminating = true;
  o.token_secret = o.coordinator_config_map = o.coordinator_service = o.workers_service = true;
  Plan held = PlanJob(WithState(Job(), api::StateVolume::kPersistentVolumeClaim), o, Settings());
  EXPECT_TRUE(held.create.empty());  // not on a claim that is going away
}

TEST(JobPlanTest, WorkersExitingAfterTheirCoordinatorRestartedInPlaceRestartTheGang) {
  // Until the sidecar proxy rides out the outage, jaxlib workers exit 1 when their coordinator
  // restarts; that exit is not theirs to decide on.
  Observed o = Everything({KnownCoordinator(1, kNow - absl::Seconds(3)),
                           Exited(0, 1, kNow - absl::Milliseconds(2500)),
                           Exited(1, 1, kNow - absl::Milliseconds(2400))});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Known(Job(2, phase::kRunning)), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.coordinator_restarts, 1);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "CoordinatorRestarted");
  EXPECT_EQ(Cond(plan, kConditionRestarting)->message,
            "gang restart 1 of at most 3: worker 0 exited with code 1 after the coordinator "
            "restarted");
  EXPECT_EQ(EventReasons(plan), (std::vector<std::string>{"CoordinatorRestarted", "GangRestart"}));
}

TEST(JobPlanTest, AKilledWorkerAfterACoordinatorRestartIsStillNamedTheCause) {
  Observed o = Everything({KnownCoordinator(1, kNow - absl::Seconds(3)),
                           Exited(0, 137, kNow - absl::Milliseconds(2500)), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Known(Job(2, phase::kRunning), 1), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "WorkerFailed");
}

TEST(JobPlanTest, AWorkerExitWhileTheCoordinatorIsDownRestartsTheGang) {
  ObservedPod down = KnownCoordinator();
  down.ready = false;
  down.last_exit_at = kNow - absl::Seconds(3);
  Observed o = Everything({down, Exited(0, 1, kNow - absl::Milliseconds(2900)), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(Known(Job(2, phase::kRunning)), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "CoordinatorRestarted");
}

TEST(JobPlanTest, AWorkerExitLongAfterACoordinatorRestartIsTheWorkersOwn) {
  auto job = Known(Job(2, phase::kRunning), 1);
  job.status.coordinator_restarts = 1;
  job.status.coordinator_pod.last_restart_time = kNow - absl::Minutes(5);
  Observed o = Everything({KnownCoordinator(1, kNow - absl::Minutes(5)),
                           Exited(0, 1, kNow - absl::Seconds(3)), Worker(1)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(job, o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(Cond(plan, kConditionFailed)->reason, "WorkerFailed");
  // A permanent exit well before the coordinator went away is the worker's own too.
  job.status.coordinator_pod.last_restart_time = kNow - absl::Seconds(1);
  Observed before = Everything({KnownCoordinator(1, kNow - absl::Seconds(1)),
                                Exited(0, 1, kNow - absl::Seconds(4)), Worker(1)});
  before.failure_first_seen = kNow - absl::Seconds(3);
  EXPECT_EQ(PlanJob(job, before, Settings()).status.phase, phase::kFailed);
}

TEST(JobPlanTest, WithoutAStateVolumeACoordinatorExitStillRestartsTheGang) {
  ObservedPod exited = Coordinator();
  exited.phase = "Failed";
  exited.exit_code = 137;
  exited.finished_at = kNow - absl::Seconds(3);
  Observed o = Everything({exited, Worker(0)});
  o.failure_first_seen = kNow - absl::Seconds(2);
  Plan plan = PlanJob(WithState(Job(1, phase::kRunning), api::StateVolume::kNone), o, Settings());
  ASSERT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(Cond(plan, kConditionRestarting)->reason, "CoordinatorLost");
  EXPECT_EQ(plan.status.coordinator_restarts, 0);
}

TEST(ObservePodTest, FieldsOfUnexpectedTypesReadAsAbsentAndThrowNothing) {
  // The coordinated_job fuzzer's first find: a number where an object was read threw.
  for (const char* text : {"5", "[]", R"({"metadata": 5, "status": "x"})",
                           R"({"metadata": {"name": 7, "labels": [1], "deletionTimestamp": 3},
            "spec": {"restartPolicy": 1, "containers": [7]},
            "status": {"phase": 3, "conditions": [1, {"type": 2}],
                       "containerStatuses": [{"name": 5}, 4]}})"}) {
    SCOPED_TRACE(text);
    ObservedPod p;
    EXPECT_NO_THROW(p = ObservePod(json::parse(text)));
    EXPECT_EQ(p.name, "");
    EXPECT_EQ(p.phase, "");
    EXPECT_EQ(p.index, -1);
    EXPECT_FALSE(p.exit_code.has_value());
  }
}

TEST(ObservePodTest, ACoordinatorThatRestartsInPlaceHasNoExitButItsLastExitTime) {
  json pod = json::parse(R"({
    "metadata": {"name": "train-coordinator", "uid": "c1",
      "labels": {"cohort.dev/role": "coordinator", "cohort.dev/restart": "0"}},
    "spec": {"restartPolicy": "Always", "containers": [{"name": "coordinator"}]},
    "status": {"phase": "Running",
      "containerStatuses": [{"name": "coordinator", "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 137, "finishedAt": "2026-11-22T10:00:05Z"}}}]}})");
  ObservedPod p = ObservePod(pod);
  EXPECT_EQ(p.uid, "c1");
  EXPECT_TRUE(p.restarts_in_place);
  EXPECT_EQ(p.restart_count, 2);
  EXPECT_FALSE(p.exit_code.has_value());
  EXPECT_EQ(p.last_exit_at, api::ParseRfc3339("2026-11-22T10:00:05Z"));

  pod["status"]["containerStatuses"][0]["state"] = {
      {"terminated", {{"exitCode", 1}, {"finishedAt", "2026-11-22T10:01:00Z"}}}};
  p = ObservePod(pod);
  EXPECT_FALSE(p.exit_code.has_value());
  EXPECT_EQ(p.last_exit_at, api::ParseRfc3339("2026-11-22T10:01:00Z"));
}

TEST(ObservePodTest, ReadsTheWorkloadContainersExit) {
  json pod = json::parse(R"({
    "metadata": {"name": "train-worker-1", "labels": {"cohort.dev/role": "worker",
      "cohort.dev/task-index": "1", "cohort.dev/restart": "2"}},
    "spec": {"restartPolicy": "Never", "containers": [{"name": "worker"}],
             "initContainers": [{"name": "cohort-sidecar"}]},
    "status": {"phase": "Running", "podIP": "10.244.0.9",
      "conditions": [{"type": "Ready", "status": "False"}],
      "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 137,
        "reason": "OOMKilled", "finishedAt": "2026-11-22T10:00:05Z"}}}]}})");
  ObservedPod p = ObservePod(pod);
  EXPECT_EQ(p.role, "worker");
  EXPECT_EQ(p.index, 1);
  EXPECT_EQ(p.restart, 2);
  EXPECT_EQ(p.pod_ip, "10.244.0.9");
  EXPECT_FALSE(p.ready);
  ASSERT_TRUE(p.exit_code.has_value());
  EXPECT_EQ(*p.exit_code, 137);
  EXPECT_EQ(p.reason, "OOMKilled");
  EXPECT_EQ(p.finished_at, api::ParseRfc3339("2026-11-22T10:00:05Z"));
}

TEST(ObservePodTest, ADeletionRequestIsTheDeletionTimestampLessTheGracePeriod) {
  json pod = {{"metadata",
               {{"name", "train-coordinator"},
                {"deletionTimestamp", "2026-11-22T10:00:35Z"},
                {"deletionGracePeriodSeconds", 30}}}};
  ObservedPod p = ObservePod(pod);
  EXPECT_TRUE(p.terminating);
  EXPECT_EQ(p.deletion_requested_at, api::ParseRfc3339("2026-11-22T10:00:05Z"));
  EXPECT_FALSE(ObservePod({{"metadata", {{"name", "p"}}}}).deletion_requested_at.has_value());
}

TEST(ObservePodTest, AnEvictedPodHasNoExitCodeButFailed) {
  json pod = {{"metadata", {{"name", "p"}, {"deletionTimestamp", "2026-11-22T10:00:05Z"}}},
              {"status", {{"phase", "Failed"}, {"reason", "Evicted"}}}};
  ObservedPod p = ObservePod(pod);
  EXPECT_TRUE(p.terminating);
  EXPECT_EQ(p.exit_code, -1);
  EXPECT_EQ(p.reason, "Evicted");
  EXPECT_EQ(p.role, "");
  EXPECT_EQ(p.index, -1);
}

// The sidecar's container in a worker pod of `job`.
json SidecarOf(const json& pod) {
  for (const json& c : pod["spec"]["initContainers"]) {
    if (c["name"] == kSidecarContainer) return c;
  }
  ADD_FAILURE() << "no sidecar in " << pod.dump();
  return json::object();
}
std::string EnvOf(const json& container, const std::string& name) {
  for (const json& e : container.value("env", json::array())) {
    if (e["name"] == name) return e.value("value", "");
  }
  return "<unset>";
}

// The sidecar's argument that follows `flag` ("<absent>" without it).
std::string ArgOf(const json& container, const std::string& flag) {
  const json& args = container["args"];
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
  }
  return "<absent>";
}

TEST(JobPlanTest, AProgressTimeoutReachesTheSidecarAndStackDumpsLetItTraceTheWorkload) {
  api::CoordinatedJob job = Job();
  json pod = WorkerPod(job, 0, 0, Settings());
  json sidecar = SidecarOf(pod);
  // The progress file is in every pod, where the workload and the sidecar both see it.
  EXPECT_EQ(EnvOf(pod["spec"]["containers"][0], "COHORT_PROGRESS_FILE"),
            "/var/run/cohort/progress");
  EXPECT_EQ(EnvOf(sidecar, "COHORT_PROGRESS_FILE"), "/var/run/cohort/progress");
  EXPECT_EQ(ArgOf(sidecar, "--progress-timeout"), "<absent>");
  EXPECT_EQ(sidecar["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(sidecar["securityContext"]["capabilities"], json({{"drop", {"ALL"}}}));

  job.spec.failure_policy.progress_timeout = "90s";
  job.spec.sidecar.stack_dumps = true;
  sidecar = SidecarOf(WorkerPod(job, 0, 0, Settings()));
  EXPECT_EQ(ArgOf(sidecar, "--progress-timeout"), "90s");
  EXPECT_EQ(ArgOf(sidecar, "--workload-liveness"), "process");  // the pid to trace
  EXPECT_EQ(sidecar["securityContext"]["runAsUser"], 0);
  EXPECT_EQ(sidecar["securityContext"]["runAsNonRoot"], false);
  EXPECT_EQ(sidecar["securityContext"]["capabilities"],
            json({{"drop", {"ALL"}}, {"add", {"SYS_PTRACE"}}}));
  EXPECT_EQ(sidecar["securityContext"]["allowPrivilegeEscalation"], false);
}

TEST(JobPlanTest, TheSidecarIsGivenThePodsGpusAsTheClusterAllows) {
  // The device plugin: the sidecar is told how many to expect, and sees none unless the
  // operator gives it the node's and the kubelet's socket (visible-devices).
  api::CoordinatedJob job = Job();
  job.spec.pod_template["spec"]["containers"][0]["resources"] = {
      {"limits", {{"nvidia.com/gpu", 4}, {"cpu", "8"}}}};
  json pod = WorkerPod(job, 1, 0, Settings());
  json sidecar = SidecarOf(pod);
  EXPECT_EQ(EnvOf(sidecar, "COHORT_EXPECTED_GPUS"), "4");
  EXPECT_EQ(EnvOf(sidecar, "NVIDIA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_EQ(sidecar["securityContext"]["runAsNonRoot"], true);
  OperatorSettings visible = Settings();
  visible.sidecar_gpu_access = "visible-devices";
  pod = WorkerPod(job, 1, 0, visible);
  sidecar = SidecarOf(pod);
  EXPECT_EQ(EnvOf(sidecar, "NVIDIA_VISIBLE_DEVICES"), "all");
  EXPECT_EQ(EnvOf(sidecar, "COHORT_POD_RESOURCES_SOCKET"),
            "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_EQ(sidecar["securityContext"]["runAsUser"], 0);
  bool mounted = false, volume = false;
  for (const json& m : sidecar["volumeMounts"]) {
    mounted = mounted || (m["mountPath"] == kPodResourcesDir && m["readOnly"] == true);
  }
  for (const json& v : pod["spec"]["volumes"]) {
    volume = volume || v.value("/hostPath/path"_json_pointer, "") == kPodResourcesDir;
  }
  EXPECT_TRUE(mounted && volume) << pod.dump();
  // The workload's container is untouched; a pod that asks for no GPU gets nothing of it.
  EXPECT_EQ(EnvOf(pod["spec"]["containers"][0], "NVIDIA_VISIBLE_DEVICES"), "<unset>");
  json plain = SidecarOf(WorkerPod(Job(), 0, 0, visible));
  EXPECT_EQ(EnvOf(plain, "COHORT_EXPECTED_GPUS"), "0");
  EXPECT_EQ(EnvOf(plain, "NVIDIA_VISIBLE_DEVICES"), "<unset>");

  // DRA: the workload's claims are the sidecar's too, so it sees exactly their devices.
  api::CoordinatedJob dra = Job();
  dra.spec.pod_template["spec"]["resourceClaims"] = {
      {{"name", "gpus"}, {"resourceClaimTemplateName", "eight-gpus"}}};
  dra.spec.pod_template["spec"]["containers"][0]["resources"] = {
      {"claims", json::array({{{"name", "gpus"}}})}};
  sidecar = SidecarOf(WorkerPod(dra, 0, 0, visible));
  EXPECT_EQ(sidecar["resources"]["claims"], json::array({{{"name", "gpus"}}}));
  EXPECT_EQ(EnvOf(sidecar, "COHORT_EXPECTED_GPUS"), "<unset>") << "a claim's count is the driver's";
  EXPECT_EQ(EnvOf(sidecar, "NVIDIA_VISIBLE_DEVICES"), "<unset>");

  // Nonsense quantities count as none, and a sum stays bounded.
  EXPECT_EQ(TemplateGpusOf({{"spec",
                             {{"containers",
                               {{{"resources", {{"limits", {{"nvidia.com/gpu", "many"}}}}}},
                                {{"resources", {{"limits", {{"nvidia.com/mig-1g.5gb", "2"}}}}}},
                                {{"resources", "none"}}}}}}})
                .count,
            2);
  EXPECT_EQ(TemplateGpusOf(json("not a template")).count, 0);
}

}  // namespace
}  // namespace cohort::controller
