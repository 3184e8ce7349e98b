#include "sidecar/progress_watch.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace cohort::progress_watch_test {
namespace {

class ProgressWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/progress-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    file_ = dir_ + "/progress";
  }
  void TearDown() override {
    unlink(file_.c_str());
    rmdir(dir_.c_str());
  }

  // Writes the file anew, as a workload would at each step.
  void Write(const std::string& content) {
    std::ofstream out(file_, std::ios::trunc);
    out << content;
  }

  ProgressWatch::Options Options(absl::Duration timeout) {
    ProgressWatch::Options options;
    options.progress_file = file_;
    options.timeout = timeout;
    return options;
  }

  ProgressWatch::StallCallback Record() {
    return [this](const std::string& description) { stalls_.push_back(description); };
  }

  ManualClock clock_;
  std::string dir_;
  std::string file_;
  std::vector<std::string> stalls_;
};

TEST_F(ProgressWatchTest, AStallIsToldOnceAndAgainOnlyAfterProgress) {
  ProgressWatch watch(Options(absl::Minutes(1)), {}, clock_, Record());
  clock_.Advance(absl::Seconds(59));
  watch.Poll();
  EXPECT_TRUE(stalls_.empty());
  clock_.Advance(absl::Seconds(1));
  watch.Poll();
  clock_.Advance(absl::Seconds(30));
  watch.Poll();
  ASSERT_EQ(stalls_.size(), 1u);
  EXPECT_EQ(stalls_[0], "no progress for 1m (none seen since the workload started, 1m ago)");

  Write("7\n");
  watch.Poll();
  EXPECT_EQ(watch.step(), 7);
  EXPECT_EQ(watch.SinceProgress(), absl::ZeroDuration());
  clock_.Advance(absl::Minutes(1));
  watch.Poll();
  ASSERT_EQ(stalls_.size(), 2u);
  EXPECT_EQ(stalls_[1], "no progress for 1m (last: step 7, reported 1m ago)");
}

TEST_F(ProgressWatchTest, EveryWriteCountsAndTheStepIsReadFromIt) {
  ProgressWatch watch(Options(absl::Minutes(1)), {}, clock_, Record());
  Write("1\n");
  watch.Poll();
  clock_.Advance(absl::Seconds(50));
  Write("1\nloss 0.5\n");  // a write without a new step still counts
  watch.Poll();
  clock_.Advance(absl::Seconds(50));
  watch.Poll();
  EXPECT_TRUE(stalls_.empty());
  EXPECT_EQ(watch.step(), 1);
  EXPECT_EQ(watch.SinceProgress(), absl::Seconds(50));
}

TEST_F(ProgressWatchTest, AFileLeftByAnEarlierRunIsNotProgress) {
  Write("145\n");
  ProgressWatch watch(Options(absl::Minutes(1)), {}, clock_, Record());
  watch.Start();
  watch.Stop();
  clock_.Advance(absl::Minutes(1));
  watch.Poll();
  EXPECT_EQ(stalls_.size(), 1u);
  EXPECT_EQ(watch.step(), std::nullopt);
}

TEST_F(ProgressWatchTest, FinishedCoordinationCallsAndGpuActivityCountWithoutAFile) {
  std::atomic<uint64_t> calls{0};
  std::optional<GpuActivityReading> activity;
  ProgressWatch::Sources sources;
  sources.finished_calls = [&] { return calls.load(); };
  sources.gpu_activity = [&] { return activity; };
  ProgressWatch watch(Options(absl::Minutes(1)), sources, clock_, Record());
  watch.Poll();
  clock_.Advance(absl::Seconds(40));
  calls = 3;
  watch.Poll();
  clock_.Advance(absl::Seconds(40));
  activity = GpuActivityReading{GpuActivityReading::Measure::kUtilization, 0.8};
  watch.Poll();
  activity->value = 0.0;  // below the threshold from here
  clock_.Advance(absl::Seconds(40));
  watch.Poll();
  EXPECT_TRUE(stalls_.empty());
  clock_.Advance(absl::Seconds(20));
  watch.Poll();
  ASSERT_EQ(stalls_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(stalls_[0], "last: GPU utilisation 1m ago")) << stalls_[0];
}

// Where the GPUs have SM activity (NVML GPM), it is judged instead of utilisation, by a
// threshold of its own: a collective spinning on a lost peer keeps a few SMs busy, not half.
TEST_F(ProgressWatchTest, SmActivityIsJudgedByItsOwnThreshold) {
  GpuActivityReading activity{GpuActivityReading::Measure::kSmActivity, 0.2};
  ProgressWatch::Sources sources;
  sources.gpu_activity = [&] { return std::optional<GpuActivityReading>(activity); };
  ProgressWatch watch(Options(absl::Minutes(1)), sources, clock_, Record());
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(20));
    watch.Poll();
  }
  ASSERT_EQ(stalls_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(stalls_[0], "none seen since the workload started")) << stalls_[0];
  activity.value = 0.8;
  watch.Poll();
  EXPECT_EQ(watch.SinceProgress(), absl::ZeroDuration());
  activity.value = 0.2;
  clock_.Advance(absl::Minutes(1));
  watch.Poll();
  ASSERT_EQ(stalls_.size(), 2u);
  EXPECT_TRUE(absl::StrContains(stalls_[1], "last: GPU SM activity 1m ago")) << stalls_[1];
}

// A task at a barrier waits for the one that hangs: it is not the one to blame, however long
// it waits, and even though it has reported steps before.
TEST_F(ProgressWatchTest, WaitingOnPeersInACoordinationCallIsNotAStall) {
  std::atomic<uint64_t> waiting{0};
  ProgressWatch::Sources sources;
  sources.waiting_calls = [&] { return waiting.load(); };
  ProgressWatch watch(Options(absl::Minutes(1)), sources, clock_, Record());
  watch.Start();
  watch.Stop();
  Write("7\n");
  watch.Poll();
  waiting = 1;
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(50));
    watch.Poll();
  }
  EXPECT_TRUE(stalls_.empty());
  EXPECT_EQ(watch.SinceProgress(), absl::ZeroDuration());
  waiting = 0;  // the barrier passed; no step follows
  clock_.Advance(absl::Minutes(1));
  watch.Poll();
  ASSERT_EQ(stalls_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(stalls_[0], "last: waiting on its peers in a coordination call"))
      << stalls_[0];
}

TEST_F(ProgressWatchTest, WithoutATimeoutNothingIsToldButTheMetricsAreServed) {
  MetricsRegistry registry;
  ProgressWatch watch(Options(absl::ZeroDuration()), {}, clock_, Record());
  watch.RegisterMetrics(&registry);
  EXPECT_FALSE(absl::StrContains(registry.Render(), "\ncohort_task_step "));
  Write("12\n");
  watch.Poll();
  clock_.Advance(absl::Hours(3));
  watch.Poll();
  EXPECT_TRUE(stalls_.empty());
  std::string text = registry.Render();
  EXPECT_TRUE(absl::StrContains(text, "\ncohort_task_step 12\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cohort_task_seconds_since_progress 10800")) << text;
}

}  // namespace
}  // namespace cohort::progress_watch_test
