#include "runtime/scheduler/object_directory.h"

#include <variant>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace cohort::runtime::object_directory_test {

class ObjectDirectoryTest : public ::testing::Test {
 protected:
  ObjectDirectoryTest() : members_(clock_, SchedulerLimits{}, 40000) {
    members_.AddStore("a:1");
    members_.AddStore("b:1");
  }

  ManualClock clock_;
  MemberTable members_;
  ObjectTable objects_;
  OperationTable operations_;
  std::vector<Effect> effects_;
  SchedulerStats counters_;
  ObjectDirectory directory_{members_, objects_, operations_, effects_, counters_};
};

TEST_F(ObjectDirectoryTest, AStoreWaitsForAnObjectReadyNowhereAndGetsItOnceItLands) {
  ObjectId id = objects_.Create(0, 1);
  directory_.WantAt(2, id, id);
  EXPECT_TRUE(effects_.empty());
  EXPECT_TRUE(directory_.transfers().Involves(id));
  ASSERT_TRUE(directory_.Landed(1, id, 10));
  ASSERT_EQ(effects_.size(), 1u);
  const auto* deliver = std::get_if<DeliverEffect>(&effects_[0]);
  ASSERT_NE(deliver, nullptr);
  EXPECT_EQ(deliver->to, 2u);
  EXPECT_EQ(deliver->from_address, "a:1");
  EXPECT_EQ(counters_.deliveries, 1u);
  ASSERT_TRUE(directory_.Landed(2, id, 10));
  EXPECT_EQ(counters_.delivered_bytes, 10u);
  EXPECT_FALSE(directory_.transfers().Involves(id));
}

TEST_F(ObjectDirectoryTest, AFailedObjectIsPlacedAsItsError) {
  ObjectId id = objects_.Create(0, 1);
  directory_.WantAt(1, id, id);
  directory_.Fail(id, "it broke");
  ASSERT_EQ(effects_.size(), 1u);
  const auto* place = std::get_if<PlaceErrorEffect>(&effects_[0]);
  ASSERT_NE(place, nullptr);
  EXPECT_EQ(place->message, "it broke");
  EXPECT_TRUE(objects_.Find(id)->failed);
}

TEST_F(ObjectDirectoryTest, ACopyLetGoMeanwhileIsDroppedWhereItLands) {
  ObjectId id = objects_.Create(0, 1);
  std::vector<Deallocation> freed;
  objects_.Release(id, &freed);
  EXPECT_FALSE(directory_.Landed(1, id, 10));
  ASSERT_EQ(effects_.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<DeallocateEffect>(effects_[0]));
}

TEST_F(ObjectDirectoryTest, AFailedDeliveryWithNoCopyLeftWaitsForTheRebuild) {
  ObjectId id = objects_.Create(0, 1);
  ASSERT_TRUE(directory_.Landed(1, id, 10));
  directory_.WantAt(2, id, id);
  objects_.FindMutable(id)->locations.clear();
  directory_.DeliveryFailed(2, id);
  EXPECT_TRUE(directory_.transfers().deliveries().empty());
  EXPECT_EQ(directory_.transfers().TakeWaiters(id),
            (absl::btree_set<TransferTable::Waiter>{{2, id}}));
}

}  // namespace cohort::runtime::object_directory_test
