// cohort-gpu-info as a user runs it: a process, flags, JSON on standard output.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/sidecar/gpu/fake_nvml_test_support.h"
#include "tests/support/build_paths.h"

namespace cohort::gpu {
namespace {

using ::cohort::gpu::testing::kFakeNvml;
using ::cohort::gpu::testing::TestData;
using ::testing::HasSubstr;

struct ProcessResult {
  int status = -1;
  std::string out;
  std::string err;
};

// Runs cohort-gpu-info with `args` (shell words) and `environment` ("A=b C=d").
ProcessResult RunGpuInfo(const std::string& args, const std::string& environment = "") {
  std::string err_path = ::testing::TempDir() + "gpu_info_stderr." + std::to_string(getpid());
  std::string command = "env " + environment + " " +
                        ::cohort::testing::InBuild(COHORT_GPU_INFO_PATH) + " " + args + " 2>" +
                        err_path;
  ProcessResult run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  run.err = text.str();
  std::remove(err_path.c_str());
  return run;
}

std::string FakeNode(const std::string& config) { return "FAKE_NVML_CONFIG=" + TestData(config); }

TEST(GpuInfoMainTest, PrintsTheInventoryAsJson) {
  ProcessResult run =
      RunGpuInfo(std::string("--library ") + kFakeNvml, FakeNode("eight_gpus.json"));

  ASSERT_EQ(run.status, 0) << run.err;
  nlohmann::json info = nlohmann::json::parse(run.out);
  EXPECT_EQ(info["nvml"]["loaded"], true);
  EXPECT_EQ(info["nvml"]["driver_version"], "550.54.15");
  EXPECT_EQ(info["nvml"]["cuda_driver_version"], "12.4");
  ASSERT_EQ(info["gpus"].size(), 8u);
  EXPECT_EQ(info["gpus"][3]["pci_bus_id"], "00000000:5D:00.0");
  EXPECT_EQ(info["gpus"][3]["pci_device_id"], "0x233010DE");
  EXPECT_EQ(info["gpus"][3]["compute_capability"], "9.0");
  EXPECT_EQ(info["gpus"][7]["mig_mode"]["current"], "enabled");
  EXPECT_EQ(info["gpus"][0]["nvlinks"][0]["peer"], "switch");
  EXPECT_EQ(info["topology"].size(), 28u);
  EXPECT_EQ(info["topology"][0]["pcie"], "PXB");
  EXPECT_FALSE(info.contains("samples"));
  EXPECT_THAT(run.err, HasSubstr("found 8 GPUs"));
}

TEST(GpuInfoMainTest, SampleFlagAddsTelemetryAndHealth) {
  ProcessResult run =
      RunGpuInfo(std::string("--sample"), "COHORT_NVML_LIBRARY=" + std::string(kFakeNvml) + " " +
                                              FakeNode("eight_gpus.json"));

  ASSERT_EQ(run.status, 0) << run.err;
  nlohmann::json info = nlohmann::json::parse(run.out);
  ASSERT_EQ(info["samples"].size(), 8u);
  EXPECT_EQ(info["samples"][1]["temperature_celsius"], 31);
  EXPECT_EQ(info["samples"][1]["ecc"]["aggregate_single_bit"], 11);
  // One sample: SM activity, measured from one GPM sample to the next, has none yet.
  EXPECT_TRUE(info["samples"][1]["sm_activity"].is_null());
  ASSERT_EQ(info["health"].size(), 8u);
  EXPECT_EQ(info["health"][1]["healthy"], true);
  EXPECT_TRUE(info["health_events"].empty());
}

TEST(GpuInfoMainTest, WatchingMeasuresSmActivityOverTheWatch) {
  ProcessResult run =
      RunGpuInfo(std::string("--watch 0.3"), "COHORT_NVML_LIBRARY=" + std::string(kFakeNvml) + " " +
                                                 FakeNode("eight_gpus.json"));

  ASSERT_EQ(run.status, 0) << run.err;
  nlohmann::json info = nlohmann::json::parse(run.out);
  ASSERT_EQ(info["samples"].size(), 8u);
  ASSERT_TRUE(info["samples"][1]["sm_activity"].is_number()) << run.out;
  EXPECT_NEAR(info["samples"][1]["sm_activity"].get<double>(), 0.11, 1e-6);
  EXPECT_THAT(run.err, HasSubstr("SM activity (NVML GPM) on every GPU"));
}

TEST(GpuInfoMainTest, NodeWithoutDriverPrintsZeroGpusAndSucceeds) {
  ProcessResult run = RunGpuInfo("--sample --library /nonexistent/libnvidia-ml.so.1");

  ASSERT_EQ(run.status, 0);
  nlohmann::json info = nlohmann::json::parse(run.out);
  EXPECT_EQ(info["nvml"]["loaded"], false);
  EXPECT_TRUE(info["gpus"].empty());
  EXPECT_TRUE(info["samples"].empty());
  EXPECT_THAT(run.err, HasSubstr("could not be loaded"));
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1);
}

TEST(GpuInfoMainTest, HelpDescribesTheFlags) {
  ProcessResult run = RunGpuInfo("--help");

  EXPECT_EQ(run.status, 0);
  EXPECT_THAT(run.out, HasSubstr("Usage: cohort-gpu-info"));
  EXPECT_THAT(run.out, HasSubstr("--library PATH"));
  EXPECT_THAT(run.out, HasSubstr("--ignore-xids"));
}

TEST(GpuInfoMainTest, BadFlagsAreRefused) {
  EXPECT_EQ(RunGpuInfo("--frobnicate").status, 2);
  EXPECT_EQ(RunGpuInfo("--watch soon").status, 2);
  EXPECT_EQ(RunGpuInfo("--ignore-xids 13,x").status, 2);
  EXPECT_EQ(RunGpuInfo("--library").status, 2);
}

}  // namespace
}  // namespace cohort::gpu
