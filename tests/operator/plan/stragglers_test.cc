// failurePolicy.stragglers: each worker's score from the coordinator's view of the gang's
// progress, and PlanStragglers' status and Events over time.
#include <string>
#include <vector>

#include "operator/api/coordinated_job_internal.h"
#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller {
// Its own namespace: the unity builds compile this file with others of its test.
namespace stragglers_test {
namespace {

using planning::PlanStragglers;
using planning::StragglerScore;
using planning::StragglerScores;

// The view of a gang whose sidecar tasks sent these busy seconds per step (none: no value).
CoordinatorView Gang(const std::vector<std::optional<double>>& busy) {
  CoordinatorView view;
  for (size_t i = 0; i < busy.size(); ++i) {
    TaskProgress p;
    p.step = 40;
    p.busy_seconds_per_step = busy[i];
    view.progress["/job:sidecar/task:" + std::to_string(i)] = p;
  }
  return view;
}

double ScoreOf(const std::vector<StragglerScore>& scores, int worker) {
  for (const StragglerScore& s : scores) {
    if (s.worker == worker) return s.score;
  }
  return -1;
}

TEST(StragglersTest, EachWorkerIsScoredAgainstTheMedianOfTheOthers) {
  const auto scores = StragglerScores(Gang({0.5, 0.5, 1.0, 0.52}), 4);
  ASSERT_EQ(scores.size(), 4u);
  EXPECT_DOUBLE_EQ(ScoreOf(scores, 2), 2.0);
  EXPECT_DOUBLE_EQ(ScoreOf(scores, 0), 0.5 / 0.52);
  EXPECT_DOUBLE_EQ(ScoreOf(scores, 3), 0.52 / 0.5);
}

TEST(StragglersTest, NoScoreUntilThreeWorkersAndHalfTheGangHaveAPace) {
  EXPECT_TRUE(StragglerScores(Gang({0.5, 1.0}), 2).empty()) << "two are no gang to compare";
  EXPECT_TRUE(StragglerScores(
                  Gang({0.5, 1.0, 0.5, std::nullopt, std::nullopt, std::nullopt, std::nullopt}), 7)
                  .empty());
  EXPECT_EQ(StragglerScores(Gang({0.5, 1.0, 0.5, std::nullopt}), 4).size(), 3u);
  // A task of a worker the job does not have (replicas shrank) is left out.
  EXPECT_EQ(StragglerScores(Gang({0.5, 1.0, 0.5, 0.5}), 3).size(), 3u);
}

class PlanStragglersTest : public ::testing::Test {
 protected:
  PlanStragglersTest() : job_(Job(3, phase::kRunning)) {
    job_.status.gang_start_time = kNow - absl::Minutes(10);
    job_.spec.failure_policy.stragglers.ratio = 1.5;
    job_.spec.failure_policy.stragglers.after = absl::Minutes(1);
  }
  // PlanStragglers at `now` with the gang's paces; the status carried to the next call.
  Plan Run(absl::Time now, const std::vector<std::optional<double>>& busy) {
    // The pods of the gang status.restarts says runs.
    const int gang = job_.status.restarts;
    std::vector<ObservedPod> workers = {Worker(0, gang), Worker(1, gang), Worker(2, gang)};
    workers[1].node = "node-b";
    Observed observed = Everything({Coordinator(gang), workers[0], workers[1], workers[2]});
    observed.now = now;
    observed.coordinator = Gang(busy);
    planning::Planner P{job_, observed, Plan{}};
    P.plan.status = job_.status;
    const planning::JobPods pods = planning::SortPods(P, /*with_driver=*/false);
    decided_ = PlanStragglers(P, pods);
    job_.status = P.plan.status;
    return std::move(P.plan);
  }
  // A rule on Straggler; the worker 1 of the gang lags from kNow and is named a minute on.
  Plan NamedWithRule(const std::string& action) {
    job_.spec.failure_policy.rules.clear();
    api::FailureRule r;
    r.action = action == "FailJob"         ? api::FailureAction::kFailJob
               : action == "RestartGang"   ? api::FailureAction::kRestartGang
               : action == "RestartWorker" ? api::FailureAction::kRestartWorker
                                           : api::FailureAction::kRestartGangUncounted;
    r.on_reasons = {"Straggler"};
    job_.spec.failure_policy.rules.push_back(r);
    Run(kNow, {0.5, 1.0, 0.5});
    EXPECT_FALSE(decided_) << "not named yet, so no rule acts";
    return Run(kNow + absl::Minutes(1), {0.5, 1.0, 0.5});
  }
  bool decided_ = false;
  api::CoordinatedJob job_;
};

TEST_F(PlanStragglersTest, AWorkerThatLagsForLongEnoughIsNamedOnceAndAgainWhenItKeepsUp) {
  Plan plan = Run(kNow, {0.5, 1.0, 0.5});
  ASSERT_TRUE(plan.status.straggler.has_value());
  EXPECT_EQ(plan.status.straggler->worker, 1);
  EXPECT_EQ(plan.status.straggler->score, 2.0);
  EXPECT_FALSE(plan.status.straggler->reported);
  EXPECT_TRUE(plan.events.empty()) << "not for a minute yet";
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_LE(*plan.requeue_after, absl::Minutes(1));

  plan = Run(kNow + absl::Seconds(30), {0.5, 0.9, 0.5});
  EXPECT_EQ(plan.status.straggler->since, kNow) << "the same worker lags on";
  EXPECT_TRUE(plan.events.empty());

  plan = Run(kNow + absl::Minutes(1), {0.5, 1.0, 0.55});
  ASSERT_EQ(EventReasons(plan), std::vector<std::string>{"Straggler"});
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_EQ(plan.events[0].message.rfind(
                "worker 1 (node node-b) is a straggler: its steps take it 1.90 times", 0),
            0u)
      << plan.events[0].message;
  EXPECT_TRUE(plan.status.straggler->reported);

  plan = Run(kNow + absl::Minutes(2), {0.5, 1.0, 0.5});
  EXPECT_TRUE(plan.events.empty()) << "named once";

  plan = Run(kNow + absl::Minutes(3), {0.5, 0.55, 0.5});
  EXPECT_EQ(EventReasons(plan), std::vector<std::string>{"StragglerRecovered"});
  EXPECT_FALSE(plan.status.straggler.has_value());
}

TEST_F(PlanStragglersTest, WithoutARuleNamingTheStragglerDecidesNothing) {
  Run(kNow, {0.5, 1.0, 0.5});
  Plan plan = Run(kNow + absl::Minutes(1), {0.5, 1.0, 0.5});
  EXPECT_EQ(EventReasons(plan), std::vector<std::string>{"Straggler"});
  EXPECT_FALSE(decided_);
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_FALSE(plan.status.last_failure.has_value());
}

TEST_F(PlanStragglersTest, ARestartGangRuleRestartsTheGangCountedWithTheStragglerAsCause) {
  job_.spec.failure_policy.max_restarts = 2;
  Plan plan = NamedWithRule("RestartGang");
  EXPECT_TRUE(decided_);
  EXPECT_EQ(EventReasons(plan), (std::vector<std::string>{"Straggler", "GangRestart"}));
  EXPECT_EQ(plan.status.phase, phase::kRestarting);
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.uncounted_restarts, 0);
  EXPECT_EQ(plan.delete_pods.size(), 4u) << "every pod of the gang, the coordinator's too";
  EXPECT_NE(plan.events[1].message.find("gang restart 1 of at most 2 by failurePolicy.rules[0] "
                                        "(RestartGang on Straggler): worker 1 (node node-b)"),
            std::string::npos)
      << plan.events[1].message;
  ASSERT_TRUE(plan.status.last_failure.has_value());
  EXPECT_EQ(plan.status.last_failure->cause, "Straggler");
  EXPECT_EQ(plan.status.last_failure->reasons, std::vector<std::string>{"Straggler"});
  EXPECT_EQ(plan.status.last_failure->failed_at, kNow) << "since it began to lag";
  EXPECT_EQ(plan.status.last_failure->decided_at, kNow + absl::Minutes(1));
}

TEST_F(PlanStragglersTest, ARestartTheJobHasNoneLeftForIsNotMadeAndTheJobRunsOn) {
  job_.spec.failure_policy.max_restarts = 1;
  job_.status.restarts = 1;
  Plan plan = NamedWithRule("RestartGang");
  EXPECT_FALSE(decided_);
  EXPECT_EQ(EventReasons(plan), (std::vector<std::string>{"Straggler", "StragglerKept"}));
  EXPECT_EQ(plan.status.phase, phase::kRunning);
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_NE(plan.events[1].message.find("has used its 1 restarts"), std::string::npos)
      << plan.events[1].message;
  plan = Run(kNow + absl::Minutes(2), {0.5, 1.0, 0.5});
  EXPECT_TRUE(plan.events.empty()) << "said once";
}

TEST_F(PlanStragglersTest, ARestartWorkerRuleRestartsTheStragglerAlone) {
  job_.spec.coordinator.recoverable = true;
  job_.spec.failure_policy.max_restarts = 1;
  Plan plan = NamedWithRule("RestartWorker");
  EXPECT_TRUE(decided_);
  EXPECT_EQ(EventReasons(plan), (std::vector<std::string>{"Straggler", "WorkerRestart"}));
  EXPECT_EQ(plan.delete_pods, std::vector<std::string>{"train-worker-1"});
  EXPECT_EQ(plan.status.worker_restarts, 1);
  ASSERT_EQ(plan.status.restarting_workers.size(), 1u);
  EXPECT_EQ(plan.status.restarting_workers[0].index, 1);
  EXPECT_EQ(plan.status.phase, phase::kRunning) << "the rest of the gang runs on";
}

TEST_F(PlanStragglersTest, AFailJobRuleFailsTheJobNamingTheStraggler) {
  Plan plan = NamedWithRule("FailJob");
  EXPECT_TRUE(decided_);
  EXPECT_EQ(plan.status.phase, phase::kFailed);
  EXPECT_EQ(EventReasons(plan), (std::vector<std::string>{"Straggler", "FailureRule"}));
  EXPECT_NE(plan.events[1].message.find("worker 1 (node node-b) is a straggler"),
            std::string::npos);
  EXPECT_NE(plan.events[1].message.find("failurePolicy.rules[0] (FailJob on Straggler) fails the "
                                        "job"),
            std::string::npos)
      << plan.events[1].message;
}

TEST(StragglersTest, RestartGangUncountedOnStragglerIsRefused) {
  json object = {{"apiVersion", "cohort.dev/v1alpha1"},
                 {"kind", "CoordinatedJob"},
                 {"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "u1"}}},
                 {"spec",
                  {{"replicas", 3},
                   {"failurePolicy",
                    {{"rules", json::array({{{"action", "RestartGangUncounted"},
                                             {"onReasons", {"Hang", "Straggler"}}}})}}},
                   {"template", {{"spec", {{"containers", json::array({{{"name", "w"}}})}}}}}}}};
  auto job = api::ParseCoordinatedJob(object);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message().rfind(
                "spec.failurePolicy.rules[0].onReasons: RestartGangUncounted on Straggler", 0),
            0u)
      << job.status();
  object["spec"]["failurePolicy"]["rules"][0]["action"] = "RestartGang";
  EXPECT_TRUE(api::ParseCoordinatedJob(object).ok());
}

TEST_F(PlanStragglersTest, AnotherWorkerLaggingStartsTheClockAgainAndAGangWithinTheRatioHasNone) {
  Run(kNow, {0.5, 1.0, 0.5});
  Plan plan = Run(kNow + absl::Seconds(50), {1.0, 0.5, 0.5});
  ASSERT_TRUE(plan.status.straggler.has_value());
  EXPECT_EQ(plan.status.straggler->worker, 0);
  EXPECT_EQ(plan.status.straggler->since, kNow + absl::Seconds(50));
  plan = Run(kNow + absl::Seconds(70), {1.0, 0.5, 0.5});
  EXPECT_TRUE(plan.events.empty()) << "worker 0 lags for 20 s only";

  plan = Run(kNow + absl::Seconds(80), {0.6, 0.5, 0.5});
  EXPECT_FALSE(plan.status.straggler.has_value());
  EXPECT_TRUE(plan.events.empty()) << "never named, so no recovery to tell";
}

TEST_F(PlanStragglersTest, OnlyAGangWithPacesIsLookedAtAgain) {
  Plan plan = Run(kNow, {0.5, 0.5, 0.5});
  ASSERT_TRUE(plan.requeue_after.has_value()) << "its paces change without waking anyone";
  EXPECT_LE(*plan.requeue_after, absl::Seconds(15));
  plan = Run(kNow, {std::nullopt, std::nullopt, std::nullopt});
  EXPECT_FALSE(plan.requeue_after.has_value()) << "no sidecar sends a pace: nothing to look at";
}

TEST_F(PlanStragglersTest, AStragglerOfAnEarlierGangIsForgotten) {
  job_.status.straggler = api::StragglerStatus{1, 2.0, kNow - absl::Minutes(20), true};
  Plan plan = Run(kNow, {0.5, 1.0, 0.5});
  ASSERT_TRUE(plan.status.straggler.has_value());
  EXPECT_EQ(plan.status.straggler->since, kNow) << "this gang's worker 1 starts its own clock";
  EXPECT_FALSE(plan.status.straggler->reported);
}

TEST(StragglersTest, ThePolicyIsReadAndBadValuesRefusedNamingTheField) {
  json object = {{"apiVersion", "cohort.dev/v1alpha1"},
                 {"kind", "CoordinatedJob"},
                 {"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "u1"}}},
                 {"spec",
                  {{"replicas", 3},
                   {"failurePolicy", {{"stragglers", {{"ratio", 1.5}, {"for", "30s"}}}}},
                   {"template", {{"spec", {{"containers", json::array({{{"name", "w"}}})}}}}}}}};
  auto job = api::ParseCoordinatedJob(object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.failure_policy.stragglers.ratio, 1.5);
  EXPECT_EQ(job->spec.failure_policy.stragglers.after, absl::Seconds(30));
  for (const json& bad :
       {json{{"ratio", 1}}, json{{"ratio", "2"}}, json{{"for", "soon"}}, json("fast")}) {
    object["spec"]["failurePolicy"]["stragglers"] = bad;
    auto parsed = api::ParseCoordinatedJob(object);
    ASSERT_FALSE(parsed.ok()) << bad.dump();
    EXPECT_EQ(parsed.status().message().rfind("spec.failurePolicy.stragglers", 0), 0u)
        << parsed.status();
  }
  // The status a plan writes reads back the same.
  api::JobStatus st;
  st.phase = phase::kRunning;
  st.straggler = api::StragglerStatus{2, 1.87, kNow, true};
  EXPECT_EQ(api::internal::ParseJobStatus(api::StatusToJson(st), 3), st);
}

}  // namespace
}  // namespace stragglers_test
}  // namespace cohort::controller
