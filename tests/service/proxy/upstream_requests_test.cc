// The CoordinationBackend's calls as requests to the coordinator, and their answers back.
#include "service/proxy/upstream_requests.h"

#include <optional>
#include <string>
#include <vector>

#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "gtest/gtest.h"

namespace cohort::upstream_requests_test {
namespace {

namespace tf = tensorflow;

TEST(UpstreamRequestsTest, BarrierCarriesItsTimeoutInWholeMillisecondsAndParks) {
  std::optional<absl::StatusOr<int64_t>> got;
  auto r = upstream::Barrier("b", 3, absl::Microseconds(10), TaskName{"worker", 1},
                             {TaskName{"worker", 0}, TaskName{"worker", 1}},
                             [&got](const absl::StatusOr<int64_t>& counter) { got = counter; });
  EXPECT_EQ(r.request.barrier_id(), "b");
  EXPECT_EQ(r.request.counter(), 3);
  EXPECT_EQ(r.request.barrier_timeout_in_ms(), 1);
  EXPECT_EQ(r.request.tasks_size(), 2);
  EXPECT_TRUE(r.options.park);
  tf::BarrierResponse response;
  response.set_counter(4);
  r.done(absl::OkStatus(), response);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, 4);

  auto forever = upstream::Barrier("b", 0, absl::InfiniteDuration(), TaskName{"worker", 1}, {},
                                   [](const absl::StatusOr<int64_t>&) {});
  EXPECT_EQ(forever.request.barrier_timeout_in_ms(), 0);
}

TEST(UpstreamRequestsTest, AReportToTheServiceCarriesTheReasonItsReporterGave) {
  auto r = upstream::ReportErrorToService(TaskName{"worker", 1}, absl::InternalError("XID 79"),
                                          FailureReason::kGpuFault, [](const absl::Status&) {});
  EXPECT_EQ(r.request.error_code(), static_cast<int>(absl::StatusCode::kInternal));
  EXPECT_EQ(r.request.error_message(), "XID 79");
  EXPECT_EQ(r.request.error_origin().task_id(), 1);
  EXPECT_EQ(r.request.cohort_failure_reason(), static_cast<int>(FailureReason::kGpuFault));

  // None given: none sent, and the coordinator decides.
  auto plain =
      upstream::ReportErrorToService(TaskName{"worker", 1}, absl::InternalError("x"),
                                     FailureReason::kUnspecified, [](const absl::Status&) {});
  EXPECT_EQ(plain.request.cohort_failure_reason(), 0);
}

TEST(UpstreamRequestsTest, AHeartbeatCarriesTheProgressItIsGivenAndNoneWhenEmpty) {
  auto r = upstream::Heartbeat(TaskName{"worker", 1}, 7, TaskProgress{12, std::nullopt},
                               [](const absl::Status&) {});
  EXPECT_EQ(r.request.incarnation(), 7u);
  ASSERT_TRUE(r.request.has_cohort_progress());
  EXPECT_TRUE(r.request.cohort_progress().has_step());
  EXPECT_EQ(r.request.cohort_progress().step(), 12);
  EXPECT_FALSE(r.request.cohort_progress().has_busy_seconds_per_step());

  auto plain =
      upstream::Heartbeat(TaskName{"worker", 1}, 7, TaskProgress{}, [](const absl::Status&) {});
  EXPECT_FALSE(plain.request.has_cohort_progress());
}

TEST(UpstreamRequestsTest, AGetWithoutTimeoutIsSharedAndATimedOneHasItsDeadline) {
  auto shared =
      upstream::GetKeyValue("/a/b", std::nullopt, [](const absl::StatusOr<std::string>&) {});
  EXPECT_EQ(shared.options.share_key, "GetKeyValue/" + KeyValueStore::NormalizeKey("/a/b"));
  EXPECT_EQ(shared.options.deadline, absl::InfiniteFuture());
  EXPECT_TRUE(shared.options.park);

  auto timed =
      upstream::GetKeyValue("a", absl::Hours(1), [](const absl::StatusOr<std::string>&) {});
  EXPECT_TRUE(timed.options.share_key.empty());
  EXPECT_GT(timed.options.deadline, absl::Now());
}

TEST(UpstreamRequestsTest, ATimedGetPastItsDeadlineSaysWhichKeyItWaitedFor) {
  std::optional<absl::StatusOr<std::string>> got;
  auto r = upstream::GetKeyValue("a", absl::ZeroDuration(),
                                 [&got](const absl::StatusOr<std::string>& value) { got = value; });
  r.done(absl::DeadlineExceededError("deadline"), tf::GetKeyValueResponse());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got->status().message().find("timed out waiting for key"), std::string::npos);
}

TEST(UpstreamRequestsTest, AnIncrementAnsweredWithANonNumberIsAnInternalError) {
  std::optional<absl::StatusOr<int64_t>> got;
  auto r = upstream::IncrementKeyValue("n", 2,
                                       [&got](const absl::StatusOr<int64_t>& sum) { got = sum; });
  EXPECT_TRUE(r.options.once);
  EXPECT_EQ(r.request.increment(), 2);
  tf::IncrementKeyValueResponse response;
  response.mutable_kv()->set_value("x");
  r.done(absl::OkStatus(), response);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kInternal);
}

TEST(UpstreamRequestsTest, AliveTasksWithoutAnIncarnationGetZero) {
  std::optional<absl::StatusOr<std::vector<AliveTask>>> got;
  auto r = upstream::GetAliveTasks(
      TaskName{"worker", 0}, {TaskName{"worker", 1}},
      [&got](absl::StatusOr<std::vector<AliveTask>> alive) { got = std::move(alive); });
  tf::GetAliveTasksResponse response;
  auto* one = response.add_alive_tasks();
  one->set_job_name("worker");
  one->set_task_id(1);
  auto* two = response.add_alive_tasks();
  two->set_job_name("worker");
  two->set_task_id(2);
  response.add_incarnations(9);
  r.done(absl::OkStatus(), response);
  ASSERT_TRUE(got.has_value() && got->ok());
  ASSERT_EQ((*got)->size(), 2u);
  EXPECT_EQ((**got)[0].incarnation, 9u);
  EXPECT_EQ((**got)[1].incarnation, 0u);
}

TEST(UpstreamRequestsTest, ABatchAnsweredWithTheWrongNumberOfResultsIsAnInternalError) {
  std::optional<absl::StatusOr<std::vector<absl::StatusOr<std::string>>>> got;
  auto r = upstream::TorchStoreBatch(
      {ForwardedTorchCommand{}, ForwardedTorchCommand{}},
      [&got](absl::StatusOr<std::vector<absl::StatusOr<std::string>>> results) {
        got = std::move(results);
      });
  v1::TorchStoreBatchResponse response;
  response.add_results()->set_reply("ok");
  r.done(absl::OkStatus(), response);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kInternal);
}

TEST(UpstreamRequestsTest, OnlyATorchCommandThatWaitsParks) {
  ForwardedTorchCommand command;
  EXPECT_FALSE(
      upstream::TorchStore(command, [](const absl::StatusOr<std::string>&) {}).options.park);
  command.waits = true;
  EXPECT_TRUE(
      upstream::TorchStore(command, [](const absl::StatusOr<std::string>&) {}).options.park);
}

TEST(UpstreamRequestsTest, ACallEndsByTheCallersDeadlineUnlessShared) {
  const absl::Time caller = absl::Now() + absl::Seconds(5);
  auto own = MakeUpstreamCall<TfAsync>(
      nullptr, upstream::TryGetKeyValue("a", [](const absl::StatusOr<std::string>&) {}), caller);
  EXPECT_EQ(own.first->deadline, caller);
  EXPECT_FALSE(own.first->park);

  auto shared = MakeUpstreamCall<TfAsync>(
      nullptr, upstream::GetKeyValue("a", std::nullopt, [](const absl::StatusOr<std::string>&) {}),
      caller);
  EXPECT_EQ(shared.first->deadline, absl::InfiniteFuture());
  ASSERT_TRUE(shared.first->park);
  v1::ParkRequest parked;
  shared.first->park(&parked);
  EXPECT_EQ(parked.get_key_value().key(), "a");
  EXPECT_EQ(parked.get_key_value().timeout_ms(), 0);
}

TEST(UpstreamRequestsTest, TheSubscriberHandsTheTypedResponseToDone) {
  std::optional<absl::StatusOr<std::string>> got;
  auto [call, subscriber] = MakeUpstreamCall<TfAsync>(
      nullptr,
      upstream::TryGetKeyValue("a",
                               [&got](const absl::StatusOr<std::string>& value) { got = value; }),
      absl::InfiniteFuture());
  tf::TryGetKeyValueResponse response;
  response.mutable_kv()->set_value("v");
  subscriber(absl::OkStatus(), response);
  ASSERT_TRUE(got.has_value() && got->ok());
  EXPECT_EQ(**got, "v");
}

}  // namespace
}  // namespace cohort::upstream_requests_test
