// Health through the whole stack: faults injected into the fake NVML (XIDs, double-bit ECC
// errors, a GPU falling off the bus) reach GpuMonitor's health and its listener, by polling
// and by the background event thread, with the recovery action the driver reports.

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::chrono::milliseconds kWait(2000);

class GpuMonitorHealthTest : public ::testing::Test {
 protected:
  void Open(const std::string& config, const char* library = kFakeNvml, HealthPolicy policy = {}) {
    library_ = library;
    node_ = std::make_unique<ScopedFakeNode>(config);
    GpuMonitorOptions options = recorder_.Options(library);
    options.health_policy = std::move(policy);
    monitor_ = std::make_unique<GpuMonitor>(options);
  }

  void InjectXid(unsigned int gpu, unsigned long long xid) {
    ASSERT_EQ(FakeControl<FakeNvmlInjectXidFn>(library_, "fakeNvmlInjectXid")(gpu, xid), 0);
  }
  void InjectDoubleBitEcc(unsigned int gpu, unsigned long long count) {
    ASSERT_EQ(FakeControl<FakeNvmlInjectDoubleBitEccFn>(library_, "fakeNvmlInjectDoubleBitEcc")(
                  gpu, count),
              0);
  }
  void LoseGpu(unsigned int gpu) {
    ASSERT_EQ(FakeControl<FakeNvmlSetGpuLostFn>(library_, "fakeNvmlSetGpuLost")(gpu), 0);
  }
  void SetRecoveryAction(unsigned int gpu, unsigned int action) {
    ASSERT_EQ(FakeControl<FakeNvmlSetRecoveryActionFn>(library_, "fakeNvmlSetRecoveryAction")(
                  gpu, action),
              0);
  }

  std::vector<int> UnhealthyGpus() {
    std::vector<int> unhealthy;
    for (const GpuHealth& health : monitor_->Health()) {
      if (!health.healthy) unhealthy.push_back(health.gpu_index);
    }
    return unhealthy;
  }

  const char* library_ = kFakeNvml;
  MonitorRecorder recorder_;
  std::unique_ptr<ScopedFakeNode> node_;
  std::unique_ptr<GpuMonitor> monitor_;
};

TEST_F(GpuMonitorHealthTest, AllGpusStartHealthy) {
  Open("eight_gpus.json");

  EXPECT_TRUE(monitor_->listening_for_events());
  EXPECT_THAT(UnhealthyGpus(), IsEmpty());
  EXPECT_THAT(monitor_->PollEvents(std::chrono::milliseconds(10)), IsEmpty());
}

TEST_F(GpuMonitorHealthTest, CriticalXidMarksThatGpuUnhealthy) {
  Open("eight_gpus.json");

  InjectXid(3, 79);
  std::vector<GpuEvent> events = monitor_->PollEvents(kWait);

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].gpu_index, 3);
  EXPECT_EQ(events[0].kind, GpuEvent::Kind::kXid);
  EXPECT_EQ(events[0].xid, 79u);
  EXPECT_THAT(UnhealthyGpus(), ElementsAre(3));
  // The fake's driver, like a current one, reports a recovery action; here it needs none.
  EXPECT_THAT(monitor_->Health()[3].reasons,
              ElementsAre("XID 79 (GPU has fallen off the bus); recovery action: none"));
  ASSERT_EQ(recorder_.events().size(), 1u);
  HealthEvent event = recorder_.events()[0];
  EXPECT_EQ(event.gpu_index, 3);
  EXPECT_EQ(event.gpu_uuid, "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001003");
  EXPECT_EQ(event.problem, HealthProblem::kCriticalXid);
  EXPECT_EQ(event.xid, 79u);
  EXPECT_EQ(event.recovery_action, 0u);
}

TEST_F(GpuMonitorHealthTest, XidCarriesTheRecoveryActionTheDriverReports) {
  Open("eight_gpus.json");

  SetRecoveryAction(3, 1);
  InjectXid(3, 79);
  monitor_->PollEvents(kWait);

  ASSERT_EQ(recorder_.events().size(), 1u);
  HealthEvent event = recorder_.events()[0];
  EXPECT_EQ(event.recovery_action, 1u);
  EXPECT_EQ(event.reason, "XID 79 (GPU has fallen off the bus); recovery action: GPU reset");
  EXPECT_THAT(monitor_->Health()[3].reasons, ElementsAre(HasSubstr("recovery action: GPU reset")));
}

TEST_F(GpuMonitorHealthTest, DriverWithoutTheRecoveryActionFieldGivesNoAction) {
  Open("nvlink_mesh.json");  // a 470 driver: nvmlDeviceGetFieldValues, but not the field

  InjectXid(1, 79);
  monitor_->PollEvents(kWait);

  ASSERT_EQ(recorder_.events().size(), 1u);
  EXPECT_EQ(recorder_.events()[0].recovery_action, std::nullopt);
  EXPECT_EQ(recorder_.events()[0].reason, "XID 79 (GPU has fallen off the bus)");
}

TEST_F(GpuMonitorHealthTest, DriverWithoutFieldValuesGivesNoAction) {
  Open("eight_gpus.json", kOldDriverFakeNvml);  // no nvmlDeviceGetFieldValues at all

  SetRecoveryAction(2, 1);
  InjectXid(2, 79);
  monitor_->PollEvents(kWait);

  ASSERT_EQ(recorder_.events().size(), 1u);
  EXPECT_EQ(recorder_.events()[0].recovery_action, std::nullopt);
  EXPECT_EQ(recorder_.events()[0].reason, "XID 79 (GPU has fallen off the bus)");
}

TEST_F(GpuMonitorHealthTest, ApplicationXidLeavesTheGpuHealthy) {
  Open("eight_gpus.json");

  InjectXid(2, 13);
  InjectXid(2, 43);
  std::vector<GpuEvent> events = monitor_->PollEvents(kWait);

  EXPECT_EQ(events.size(), 2u);  // seen, and judged harmless
  EXPECT_THAT(UnhealthyGpus(), IsEmpty());
  EXPECT_THAT(recorder_.events(), IsEmpty());
}

TEST_F(GpuMonitorHealthTest, ConfiguredIgnoreListApplies) {
  HealthPolicy policy;
  policy.ignored_xids = {79};
  Open("eight_gpus.json", kFakeNvml, policy);

  InjectXid(1, 79);
  InjectXid(2, 13);
  monitor_->PollEvents(kWait);

  EXPECT_THAT(UnhealthyGpus(), ElementsAre(2));
}

TEST_F(GpuMonitorHealthTest, DoubleBitEccEventMarksThatGpuUnhealthy) {
  Open("eight_gpus.json");

  InjectDoubleBitEcc(6, 1);
  std::vector<GpuEvent> events = monitor_->PollEvents(kWait);

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, GpuEvent::Kind::kDoubleBitEcc);
  EXPECT_THAT(UnhealthyGpus(), ElementsAre(6));
  ASSERT_EQ(recorder_.events().size(), 1u);
  EXPECT_EQ(recorder_.events()[0].problem, HealthProblem::kDoubleBitEcc);
}

TEST_F(GpuMonitorHealthTest, RisingDoubleBitCounterIsFoundBySampling) {
  // These GPUs raise no double-bit ECC events, so only the counters can tell.
  Open("nvlink_mesh.json");
  monitor_->Sample();

  InjectDoubleBitEcc(0, 2);
  EXPECT_THAT(monitor_->PollEvents(std::chrono::milliseconds(10)), IsEmpty());
  EXPECT_THAT(UnhealthyGpus(), IsEmpty());
  monitor_->Sample();

  EXPECT_THAT(UnhealthyGpus(), ElementsAre(0));
  ASSERT_EQ(recorder_.events().size(), 1u);
  EXPECT_EQ(recorder_.events()[0].reason,
            "double-bit ECC errors rose from 0 to 2 (volatile counter)");
}

TEST_F(GpuMonitorHealthTest, DoubleBitErrorsFromBeforeStartLeaveTheGpuHealthy) {
  Open("eight_gpus.json");  // GPU 5 has one aggregate double-bit error from its past

  monitor_->Sample();
  monitor_->Sample();

  EXPECT_THAT(UnhealthyGpus(), IsEmpty());
}

TEST_F(GpuMonitorHealthTest, LostGpuIsUnhealthyAfterTheNextSample) {
  Open("eight_gpus.json");

  LoseGpu(4);
  std::vector<GpuSample> samples = monitor_->Sample();

  ASSERT_EQ(samples.size(), 8u);
  EXPECT_TRUE(samples[4].lost);
  EXPECT_EQ(samples[4].temperature_celsius, std::nullopt);
  EXPECT_FALSE(samples[3].lost);
  EXPECT_THAT(UnhealthyGpus(), ElementsAre(4));
  ASSERT_EQ(recorder_.events().size(), 1u);
  EXPECT_EQ(recorder_.events()[0].problem, HealthProblem::kGpuLost);
  EXPECT_EQ(recorder_.events()[0].reason,
            "GPU is lost from the bus (NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetUtilizationRates)");

  // Later samples still say lost, and do not report it again.
  EXPECT_TRUE(monitor_->Sample()[4].lost);
  EXPECT_EQ(recorder_.events().size(), 1u);
}

TEST_F(GpuMonitorHealthTest, LostGpuIsFoundWhenTheEventWaitSaysSo) {
  Open("eight_gpus.json");

  LoseGpu(6);
  EXPECT_THAT(monitor_->PollEvents(kWait), IsEmpty());

  EXPECT_THAT(UnhealthyGpus(), ElementsAre(6));
}

TEST_F(GpuMonitorHealthTest, EventThreadDeliversProblemsToTheListener) {
  Open("eight_gpus.json");
  ASSERT_TRUE(monitor_->StartEventThread());

  InjectXid(0, 48);
  ASSERT_TRUE(recorder_.WaitForEvents(1));
  LoseGpu(5);
  ASSERT_TRUE(recorder_.WaitForEvents(2));
  monitor_->StopEventThread();

  std::vector<HealthEvent> events = recorder_.events();
  EXPECT_EQ(events[0].gpu_index, 0);
  EXPECT_EQ(events[0].reason, "XID 48 (double-bit ECC error); recovery action: none");
  EXPECT_EQ(events[1].gpu_index, 5);
  EXPECT_EQ(events[1].problem, HealthProblem::kGpuLost);
  EXPECT_THAT(UnhealthyGpus(), ElementsAre(0, 5));
}

TEST_F(GpuMonitorHealthTest, StoppingTheEventThreadEndsItSoEventsWaitForTheNextPoll) {
  Open("eight_gpus.json");
  ASSERT_TRUE(monitor_->StartEventThread());
  EXPECT_TRUE(monitor_->StartEventThread());  // already running: no second thread

  // Returns once the thread saw the stop (at the end of its wait slice) and ended.
  monitor_->StopEventThread();

  // Nothing polls any more: an XID stays in NVML until the next poll, which finds it.
  InjectXid(2, 79);
  EXPECT_THAT(UnhealthyGpus(), IsEmpty());
  std::vector<GpuEvent> events = monitor_->PollEvents(kWait);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].gpu_index, 2);
  EXPECT_THAT(UnhealthyGpus(), ElementsAre(2));
}

TEST_F(GpuMonitorHealthTest, OlderDriverStillDeliversXids) {
  Open("eight_gpus.json", kOldDriverFakeNvml);  // nvmlEventSetWait, not _v2

  InjectXid(7, 94);
  monitor_->PollEvents(kWait);

  EXPECT_THAT(UnhealthyGpus(), ElementsAre(7));
  EXPECT_THAT(monitor_->Health()[7].reasons, ElementsAre(HasSubstr("contained ECC error")));
}

}  // namespace
}  // namespace cohort::gpu
