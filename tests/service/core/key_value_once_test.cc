#include "service/core/key_value_once.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "service/core/key_value_store.h"
#include "service/core/parked_call.h"
#include "service/core/requests.h"
#include "service/core/timer_queue.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace key_value_once_test {
namespace {

class KeyValueOnceTest : public ::testing::Test {
 protected:
  ParkedCallRegistry parked_{ParkLimits{}};
  TimerQueue timers_;
  KeyValueStore store_{KeyValueLimits{}, &parked_, &timers_};
  KeyValueOnce once_{&store_};
};

TEST_F(KeyValueOnceTest, AnInsertSentAgainGetsItsFirstAnswerAndChangesNothing) {
  const RequestId request{"ab", 1, 0};
  ASSERT_TRUE(once_.Insert(request, "k", "first", /*allow_overwrite=*/false).ok());
  ASSERT_TRUE(store_.Insert("k", "changed since", /*allow_overwrite=*/true).ok());

  EXPECT_TRUE(once_.Insert(request, "k", "first", /*allow_overwrite=*/false).ok());
  EXPECT_EQ(store_.TryGet("k").value(), "changed since");
}

TEST_F(KeyValueOnceTest, AnIncrementSentAgainGetsItsFirstSum) {
  const RequestId request{"ab", 7, 0};
  EXPECT_EQ(once_.Increment(request, "n", 5).value(), 5);
  EXPECT_EQ(once_.Increment(request, "n", 5).value(), 5);
  EXPECT_EQ(store_.TryGet("n").value(), "5");
  EXPECT_EQ(once_.Increment({"ab", 8, 0}, "n", 5).value(), 10);
}

TEST_F(KeyValueOnceTest, ARefusedCallIsKeptNowhereAndIsCarriedOutWhenSentAgain) {
  ASSERT_TRUE(store_.Insert("k", "there", /*allow_overwrite=*/false).ok());
  const RequestId request{"ab", 1, 0};
  EXPECT_EQ(once_.Insert(request, "k", "mine", false).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(store_.TryGet(RequestRecordKey("ab")).ok());

  ASSERT_TRUE(store_.Delete("k").ok());
  EXPECT_TRUE(once_.Insert(request, "k", "mine", false).ok());
  EXPECT_EQ(store_.TryGet("k").value(), "mine");
}

TEST_F(KeyValueOnceTest, AnswersBelowTheSessionsLowMarkAreForgotten) {
  ASSERT_TRUE(once_.Increment({"ab", 1, 0}, "n", 1).ok());
  ASSERT_TRUE(store_.TryGet(RequestRecordKey("ab")).ok());

  // Request 2 says every request below it was answered: the record of 1 goes, and 2 keeps
  // its own.
  ASSERT_TRUE(once_.Increment({"ab", 2, 2}, "n", 1).ok());
  RequestRecord record = RequestRecord::Parse(store_.TryGet(RequestRecordKey("ab")).value());
  EXPECT_FALSE(record.Find(1).has_value());
  EXPECT_EQ(record.Find(2), "2");
}

}  // namespace
}  // namespace key_value_once_test
}  // namespace cohort
