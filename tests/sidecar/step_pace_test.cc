#include "sidecar/step_pace.h"

#include "gtest/gtest.h"

namespace cohort::step_pace_test {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// `seconds` of polls every 250 ms: a step every `step_seconds`, the last `waiting_share` of
// each step spent waiting at the step's barrier.
void Steps(StepPace* pace, double seconds, double step_seconds, double waiting_share,
           int64_t first_step = 0) {
  for (int i = 0; i * 0.25 < seconds; ++i) {
    const double t = i * 0.25;
    const double into_step = t - step_seconds * static_cast<int64_t>(t / step_seconds);
    pace->Sample(kStart + absl::Seconds(t), first_step + static_cast<int64_t>(t / step_seconds),
                 into_step >= step_seconds * (1.0 - waiting_share));
  }
}

TEST(StepPaceTest, TheTaskThatHoldsTheGangBackIsBusyLongerPerStep) {
  // Steps of 2 s for everyone: the straggler computes all of it, the others half and wait.
  StepPace straggler, peer;
  Steps(&straggler, 60, 2.0, 0.0);
  Steps(&peer, 60, 2.0, 0.5);
  ASSERT_TRUE(straggler.BusySecondsPerStep().has_value());
  ASSERT_TRUE(peer.BusySecondsPerStep().has_value());
  EXPECT_NEAR(*straggler.BusySecondsPerStep(), 2.0, 0.1);
  EXPECT_NEAR(*peer.BusySecondsPerStep(), 1.0, 0.1);
}

TEST(StepPaceTest, NothingIsSaidBeforeFiveStepsOrWithoutReports) {
  StepPace pace;
  pace.Sample(kStart, std::nullopt, false);
  pace.Sample(kStart + absl::Seconds(5), std::nullopt, true);
  EXPECT_FALSE(pace.BusySecondsPerStep().has_value());
  for (int i = 0; i < StepPace::kMinSteps; ++i) {
    pace.Sample(kStart + absl::Seconds(6 + i), 4 + i, false);
    EXPECT_FALSE(pace.BusySecondsPerStep().has_value()) << i << " steps";
  }
  pace.Sample(kStart + absl::Seconds(6 + StepPace::kMinSteps), 4 + StepPace::kMinSteps, true);
  ASSERT_TRUE(pace.BusySecondsPerStep().has_value());
  // 5 s over 5 steps, one sample of six waiting.
  EXPECT_DOUBLE_EQ(*pace.BusySecondsPerStep(), 5.0 * (5.0 / 6.0) / 5.0);
}

TEST(StepPaceTest, OnlyTheWindowCountsAndARestartedWorkloadStartsAnew) {
  StepPace pace(absl::Seconds(20));
  Steps(&pace, 60, 4.0, 0.0);  // slow at first
  for (int i = 0; i <= 80; ++i) {
    pace.Sample(kStart + absl::Seconds(60 + i * 0.25), 15 + i / 4, false);  // 1 s a step
  }
  ASSERT_TRUE(pace.BusySecondsPerStep().has_value());
  EXPECT_NEAR(*pace.BusySecondsPerStep(), 1.0, 0.05) << "the slow minute is out of the window";
  // Step 0 again: a new run of the workload; its pace is not mixed with the old one's.
  pace.Sample(kStart + absl::Seconds(81), 0, false);
  EXPECT_FALSE(pace.BusySecondsPerStep().has_value());
}

}  // namespace
}  // namespace cohort::step_pace_test
