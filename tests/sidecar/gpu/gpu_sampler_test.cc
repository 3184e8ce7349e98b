// Telemetry sampled through the fake NVML: each field equals the fake's configuration, and
// fields a GPU or driver lacks are empty. SM activity, from GPM, is measured between one
// sample and the next.

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sidecar/gpu/gpu_monitor.h"
#include "tests/sidecar/gpu/fake_nvml/fake_nvml_control.h"
#include "tests/sidecar/gpu/fake_nvml_test_support.h"

namespace cohort::gpu {
namespace {

using ::cohort::gpu::testing::FakeControl;
using ::cohort::gpu::testing::kFakeNvml;
using ::cohort::gpu::testing::kOldDriverFakeNvml;
using ::cohort::gpu::testing::MonitorRecorder;
using ::cohort::gpu::testing::ScopedFakeNode;
using ::cohort::gpu::testing::TestData;
using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

template <typename T>
std::optional<T> Get(const nlohmann::json& object, const char* key) {
  return object.at(key).get<T>();
}

TEST(GpuSamplerTest, SampleMatchesTheConfiguration) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));
  std::ifstream file(TestData("eight_gpus.json"));
  nlohmann::json config = nlohmann::json::parse(file);

  std::vector<GpuSample> samples = monitor.Sample();

  ASSERT_EQ(samples.size(), 8u);
  for (size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const GpuSample& sample = samples[i];
    const nlohmann::json& gpu = config["gpus"][i];
    const nlohmann::json& memory = gpu["memory"];
    EXPECT_EQ(sample.index, static_cast<int>(i));
    EXPECT_FALSE(sample.lost);
    EXPECT_EQ(sample.gpu_utilization_percent, Get<uint32_t>(gpu["utilization"], "gpu"));
    EXPECT_EQ(sample.memory_utilization_percent, Get<uint32_t>(gpu["utilization"], "memory"));
    EXPECT_EQ(sample.memory_used_bytes, Get<uint64_t>(memory, "used"));
    EXPECT_EQ(sample.memory_reserved_bytes, Get<uint64_t>(memory, "reserved"));
    EXPECT_THAT(sample.memory_free_bytes,
                Optional(memory["total"].get<uint64_t>() - memory["used"].get<uint64_t>() -
                         memory["reserved"].get<uint64_t>()));
    EXPECT_EQ(sample.temperature_celsius, Get<uint32_t>(gpu, "temperature"));
    EXPECT_EQ(sample.power_milliwatts, Get<uint32_t>(gpu, "power_mw"));
    EXPECT_EQ(sample.power_limit_milliwatts, Get<uint32_t>(gpu, "power_limit_mw"));
    EXPECT_EQ(sample.energy_millijoules, Get<uint64_t>(gpu, "energy_mj"));
    EXPECT_EQ(sample.sm_clock_mhz, Get<uint32_t>(gpu, "sm_clock_mhz"));
    EXPECT_EQ(sample.pcie_replay_count, Get<uint32_t>(gpu, "pcie_replay"));
    EXPECT_EQ(sample.ecc.volatile_single_bit, Get<uint64_t>(gpu["ecc"], "volatile_single"));
    EXPECT_EQ(sample.ecc.volatile_double_bit, Get<uint64_t>(gpu["ecc"], "volatile_double"));
    EXPECT_EQ(sample.ecc.aggregate_single_bit, Get<uint64_t>(gpu["ecc"], "aggregate_single"));
    EXPECT_EQ(sample.ecc.aggregate_double_bit, Get<uint64_t>(gpu["ecc"], "aggregate_double"));
    ASSERT_TRUE(sample.remapped_rows.has_value());
    EXPECT_EQ(sample.remapped_rows->correctable, gpu["remapped_rows"]["correctable"]);
    EXPECT_EQ(sample.remapped_rows->uncorrectable, gpu["remapped_rows"]["uncorrectable"]);
    EXPECT_EQ(sample.remapped_rows->pending, gpu["remapped_rows"]["pending"]);
    EXPECT_EQ(sample.remapped_rows->failure, gpu["remapped_rows"]["failure"]);
  }
  // Spelled out for one GPU.
  EXPECT_THAT(samples[2].gpu_utilization_percent, Optional(23u));
  EXPECT_THAT(samples[2].power_milliwatts, Optional(102222u));
  EXPECT_THAT(samples[2].sm_clock_mhz, Optional(1950u));
  EXPECT_TRUE(samples[2].remapped_rows->pending);
  EXPECT_THAT(samples[5].ecc.aggregate_double_bit, Optional(1u));
}

TEST(GpuSamplerTest, OlderDriverCountsReservedMemoryAsUsedAndHasNoRemappedRows) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kOldDriverFakeNvml));

  std::vector<GpuSample> samples = monitor.Sample();

  ASSERT_EQ(samples.size(), 8u);
  // nvmlDeviceGetMemoryInfo (v1): used includes the 480 MiB the driver reserves.
  EXPECT_THAT(samples[0].memory_used_bytes, Optional(1073741824u + 503316480u));
  EXPECT_EQ(samples[0].memory_reserved_bytes, std::nullopt);
  EXPECT_EQ(samples[0].remapped_rows, std::nullopt);
  EXPECT_THAT(samples[0].temperature_celsius, Optional(30u));
}

TEST(GpuSamplerTest, TelemetryTheGpuDoesNotReportIsEmpty) {
  ScopedFakeNode node("nvlink_mesh.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));

  std::vector<GpuSample> samples = monitor.Sample();

  ASSERT_EQ(samples.size(), 4u);
  const GpuSample& sample = samples[1];
  EXPECT_FALSE(sample.lost);
  EXPECT_THAT(sample.memory_used_bytes, Optional(0u));
  EXPECT_EQ(sample.gpu_utilization_percent, std::nullopt);
  EXPECT_EQ(sample.temperature_celsius, std::nullopt);
  EXPECT_EQ(sample.power_milliwatts, std::nullopt);
  EXPECT_EQ(sample.energy_millijoules, std::nullopt);
  EXPECT_EQ(sample.sm_clock_mhz, std::nullopt);
  EXPECT_EQ(sample.ecc.volatile_double_bit, std::nullopt);
  EXPECT_EQ(sample.remapped_rows, std::nullopt);
  EXPECT_EQ(sample.pcie_replay_count, std::nullopt);
}

// The SM activity of each sample (sampler tests' own helper).
std::vector<std::optional<double>> SamplerTestSmActivity(const std::vector<GpuSample>& samples) {
  std::vector<std::optional<double>> activity;
  for (const GpuSample& sample : samples) activity.push_back(sample.sm_activity);
  return activity;
}

TEST(GpuSamplerTest, SmActivityIsMeasuredFromOneSampleToTheNext) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));
  std::ifstream file(TestData("eight_gpus.json"));
  nlohmann::json config = nlohmann::json::parse(file);
  EXPECT_THAT(recorder.logs(), ElementsAre(HasSubstr("; SM activity (NVML GPM) on every GPU")));
  auto set_sm_activity = FakeControl<FakeNvmlSetSmActivityFn>(kFakeNvml, "fakeNvmlSetSmActivity");
  ASSERT_NE(set_sm_activity, nullptr);

  // The first sample has nothing to measure from.
  for (const std::optional<double>& activity : SamplerTestSmActivity(monitor.Sample())) {
    EXPECT_EQ(activity, std::nullopt);
  }
  std::vector<GpuSample> samples = monitor.Sample();
  ASSERT_EQ(samples.size(), 8u);
  for (size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    EXPECT_THAT(samples[i].sm_activity,
                Optional(DoubleNear(config["gpus"][i]["sm_activity"].get<double>(), 1e-9)));
  }

  // GPU 2 from now on: a collective spinning on a lost peer, its utilisation unchanged.
  ASSERT_EQ(set_sm_activity(2, 0.1), 0);
  samples = monitor.Sample();
  EXPECT_THAT(samples[2].sm_activity, Optional(DoubleNear(0.1, 1e-9)));
  EXPECT_THAT(samples[2].gpu_utilization_percent, Optional(23u));
  EXPECT_THAT(samples[3].sm_activity, Optional(DoubleNear(0.29, 1e-9)));
  EXPECT_EQ(recorder.logs().size(), 1u);  // nothing failed, nothing more said
}

TEST(GpuSamplerTest, GpusWithoutGpmHaveNoSmActivity) {
  ScopedFakeNode node("nvlink_mesh.json");  // V100s: no GPM
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));

  monitor.Sample();
  std::vector<GpuSample> samples = monitor.Sample();

  ASSERT_EQ(samples.size(), 4u);
  for (const std::optional<double>& activity : SamplerTestSmActivity(samples)) {
    EXPECT_EQ(activity, std::nullopt);
  }
  // Said once, in the summary, and nothing else: a GPU without GPM is no error.
  EXPECT_THAT(recorder.logs(),
              ElementsAre(HasSubstr("; no SM activity (NVML GPM): GPM is not supported")));
}

TEST(GpuSamplerTest, AnOlderDriverWithoutGpmGivesNoSmActivityOnGpusThatWouldHaveIt) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kOldDriverFakeNvml));

  monitor.Sample();
  std::vector<GpuSample> samples = monitor.Sample();

  ASSERT_EQ(samples.size(), 8u);
  for (const std::optional<double>& activity : SamplerTestSmActivity(samples)) {
    EXPECT_EQ(activity, std::nullopt);
  }
  EXPECT_THAT(samples[0].gpu_utilization_percent, Optional(3u));
  EXPECT_THAT(recorder.logs(),
              ElementsAre(HasSubstr("; no SM activity (NVML GPM): the driver has no GPM")));
}

TEST(GpuSamplerTest, SomeGpusWithGpmAndSomeWithoutAreNamedInTheSummary) {
  // A pod's GPUs are of one model; a node's may not be.
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder first_recorder;
  GpuMonitor first(first_recorder.Options(kFakeNvml));
  auto set_sm_activity = FakeControl<FakeNvmlSetSmActivityFn>(kFakeNvml, "fakeNvmlSetSmActivity");
  ASSERT_NE(set_sm_activity, nullptr);
  // The fake keeps its node while NVML is initialised: the next monitor sees GPUs 5 and 6
  // without GPM.
  ASSERT_EQ(set_sm_activity(5, -1), 0);
  ASSERT_EQ(set_sm_activity(6, -1), 0);
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));

  monitor.Sample();
  std::vector<GpuSample> samples = monitor.Sample();

  EXPECT_THAT(samples[4].sm_activity, Optional(DoubleNear(0.38, 1e-9)));
  EXPECT_EQ(samples[5].sm_activity, std::nullopt);
  EXPECT_EQ(samples[6].sm_activity, std::nullopt);
  EXPECT_THAT(recorder.logs(),
              ElementsAre(HasSubstr("; SM activity (NVML GPM) on GPU 0, 1, 2, 3, 4, 7; none on "
                                    "GPU 5, 6: GPM is not supported")));
}

TEST(GpuSamplerTest, AFailedGpmReadIsSaidOnceAndTheNextMeasuresFromTheLastSampleTaken) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));
  auto set_sm_activity = FakeControl<FakeNvmlSetSmActivityFn>(kFakeNvml, "fakeNvmlSetSmActivity");
  ASSERT_NE(set_sm_activity, nullptr);
  monitor.Sample();

  // GPU 4's GPM reads fail for two samples (the fake answers NOT_SUPPORTED).
  ASSERT_EQ(set_sm_activity(4, -1), 0);
  std::vector<GpuSample> samples = monitor.Sample();
  EXPECT_EQ(samples[4].sm_activity, std::nullopt);
  EXPECT_THAT(samples[4].gpu_utilization_percent, Optional(43u));
  EXPECT_THAT(samples[3].sm_activity, Optional(DoubleNear(0.29, 1e-9)));
  monitor.Sample();
  std::vector<std::string> logs = recorder.logs();
  EXPECT_EQ(std::count_if(logs.begin(), logs.end(),
                          [](const std::string& line) {
                            return line.find("GPU 4 gave no SM activity") != std::string::npos;
                          }),
            1)
      << ::testing::PrintToString(logs);
  EXPECT_THAT(logs.back(), AllOf(HasSubstr("GPU 4 gave no SM activity"),
                                 HasSubstr("nvmlGpmSampleGet: Not Supported")));

  // Back: measured from the last sample that was taken, before the failures.
  ASSERT_EQ(set_sm_activity(4, 0.9), 0);
  samples = monitor.Sample();
  EXPECT_THAT(samples[4].sm_activity, Optional(DoubleNear(0.9, 1e-9)));
  EXPECT_FALSE(samples[4].lost);
}

TEST(GpuSamplerTest, ASampleSoonerThanGpmRefreshesRepeatsTheLastSmActivity) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitorOptions options = recorder.Options(kFakeNvml);
  options.sm_activity_min_interval = std::chrono::milliseconds(500);
  // The monitor's time, moved by the test.
  auto now = std::make_shared<std::chrono::steady_clock::time_point>();
  options.now = [now] { return *now; };
  GpuMonitor monitor(options);
  auto set_sm_activity = FakeControl<FakeNvmlSetSmActivityFn>(kFakeNvml, "fakeNvmlSetSmActivity");
  ASSERT_NE(set_sm_activity, nullptr);

  monitor.Sample();
  *now += std::chrono::milliseconds(600);
  EXPECT_THAT(monitor.Sample()[1].sm_activity, Optional(DoubleNear(0.11, 1e-9)));
  ASSERT_EQ(set_sm_activity(1, 0.9), 0);
  // Within 500 ms of the last GPM sample: not read again.
  *now += std::chrono::milliseconds(499);
  EXPECT_THAT(monitor.Sample()[1].sm_activity, Optional(DoubleNear(0.11, 1e-9)));
  *now += std::chrono::milliseconds(1);
  EXPECT_THAT(monitor.Sample()[1].sm_activity, Optional(DoubleNear(0.9, 1e-9)));
}

TEST(GpuSamplerTest, TheMonitorFreesItsGpmSamples) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  auto monitor = std::make_unique<GpuMonitor>(recorder.Options(kFakeNvml));
  // Hold the fake loaded past the monitor, to read its counter afterwards.
  void* fake = dlopen(kFakeNvml, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake, nullptr);
  auto gpm_samples = reinterpret_cast<FakeNvmlCountFn>(dlsym(fake, "fakeNvmlGpmSampleCount"));
  ASSERT_NE(gpm_samples, nullptr);
  EXPECT_EQ(gpm_samples(), 16);  // two per GPU
  monitor->Sample();

  monitor.reset();

  EXPECT_EQ(gpm_samples(), 0);
  dlclose(fake);
}

}  // namespace
}  // namespace cohort::gpu
