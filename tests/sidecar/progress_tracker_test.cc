#include "sidecar/progress_tracker.h"

#include "gtest/gtest.h"

namespace cohort::progress_tracker_test {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

ProgressTracker Tracker(absl::Duration timeout) {
  ProgressTracker::Options options;
  options.timeout = timeout;
  return ProgressTracker(options, kStart);
}

GpuActivityReading Utilization(double value) {
  return {GpuActivityReading::Measure::kUtilization, value};
}

GpuActivityReading SmActivity(double value) {
  return {GpuActivityReading::Measure::kSmActivity, value};
}

TEST(ProgressTrackerTest, TheFirstStallIsTimedFromTheStart) {
  auto tracker = Tracker(absl::Minutes(5));
  EXPECT_FALSE(tracker.Stalled(kStart + absl::Minutes(5) - absl::Seconds(1)));
  EXPECT_TRUE(tracker.Stalled(kStart + absl::Minutes(5)));
  EXPECT_EQ(tracker.Describe(kStart + absl::Minutes(5)),
            "no progress for 5m (none seen since the workload started, 5m ago)");
}

TEST(ProgressTrackerTest, WithoutATimeoutNothingIsAStall) {
  auto tracker = Tracker(absl::ZeroDuration());
  EXPECT_FALSE(tracker.Stalled(kStart + absl::Hours(100)));
  EXPECT_EQ(tracker.SinceProgress(kStart + absl::Hours(100)), absl::Hours(100));
}

TEST(ProgressTrackerTest, AReportIsProgressAndKeepsItsStep) {
  auto tracker = Tracker(absl::Minutes(5));
  tracker.Reported(kStart + absl::Minutes(4), 144);
  tracker.Reported(kStart + absl::Minutes(6), std::nullopt);  // a write without a step
  EXPECT_EQ(tracker.step(), 144);
  EXPECT_FALSE(tracker.Stalled(kStart + absl::Minutes(10)));
  EXPECT_TRUE(tracker.Stalled(kStart + absl::Minutes(11)));
  EXPECT_EQ(tracker.Describe(kStart + absl::Minutes(11) + absl::Milliseconds(400)),
            "no progress for 5m (last: step 144, reported 5m0.4s ago)");
}

TEST(ProgressTrackerTest, FinishedCoordinationCallsCountOnlyWhenTheirNumberGrows) {
  auto tracker = Tracker(absl::Minutes(1));
  tracker.CoordinationCalls(kStart + absl::Seconds(30), 7);  // where counting starts
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kNone);
  tracker.CoordinationCalls(kStart + absl::Seconds(50), 7);
  EXPECT_EQ(tracker.last_progress(), kStart);
  tracker.CoordinationCalls(kStart + absl::Seconds(55), 9);
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(55));
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kCoordinationCall);
  // A restarted proxy counts from zero again: not progress, and counting starts there.
  tracker.CoordinationCalls(kStart + absl::Seconds(70), 2);
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(55));
  tracker.CoordinationCalls(kStart + absl::Seconds(80), 3);
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(80));
}

TEST(ProgressTrackerTest, GpuUtilisationCountsAboveItsThreshold) {
  auto tracker = Tracker(absl::Minutes(1));
  tracker.GpuActivity(kStart + absl::Seconds(10), Utilization(0.01));
  EXPECT_EQ(tracker.last_progress(), kStart);
  tracker.GpuActivity(kStart + absl::Seconds(20), Utilization(0.9));
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(20));
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kGpuUtilization);
  EXPECT_EQ(tracker.Describe(kStart + absl::Seconds(80)),
            "no progress for 1m (last: GPU utilisation 1m ago)");
}

// A collective spinning on a lost peer holds a few SMs (its channels') at full utilisation:
// SM activity has a threshold of its own, above what such a collective holds.
TEST(ProgressTrackerTest, SmActivityCountsAboveItsOwnHigherThreshold) {
  auto tracker = Tracker(absl::Minutes(1));
  tracker.GpuActivity(kStart + absl::Seconds(10), SmActivity(0.1));
  tracker.GpuActivity(kStart + absl::Seconds(20), SmActivity(0.3));
  EXPECT_EQ(tracker.last_progress(), kStart);
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kNone);
  tracker.GpuActivity(kStart + absl::Seconds(30), SmActivity(0.8));
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(30));
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kGpuSmActivity);
  EXPECT_EQ(tracker.Describe(kStart + absl::Seconds(90)),
            "no progress for 1m (last: GPU SM activity 1m ago)");
  // Both thresholds can be set.
  ProgressTracker::Options options;
  options.timeout = absl::Minutes(1);
  options.gpu_sm_activity_threshold = 0.05;
  options.gpu_utilization_threshold = 0.95;
  ProgressTracker tuned(options, kStart);
  tuned.GpuActivity(kStart + absl::Seconds(10), Utilization(0.9));
  EXPECT_EQ(tuned.last_progress(), kStart);
  tuned.GpuActivity(kStart + absl::Seconds(20), SmActivity(0.1));
  EXPECT_EQ(tuned.last_progress(), kStart + absl::Seconds(20));
}

TEST(ProgressTrackerTest, AWorkloadThatReportsIsJudgedByItsReportsAlone) {
  // Stuck in a collective: its GPUs stay busy and its proxy still finishes calls.
  auto tracker = Tracker(absl::Minutes(1));
  tracker.CoordinationCalls(kStart, 0);
  tracker.Reported(kStart + absl::Seconds(5), 1);
  tracker.GpuActivity(kStart + absl::Seconds(50), Utilization(1.0));
  tracker.GpuActivity(kStart + absl::Seconds(55), SmActivity(1.0));
  tracker.CoordinationCalls(kStart + absl::Seconds(60), 5);
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(5));
  EXPECT_TRUE(tracker.Stalled(kStart + absl::Seconds(65)));
}

TEST(ProgressTrackerTest, ProgressNeverGoesBack) {
  auto tracker = Tracker(absl::Minutes(1));
  tracker.Reported(kStart + absl::Seconds(30), 3);
  tracker.Reported(kStart + absl::Seconds(20), 4);  // read late
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(30));
  EXPECT_EQ(tracker.step(), 4);
}

TEST(ProgressTrackerTest, TheStepIsTheLastLineThatIsANumber) {
  struct Row {
    const char* content;
    std::optional<int64_t> step;
  };
  for (const Row& row : std::initializer_list<Row>{
           {"145\n", 145},
           {"  12  ", 12},
           {"1\n2\n3\n\n", 3},
           {"3\nloss 0.12\n", 3},
           {"", std::nullopt},
           {"step five\n", std::nullopt},
           {"-1", -1},
           {"99999999999999999999", std::nullopt},
       }) {
    EXPECT_EQ(ParseProgressStep(row.content), row.step) << "content: " << row.content;
  }
}

}  // namespace
}  // namespace cohort::progress_tracker_test
