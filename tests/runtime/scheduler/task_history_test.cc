#include "runtime/scheduler/task_history.h"

#include "gtest/gtest.h"

namespace cohort::runtime::task_history_test {

absl::btree_map<OperationId, Operation> Operations(int n) {
  absl::btree_map<OperationId, Operation> ops;
  for (OperationId id = 1; id <= static_cast<OperationId>(n); ++id) ops[id].id = id;
  return ops;
}

TEST(TaskHistoryTableTest, TheOldestFinishedArePastTheLimit) {
  auto ops = Operations(3);
  TaskHistory history;
  history.Finished(ops[2]);
  history.Finished(ops[1]);
  history.Finished(ops[3]);
  history.Finished(ops[3]);  // once
  EXPECT_EQ(history.size(), 3u);
  EXPECT_EQ(history.TakePast(1, ops), (std::vector<OperationId>{2, 1}));
  EXPECT_EQ(history.size(), 1u);
}

TEST(TaskHistoryTableTest, ATaskRunAgainTakesANewPlace) {
  auto ops = Operations(2);
  TaskHistory history;
  history.Finished(ops[1]);
  history.Finished(ops[2]);
  history.Unfinished(ops[1]);
  EXPECT_EQ(history.size(), 1u);
  history.Finished(ops[1]);
  EXPECT_EQ(history.TakePast(1, ops), (std::vector<OperationId>{2}));
}

TEST(TaskHistoryTableTest, ARestartOrdersTheFinishedById) {
  auto ops = Operations(3);
  ops[1].state = OpState::kFailed;
  ops[2].state = OpState::kRunning;
  ops[3].state = OpState::kSucceeded;
  TaskHistory history;
  history.Restart(ops);
  EXPECT_EQ(history.size(), 2u);
  EXPECT_EQ(history.TakePast(0, ops), (std::vector<OperationId>{1, 3}));
}

}  // namespace cohort::runtime::task_history_test
