// Telemetry sampled through the fake NVML: each field equals the fake's configuration, and
// fields a GPU or driver lacks are empty.

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sidecar/gpu/gpu_monitor.h"
#include "tests/sidecar/gpu/fake_nvml_test_support.h"

namespace cohort::gpu {
namespace {

using ::cohort::gpu::testing::kFakeNvml;
using ::cohort::gpu::testing::kOldDriverFakeNvml;
using ::cohort::gpu::testing::MonitorRecorder;
using ::cohort::gpu::testing::ScopedFakeNode;
using ::cohort::gpu::testing::TestData;
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

}  // namespace
}  // namespace cohort::gpu
