#include "runtime/scheduler/transfer_table.h"

#include "gtest/gtest.h"

namespace cohort::runtime::transfer_table_test {

TEST(TransferTableTest, WaitersAreTakenOnce) {
  TransferTable table;
  table.Wait(5, 1, 9);
  table.Wait(5, 2, 5);
  EXPECT_TRUE(table.Involves(5));
  EXPECT_EQ(table.TakeWaiters(5), (absl::btree_set<TransferTable::Waiter>{{1, 9}, {2, 5}}));
  EXPECT_TRUE(table.TakeWaiters(5).empty());
  EXPECT_FALSE(table.Involves(5));
}

TEST(TransferTableTest, ASecondRequestJoinsTheDeliveryUnderWay) {
  TransferTable table;
  EXPECT_TRUE(table.AddDelivery(1, 5, 5));
  EXPECT_FALSE(table.AddDelivery(1, 5, 8));
  ASSERT_NE(table.FindMutable({1, 5}), nullptr);
  EXPECT_EQ(table.FindMutable({1, 5})->aliases, (absl::btree_set<ObjectId>{8}));
  table.WaitInstead({1, 5});
  EXPECT_EQ(table.FindMutable({1, 5}), nullptr);
  EXPECT_EQ(table.TakeWaiters(5), (absl::btree_set<TransferTable::Waiter>{{1, 5}, {1, 8}}));
}

TEST(TransferTableTest, ALostStoreEndsDeliveriesToItAndNamesThoseFromIt) {
  TransferTable table;
  table.AddDelivery(1, 5, 5);
  table.AddDelivery(2, 6, 6);
  table.FindMutable({2, 6})->from = 1;
  table.Wait(7, 1, 7);
  EXPECT_EQ(table.StoreLost(1), (std::vector<TransferTable::Key>{{2, 6}}));
  EXPECT_FALSE(table.Take({1, 5}).has_value());
  SchedulerChanges changes;
  table.TakeChanges(&changes);
  ASSERT_EQ(changes.wanted.size(), 1u);
  EXPECT_TRUE(changes.wanted[0].second.empty());  // nobody waits for 7 any more
  EXPECT_EQ(changes.deliveries.size(), 2u);
}

TEST(TransferTableTest, ACaptureAppliedToANewTableHoldsTheSame) {
  TransferTable table;
  table.Wait(7, 1, 7);
  table.AddDelivery(2, 6, 9);
  SchedulerChanges state;
  table.Capture(&state);
  TransferTable restored;
  restored.Apply(state);
  EXPECT_EQ(restored.wanted(), table.wanted());
  EXPECT_EQ(restored.DeliveryKeys(), (std::vector<TransferTable::Key>{{2, 6}}));
  EXPECT_EQ(restored.ChangedObjects(), std::vector<ObjectId>());  // Apply changes nothing to tell
}

}  // namespace cohort::runtime::transfer_table_test
