// Barriers, specified through CoordinationService::Barrier, which feeds the BarrierTable the
// participants' health and failures.
#include "service/core/barrier_table.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"
#include "tests/service/core/callback_result.h"
#include "tests/service/core/coordination_service_fixture.h"

namespace cohort {
namespace {

using ::cohort::testing::CoordinationServiceTest;
using ::cohort::testing::kSidecar0;
using ::cohort::testing::kW0;
using ::cohort::testing::kW1;
using ::cohort::testing::kW2;
using ::cohort::testing::Mentions;
using BarrierResult = ::cohort::testing::ValueResult<int64_t>;

constexpr absl::Duration kTimeout = absl::Seconds(10);

// Three workload tasks, registered, and an auxiliary job of two.
class BarrierTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    CoordinationServiceTest::SetUp();
    RegisterWorkers();
  }

  BarrierResult Arrive(const TaskName& caller, int64_t counter = 0,
                       std::vector<TaskName> tasks = {}, absl::Duration timeout = kTimeout,
                       const std::string& id = "b", WaiterId waiter = 0) {
    BarrierResult result;
    if (waiter == 0) waiter = service_->NewWaiterId();
    service_->Barrier(id, counter, timeout, caller, std::move(tasks), waiter, result.Callback());
    return result;
  }

  // Runs instance `counter` of barrier "b" with every workload task.
  void Pass(int64_t counter) {
    BarrierResult a = Arrive(kW0, counter), b = Arrive(kW1, counter), c = Arrive(kW2, counter);
    ASSERT_TRUE(c.fired());
    ASSERT_EQ(c.value().value(), counter);
  }
};

absl::StatusCode Code(const BarrierResult& r) { return r.value().status().code(); }

TEST_F(BarrierTest, BarrierPassesWhenAllParticipantsArrive) {
  BarrierResult w0 = Arrive(kW0);
  BarrierResult w1 = Arrive(kW1);
  EXPECT_FALSE(w0.fired());
  EXPECT_FALSE(w1.fired());

  BarrierResult w2 = Arrive(kW2);

  for (const BarrierResult* r : {&w0, &w1, &w2}) {
    ASSERT_TRUE(r->fired());
    EXPECT_EQ(r->value().value(), 0);
  }
  EXPECT_TRUE(service_->OpenBarriers().empty());
}

TEST_F(BarrierTest, EmptyTaskListMeansEveryWorkloadTaskButNotAuxiliaryOnes) {
  ASSERT_TRUE(Register(kSidecar0).value().ok());
  BarrierResult w0 = Arrive(kW0), w1 = Arrive(kW1);
  std::vector<BarrierSnapshot> open = service_->OpenBarriers();
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].arrived, (std::vector<TaskName>{kW0, kW1}));
  EXPECT_EQ(open[0].missing, std::vector<TaskName>{kW2});

  BarrierResult w2 = Arrive(kW2);

  ASSERT_TRUE(w2.fired());
  EXPECT_TRUE(w2.value().ok());
}

TEST_F(BarrierTest, PassedBarrierAnswersARepeatedCallWithTheSameCounterAtOnce) {
  Pass(0);

  BarrierResult again = Arrive(kW0, 0);

  ASSERT_TRUE(again.fired());
  EXPECT_EQ(again.value().value(), 0);
  EXPECT_TRUE(service_->OpenBarriers().empty());
}

TEST_F(BarrierTest, FailedBarrierAnswersARepeatedCallWithTheSameCounterWithItsError) {
  BarrierResult w0 = Arrive(kW0);
  Advance(kTimeout);
  ASSERT_EQ(Code(w0), absl::StatusCode::kDeadlineExceeded);

  BarrierResult late = Arrive(kW1, 0);

  ASSERT_TRUE(late.fired());
  EXPECT_EQ(late.value().status(), w0.value().status());
}

TEST_F(BarrierTest, NextInstanceOfABarrierUsesCounterPlusOne) {
  Pass(0);

  BarrierResult w0 = Arrive(kW0, 1), w1 = Arrive(kW1, 1);
  EXPECT_FALSE(w0.fired());
  BarrierResult w2 = Arrive(kW2, 1);

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().value(), 1);
  EXPECT_EQ(w2.value().value(), 1);
}

TEST_F(BarrierTest, CallWithAnUnexpectedCounterIsInternal) {
  Pass(0);

  BarrierResult skipped = Arrive(kW0, 2);

  ASSERT_TRUE(skipped.fired());
  EXPECT_EQ(Code(skipped), absl::StatusCode::kInternal);
}

TEST_F(BarrierTest, CounterMismatchFailsTheOpenInstanceForEveryone) {
  BarrierResult w0 = Arrive(kW0, 0);

  BarrierResult w1 = Arrive(kW1, 1);

  ASSERT_TRUE(w0.fired());
  ASSERT_TRUE(w1.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInternal);
  EXPECT_EQ(Code(w1), absl::StatusCode::kInternal);
}

TEST_F(BarrierTest, BarrierFailsWhenTaskListsDiffer) {
  BarrierResult w0 = Arrive(kW0, 0, {kW0, kW1});

  BarrierResult w1 = Arrive(kW1, 0, {kW0, kW1, kW2});

  ASSERT_TRUE(w0.fired());
  ASSERT_TRUE(w1.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(w1), absl::StatusCode::kInvalidArgument);
}

TEST_F(BarrierTest, TaskListsThatDifferOnlyInOrderOrDuplicatesAgree) {
  BarrierResult w0 = Arrive(kW0, 0, {kW1, kW0});

  BarrierResult w1 = Arrive(kW1, 0, {kW0, kW1, kW1});

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().value(), 0);
  EXPECT_EQ(w1.value().value(), 0);
}

TEST_F(BarrierTest, BarrierFailsWhenCallerIsNotAParticipant) {
  BarrierResult w0 = Arrive(kW0, 0, {kW0, kW1});

  BarrierResult outsider = Arrive(kW2, 0, {kW0, kW1});

  ASSERT_TRUE(outsider.fired());
  EXPECT_EQ(Code(outsider), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInvalidArgument);
}

TEST_F(BarrierTest, BarrierFailsWhenAParticipantIsInError) {
  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("crashed")).ok());

  BarrierResult w0 = Arrive(kW0);

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInternal);
  EXPECT_TRUE(Mentions(w0.value().status(), kW2));
}

TEST_F(BarrierTest, BarrierFailsWhenAParticipantFailsWhileOthersWait) {
  BarrierResult w0 = Arrive(kW0), w1 = Arrive(kW1);

  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("crashed")).ok());

  ASSERT_TRUE(w0.fired());
  ASSERT_TRUE(w1.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInternal);
  EXPECT_EQ(Code(w1), absl::StatusCode::kInternal);
}

TEST_F(BarrierTest, FailureOfATaskOutsideTheBarrierDoesNotFailIt) {
  BarrierResult w0 = Arrive(kW0, 0, {kW0, kW1});

  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("crashed")).ok());

  EXPECT_FALSE(w0.fired());
}

TEST_F(BarrierTest, BarrierTimesOutNamingTheMissingTasks) {
  BarrierResult w0 = Arrive(kW0);

  Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(w0.fired());
  Advance(absl::Milliseconds(1));

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kDeadlineExceeded);
  const absl::Status& error = w0.value().status();
  EXPECT_TRUE(Mentions(error, kW1)) << error;
  EXPECT_TRUE(Mentions(error, kW2)) << error;
  EXPECT_FALSE(Mentions(error, kW0)) << error;
}

TEST_F(BarrierTest, FirstArrivalFixesTheDeadline) {
  BarrierResult w0 = Arrive(kW0, 0, {}, absl::Seconds(10));
  Advance(absl::Seconds(5));
  BarrierResult w1 = Arrive(kW1, 0, {}, absl::Seconds(100));

  Advance(absl::Seconds(5));

  ASSERT_TRUE(w1.fired());
  EXPECT_EQ(Code(w1), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Code(w0), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(BarrierTest, CancelBarrierCancelsWaitersAndLaterCallers) {
  BarrierResult w0 = Arrive(kW0);

  ASSERT_TRUE(service_->CancelBarrier("b", 0, kW1).ok());

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kCancelled);
  BarrierResult w2 = Arrive(kW2);
  ASSERT_TRUE(w2.fired());
  EXPECT_EQ(Code(w2), absl::StatusCode::kCancelled);
}

TEST_F(BarrierTest, CancelBarrierBeforeAnyoneArrivesCancelsLaterCallers) {
  ASSERT_TRUE(service_->CancelBarrier("b", 0, kW1).ok());

  BarrierResult w0 = Arrive(kW0);

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kCancelled);
}

TEST_F(BarrierTest, CancelBarrierAfterItPassedIsFailedPrecondition) {
  Pass(0);

  EXPECT_EQ(service_->CancelBarrier("b", 0, kW0).code(), absl::StatusCode::kFailedPrecondition);

  BarrierResult again = Arrive(kW1, 0);
  EXPECT_EQ(again.value().value(), 0);
}

TEST_F(BarrierTest, CancelBarrierOfAnotherInstanceThanTheOpenOneIsFailedPrecondition) {
  Pass(0);
  BarrierResult w0 = Arrive(kW0, 1);

  EXPECT_EQ(service_->CancelBarrier("b", 2, kW0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(w0.fired());
}

TEST_F(BarrierTest, RepeatedCallOfATaskCancelsItsEarlierCall) {
  BarrierResult first = Arrive(kW0);

  BarrierResult second = Arrive(kW0);

  ASSERT_TRUE(first.fired());
  EXPECT_EQ(Code(first), absl::StatusCode::kCancelled);
  EXPECT_FALSE(second.fired());
  BarrierResult w1 = Arrive(kW1), w2 = Arrive(kW2);
  ASSERT_TRUE(second.fired());
  EXPECT_EQ(second.value().value(), 0);
  EXPECT_EQ(first.count(), 1);
}

TEST_F(BarrierTest, CallerThatGoesAwayStillCountsAsArrived) {
  WaiterId waiter = service_->NewWaiterId();
  BarrierResult w0 = Arrive(kW0, 0, {}, kTimeout, "b", waiter);
  service_->Cancel(waiter, absl::CancelledError("rpc cancelled"));
  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().status(), absl::CancelledError("rpc cancelled"));

  BarrierResult w1 = Arrive(kW1), w2 = Arrive(kW2);

  ASSERT_TRUE(w2.fired());
  EXPECT_EQ(w1.value().value(), 0);
  EXPECT_EQ(w2.value().value(), 0);
  EXPECT_EQ(w0.count(), 1);
}

TEST_F(BarrierTest, BarrierOverASubsetPassesWithoutTheOtherTasks) {
  BarrierResult w0 = Arrive(kW0, 0, {kW0, kW2});

  BarrierResult w2 = Arrive(kW2, 0, {kW0, kW2});

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().value(), 0);
  EXPECT_EQ(w2.value().value(), 0);
}

TEST_F(BarrierTest, BarriersWithDifferentIdsAreIndependent) {
  BarrierResult a = Arrive(kW0, 0, {kW0, kW1}, kTimeout, "a");
  BarrierResult b = Arrive(kW0, 0, {kW0, kW1}, kTimeout, "b");

  BarrierResult a1 = Arrive(kW1, 0, {kW0, kW1}, kTimeout, "a");

  ASSERT_TRUE(a.fired());
  EXPECT_TRUE(a.value().ok());
  EXPECT_FALSE(b.fired());
}

TEST_F(BarrierTest, StoppingTheServiceEndsOpenBarriersAndLaterCallsUnavailable) {
  BarrierResult w0 = Arrive(kW0);

  service_->Stop(absl::UnavailableError("coordinator shutting down"));

  // Unavailable, as every other parked call: the coordinator went away, the barrier did not
  // fail (a proxy sends the arrival again to the coordinator that comes back).
  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kUnavailable);
  auto info = GetServiceError(w0.value().status());
  ASSERT_TRUE(info.has_value());
  EXPECT_FALSE(info->source.has_value());
  BarrierResult late = Arrive(kW1);
  ASSERT_TRUE(late.fired());
  EXPECT_EQ(Code(late), absl::StatusCode::kUnavailable);
}

TEST_F(BarrierTest, BarrierErrorCarriesTheBarrierIdAndCounter) {
  Pass(0);
  BarrierResult w0 = Arrive(kW0, 1);

  Advance(kTimeout);

  ASSERT_TRUE(w0.fired());
  std::optional<BarrierErrorInfo> info = GetBarrierError(w0.value().status());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->barrier_id, "b");
  EXPECT_EQ(info->counter, 1);
}

TEST_F(BarrierTest, BarrierNamingAnUnknownTaskIsInvalidArgument) {
  BarrierResult w0 = Arrive(kW0, 0, {kW0, TaskName{"worker", 7}});

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInvalidArgument);
}

TEST_F(BarrierTest, BarrierWithAnEmptyIdIsInvalidArgument) {
  BarrierResult w0 = Arrive(kW0, 0, {}, kTimeout, "");

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Code(w0), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort
