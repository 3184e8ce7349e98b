// UpstreamCallTable on its own: sharing, subscribers leaving, holding, attempts, request ids.
#include "service/proxy/upstream_call_table.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensorflow/coordination_service.pb.h"

namespace cohort::upstream_call_table_test {
namespace {

using Call = UpstreamCallTable::Call;

Call NewCall(std::string share_key = "", absl::Time deadline = absl::InfiniteFuture()) {
  auto call = std::make_shared<UpstreamCall>();
  auto response = std::make_shared<tensorflow::HeartbeatResponse>();
  call->response = response.get();
  call->messages = response;
  call->options.share_key = std::move(share_key);
  call->deadline = deadline;
  return call;
}

// A subscriber that records the statuses it got.
UpstreamSubscriber Recorder(std::vector<absl::Status>* got) {
  return [got](const absl::Status& s, const google::protobuf::Message&) { got->push_back(s); };
}

TEST(UpstreamCallTableTest, CallsOfOneShareKeyJoinTheFirstUntilItFinishes) {
  UpstreamCallTable table;
  Call first = NewCall("GetKeyValue/a");
  EXPECT_EQ(table.SharedWith(first), first);
  table.Share(first);
  Call second = NewCall("GetKeyValue/a");
  EXPECT_EQ(table.SharedWith(second), first);
  EXPECT_EQ(table.SharedWith(NewCall("GetKeyValue/b"))->options.share_key, "GetKeyValue/b");

  table.Subscribe(first, 1, nullptr);
  table.Subscribe(first, 2, nullptr);
  EXPECT_EQ(table.Finish(first).size(), 2u);
  EXPECT_EQ(table.SharedWith(second), second);
  // Finished once: nobody left to answer.
  EXPECT_TRUE(table.Finish(first).empty());
}

TEST(UpstreamCallTableTest, CallsWithoutAShareKeyAreNeverShared) {
  UpstreamCallTable table;
  Call first = NewCall();
  table.Share(first);
  Call second = NewCall();
  EXPECT_EQ(table.SharedWith(second), second);
}

TEST(UpstreamCallTableTest, TheLastSubscriberLeavingAbandonsTheCall) {
  UpstreamCallTable table;
  Call call = NewCall("WatchJobState/0/job");
  table.Share(call);
  std::vector<absl::Status> got;
  table.Subscribe(call, 1, Recorder(&got));
  table.Subscribe(call, 2, Recorder(&got));
  table.Hold(call);

  UpstreamCallTable::Departure one = table.Unsubscribe(1);
  EXPECT_EQ(one.call, call);
  ASSERT_TRUE(one.subscriber);
  EXPECT_FALSE(call->abandoned);
  EXPECT_EQ(table.held(), 1u);

  UpstreamCallTable::Departure two = table.Unsubscribe(2);
  EXPECT_TRUE(call->abandoned);
  EXPECT_TRUE(call->finished);
  EXPECT_EQ(table.held(), 0u);
  EXPECT_EQ(two.context, nullptr);  // no attempt was out
  EXPECT_EQ(two.park, nullptr);
  Call again = NewCall("WatchJobState/0/job");
  EXPECT_EQ(table.SharedWith(again), again);

  // A waiter that subscribes to nothing here.
  EXPECT_EQ(table.Unsubscribe(3).call, nullptr);
}

TEST(UpstreamCallTableTest, AnAbandonedCallWithAnAttemptOutHandsBackItsContext) {
  UpstreamCallTable table;
  Call call = NewCall();
  table.Subscribe(call, 7, nullptr);
  table.AttemptSent(call);
  call->context = std::make_unique<grpc::ClientContext>();
  UpstreamCallTable::Departure left = table.Unsubscribe(7);
  EXPECT_EQ(left.context, call->context.get());

  // Answered since: nothing to cancel.
  Call answered = NewCall();
  table.Subscribe(answered, 8, nullptr);
  table.AttemptSent(answered);
  answered->context = std::make_unique<grpc::ClientContext>();
  table.AttemptAnswered(answered);
  EXPECT_EQ(table.Unsubscribe(8).context, nullptr);
}

TEST(UpstreamCallTableTest, HeldCallsPastTheirDeadlineAreTakenOut) {
  UpstreamCallTable table;
  const absl::Time now = absl::FromUnixSeconds(1000);
  Call late = NewCall("", now - absl::Seconds(1));
  Call due = NewCall("", now);
  Call waiting = NewCall("", now + absl::Seconds(1));
  table.Hold(late);
  table.Hold(waiting);
  table.Hold(due);
  EXPECT_EQ(table.TakeExpired(now), (std::vector<Call>{late, due}));
  EXPECT_EQ(table.held(), 1u);
  EXPECT_EQ(table.TakeHeld(), (std::vector<Call>{waiting}));
  EXPECT_EQ(table.held(), 0u);
}

TEST(UpstreamCallTableTest, AttemptsAfterTheFirstCountAsReissued) {
  UpstreamCallTable table;
  Call call = NewCall();
  table.AttemptSent(call);
  EXPECT_EQ(table.reissued(), 0);
  EXPECT_EQ(table.UnaryAttempts(), (std::vector<Call>{call}));
  table.AttemptAnswered(call);
  EXPECT_TRUE(table.UnaryAttempts().empty());
  table.AttemptSent(call);
  EXPECT_EQ(call->attempts, 2);
  EXPECT_EQ(table.reissued(), 1);
  EXPECT_EQ(table.attempts_in_flight(), 2);
  table.AttemptHandled();
  table.AttemptHandled();
  EXPECT_EQ(table.attempts_in_flight(), 0);
}

TEST(UpstreamCallTableTest, TheLowMarkIsTheLowestRequestNotYetAnswered) {
  UpstreamCallTable table;
  Call first = NewCall();
  first->request = table.OpenRequest();
  Call second = NewCall();
  second->request = table.OpenRequest();
  EXPECT_EQ(first->request, 1u);
  EXPECT_EQ(second->request, 2u);
  EXPECT_EQ(table.low_mark(), 1u);
  table.Finish(first);
  EXPECT_EQ(table.low_mark(), 2u);
  // A call refused before it was sent (no subscriber yet) closes its request id too.
  Call refused = NewCall();
  refused->request = table.OpenRequest();
  EXPECT_TRUE(table.Finish(refused).empty());
  table.Finish(second);
  Call third = NewCall();
  third->request = table.OpenRequest();
  EXPECT_EQ(table.low_mark(), third->request);
}

TEST(UpstreamCallTableTest, TakeAllForgetsEveryCall) {
  UpstreamCallTable table;
  Call held = NewCall();
  table.Hold(held);
  Call subscribed = NewCall();
  table.Subscribe(subscribed, 1, nullptr);
  EXPECT_EQ(table.TakeAll().size(), 2u);
  EXPECT_EQ(table.held(), 0u);
  EXPECT_EQ(table.Unsubscribe(1).call, nullptr);
}

TEST(UpstreamCallTableTest, AttemptSentUnaryGetsAContextOfItsOwn) {
  UpstreamCallTable table;
  Call call = NewCall("", absl::Now() + absl::Seconds(30));
  EXPECT_EQ(table.SendAttempt(call, nullptr, "0123456789abcdef"), 0u);
  ASSERT_NE(call->context, nullptr);
  EXPECT_EQ(call->parked_on, nullptr);
  EXPECT_EQ(call->attempts, 1);
  EXPECT_EQ(table.attempts_in_flight(), 1);
  EXPECT_EQ(table.UnaryAttempts(), std::vector<Call>{call});

  // Sent again: counted as reissued, with a new context.
  table.AttemptAnswered(call);
  table.AttemptHandled();
  grpc::ClientContext* first = call->context.get();
  table.SendAttempt(call, nullptr, "0123456789abcdef");
  EXPECT_NE(call->context.get(), first);
  EXPECT_EQ(call->attempts, 2);
  EXPECT_EQ(table.reissued(), 1);
}

}  // namespace
}  // namespace cohort::upstream_call_table_test
