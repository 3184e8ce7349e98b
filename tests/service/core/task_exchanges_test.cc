#include "service/core/task_exchanges.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "service/core/job_directory.h"
#include "service/core/parked_call.h"
#include "service/core/task_table.h"
#include "tests/service/core/callback_result.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace task_exchanges_test {
namespace {

using ::cohort::testing::ValueResult;
using DevicesResult = ValueResult<std::vector<std::string>>;
using AliveResult = ValueResult<std::vector<AliveTask>>;

const TaskName kW0{"worker", 0};
const TaskName kW1{"worker", 1};
const TaskName kSidecar0{"sidecar", 0};
const TaskName kSidecar1{"sidecar", 1};

class TaskExchangesTest : public ::testing::Test {
 protected:
  TaskExchangesTest() {
    for (const TaskName& task : {kW0, kW1, kSidecar0, kSidecar1}) {
      tasks_.MarkConnected(*tasks_.Find(task), 7, absl::FromUnixSeconds(1));
    }
  }

  // Device exchange of `task`; nullopt when it parked (its answer then goes to `result`).
  std::optional<TaskExchanges::DevicesResult> Exchange(const TaskName& task, std::string devices,
                                                       const DevicesResult& result) {
    auto call = std::make_shared<TaskExchanges::DevicesCall>(++next_id_, ParkKind::kWaitForAllTasks,
                                                             task, result.Callback());
    return exchanges_.ExchangeDevices(tasks_, task, std::move(devices), call, fx_);
  }
  absl::Status AskAlive(const TaskName& task, const std::vector<TaskName>& members,
                        const AliveResult& result) {
    auto call = std::make_shared<TaskExchanges::AliveCall>(++next_id_, ParkKind::kAliveTasks, task,
                                                           result.Callback());
    return exchanges_.AskAlive(tasks_, task, members, call, fx_);
  }
  // Carries out what the calls so far set off, as the service does after its lock.
  void CarryOut() {
    for (auto& fn : fx_.after) fn();
    fx_ = TaskEffects{};
  }

  std::vector<JobConfig> jobs_{{"worker", 2}, {"sidecar", 2, /*auxiliary=*/true}};
  JobDirectory directory_{jobs_, "worker"};
  TaskTable tasks_{directory_};
  ParkedCallRegistry parked_{ParkLimits{}};
  int locked_ = 0;
  TaskExchanges exchanges_{directory_, &parked_, [this](const std::function<void()>& fn) {
                             ++locked_;
                             fn();
                           }};
  TaskEffects fx_;
  WaiterId next_id_ = 0;
};

TEST_F(TaskExchangesTest, DevicesAreAnsweredInTaskOrderOnceEveryWorkloadTaskSentTheirs) {
  DevicesResult first;
  DevicesResult second;
  EXPECT_FALSE(Exchange(kW1, "b", first).has_value());
  EXPECT_FALSE(Exchange(kW0, "a", second).has_value());
  EXPECT_FALSE(first.fired());

  CarryOut();
  EXPECT_EQ(first.value().value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(second.value().value(), (std::vector<std::string>{"a", "b"}));
  DevicesResult late;
  EXPECT_EQ(Exchange(kW0, "again", late).value().value(), (std::vector<std::string>{"a", "b"}));
}

TEST_F(TaskExchangesTest, AnAuxiliaryJobExchangesAmongItself) {
  DevicesResult first;
  DevicesResult second;
  Exchange(kSidecar0, "x", first);
  Exchange(kSidecar1, "y", second);
  CarryOut();

  EXPECT_EQ(first.value().value(), (std::vector<std::string>{"x", "y"}));
}

TEST_F(TaskExchangesTest, AnOpenExchangeFailsWhenAMemberBecomesUnavailable) {
  DevicesResult waiting;
  Exchange(kW0, "a", waiting);

  exchanges_.FailDevicesWith(kW1, absl::UnavailableError("gone"), fx_);
  CarryOut();

  ASSERT_FALSE(waiting.value().ok());
  EXPECT_EQ(waiting.value().status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(waiting.value().status().message(),
                                "device exchange failed: /job:worker/task:1 is unavailable: gone"));
}

TEST_F(TaskExchangesTest, AliveTasksAreAnsweredOnceEveryConnectedMemberAsked) {
  AliveResult first;
  AliveResult second;
  ASSERT_TRUE(AskAlive(kW0, {kW0, kW1}, first).ok());
  CarryOut();
  EXPECT_FALSE(first.fired());

  ASSERT_TRUE(AskAlive(kW1, {kW0, kW1}, second).ok());
  CarryOut();
  ASSERT_TRUE(first.value().ok());
  ASSERT_EQ(first.value()->size(), 2u);
  EXPECT_EQ((*first.value())[0].task, kW0);
  EXPECT_EQ((*first.value())[1].incarnation, 7u);
}

TEST_F(TaskExchangesTest, AskingAboutAListWithoutTheAskerIsInvalid) {
  AliveResult result;
  EXPECT_EQ(AskAlive(kW0, {kW1}, result).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parked_.Count(ParkKind::kAliveTasks), 0);
}

TEST_F(TaskExchangesTest, ACancelledCallLeavesItsGroupUnderTheOwnersLock) {
  DevicesResult cancelled;
  Exchange(kW0, "a", cancelled);

  parked_.Cancel(next_id_, absl::CancelledError("the caller went away"));
  EXPECT_EQ(locked_, 1);
  EXPECT_EQ(cancelled.value().status().code(), absl::StatusCode::kCancelled);

  // Its arrival still counts: the other member's arrival finishes the group.
  DevicesResult other;
  Exchange(kW1, "b", other);
  CarryOut();
  EXPECT_EQ(other.value().value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cancelled.count(), 1);
}

}  // namespace
}  // namespace task_exchanges_test
}  // namespace cohort
