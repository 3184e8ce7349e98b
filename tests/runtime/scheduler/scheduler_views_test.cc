#include "runtime/scheduler/scheduler_views.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace cohort::runtime::scheduler_views_test {

TEST(SchedulerViewsTest, CountersSurviveTheirSavedForm) {
  SchedulerStats stats;
  stats.tasks_submitted = 1;
  stats.delivered_bytes = 10;
  stats.tasks_queued = 5;  // a gauge: not saved
  SchedulerStats restored;
  RestoreCounters(SavedCounters(stats), &restored);
  EXPECT_EQ(restored.tasks_submitted, 1u);
  EXPECT_EQ(restored.delivered_bytes, 10u);
  EXPECT_EQ(restored.tasks_queued, 0u);
}

TEST(SchedulerViewsTest, StatsCountWhatEachStoreHolds) {
  ManualClock clock;
  MemberTable members(clock, SchedulerLimits{}, 40000);
  StoreId store = members.AddStore("a:1");
  ObjectTable objects;
  ObjectId id = objects.Create(0, 1);
  objects.FindMutable(id)->locations.insert(store);
  objects.FindMutable(id)->size = 7;
  OperationTable operations;
  operations.Enqueue(operations.Add(), clock.Now());
  SchedulerStats stats = StatsOf(SchedulerStats{}, operations, 0, members, objects);
  EXPECT_EQ(stats.tasks_queued, 1u);
  EXPECT_EQ(stats.objects_kept, 1u);
  ASSERT_EQ(stats.stores.size(), 1u);
  EXPECT_EQ(stats.stores[0].bytes, 7u);
}

TEST(SchedulerViewsTest, ObjectsAreIndexedByIdWithTheirTargets) {
  ManualClock clock;
  ObjectTable objects;
  ObjectId a = objects.Create(0, 1);
  ObjectId b = objects.Create(0, 1);
  ASSERT_TRUE(objects.Alias(b, a).ok());
  SchedulerInfoView view = SchedulerInfoOf(OperationTable(), FunctionTable(SchedulerLimits{}),
                                           MemberTable(clock, SchedulerLimits{}, 40000), objects);
  EXPECT_EQ(view.target_objectid, (std::vector<ObjectId>{0, a, a}));
  EXPECT_EQ(view.reference_count, (std::vector<int64_t>{0, 2, 1}));
}

}  // namespace cohort::runtime::scheduler_views_test
