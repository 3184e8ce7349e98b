#include "runtime/scheduler/operation_table.h"

#include "gtest/gtest.h"

namespace cohort::runtime::operation_table_test {

TEST(OperationTableTest, IdsAreSequentialAndAPutsObjectIsKeptWithIt) {
  OperationTable table;
  EXPECT_EQ(table.Add().id, 1u);
  Operation& put = table.AddPut(7);
  EXPECT_EQ(put.id, 2u);
  EXPECT_EQ(put.put_object, 7u);
  EXPECT_TRUE(table.KeepsMaker(7, 0));
  EXPECT_TRUE(table.KeepsMaker(9, 1));
  EXPECT_EQ(table.Forget(2), (std::vector<ObjectId>{7}));
  EXPECT_FALSE(table.KeepsMaker(7, 0));
  EXPECT_EQ(table.next_id(), 3u);
}

TEST(OperationTableTest, WaitingTasksGoBackAheadOfThoseNotLookedAt) {
  OperationTable table;
  absl::Time now = absl::UnixEpoch();
  for (int i = 0; i < 3; ++i) table.Enqueue(table.Add(), now);
  EXPECT_TRUE(table.AnyUnfinished());
  OperationId first = table.PopQueued();
  table.PutBack({first});
  EXPECT_EQ(table.queue(), (std::deque<OperationId>{1, 2, 3}));
  table.PopQueued();
  table.PopQueued();
  table.PutBack({2});
  EXPECT_EQ(table.queue(), (std::deque<OperationId>{2, 3}));
}

TEST(OperationTableTest, TheJournalIsToldChangesAndForgottenOperationsOnce) {
  OperationTable table;
  table.Add();
  table.Add().task.results = {5};
  SchedulerChanges changes;
  table.TakeChanges(&changes);
  ASSERT_EQ(changes.operations.size(), 2u);
  EXPECT_EQ(table.Forget(2), (std::vector<ObjectId>{5}));
  SchedulerChanges next;
  table.TakeChanges(&next);
  EXPECT_TRUE(next.operations.empty());
  EXPECT_EQ(next.forgotten_operations, (std::vector<OperationId>{2}));
}

TEST(OperationTableTest, ApplyForgetsAfterRestoringAndNeverHandsOutAnIdTwice) {
  SchedulerChanges changes;
  Operation op;
  op.id = 4;
  op.finished_seq = 9;
  changes.operations.push_back(op);
  changes.forgotten_operations = {6};
  OperationTable table;
  table.Apply(changes, absl::UnixEpoch());
  ASSERT_NE(table.Find(4), nullptr);
  EXPECT_EQ(table.Find(4)->finished_seq, 0u);  // transient
  EXPECT_EQ(table.next_id(), 7u);
  table.RequeueByAge();  // queued, as read back
  EXPECT_EQ(table.queue(), (std::deque<OperationId>{4}));
}

}  // namespace cohort::runtime::operation_table_test
