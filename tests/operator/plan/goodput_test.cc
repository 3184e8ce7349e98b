// Goodput: the last failure's timeline (failed, detected, decided, recovered) and the time a
// job's gangs had every task registered, through whole plans.
#include <string>
#include <vector>

#include "operator/api/coordinated_job_internal.h"
#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller {
// Its own namespace: the unity builds compile this file with others of its test.
namespace goodput_test {
namespace {

absl::Time Ago(double seconds) { return kNow - absl::Seconds(seconds); }

// A running gang of 3 that has had every task registered for ten minutes.
api::CoordinatedJob Training() {
  api::CoordinatedJob job = Job(3, phase::kRunning);
  job.status.start_time = Ago(1200);
  job.status.goodput.gang_registered_time = Ago(600);
  job.status.goodput.productive_seconds = 100;
  return job;
}

TEST(GoodputTest, AWorkersExitIsTimedFromTheExit) {
  Observed o = Everything({Coordinator(), Worker(0), Worker(1), Exited(2, 137, Ago(40))});
  o.failure_first_seen = Ago(30);
  const Plan plan = PlanJob(Training(), o, Settings());
  ASSERT_EQ(plan.status.restarts, 1);
  ASSERT_TRUE(plan.status.last_failure.has_value());
  const api::FailureTimeline& f = *plan.status.last_failure;
  EXPECT_EQ(f.cause, "WorkerFailed");
  EXPECT_NE(f.message.find("worker 2 exited with code 137"), std::string::npos) << f.message;
  EXPECT_EQ(f.failed_at, Ago(40));
  EXPECT_EQ(f.detected_at, Ago(30));
  EXPECT_EQ(f.decided_at, kNow);
  EXPECT_FALSE(f.recovered_at.has_value());
  // Trained from its registration until the exit, not until the restart.
  EXPECT_DOUBLE_EQ(plan.status.goodput.productive_seconds, 100 + 560);
  EXPECT_FALSE(plan.status.goodput.gang_registered_time.has_value());
}

TEST(GoodputTest, AHungTaskFailedAtItsLastProgress) {
  api::CoordinatedJob job = Training();
  job.spec.failure_policy.progress_timeout = "20s";
  Observed o = Everything({Coordinator(), Worker(0), Worker(1), Worker(2)});
  o.failure_first_seen = Ago(10);
  o.coordinator = CoordinatorView{};
  o.coordinator->errors.push_back({"/job:sidecar/task:1", true, 4,
                                   "/job:worker/task:1 is hung: no progress for 20s",
                                   FailureReason::kHang});
  const Plan plan = PlanJob(job, o, Settings());
  ASSERT_TRUE(plan.status.last_failure.has_value());
  EXPECT_EQ(plan.status.last_failure->reasons, std::vector<std::string>{"Hang"});
  EXPECT_EQ(plan.status.last_failure->failed_at, Ago(30)) << "reported 20 s after";
  EXPECT_EQ(plan.status.last_failure->detected_at, Ago(10));
  EXPECT_DOUBLE_EQ(plan.status.goodput.productive_seconds, 100 + 570);
}

TEST(GoodputTest, TheNextGangRegisteredIsTheRecovery) {
  api::CoordinatedJob job = Job(3, phase::kRunning, 1);
  job.object["metadata"]["creationTimestamp"] = api::FormatRfc3339(Ago(3600));
  job.status.goodput.startup_seconds = 42;
  job.status.last_failure = api::FailureTimeline{
      "TaskError", {"GPUFault"}, "GPU 0 failed", Ago(100), Ago(99), Ago(98), std::nullopt};
  Observed o = Everything({Coordinator(1), Worker(0, 1), Worker(1, 1), Worker(2, 1)});
  o.coordinator = CoordinatorView{};
  o.coordinator->registered = 2;
  Plan plan = PlanJob(job, o, Settings());
  EXPECT_FALSE(plan.status.last_failure->recovered_at.has_value()) << "one task is missing";
  EXPECT_FALSE(plan.status.goodput.gang_registered_time.has_value());

  o.coordinator->registered = 3;
  plan = PlanJob(job, o, Settings());
  ASSERT_TRUE(plan.status.last_failure->recovered_at.has_value());
  EXPECT_EQ(*plan.status.last_failure->recovered_at, kNow);
  EXPECT_EQ(plan.status.goodput.gang_registered_time, kNow);
  EXPECT_EQ(plan.status.goodput.startup_seconds, 42) << "the first gang's, kept";
}

TEST(GoodputTest, TheFirstGangRegisteredTimesTheStartup) {
  api::CoordinatedJob job = Job(3, phase::kRunning);
  job.object["metadata"]["creationTimestamp"] = api::FormatRfc3339(Ago(75));
  Observed o = Everything({Coordinator(), Worker(0), Worker(1), Worker(2)});
  o.coordinator = CoordinatorView{};
  o.coordinator->registered = 3;
  const Plan plan = PlanJob(job, o, Settings());
  ASSERT_TRUE(plan.status.goodput.startup_seconds.has_value());
  EXPECT_DOUBLE_EQ(*plan.status.goodput.startup_seconds, 75);
  EXPECT_FALSE(plan.status.last_failure.has_value());
}

TEST(GoodputTest, TheEffectiveTrainingRatioIsTheTimeRegisteredOverTheTimeSinceTheStart) {
  api::JobStatus st;
  EXPECT_FALSE(planning::EffectiveTrainingRatio(st, kNow).has_value()) << "not started";
  st.start_time = Ago(100);
  st.goodput.productive_seconds = 30;
  st.goodput.gang_registered_time = Ago(50);
  EXPECT_DOUBLE_EQ(*planning::EffectiveTrainingRatio(st, kNow), 0.8);
  st.completion_time = Ago(20);  // a finished job's ratio stops with it
  EXPECT_DOUBLE_EQ(*planning::EffectiveTrainingRatio(st, kNow + absl::Hours(1)), 60.0 / 80);
  st.goodput.gang_registered_time.reset();
  EXPECT_DOUBLE_EQ(*planning::EffectiveTrainingRatio(st, kNow), 30.0 / 80);
}

TEST(GoodputTest, TheStatusRoundTripsToTheMillisecond) {
  api::JobStatus st;
  st.last_failure = api::FailureTimeline{"TaskError",
                                         {"GPUFault", "Hang"},
                                         "GPU 0 failed",
                                         kNow + absl::Milliseconds(123),
                                         kNow + absl::Milliseconds(456),
                                         kNow + absl::Seconds(2),
                                         kNow + absl::Seconds(90)};
  st.goodput = {kNow + absl::Milliseconds(7), 12.5, 30};
  const json written = api::StatusToJson(st);
  EXPECT_EQ(written["lastFailure"]["failedAt"], "2027-01-15T08:00:00.123Z");
  const api::JobStatus back = api::internal::ParseJobStatus(written, 3);
  EXPECT_EQ(back.last_failure, st.last_failure);
  EXPECT_EQ(back.goodput, st.goodput);
  EXPECT_FALSE(api::StatusToJson(api::JobStatus{}).contains("goodput")) << "none: not written";
}

}  // namespace
}  // namespace goodput_test
}  // namespace cohort::controller
