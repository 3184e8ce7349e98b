// Loading NVML: where the library comes from, and how a node without a usable one (no driver,
// a wrong file, a driver that is not loaded, no GPUs, an older driver) ends up with zero GPUs
// or reduced data, one log line, and nothing failing.

#include "sidecar/gpu/nvml_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sidecar/gpu/gpu_monitor.h"
#include "tests/sidecar/gpu/fake_nvml/fake_nvml_control.h"
#include "tests/sidecar/gpu/fake_nvml_test_support.h"

namespace cohort::gpu {
namespace {

using ::cohort::gpu::testing::kFakeNvml;
using ::cohort::gpu::testing::kOldDriverFakeNvml;
using ::cohort::gpu::testing::MonitorRecorder;
using ::cohort::gpu::testing::ScopedEnvironment;
using ::cohort::gpu::testing::ScopedFakeNode;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// Everything a node without GPUs must show: no GPUs, and every call harmless.
void ExpectNoGpus(GpuMonitor& monitor) {
  EXPECT_THAT(monitor.inventory().gpus, IsEmpty());
  EXPECT_THAT(monitor.inventory().topology, IsEmpty());
  EXPECT_THAT(monitor.Sample(), IsEmpty());
  EXPECT_THAT(monitor.PollEvents(std::chrono::milliseconds(0)), IsEmpty());
  EXPECT_FALSE(monitor.listening_for_events());
  EXPECT_FALSE(monitor.StartEventThread());
  EXPECT_THAT(monitor.Health(), IsEmpty());
}

TEST(NvmlLibraryTest, PathComesFromTheCallerThenTheEnvironmentThenTheDefault) {
  ScopedEnvironment unset(NvmlLibrary::kPathEnvironmentVariable, nullptr);
  EXPECT_EQ(NvmlLibrary::ResolvePath(""), "libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibrary::ResolvePath("/opt/nvml.so"), "/opt/nvml.so");
  ScopedEnvironment set(NvmlLibrary::kPathEnvironmentVariable, "/env/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibrary::ResolvePath(""), "/env/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibrary::ResolvePath("/opt/nvml.so"), "/opt/nvml.so");
}

TEST(NvmlLibraryTest, MissingLibraryMeansZeroGpusAndOneLogLine) {
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options("/nonexistent/libnvidia-ml.so.1"));

  ExpectNoGpus(monitor);
  EXPECT_FALSE(monitor.inventory().nvml_loaded);
  ASSERT_EQ(recorder.logs().size(), 1u);
  EXPECT_THAT(recorder.logs()[0], HasSubstr("/nonexistent/libnvidia-ml.so.1 could not be loaded"));
  EXPECT_THAT(recorder.logs()[0], HasSubstr("reporting 0 GPUs"));
  EXPECT_EQ(monitor.inventory().diagnostic, recorder.logs()[0]);
}

TEST(NvmlLibraryTest, LibraryWithoutNvmlFunctionsIsRefused) {
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options("libm.so.6"));

  ExpectNoGpus(monitor);
  ASSERT_EQ(recorder.logs().size(), 1u);
  EXPECT_THAT(recorder.logs()[0], HasSubstr("libm.so.6 is not a usable NVML library"));
}

TEST(NvmlLibraryTest, DriverNotLoadedMeansZeroGpusAndOneLogLine) {
  ScopedFakeNode node("driver_not_loaded.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));

  ExpectNoGpus(monitor);
  ASSERT_EQ(recorder.logs().size(), 1u);
  EXPECT_THAT(recorder.logs()[0], HasSubstr("failed to initialise: Driver Not Loaded"));
  EXPECT_THAT(recorder.logs()[0], HasSubstr("kernel module is not loaded"));
}

TEST(NvmlLibraryTest, DriverWithoutGpusMeansZeroGpusAndOneLogLine) {
  ScopedFakeNode node("no_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));

  ExpectNoGpus(monitor);
  EXPECT_TRUE(monitor.inventory().nvml_loaded);
  EXPECT_EQ(monitor.inventory().driver.driver_version, "550.54.15");
  EXPECT_THAT(recorder.logs(), ElementsAre(HasSubstr("(driver 550.54.15) found no GPUs")));
}

TEST(NvmlLibraryTest, EnvironmentVariableChoosesTheLibrary) {
  ScopedFakeNode node("eight_gpus.json");
  ScopedEnvironment library(NvmlLibrary::kPathEnvironmentVariable, kFakeNvml);
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(""));

  EXPECT_EQ(monitor.inventory().library_path, kFakeNvml);
  EXPECT_EQ(monitor.inventory().gpus.size(), 8u);
  EXPECT_THAT(recorder.logs(), ElementsAre(HasSubstr("found 8 GPUs")));
}

TEST(NvmlLibraryTest, ConfiguredPathWinsOverTheEnvironment) {
  ScopedFakeNode node("eight_gpus.json");
  ScopedEnvironment library(NvmlLibrary::kPathEnvironmentVariable, "/nonexistent/nvml.so");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kFakeNvml));

  EXPECT_EQ(monitor.inventory().gpus.size(), 8u);
}

TEST(NvmlLibraryTest, MonitorShutsNvmlDownAndFreesItsEventSet) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  auto monitor = std::make_unique<GpuMonitor>(recorder.Options(kFakeNvml));
  // Hold the fake loaded past the monitor, to read its counters afterwards.
  void* fake = dlopen(kFakeNvml, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake, nullptr);
  auto init_count = reinterpret_cast<FakeNvmlCountFn>(dlsym(fake, "fakeNvmlInitCount"));
  auto event_sets = reinterpret_cast<FakeNvmlCountFn>(dlsym(fake, "fakeNvmlEventSetCount"));
  EXPECT_EQ(init_count(), 1);
  EXPECT_EQ(event_sets(), 1);

  monitor.reset();

  EXPECT_EQ(init_count(), 0);
  EXPECT_EQ(event_sets(), 0);
  dlclose(fake);
}

TEST(NvmlLibraryTest, OlderDriverLacksOptionalFunctionsAndStillWorks) {
  ScopedFakeNode node("eight_gpus.json");
  MonitorRecorder recorder;
  GpuMonitor monitor(recorder.Options(kOldDriverFakeNvml));

  const GpuInventory& inventory = monitor.inventory();
  ASSERT_TRUE(inventory.nvml_loaded);
  // Each of these has no older version to fall back to; the rest resolved to older names
  // (nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetPciInfo_v2, nvmlEventSetWait, ...).
  EXPECT_THAT(inventory.missing_functions,
              UnorderedElementsAre("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryAffinity",
                                   "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNvLinkRemoteDeviceType",
                                   "nvmlDeviceGetRemappedRows", "nvmlDeviceGetFieldValues",
                                   "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc",
                                   "nvmlGpmSampleFree", "nvmlGpmSampleGet", "nvmlGpmMetricsGet"));
  ASSERT_EQ(inventory.gpus.size(), 8u);
  EXPECT_EQ(inventory.gpus[3].pci_bus_id, "00000000:5D:00.0");
  EXPECT_EQ(inventory.gpus[3].memory_total_bytes, 85520809984u);
  EXPECT_EQ(inventory.driver.cuda_driver_version, 12040);
  EXPECT_TRUE(monitor.listening_for_events());
  EXPECT_THAT(recorder.logs(),
              ElementsAre(AllOf(HasSubstr("this driver lacks nvmlDeviceGetMemoryInfo_v2"),
                                HasSubstr("no SM activity (NVML GPM): the driver has no GPM"))));
}

TEST(NvmlLibraryTest, OpenReportsWhyItFailed) {
  std::string diagnostic;
  EXPECT_EQ(NvmlLibrary::Open("/nonexistent/libnvidia-ml.so.1", &diagnostic), nullptr);
  EXPECT_THAT(diagnostic, HasSubstr("could not be loaded"));
}

}  // namespace
}  // namespace cohort::gpu
