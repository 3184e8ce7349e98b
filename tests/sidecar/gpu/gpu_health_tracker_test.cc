// The health rules on their own, fed directly: which XIDs count, when ECC counters mean a
// double-bit error, lost GPUs, that each problem is reported once, and the recovery action
// each problem carries.

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sidecar/gpu/gpu_health.h"

namespace cohort::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

EccCounts DoubleBit(uint64_t volatile_count, uint64_t aggregate_count) {
  EccCounts counts;
  counts.volatile_single_bit = 0;
  counts.volatile_double_bit = volatile_count;
  counts.aggregate_single_bit = 0;
  counts.aggregate_double_bit = aggregate_count;
  return counts;
}

class GpuHealthTrackerTest : public ::testing::Test {
 protected:
  void Start(HealthPolicy policy = {}, RecoveryActionReader read_recovery_action = nullptr) {
    tracker_ = std::make_unique<GpuHealthTracker>(
        std::move(policy), std::vector<std::string>{"GPU-a", "GPU-b"},
        [this](const HealthEvent& event) { events_.push_back(event); },
        std::move(read_recovery_action));
  }
  // Every GPU's driver answers `action`; asked_ counts the questions.
  void StartWithRecoveryAction(std::optional<unsigned int> action) {
    Start({}, [this, action](int gpu) {
      asked_.push_back(gpu);
      return action;
    });
  }
  void SetUp() override { Start(); }

  bool Healthy(int gpu) { return tracker_->Snapshot()[gpu].healthy; }

  std::unique_ptr<GpuHealthTracker> tracker_;
  std::vector<HealthEvent> events_;
  std::vector<int> asked_;
};

TEST_F(GpuHealthTrackerTest, EveryGpuStartsHealthy) {
  std::vector<GpuHealth> health = tracker_->Snapshot();
  ASSERT_EQ(health.size(), 2u);
  EXPECT_EQ(health[1].gpu_index, 1);
  EXPECT_EQ(health[1].gpu_uuid, "GPU-b");
  EXPECT_TRUE(health[1].healthy);
  EXPECT_THAT(health[1].reasons, IsEmpty());
}

TEST_F(GpuHealthTrackerTest, CriticalXidMarksTheGpuUnhealthy) {
  tracker_->OnXid(1, 79);

  EXPECT_TRUE(Healthy(0));
  EXPECT_FALSE(Healthy(1));
  EXPECT_THAT(tracker_->Snapshot()[1].reasons, ElementsAre("XID 79 (GPU has fallen off the bus)"));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].gpu_index, 1);
  EXPECT_EQ(events_[0].gpu_uuid, "GPU-b");
  EXPECT_EQ(events_[0].problem, HealthProblem::kCriticalXid);
  EXPECT_EQ(events_[0].xid, 79u);
  EXPECT_EQ(events_[0].recovery_action, std::nullopt);  // no reader, so no action
}

TEST_F(GpuHealthTrackerTest, ApplicationXidsAreIgnoredByDefault) {
  for (uint64_t xid : {13, 31, 43, 45, 68, 109}) tracker_->OnXid(0, xid);

  EXPECT_TRUE(Healthy(0));
  EXPECT_THAT(events_, IsEmpty());
}

TEST_F(GpuHealthTrackerTest, IgnoreListIsConfigurable) {
  HealthPolicy policy;
  policy.ignored_xids = {79};
  Start(policy);

  tracker_->OnXid(0, 79);
  EXPECT_TRUE(Healthy(0));
  tracker_->OnXid(0, 13);
  EXPECT_FALSE(Healthy(0));
  EXPECT_THAT(tracker_->Snapshot()[0].reasons, ElementsAre("XID 13 (critical XID event)"));
}

TEST_F(GpuHealthTrackerTest, EachXidCodeIsReportedOnce) {
  tracker_->OnXid(0, 48);
  tracker_->OnXid(0, 48);
  tracker_->OnXid(0, 94);

  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[0].xid, 48u);
  EXPECT_EQ(events_[1].xid, 94u);
  EXPECT_EQ(tracker_->Snapshot()[0].reasons.size(), 2u);
}

TEST_F(GpuHealthTrackerTest, DoubleBitEccEventMarksTheGpuUnhealthyOnce) {
  tracker_->OnDoubleBitEccEvent(0);
  tracker_->OnDoubleBitEccEvent(0);

  EXPECT_FALSE(Healthy(0));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].problem, HealthProblem::kDoubleBitEcc);
}

TEST_F(GpuHealthTrackerTest, RisingDoubleBitCounterMarksTheGpuUnhealthy) {
  tracker_->OnEccCounts(0, DoubleBit(0, 4));
  tracker_->OnEccCounts(0, DoubleBit(0, 4));
  EXPECT_TRUE(Healthy(0));

  tracker_->OnEccCounts(0, DoubleBit(2, 6));

  EXPECT_FALSE(Healthy(0));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].problem, HealthProblem::kDoubleBitEcc);
  EXPECT_EQ(events_[0].reason, "double-bit ECC errors rose from 0 to 2 (volatile counter)");
}

TEST_F(GpuHealthTrackerTest, AggregateCounterAloneAlsoCounts) {
  EccCounts only_aggregate;
  only_aggregate.aggregate_double_bit = 1;
  tracker_->OnEccCounts(1, only_aggregate);
  only_aggregate.aggregate_double_bit = 2;
  tracker_->OnEccCounts(1, only_aggregate);

  EXPECT_FALSE(Healthy(1));
  EXPECT_THAT(events_[0].reason, HasSubstr("from 1 to 2 (aggregate counter)"));
}

TEST_F(GpuHealthTrackerTest, DoubleBitErrorsFromBeforeTheFirstSampleDoNotCount) {
  tracker_->OnEccCounts(0, DoubleBit(3, 9));
  tracker_->OnEccCounts(0, DoubleBit(3, 9));

  EXPECT_TRUE(Healthy(0));
}

TEST_F(GpuHealthTrackerTest, VolatileCounterResetByADriverReloadIsNoError) {
  tracker_->OnEccCounts(0, DoubleBit(3, 9));
  tracker_->OnEccCounts(0, DoubleBit(0, 9));
  EXPECT_TRUE(Healthy(0));
  tracker_->OnEccCounts(0, DoubleBit(1, 10));
  EXPECT_FALSE(Healthy(0));
  EXPECT_EQ(events_[0].reason, "double-bit ECC errors rose from 0 to 1 (volatile counter)");
}

TEST_F(GpuHealthTrackerTest, SingleBitErrorsLeaveTheGpuHealthy) {
  EccCounts counts = DoubleBit(0, 0);
  tracker_->OnEccCounts(0, counts);
  counts.volatile_single_bit = 100;
  counts.aggregate_single_bit = 100;
  tracker_->OnEccCounts(0, counts);

  EXPECT_TRUE(Healthy(0));
}

TEST_F(GpuHealthTrackerTest, LostGpuIsReportedOnce) {
  tracker_->OnGpuLost(1, "NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetPowerUsage");
  tracker_->OnGpuLost(1, "NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetTemperature");

  EXPECT_FALSE(Healthy(1));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].problem, HealthProblem::kGpuLost);
  EXPECT_EQ(events_[0].reason,
            "GPU is lost from the bus (NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetPowerUsage)");
}

TEST_F(GpuHealthTrackerTest, ReportsAboutUnknownGpusAreDropped) {
  tracker_->OnXid(7, 79);
  tracker_->OnXid(-1, 79);
  tracker_->OnGpuLost(2, "x");

  EXPECT_THAT(events_, IsEmpty());
}

TEST_F(GpuHealthTrackerTest, ListenerMayReadTheSnapshot) {
  std::vector<bool> seen_healthy;
  GpuHealthTracker* tracker = nullptr;
  GpuHealthTracker reentrant({}, {"GPU-a"}, [&](const HealthEvent&) {
    seen_healthy.push_back(tracker->Snapshot()[0].healthy);
  });
  tracker = &reentrant;

  reentrant.OnXid(0, 79);

  EXPECT_THAT(seen_healthy, ElementsAre(false));
}

TEST_F(GpuHealthTrackerTest, XidCarriesTheRecoveryActionAndTheReasonNamesIt) {
  StartWithRecoveryAction(1);

  tracker_->OnXid(1, 79);

  EXPECT_THAT(asked_, ElementsAre(1));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].recovery_action, 1u);
  EXPECT_EQ(events_[0].reason, "XID 79 (GPU has fallen off the bus); recovery action: GPU reset");
  EXPECT_THAT(tracker_->Snapshot()[1].reasons, ElementsAre(events_[0].reason));
}

TEST_F(GpuHealthTrackerTest, DoubleBitEccErrorsCarryTheRecoveryActionToo) {
  StartWithRecoveryAction(4);

  tracker_->OnDoubleBitEccEvent(0);
  tracker_->OnEccCounts(1, DoubleBit(0, 0));
  tracker_->OnEccCounts(1, DoubleBit(1, 1));

  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[0].recovery_action, 4u);
  EXPECT_EQ(events_[0].reason,
            "double-bit ECC error event from the driver; recovery action: drain and reset");
  EXPECT_EQ(events_[1].recovery_action, 4u);
  EXPECT_THAT(events_[1].reason, HasSubstr("; recovery action: drain and reset"));
}

TEST_F(GpuHealthTrackerTest, ADriverWithoutARecoveryActionLeavesTheReasonAlone) {
  StartWithRecoveryAction(std::nullopt);

  tracker_->OnXid(0, 79);

  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].recovery_action, std::nullopt);
  EXPECT_EQ(events_[0].reason, "XID 79 (GPU has fallen off the bus)");
}

TEST_F(GpuHealthTrackerTest, RecoveryActionIsAskedOnlyForNewProblemsOfGpusNotLost) {
  StartWithRecoveryAction(2);

  tracker_->OnXid(0, 13);  // ignored
  tracker_->OnXid(0, 79);
  tracker_->OnXid(0, 79);  // reported already
  tracker_->OnGpuLost(1, "NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetPowerUsage");
  tracker_->OnXid(1, 79);  // a lost GPU answers nothing

  EXPECT_THAT(asked_, ElementsAre(0));
  ASSERT_EQ(events_.size(), 3u);
  EXPECT_EQ(events_[0].recovery_action, 2u);
  EXPECT_EQ(events_[1].problem, HealthProblem::kGpuLost);
  EXPECT_EQ(events_[1].recovery_action, std::nullopt);
  EXPECT_EQ(events_[2].recovery_action, std::nullopt);
  EXPECT_EQ(events_[2].reason, "XID 79 (GPU has fallen off the bus)");
}

TEST(DescribeXidTest, KnownXidsHaveADescription) {
  EXPECT_EQ(DescribeXid(48), "double-bit ECC error");
  EXPECT_EQ(DescribeXid(95), "uncontained ECC error");
  EXPECT_EQ(DescribeXid(12345), "");
}

TEST(DescribeRecoveryActionTest, NamesNvmlsActionsAndNumbersNewerOnes) {
  struct Case {
    unsigned int action;
    std::string description;
  };
  for (const Case& c : std::vector<Case>{{0, "none"},
                                         {1, "GPU reset"},
                                         {2, "node reboot"},
                                         {3, "drain peer-to-peer traffic"},
                                         {4, "drain and reset"},
                                         {5, "action 5"},
                                         {4294967295u, "action 4294967295"}}) {
    EXPECT_EQ(DescribeRecoveryAction(c.action), c.description) << c.action;
  }
}

}  // namespace
}  // namespace cohort::gpu
