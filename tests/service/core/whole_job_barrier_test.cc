#include "service/core/whole_job_barrier.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "service/core/parked_call.h"
#include "service/core/timer_queue.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace whole_job_barrier_test {
namespace {

const TaskName kW0{"worker", 0};
const TaskName kW1{"worker", 1};
const absl::Time kStart = absl::FromUnixSeconds(1000);

std::shared_ptr<ParkedCall> CallOf(WaiterId id, const TaskName& task) {
  return std::make_shared<Parked<absl::Status>>(id, ParkKind::kRegister, task,
                                                [](const absl::Status&) {});
}

std::vector<WaiterId> Ids(const WholeJobBarrier::Calls& calls) {
  std::vector<WaiterId> ids;
  for (const auto& call : calls) ids.push_back(call->id());
  return ids;
}

class WholeJobBarrierTest : public ::testing::Test {
 protected:
  TimerQueue timers_;
  int timeouts_ = 0;
  WholeJobBarrier barrier_{&timers_, absl::Seconds(30), [this] { ++timeouts_; }};
};

TEST_F(WholeJobBarrierTest, TimesOutAFixedTimeAfterItOpens) {
  barrier_.OpenIfIdle(kStart);
  barrier_.OpenIfIdle(kStart + absl::Seconds(20));  // already open: the timeout stays

  timers_.RunDue(kStart + absl::Seconds(29));
  EXPECT_EQ(timeouts_, 0);
  timers_.RunDue(kStart + absl::Seconds(30));
  EXPECT_EQ(timeouts_, 1);
}

TEST_F(WholeJobBarrierTest, EndingHandsBackEveryCallAndStopsTheTimeout) {
  barrier_.OpenIfIdle(kStart);
  barrier_.AddCall(CallOf(1, kW0));
  barrier_.AddCall(CallOf(2, kW1));

  EXPECT_EQ(Ids(barrier_.End(absl::OkStatus())), (std::vector<WaiterId>{1, 2}));

  EXPECT_EQ(barrier_.state(), WholeJobBarrier::State::kPassed);
  EXPECT_TRUE(barrier_.is_done());
  timers_.RunDue(kStart + absl::Hours(1));
  EXPECT_EQ(timeouts_, 0);
}

TEST_F(WholeJobBarrierTest, AFailedBarrierKeepsItsErrorForLateComers) {
  barrier_.OpenIfIdle(kStart);

  barrier_.End(absl::InternalError("a task is in error"));

  EXPECT_EQ(barrier_.state(), WholeJobBarrier::State::kFailed);
  EXPECT_EQ(barrier_.result().code(), absl::StatusCode::kInternal);
  barrier_.OpenIfIdle(kStart + absl::Seconds(1));  // does not reopen
  EXPECT_EQ(barrier_.state(), WholeJobBarrier::State::kFailed);
}

TEST_F(WholeJobBarrierTest, ACancelledCallLeavesItsTaskWaiting) {
  barrier_.OpenIfIdle(kStart);
  barrier_.AddWaiting(kW0);
  barrier_.AddCall(CallOf(1, kW0));

  barrier_.RemoveCall(1);

  EXPECT_TRUE(barrier_.IsWaiting(kW0));
  EXPECT_EQ(barrier_.num_waiting(), 1);
  EXPECT_TRUE(barrier_.End(absl::OkStatus()).empty());
}

TEST_F(WholeJobBarrierTest, TakingOneTasksCallsLeavesTheOthers) {
  barrier_.AddCall(CallOf(1, kW0));
  barrier_.AddCall(CallOf(2, kW1));
  barrier_.AddCall(CallOf(3, kW0));

  EXPECT_EQ(Ids(barrier_.TakeCallsOf(kW0)), (std::vector<WaiterId>{1, 3}));
  EXPECT_EQ(Ids(barrier_.End(absl::OkStatus())), (std::vector<WaiterId>{2}));
}

}  // namespace
}  // namespace whole_job_barrier_test
}  // namespace cohort
