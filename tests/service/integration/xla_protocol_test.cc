// xla.coordination.CoordinationService (jaxlib >= 0.10) over real gRPC on loopback.
#include <future>
#include <thread>

#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"
#include "xla/coordination_service.grpc.pb.h"

namespace cohort::testing {
namespace {

namespace xc = xla::coordination;

class XlaProtocolTest : public ::testing::Test {
 protected:
  explicit XlaProtocolTest(absl::Duration heartbeat = absl::Seconds(10))
      : coordinator_(Jobs(2, heartbeat)),
        stub_(xc::CoordinationService::NewStub(coordinator_.Channel())) {}

  xc::Incarnations Inc(int task) {
    xc::Incarnations inc;
    inc.set_task_id(task);
    inc.set_task_incarnation(100 + task);
    inc.set_service_incarnation(coordinator_.service().service_incarnation());
    return inc;
  }
  grpc::Status Register(int id) {
    xc::RegisterTaskRequest request;
    request.set_source_task_id(id);
    request.set_incarnation(100 + id);
    xc::RegisterTaskResponse response;
    grpc::Status s = stub_->RegisterTask(Deadline().get(), request, &response);
    if (s.ok()) {
      EXPECT_EQ(response.service_incarnation(), coordinator_.service().service_incarnation());
    }
    return s;
  }
  void RegisterAll() {
    auto other = std::async(std::launch::async, [this] { return Register(1); });
    ASSERT_TRUE(Register(0).ok());
    ASSERT_TRUE(other.get().ok());
  }

  TestCoordinator coordinator_;
  std::unique_ptr<xc::CoordinationService::Stub> stub_;
};

TEST_F(XlaProtocolTest, WrongServiceIncarnationIsInternalWithServiceMismatchPayload) {
  xc::InsertKeyValueRequest request;
  *request.mutable_incarnations() = Inc(0);
  request.mutable_incarnations()->set_service_incarnation(
      coordinator_.service().service_incarnation() + 1);
  request.mutable_kv()->set_key("k");
  xc::InsertKeyValueResponse response;
  grpc::Status s = stub_->InsertKeyValue(Deadline().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  auto payloads = Payloads(s);
  ASSERT_TRUE(payloads.count("type.googleapis.com/tensorflow.ServiceMismatchError"));
  xc::ServiceMismatchError mismatch;
  ASSERT_TRUE(
      mismatch.ParseFromString(payloads["type.googleapis.com/tensorflow.ServiceMismatchError"]));
  EXPECT_EQ(mismatch.service_incarnation(), coordinator_.service().service_incarnation());
  EXPECT_TRUE(payloads.count("type.googleapis.com/tensorflow.CoordinationServiceError"));
  EXPECT_EQ(coordinator_.service().KeyValueStats().keys, 0u);
}

TEST_F(XlaProtocolTest, KeyValueBarrierAndAliveTasks) {
  RegisterAll();
  xc::InsertKeyValueRequest insert;
  *insert.mutable_incarnations() = Inc(0);
  insert.mutable_kv()->set_key("a/b");
  insert.mutable_kv()->set_value("v");
  xc::InsertKeyValueResponse ir;
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  xc::GetKeyValueRequest get;
  *get.mutable_incarnations() = Inc(1);
  get.set_key("/a/b");
  xc::GetKeyValueResponse gr;
  ASSERT_TRUE(stub_->GetKeyValue(Deadline().get(), get, &gr).ok());
  EXPECT_EQ(gr.kv().value(), "v");

  auto barrier = [this](int id) {
    xc::BarrierRequest request;
    *request.mutable_incarnations() = Inc(id);
    request.set_barrier_id("b");
    request.set_barrier_timeout_in_ms(10'000);
    request.set_source_task_id(id);
    xc::BarrierResponse response;
    return stub_->Barrier(Deadline().get(), request, &response);
  };
  auto other = std::async(std::launch::async, [&] { return barrier(1); });
  ASSERT_TRUE(barrier(0).ok());
  ASSERT_TRUE(other.get().ok());

  auto alive = [this](int id) {
    xc::GetAliveTasksRequest request;
    *request.mutable_incarnations() = Inc(id);
    request.set_requesting_task_id(id);
    request.add_task_ids(0);
    request.add_task_ids(1);
    xc::GetAliveTasksResponse response;
    EXPECT_TRUE(stub_->GetAliveTasks(Deadline().get(), request, &response).ok());
    return response;
  };
  auto other_alive = std::async(std::launch::async, [&] { return alive(1); });
  xc::GetAliveTasksResponse response = alive(0);
  other_alive.get();
  ASSERT_EQ(response.alive_task_ids_size(), 2);
  EXPECT_EQ(response.incarnations(0), 100u);
  EXPECT_EQ(response.incarnations(1), 101u);
}

TEST_F(XlaProtocolTest, BarrierTimeoutNamesTheMissingTask) {
  RegisterAll();
  xc::BarrierRequest request;
  *request.mutable_incarnations() = Inc(0);
  request.set_barrier_id("lonely");
  request.set_barrier_timeout_in_ms(200);
  request.set_source_task_id(0);
  xc::BarrierResponse response;
  grpc::Status s = stub_->Barrier(Deadline().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(s.error_message().find("/job:worker/task:1"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Payloads(s).count("type.googleapis.com/tensorflow.BarrierError"));
}

TEST_F(XlaProtocolTest, WatchTasksReportsStates) {
  xc::WatchTasksRequest request;
  *request.mutable_incarnations() = Inc(0);
  request.set_version_number(-1);
  xc::WatchTasksResponse response;
  ASSERT_TRUE(stub_->WatchTasks(Deadline().get(), request, &response).ok());
  ASSERT_EQ(response.task_state_size(), 2);
  EXPECT_EQ(response.task_state(1).task_id(), 1);
  EXPECT_EQ(response.task_state(1).state(), xc::DISCONNECTED);
  // Parked until something changes: a registration.
  request.set_version_number(response.version_number());
  auto pending = std::async(std::launch::async, [&] {
    xc::WatchTasksResponse next;
    EXPECT_TRUE(stub_->WatchTasks(Deadline().get(), request, &next).ok());
    return next;
  });
  ASSERT_TRUE(Eventually(
      [&] { return coordinator_.service().ParkedCalls(ParkKind::kWatchJobState) == 1; }));
  EXPECT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  auto reg = std::async(std::launch::async, [this] { return Register(0); });
  xc::WatchTasksResponse next = pending.get();
  EXPECT_GT(next.version_number(), response.version_number());
  auto last = std::async(std::launch::async, [this] { return Register(1); });
  EXPECT_TRUE(reg.get().ok());
  EXPECT_TRUE(last.get().ok());
}

class XlaHeartbeatTest : public XlaProtocolTest {
 protected:
  XlaHeartbeatTest() : XlaProtocolTest(absl::Milliseconds(500)) {}
};

TEST_F(XlaHeartbeatTest, SilentTaskIsDetectedAndOthersPollForErrorEnds) {
  RegisterAll();
  xc::PollForErrorRequest poll;
  *poll.mutable_incarnations() = Inc(1);
  poll.set_source_task_id(1);
  xc::PollForErrorResponse pr;
  auto pending = std::async(std::launch::async,
                            [&] { return stub_->PollForError(Deadline().get(), poll, &pr); });
  // Task 1 keeps its heartbeats going; task 0 stays silent.
  std::atomic<bool> done{false};
  std::thread beats([&] {
    while (!done) {
      xc::HeartbeatRequest hb;
      *hb.mutable_incarnations() = Inc(1);
      hb.set_incarnation(101);
      hb.set_source_task_id(1);
      xc::HeartbeatResponse r;
      stub_->Heartbeat(Deadline().get(), hb, &r);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  grpc::Status s = pending.get();
  done = true;
  beats.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  xc::CoordinationServiceError error;
  ASSERT_TRUE(error.ParseFromString(
      Payloads(s)["type.googleapis.com/tensorflow.CoordinationServiceError"]));
  EXPECT_EQ(error.source_task_id(), 0);
  EXPECT_FALSE(error.is_reported_error());
}

}  // namespace
}  // namespace cohort::testing
