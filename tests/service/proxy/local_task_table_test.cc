// LocalTaskTable on its own: what a heartbeat of a task registered here gets, and where a
// client's error poll goes.
#include "service/proxy/local_task_table.h"

#include <optional>
#include <vector>

#include "common/task_progress.h"
#include "gtest/gtest.h"

namespace cohort::local_task_table_test {
namespace {

const TaskName kWorker{"worker", 0};

// A client's poll that records what it was answered with.
LocalTaskTable::StatusDone Recorder(std::vector<absl::Status>* got) {
  return [got](const absl::Status& s) { got->push_back(s); };
}

TEST(LocalTaskTableTest, HeartbeatOfARegisteredTaskIsAnsweredHere) {
  LocalTaskTable table;
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  ASSERT_TRUE(table.Register(kWorker, 7).has_value());

  auto here = table.HeartbeatHere(link, kWorker, std::nullopt);
  ASSERT_TRUE(here.has_value());
  EXPECT_TRUE(here->answer.ok());
  EXPECT_EQ(here->incarnation, 7u);
  // The coordinator has not been reached: nothing to forward it to.
  EXPECT_FALSE(here->forward);

  // Another incarnation, or a task not registered here: the coordinator answers.
  EXPECT_FALSE(table.HeartbeatHere(link, kWorker, 8).has_value());
  EXPECT_FALSE(table.HeartbeatHere(link, TaskName{"worker", 1}, std::nullopt).has_value());

  // The service refused its last forwarded heartbeat: that is the answer from now on.
  table.SetHeartbeatError(kWorker, 7, absl::AbortedError("restarted"));
  here = table.HeartbeatHere(link, kWorker, 7);
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(here->answer.code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(here->forward);
}

TEST(LocalTaskTableTest, TheProgressOfARegisteredTasksHeartbeatsIsKeptToForward) {
  LocalTaskTable table;
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  ASSERT_TRUE(table.Register(kWorker, 7).has_value());
  EXPECT_TRUE(table.Progress(kWorker).empty());

  auto here = table.HeartbeatHere(link, kWorker, 7, TaskProgress{3, 0.5});
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(here->progress, (TaskProgress{3, 0.5}));
  EXPECT_EQ(table.Progress(kWorker), (TaskProgress{3, 0.5}));

  // A heartbeat without progress: the last one stays, and is what is forwarded.
  here = table.HeartbeatHere(link, kWorker, 7);
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(here->progress, (TaskProgress{3, 0.5}));

  // Not registered here as that: the coordinator answers, and nothing is kept here.
  EXPECT_FALSE(table.HeartbeatHere(link, kWorker, 8, TaskProgress{99, 9.0}).has_value());
  EXPECT_EQ(table.Progress(kWorker), (TaskProgress{3, 0.5}));

  // Registered anew: another run, with no progress yet.
  table.Register(kWorker, 8);
  EXPECT_TRUE(table.Progress(kWorker).empty());
  table.HeartbeatHere(link, kWorker, 8, TaskProgress{1, 0.25});
  table.Leave(kWorker);
  EXPECT_TRUE(table.Progress(kWorker).empty());
}

TEST(LocalTaskTableTest, HeartbeatAfterTheLinkEndedGetsItsFailure) {
  LocalTaskTable table;
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  link.Stop(absl::UnavailableError("stopping"));
  // Whether registered here or not.
  auto here = table.HeartbeatHere(link, kWorker, 3);
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(here->answer, absl::UnavailableError("stopping"));
  EXPECT_FALSE(here->forward);
}

TEST(LocalTaskTableTest, PollOfARegisteredTaskWaitsHereAndReplacesTheOlder) {
  LocalTaskTable table;
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  auto generation = table.Register(kWorker, 7);
  ASSERT_TRUE(generation.has_value());

  std::vector<absl::Status> first, second;
  auto placed = table.PlacePoll(link, kWorker, 1, Recorder(&first));
  EXPECT_TRUE(placed.refused.ok());
  EXPECT_FALSE(placed.forward);
  EXPECT_FALSE(placed.done);
  EXPECT_TRUE(placed.replaced.empty());

  placed = table.PlacePoll(link, kWorker, 2, Recorder(&second));
  ASSERT_EQ(placed.replaced.size(), 1u);
  EXPECT_EQ(placed.replaced[0].first, 1u);

  // The proxy's own poll ends: the newer client's poll gets its answer.
  auto polls = table.PollDone(kWorker, *generation, absl::CancelledError("done"));
  ASSERT_EQ(polls.size(), 1u);
  EXPECT_EQ(polls[0].first, 2u);

  // Its poll ended: the next client's poll goes to the coordinator.
  std::vector<absl::Status> third;
  placed = table.PlacePoll(link, kWorker, 3, Recorder(&third));
  EXPECT_TRUE(placed.forward);
  ASSERT_TRUE(placed.done);
  placed.done(absl::OkStatus());
  EXPECT_EQ(third.size(), 1u);
}

TEST(LocalTaskTableTest, PollOfAnUnknownTaskIsForwardedAndRefusedOnceTheLinkEnded) {
  LocalTaskTable table;
  UpstreamLink link("coordinator:1", absl::Seconds(10));
  std::vector<absl::Status> got;
  auto placed = table.PlacePoll(link, kWorker, 1, Recorder(&got));
  EXPECT_TRUE(placed.forward);
  EXPECT_TRUE(placed.refused.ok());
  EXPECT_TRUE(placed.done);

  ASSERT_TRUE(table.Register(kWorker, 7).has_value());
  link.Stop(absl::UnavailableError("stopping"));
  placed = table.PlacePoll(link, kWorker, 2, Recorder(&got));
  EXPECT_EQ(placed.refused, absl::UnavailableError("stopping"));
  EXPECT_FALSE(placed.forward);
  EXPECT_TRUE(placed.done);
  EXPECT_TRUE(placed.replaced.empty());
}

}  // namespace
}  // namespace cohort::local_task_table_test
