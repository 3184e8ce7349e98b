#include "runtime/scheduler/restore_check.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace cohort::runtime::restore_check_test {

class RestoreCheckTest : public ::testing::Test {
 protected:
  RestoreCheckTest() : members_(clock_, SchedulerLimits{}, 40000), functions_(SchedulerLimits{}) {}

  absl::Status Check() {
    return CheckRestored(members_, functions_, objects_, operations_, transfers_);
  }

  ManualClock clock_;
  MemberTable members_;
  FunctionTable functions_;
  ObjectTable objects_;
  OperationTable operations_;
  TransferTable transfers_;
};

TEST_F(RestoreCheckTest, WholeStateIsAccepted) {
  StoreId store = members_.AddStore("a:1");
  ObjectId id = objects_.Create(0, 1);
  objects_.FindMutable(id)->locations.insert(store);
  operations_.AddPut(id);
  EXPECT_TRUE(Check().ok());
}

TEST_F(RestoreCheckTest, AnObjectAtAnUnknownStoreIsDataLoss) {
  ObjectId id = objects_.Create(0, 1);
  objects_.FindMutable(id)->locations.insert(9);
  absl::Status s = Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("is at store 9"), absl::string_view::npos);
}

TEST_F(RestoreCheckTest, AStoreWaitingForNoObjectIsDataLoss) {
  members_.AddStore("a:1");
  transfers_.Wait(4, 1, 4);
  EXPECT_EQ(Check().code(), absl::StatusCode::kDataLoss);
}

}  // namespace cohort::runtime::restore_check_test
