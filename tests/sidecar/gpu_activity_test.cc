// What the sidecar makes of its GPUs' activity: the measure progress is judged by (SM activity
// where the GPUs have NVML's GPM, else utilisation: BusiestGpuActivity), the tracker's verdict
// on it (a collective spinning at full utilisation on a few SMs is not progress), and the
// cohort_gpu_sm_activity_ratio series, served only for GPUs that have SM activity.
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu_metrics.h"
#include "sidecar/gpu_watch.h"
#include "sidecar/progress_tracker.h"

namespace cohort::gpu_activity_test {
namespace {

using Measure = GpuActivityReading::Measure;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

gpu::GpuSample GpuAt(int index, std::optional<uint32_t> utilization_percent,
                     std::optional<double> sm_activity) {
  gpu::GpuSample sample;
  sample.index = index;
  sample.gpu_utilization_percent = utilization_percent;
  sample.sm_activity = sm_activity;
  return sample;
}

// The value of the series of `name` for GPU `gpu` in `text`; NaN when there is none.
double SeriesFor(const std::string& text, const std::string& name, int gpu) {
  std::istringstream in(text);
  std::string line;
  const std::string label = absl::StrCat("gpu=\"", gpu, "\"");
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 || line.find(label) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nan("");
}

TEST(GpuActivityTest, SmActivityIsChosenOverUtilisationWhereTheGpusHaveIt) {
  bool seen = false;
  std::optional<GpuActivityReading> reading =
      BusiestGpuActivity({GpuAt(0, 100, 0.1), GpuAt(1, 100, 0.25), GpuAt(2, 90, 0.05)}, &seen);
  ASSERT_TRUE(reading.has_value());
  EXPECT_EQ(reading->measure, Measure::kSmActivity);
  EXPECT_DOUBLE_EQ(reading->value, 0.25);
  EXPECT_TRUE(seen);
}

TEST(GpuActivityTest, UtilisationIsUsedWhereNoGpuHasSmActivity) {
  bool seen = false;
  std::optional<GpuActivityReading> reading =
      BusiestGpuActivity({GpuAt(0, 40, std::nullopt), GpuAt(1, 70, std::nullopt)}, &seen);
  ASSERT_TRUE(reading.has_value());
  EXPECT_EQ(reading->measure, Measure::kUtilization);
  EXPECT_DOUBLE_EQ(reading->value, 0.7);
  EXPECT_FALSE(seen);
}

TEST(GpuActivityTest, LostGpusAndGpusThatReportNothingGiveNone) {
  bool seen = false;
  gpu::GpuSample lost = GpuAt(0, std::nullopt, std::nullopt);
  lost.lost = true;
  EXPECT_EQ(BusiestGpuActivity({lost, GpuAt(1, std::nullopt, std::nullopt)}, &seen), std::nullopt);
  EXPECT_EQ(BusiestGpuActivity({}, &seen), std::nullopt);
}

// The first sample has no SM activity (GPM measures from one sample to the next), so it is
// judged by utilisation. Once SM activity was seen, a sample without it (a GPM read that
// failed) is no sign at all: utilisation, which a hung collective keeps high, does not stand
// in for it.
TEST(GpuActivityTest, OnceSmActivityWasSeenASampleWithoutItIsNoSign) {
  bool seen = false;
  std::optional<GpuActivityReading> first =
      BusiestGpuActivity({GpuAt(0, 100, std::nullopt)}, &seen);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->measure, Measure::kUtilization);
  ASSERT_TRUE(BusiestGpuActivity({GpuAt(0, 100, 0.6)}, &seen).has_value());
  EXPECT_EQ(BusiestGpuActivity({GpuAt(0, 100, std::nullopt)}, &seen), std::nullopt);
  std::optional<GpuActivityReading> again = BusiestGpuActivity({GpuAt(0, 100, 0.7)}, &seen);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->measure, Measure::kSmActivity);
}

// The case SM activity is for: a collective spinning on a lost peer keeps every GPU at 100 %
// utilisation and 10 % SM activity. That is not progress; 80 % SM activity is.
TEST(GpuActivityTest, FullUtilisationAtTenPercentSmActivityIsNotProgressEightyPercentIs) {
  ProgressTracker::Options options;
  options.timeout = absl::Minutes(1);
  ProgressTracker tracker(options, kStart);
  bool seen = false;
  for (int second = 5; second <= 60; second += 5) {
    std::optional<GpuActivityReading> hung =
        BusiestGpuActivity({GpuAt(0, 100, 0.1), GpuAt(1, 100, 0.1)}, &seen);
    ASSERT_TRUE(hung.has_value());
    tracker.GpuActivity(kStart + absl::Seconds(second), *hung);
  }
  EXPECT_EQ(tracker.last_progress(), kStart);
  EXPECT_TRUE(tracker.Stalled(kStart + absl::Seconds(60)));

  std::optional<GpuActivityReading> working =
      BusiestGpuActivity({GpuAt(0, 100, 0.8), GpuAt(1, 100, 0.75)}, &seen);
  ASSERT_TRUE(working.has_value());
  tracker.GpuActivity(kStart + absl::Seconds(65), *working);
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(65));
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kGpuSmActivity);
  EXPECT_EQ(tracker.Describe(kStart + absl::Seconds(125)),
            "no progress for 1m (last: GPU SM activity 1m ago)");
}

// GPUs without GPM (before Hopper, or an older driver) are judged by utilisation as before:
// any kernel running, 5 % or more.
TEST(GpuActivityTest, WithoutGpmUtilisationStillCounts) {
  ProgressTracker::Options options;
  options.timeout = absl::Minutes(1);
  ProgressTracker tracker(options, kStart);
  bool seen = false;
  std::optional<GpuActivityReading> idle =
      BusiestGpuActivity({GpuAt(0, 2, std::nullopt), GpuAt(1, 4, std::nullopt)}, &seen);
  ASSERT_TRUE(idle.has_value());
  tracker.GpuActivity(kStart + absl::Seconds(10), *idle);
  EXPECT_EQ(tracker.last_progress(), kStart);
  std::optional<GpuActivityReading> busy =
      BusiestGpuActivity({GpuAt(0, 100, std::nullopt), GpuAt(1, 3, std::nullopt)}, &seen);
  ASSERT_TRUE(busy.has_value());
  tracker.GpuActivity(kStart + absl::Seconds(20), *busy);
  EXPECT_EQ(tracker.last_progress(), kStart + absl::Seconds(20));
  EXPECT_EQ(tracker.last_sign(), ProgressTracker::Sign::kGpuUtilization);
  EXPECT_EQ(tracker.Describe(kStart + absl::Seconds(80)),
            "no progress for 1m (last: GPU utilisation 1m ago)");
}

TEST(GpuActivityTest, SmActivityIsServedOnlyForGpusThatHaveIt) {
  gpu::GpuInventory inventory;
  inventory.nvml_loaded = true;
  for (int i = 0; i < 2; ++i) {
    gpu::GpuInfo info;
    info.index = i;
    info.uuid = absl::StrCat("GPU-", i);
    info.name = "NVIDIA H100 80GB HBM3";
    inventory.gpus.push_back(info);
  }
  PodIdentity pod{"ml", "train", "train-worker-0", "0", "node-1"};
  GpuMetrics metrics(pod, inventory, /*dcgm_names=*/true,
                     [] { return std::vector<gpu::GpuHealth>{}; });
  MetricsRegistry registry;
  metrics.Register(registry);
  EXPECT_TRUE(std::isnan(SeriesFor(registry.Render(), "cohort_gpu_sm_activity_ratio", 0)));

  metrics.OnSample({GpuAt(0, 100, 0.8), GpuAt(1, 100, std::nullopt)});

  std::string text = registry.Render();
  EXPECT_DOUBLE_EQ(SeriesFor(text, "cohort_gpu_sm_activity_ratio", 0), 0.8) << text;
  EXPECT_TRUE(std::isnan(SeriesFor(text, "cohort_gpu_sm_activity_ratio", 1))) << text;
  EXPECT_DOUBLE_EQ(SeriesFor(text, "cohort_gpu_utilization_ratio", 1), 1.0) << text;
  // DCGM exporter's name for it, as a ratio as DCGM exporter serves it.
  EXPECT_DOUBLE_EQ(SeriesFor(text, "DCGM_FI_PROF_SM_ACTIVE", 0), 0.8) << text;
  EXPECT_TRUE(std::isnan(SeriesFor(text, "DCGM_FI_PROF_SM_ACTIVE", 1))) << text;
  EXPECT_NE(text.find("cohort_gpu_sm_activity_ratio{namespace=\"ml\",job=\"train\","
                      "pod=\"train-worker-0\",task=\"0\",gpu=\"0\",uuid=\"GPU-0\","
                      "model=\"NVIDIA H100 80GB HBM3\"}"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace cohort::gpu_activity_test
