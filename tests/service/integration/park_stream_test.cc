// cohort.v1.Coordinator/Park over real gRPC: waiting calls of one client on one stream,
// answered in the order they end, each with a unary call's status; cancellation by id;
// bad requests answered without harm (an id already open ends the stream); the stream's end
// (client or server) ends its calls.
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "gtest/gtest.h"
#include "service/rpc/status_translation.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"

namespace cohort::testing {
namespace {

namespace tf = tensorflow;
using Stream = grpc::ClientReaderWriter<v1::ParkRequest, v1::ParkResponse>;

class ParkStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = std::make_unique<TestCoordinator>(Jobs(2));
    stub_ = v1::Coordinator::NewStub(coordinator_->Channel());
    // Registration waits for every task: both register at once.
    absl::Notification registered[2];
    for (int task = 0; task < 2; ++task) {
      coordinator_->service().RegisterTask(TaskName{"worker", task}, 100 + task,
                                           coordinator_->service().NewWaiterId(),
                                           [&registered, task](const absl::Status& s) {
                                             EXPECT_TRUE(s.ok()) << s;
                                             registered[task].Notify();
                                           });
    }
    for (auto& r : registered) ASSERT_TRUE(r.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }

  std::unique_ptr<Stream> Open(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Park(ctx);
  }

  static v1::ParkRequest Poll(uint64_t id, int task) {
    v1::ParkRequest request;
    request.set_id(id);
    auto* source = request.mutable_poll_for_error()->mutable_source_task();
    source->set_job_name("worker");
    source->set_task_id(task);
    return request;
  }
  static v1::ParkRequest Get(uint64_t id, const std::string& key, int64_t timeout_ms = 0) {
    v1::ParkRequest request;
    request.set_id(id);
    request.mutable_get_key_value()->set_key(key);
    request.mutable_get_key_value()->set_timeout_ms(timeout_ms);
    return request;
  }
  static v1::ParkRequest Barrier(uint64_t id, const std::string& barrier, int task) {
    v1::ParkRequest request;
    request.set_id(id);
    auto* b = request.mutable_barrier();
    b->set_barrier_id(barrier);
    b->set_barrier_timeout_in_ms(60'000);
    b->mutable_source_task()->set_job_name("worker");
    b->mutable_source_task()->set_task_id(task);
    return request;
  }
  static v1::ParkRequest CancelOf(uint64_t id) {
    v1::ParkRequest request;
    request.set_id(id);
    request.set_cancel(true);
    return request;
  }

  int64_t Parked(ParkKind kind) { return coordinator_->service().ParkedCalls(kind); }

  std::unique_ptr<TestCoordinator> coordinator_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(ParkStreamTest, CallsOfOneStreamAnswerInTheOrderTheyEnd) {
  grpc::ClientContext ctx;
  auto stream = Open(&ctx);
  ASSERT_TRUE(stream->Write(Poll(1, 0)));
  ASSERT_TRUE(stream->Write(Get(2, "k")));
  ASSERT_TRUE(stream->Write(Barrier(3, "b", 0)));
  ASSERT_TRUE(Eventually([&] {
    return Parked(ParkKind::kPollForError) == 1 && Parked(ParkKind::kKeyValueGet) == 1 &&
           Parked(ParkKind::kBarrier) == 1;
  }));

  // The barrier ends first: task 1 arrives over its own protocol.
  absl::Notification passed;
  coordinator_->service().Barrier("b", 0, absl::Seconds(60), TaskName{"worker", 1}, {},
                                  coordinator_->service().NewWaiterId(),
                                  [&](const absl::StatusOr<int64_t>& c) {
                                    EXPECT_TRUE(c.ok()) << c.status();
                                    passed.Notify();
                                  });
  v1::ParkResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 3u);
  EXPECT_EQ(response.code(), 0) << response.message();
  EXPECT_TRUE(response.has_barrier());
  ASSERT_TRUE(passed.WaitForNotificationWithTimeout(absl::Seconds(10)));

  ASSERT_TRUE(coordinator_->service().InsertKeyValue("k", "value", false).ok());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 2u);
  EXPECT_EQ(response.code(), 0) << response.message();
  EXPECT_EQ(response.get_key_value().kv().key(), "k");
  EXPECT_EQ(response.get_key_value().kv().value(), "value");

  // An error reported by task 1 reaches task 0's poll, with its payload as in a unary call.
  ASSERT_TRUE(
      coordinator_->service().ReportError(TaskName{"worker", 1}, absl::InternalError("boom")).ok());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 1u);
  EXPECT_EQ(response.code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(response.message().find("boom"), std::string::npos) << response.message();
  auto payloads = Payloads(grpc::Status(grpc::StatusCode::INTERNAL, "", response.details()));
  EXPECT_EQ(payloads.count(kCoordinationServiceErrorUrl), 1u);
  EXPECT_EQ(Parked(ParkKind::kPollForError), 0);

  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ParkStreamTest, ACancelEndsOneCallAndATimedGetTimesOut) {
  grpc::ClientContext ctx;
  auto stream = Open(&ctx);
  ASSERT_TRUE(stream->Write(Get(7, "never")));
  ASSERT_TRUE(stream->Write(Get(8, "also-never")));
  ASSERT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 2; }));
  ASSERT_TRUE(stream->Write(CancelOf(7)));
  v1::ParkResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 7u);
  EXPECT_EQ(response.code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(Parked(ParkKind::kKeyValueGet), 1);

  ASSERT_TRUE(stream->Write(Get(9, "late", /*timeout_ms=*/50)));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 9u);
  EXPECT_EQ(response.code(), grpc::StatusCode::DEADLINE_EXCEEDED) << response.message();

  // Cancelling an id that is not open changes nothing.
  ASSERT_TRUE(stream->Write(CancelOf(7)));
  ASSERT_TRUE(stream->Write(CancelOf(12345)));
  ASSERT_TRUE(coordinator_->service().InsertKeyValue("also-never", "x", false).ok());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 8u);
  EXPECT_EQ(response.code(), 0);
  ctx.TryCancel();
}

TEST_F(ParkStreamTest, BadRequestsGetAClearErrorAndChangeNothing) {
  grpc::ClientContext ctx;
  auto stream = Open(&ctx);
  ASSERT_TRUE(stream->Write(Get(1, "k")));
  ASSERT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 1; }));

  v1::ParkRequest empty;
  empty.set_id(2);
  ASSERT_TRUE(stream->Write(empty));
  v1::ParkResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 2u);
  EXPECT_EQ(response.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(response.message().find("names no call"), std::string::npos) << response.message();

  ASSERT_TRUE(stream->Write(Get(3, "k", -5)));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 3u);
  EXPECT_EQ(response.code(), grpc::StatusCode::INVALID_ARGUMENT);

  ASSERT_TRUE(stream->Write(Poll(4, 99)));  // no such task
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 4u);
  EXPECT_EQ(response.code(), grpc::StatusCode::INVALID_ARGUMENT) << response.message();

  v1::ParkRequest nameless = Poll(5, 0);
  nameless.mutable_poll_for_error()->clear_source_task();
  ASSERT_TRUE(stream->Write(nameless));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 5u);
  EXPECT_EQ(response.code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::ParkRequest barrier = Barrier(6, "b", 0);
  barrier.mutable_barrier()->set_barrier_timeout_in_ms(-1);
  ASSERT_TRUE(stream->Write(barrier));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 6u);
  EXPECT_EQ(response.code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The first get is still open, and still answers.
  EXPECT_EQ(Parked(ParkKind::kKeyValueGet), 1);
  EXPECT_EQ(Parked(ParkKind::kBarrier), 0);
  ASSERT_TRUE(coordinator_->service().InsertKeyValue("k", "v", false).ok());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.id(), 1u);
  EXPECT_EQ(response.get_key_value().kv().value(), "v");
  ctx.TryCancel();
}

TEST_F(ParkStreamTest, AnIdAlreadyOpenEndsTheStream) {
  grpc::ClientContext ctx;
  auto stream = Open(&ctx);
  ASSERT_TRUE(stream->Write(Get(1, "k")));
  ASSERT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 1; }));
  stream->Write(Get(1, "other"));  // an answer under id 1 could not be told apart
  v1::ParkResponse response;
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status end = stream->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(end.error_message().find("already open"), std::string::npos) << end.error_message();
  EXPECT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 0; }));
  EXPECT_FALSE(coordinator_->service().TryGetKeyValue("other").ok());
}

TEST_F(ParkStreamTest, TheStreamsEndEndsItsCalls) {
  {
    grpc::ClientContext ctx;
    auto stream = Open(&ctx);
    ASSERT_TRUE(stream->Write(Poll(1, 0)));
    ASSERT_TRUE(stream->Write(Get(2, "never")));
    ASSERT_TRUE(Eventually([&] {
      return Parked(ParkKind::kPollForError) == 1 && Parked(ParkKind::kKeyValueGet) == 1;
    }));
    stream->WritesDone();
    v1::ParkResponse response;
    EXPECT_FALSE(stream->Read(&response));  // the answers of cancelled calls are not sent
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_TRUE(Eventually(
      [&] { return Parked(ParkKind::kPollForError) == 0 && Parked(ParkKind::kKeyValueGet) == 0; }));

  {
    grpc::ClientContext ctx;
    auto stream = Open(&ctx);
    ASSERT_TRUE(stream->Write(Get(1, "never")));
    ASSERT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 1; }));
    ctx.TryCancel();  // the client goes away
  }
  EXPECT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 0; }));
}

TEST_F(ParkStreamTest, AServerShuttingDownEndsItsStreamsUnavailable) {
  grpc::ClientContext ctx;
  auto stream = Open(&ctx);
  ASSERT_TRUE(stream->Write(Get(1, "never")));
  ASSERT_TRUE(Eventually([&] { return Parked(ParkKind::kKeyValueGet) == 1; }));
  std::thread stop([&] { coordinator_.reset(); });
  v1::ParkResponse response;
  // The get's answer (the service is stopping) may come first; then the stream ends.
  while (stream->Read(&response)) {
    EXPECT_EQ(response.id(), 1u);
    EXPECT_EQ(response.code(), grpc::StatusCode::UNAVAILABLE);
  }
  grpc::Status end = stream->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE) << end.error_message();
  stop.join();
}

}  // namespace
}  // namespace cohort::testing
