#include "runtime/scheduler/call_log.h"

#include "gtest/gtest.h"

namespace cohort::runtime::call_log_test {

TEST(CallLogTest, ARememberedCallIsAnsweredAgainAndACallWithNoNumberNever) {
  CallLog log(4);
  log.Remember({1, 7}, CallOutcome{absl::OkStatus(), true, {3}});
  log.Remember({1, 0}, CallOutcome{absl::OkStatus(), false, {}});
  ASSERT_NE(log.Repeated({1, 7}), nullptr);
  EXPECT_EQ(log.Repeated({1, 7})->ids, (std::vector<ObjectId>{3}));
  EXPECT_EQ(log.Repeated({2, 7}), nullptr);
  EXPECT_EQ(log.Repeated({1, 0}), nullptr);
}

TEST(CallLogTest, EachCallerKeepsOnlyItsNewestCalls) {
  CallLog log(2);
  for (uint64_t n = 1; n <= 3; ++n) log.Remember({1, n}, CallOutcome{});
  log.Remember({2, 1}, CallOutcome{});
  EXPECT_EQ(log.Repeated({1, 1}), nullptr);
  EXPECT_NE(log.Repeated({1, 2}), nullptr);
  EXPECT_NE(log.Repeated({1, 3}), nullptr);
  EXPECT_NE(log.Repeated({2, 1}), nullptr);
}

TEST(CallLogTest, OnlyAJournaledLogTellsItsNewCalls) {
  CallLog log(4);
  log.Remember({1, 1}, CallOutcome{});
  SchedulerChanges changes;
  log.TakeChanges(&changes);
  EXPECT_TRUE(changes.calls.empty());
  log.set_journaled(true);
  log.Remember({1, 2}, CallOutcome{absl::NotFoundError("x"), false, {}});
  log.TakeChanges(&changes);
  ASSERT_EQ(changes.calls.size(), 1u);
  EXPECT_EQ(changes.calls[0].call, 2u);
  EXPECT_EQ(changes.calls[0].outcome.status.code(), absl::StatusCode::kNotFound);
  SchedulerChanges again;
  log.TakeChanges(&again);
  EXPECT_TRUE(again.calls.empty());
}

TEST(CallLogTest, ACaptureAppliedToANewLogAnswersTheSame) {
  CallLog log(4);
  log.Remember({2, 5}, CallOutcome{});
  log.Remember({1, 9}, CallOutcome{absl::OkStatus(), false, {4}});
  SchedulerChanges state;
  log.Capture(&state);
  ASSERT_EQ(state.calls.size(), 2u);
  EXPECT_EQ(state.calls[0].worker, 1u);  // workers in order
  CallLog restored(4);
  restored.Apply(state);
  ASSERT_NE(restored.Repeated({1, 9}), nullptr);
  EXPECT_EQ(restored.Repeated({1, 9})->ids, (std::vector<ObjectId>{4}));
  EXPECT_NE(restored.Repeated({2, 5}), nullptr);
}

}  // namespace cohort::runtime::call_log_test
