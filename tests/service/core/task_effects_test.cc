#include "service/core/task_effects.h"

#include <memory>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "service/core/parked_call.h"
#include "tests/service/core/callback_result.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace task_effects_test {
namespace {

using ::cohort::testing::StatusResult;

const TaskName kW0{"worker", 0};

class TaskEffectsTest : public ::testing::Test {
 protected:
  // A call parked under `id`, as the service parks one.
  std::shared_ptr<Parked<absl::Status>> Park(WaiterId id, const StatusResult& result) {
    auto call =
        std::make_shared<Parked<absl::Status>>(id, ParkKind::kPollForError, kW0, result.Callback());
    EXPECT_TRUE(registry_.Add(call).ok());
    return call;
  }
  static void CarryOut(TaskEffects& fx) {
    for (auto& fn : fx.after) fn();
  }

  ParkedCallRegistry registry_{ParkLimits{}};
};

TEST_F(TaskEffectsTest, AFinishedCallIsAnsweredOnlyWhenTheEffectsAreCarriedOut) {
  StatusResult result;
  TaskEffects fx;
  fx.Finish<absl::Status>(registry_, Park(1, result), absl::OkStatus());

  EXPECT_FALSE(result.fired());
  CarryOut(fx);
  EXPECT_EQ(result.count(), 1);
  EXPECT_TRUE(result.value().ok());
  EXPECT_EQ(registry_.Count(ParkKind::kPollForError), 0);
}

TEST_F(TaskEffectsTest, ACallCancelledBeforeTheEffectsRunIsAnsweredOnce) {
  StatusResult result;
  TaskEffects fx;
  fx.Finish<absl::Status>(registry_, Park(1, result), absl::OkStatus());

  registry_.Cancel(1, absl::CancelledError("the caller went away"));
  CarryOut(fx);

  EXPECT_EQ(result.count(), 1);
  EXPECT_EQ(result.value().code(), absl::StatusCode::kCancelled);
}

TEST_F(TaskEffectsTest, AReplacedCallLeavesTheRegistryAtOnce) {
  StatusResult result;
  TaskEffects fx;
  fx.FinishReplaced<absl::Status>(registry_, Park(1, result), absl::CancelledError("replaced"));

  EXPECT_EQ(registry_.Count(ParkKind::kPollForError), 0);  // room for its successor
  registry_.Cancel(1, absl::UnavailableError("too late"));
  EXPECT_FALSE(result.fired());
  CarryOut(fx);
  EXPECT_EQ(result.count(), 1);
  EXPECT_EQ(result.value().message(), "replaced");
}

TEST_F(TaskEffectsTest, FinishAllAnswersEveryCallAlike) {
  StatusResult first;
  StatusResult second;
  TaskEffects fx;
  fx.FinishAll<absl::Status>(registry_, {Park(1, first), Park(2, second)},
                             absl::AbortedError("the barrier failed"));
  CarryOut(fx);

  EXPECT_EQ(first.value().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(second.value().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace task_effects_test
}  // namespace cohort
