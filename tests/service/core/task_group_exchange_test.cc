#include "service/core/task_group_exchange.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "service/core/job_directory.h"
#include "service/core/parked_call.h"
#include "service/core/task_table.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace task_group_exchange_test {
namespace {

const TaskName kW0{"worker", 0};
const TaskName kW1{"worker", 1};
const TaskName kW2{"worker", 2};
const std::vector<TaskName> kAll{kW0, kW1, kW2};

std::shared_ptr<ParkedCall> CallOf(WaiterId id, const TaskName& task) {
  return std::make_shared<Parked<absl::Status>>(id, ParkKind::kAliveTasks, task,
                                                [](const absl::Status&) {});
}

class TaskGroupExchangeTest : public ::testing::Test {
 protected:
  void Arrive(const std::vector<TaskName>& members, const TaskName& task, WaiterId id,
              std::string payload = "") {
    TaskGroupExchange::Group& group = exchange_.Join(members);
    group.arrived[task] = std::move(payload);
    group.calls.push_back(CallOf(id, task));
  }
  void Connect(const TaskName& task) {
    tasks_.MarkConnected(*tasks_.Find(task), 7, absl::FromUnixSeconds(1));
  }

  std::vector<JobConfig> jobs_{{"worker", 3}};
  JobDirectory directory_{jobs_, ""};
  TaskTable tasks_{directory_};
  TaskGroupExchange exchange_;
};

TEST_F(TaskGroupExchangeTest, FinishedGroupAnswersPayloadsInMemberOrder) {
  Arrive(kAll, kW2, 1, "c");
  Arrive(kAll, kW0, 2, "a");
  Arrive(kAll, kW1, 3, "b");

  TaskGroupExchange::Group& group = exchange_.Join(kAll);
  EXPECT_EQ(exchange_.Finish(group, absl::OkStatus()).size(), 3u);

  EXPECT_TRUE(group.done);
  EXPECT_EQ(group.payloads, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(exchange_.Join(kAll).done);  // late callers find the answer
}

TEST_F(TaskGroupExchangeTest, OnlyOpenGroupsOfTheTaskAreFound) {
  Arrive(kAll, kW0, 1);
  Arrive({kW1, kW2}, kW1, 2);

  auto open = exchange_.OpenGroupsWith(kW0);
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0]->members, kAll);
  exchange_.Finish(*open[0], absl::UnavailableError("gone"));
  EXPECT_TRUE(exchange_.OpenGroupsWith(kW0).empty());
}

TEST_F(TaskGroupExchangeTest, ForgettingDropsOnlyFinishedGroupsOfTheTask) {
  Arrive(kAll, kW0, 1);
  exchange_.Finish(exchange_.Join(kAll), absl::OkStatus());
  Arrive({kW1, kW2}, kW1, 2);

  exchange_.ForgetFinishedWith(kW0);
  exchange_.ForgetFinishedWith(kW1);  // its group is still open

  EXPECT_FALSE(exchange_.Join(kAll).done);
  EXPECT_EQ(exchange_.Join({kW1, kW2}).calls.size(), 1u);
}

TEST_F(TaskGroupExchangeTest, GroupIsReadyOnceEveryConnectedMemberJoined) {
  Connect(kW0);
  Connect(kW1);
  Arrive(kAll, kW0, 1);
  EXPECT_TRUE(exchange_.TakeReady(tasks_).empty());  // kW1 is connected and has not asked

  Arrive(kAll, kW1, 2);
  auto ready = exchange_.TakeReady(tasks_);

  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].calls.size(), 2u);
  ASSERT_EQ(ready[0].connected.size(), 2u);
  EXPECT_EQ(ready[0].connected[0]->name, kW0);
  EXPECT_EQ(ready[0].connected[1]->name, kW1);
  EXPECT_TRUE(exchange_.TakeReady(tasks_).empty());  // taken out
}

TEST_F(TaskGroupExchangeTest, RemovedCallIsNotAnswered) {
  Arrive(kAll, kW0, 1);
  Arrive(kAll, kW1, 2);

  exchange_.RemoveCall(kAll, 1);

  auto calls = exchange_.Finish(exchange_.Join(kAll), absl::OkStatus());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]->id(), 2u);
}

}  // namespace
}  // namespace task_group_exchange_test
}  // namespace cohort
