#include "runtime/scheduler/rebuilder.h"

#include "gtest/gtest.h"

namespace cohort::runtime::rebuilder_test {

class RebuilderTest : public ::testing::Test {
 protected:
  RebuilderTest() : members_(clock_, SchedulerLimits{}, 40000) { members_.AddStore("a:1"); }

  // A finished task with one result, held only at store 1.
  ObjectId ResultOfFinishedTask() {
    Operation& op = operations_.Add();
    op.task.function_name = "f";
    op.state = OpState::kSucceeded;
    ObjectId result = objects_.Create(op.id, 0);
    op.task.results = {result};
    objects_.FindMutable(result)->locations.insert(1);
    history_.Finished(op);
    return result;
  }

  ManualClock clock_;
  SchedulerLimits limits_;
  MemberTable members_;
  ObjectTable objects_;
  OperationTable operations_;
  TaskHistory history_;
  std::vector<Effect> effects_;
  SchedulerStats counters_;
  ObjectDirectory directory_{members_, objects_, operations_, effects_, counters_};
  Rebuilder rebuilder_{clock_, limits_, 1, objects_, operations_, history_, directory_, counters_};
};

TEST_F(RebuilderTest, ALostResultRunsItsTaskAgain) {
  ObjectId result = ResultOfFinishedTask();
  rebuilder_.StoreLost(1, "gone");
  EXPECT_TRUE(objects_.Find(result)->locations.empty());
  EXPECT_EQ(operations_.queue(), (std::deque<OperationId>{1}));
  EXPECT_EQ(operations_.Find(1)->rebuilds, 1);
  EXPECT_EQ(history_.size(), 0u);
  EXPECT_EQ(counters_.tasks_rebuilt, 1u);
}

TEST_F(RebuilderTest, ALostPutFailsSayingWhy) {
  ObjectId put = objects_.Create(0, 3);
  objects_.FindMutable(put)->locations.insert(1);
  rebuilder_.StoreLost(1, "gone");
  const ObjectRecord* record = objects_.Find(put);
  EXPECT_TRUE(record->failed);
  EXPECT_NE(record->error.find("put by worker 3"), std::string::npos);
  EXPECT_EQ(counters_.objects_lost, 1u);
}

TEST_F(RebuilderTest, ATaskRunAgainTooOftenIsNotRunAgain) {
  ObjectId result = ResultOfFinishedTask();
  operations_.Mutable(1).rebuilds = 1;  // max_rebuilds
  rebuilder_.Rebuild(result, "gone");
  EXPECT_TRUE(objects_.Find(result)->failed);
  EXPECT_TRUE(operations_.queue().empty());
}

}  // namespace cohort::runtime::rebuilder_test
