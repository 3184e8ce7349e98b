// The coordinator's limits as a client meets them over real gRPC: oversized barrier ids are
// refused with an error the client can read (not a transport error about metadata), errors
// too long for the trailers reach the client cut, and calls from tasks that are not
// registered are refused where upstream's service refuses them. Refused calls change nothing.
#include <string>

#include "absl/strings/match.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/service/integration/test_server.h"

namespace cohort::testing {
// Its own namespace: the unity builds compile this file with others of its test.
namespace wire_limits_test {
namespace {

namespace tf = tensorflow;

constexpr char kBarrierErrorUrl[] = "type.googleapis.com/tensorflow.BarrierError";

tf::CoordinatedTask Task(int id) {
  tf::CoordinatedTask t;
  t.set_job_name("worker");
  t.set_task_id(id);
  return t;
}

ServiceConfig Config(size_t max_barrier_id_bytes = BarrierLimits{}.max_id_bytes) {
  ServiceConfig config = Jobs(2);
  config.register_barrier = false;
  config.barriers.max_id_bytes = max_barrier_id_bytes;
  return config;
}

class WireLimitsTest : public ::testing::Test {
 protected:
  void Start(ServiceConfig config) {
    coordinator_ = std::make_unique<TestCoordinator>(std::move(config));
    stub_ = tf::CoordinationService::NewStub(coordinator_->Channel());
  }
  grpc::Status Register(int id) {
    tf::RegisterTaskRequest request;
    *request.mutable_source_task() = Task(id);
    request.set_incarnation(100 + id);
    tf::RegisterTaskResponse response;
    return stub_->RegisterTask(Deadline().get(), request, &response);
  }
  grpc::Status Barrier(int id, const std::string& barrier, absl::Duration timeout) {
    tf::BarrierRequest request;
    request.set_barrier_id(barrier);
    request.set_barrier_timeout_in_ms(absl::ToInt64Milliseconds(timeout));
    *request.mutable_source_task() = Task(id);
    tf::BarrierResponse response;
    return stub_->Barrier(Deadline().get(), request, &response);
  }
  tf::CoordinatedTaskState State(int id) {
    tf::GetTaskStateRequest request;
    *request.add_source_task() = Task(id);
    tf::GetTaskStateResponse response;
    EXPECT_TRUE(stub_->GetTaskState(Deadline().get(), request, &response).ok());
    return response.task_state(0).state();
  }

  std::unique_ptr<TestCoordinator> coordinator_;
  std::unique_ptr<tf::CoordinationService::Stub> stub_;
};

TEST_F(WireLimitsTest, TwoHundredHugeBarrierIdsAreRefusedAndNothingIsKept) {
  Start(Config());
  ASSERT_TRUE(Register(0).ok());

  for (int i = 0; i < 200; ++i) {
    const std::string id = std::to_string(i) + std::string(120 * 1024, 'b');
    grpc::Status s = Barrier(0, id, absl::Seconds(5));
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    ASSERT_TRUE(absl::StrContains(s.error_message(), "--max-barrier-id-bytes"))
        << s.error_message();
  }

  EXPECT_TRUE(coordinator_->service().OpenBarriers().empty());
  EXPECT_EQ(coordinator_->service().FinishedBarriersKept(), 0u);
  EXPECT_EQ(State(0), tf::TASKSTATE_CONNECTED);
}

TEST_F(WireLimitsTest, AnErrorNamingAHugeBarrierReachesTheClientCut) {
  // An administrator allowed long ids; the barrier then times out. The client must see the
  // timeout, whatever the id holds (non-ASCII bytes travel as three in the trailers).
  Start(Config(256 * 1024));
  ASSERT_TRUE(Register(0).ok());
  for (const std::string& unit : {std::string("b"), std::string("\xc3\xa9")}) {
    std::string id;
    while (id.size() < 120 * 1024) id += unit;

    grpc::Status s = Barrier(0, id, absl::Milliseconds(50));

    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "barrier \"" + unit + unit + unit))
        << s.error_message().substr(0, 200);
    EXPECT_LE(s.error_message().size(), 3072u);
    EXPECT_TRUE(Payloads(s).count(kBarrierErrorUrl));
  }
}

TEST_F(WireLimitsTest, ATaskThatIsNotRegisteredCannotCallABarrierOrReportItsOwnError) {
  Start(Config());
  ASSERT_TRUE(Register(0).ok());

  grpc::Status barrier = Barrier(1, "step", absl::Seconds(5));
  tf::ReportErrorToServiceRequest report;
  report.set_error_code(13);
  report.set_error_message("I am worker 1");
  *report.mutable_error_origin() = Task(1);
  tf::ReportErrorToServiceResponse reported;
  grpc::Status own = stub_->ReportErrorToService(Deadline().get(), report, &reported);

  EXPECT_EQ(barrier.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(barrier.error_message(), "not registered"))
      << barrier.error_message();
  EXPECT_EQ(own.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(coordinator_->service().OpenBarriers().empty());
  EXPECT_EQ(State(1), tf::TASKSTATE_DISCONNECTED);
  EXPECT_EQ(State(0), tf::TASKSTATE_CONNECTED);

  // An error reported about worker 1 by someone else (an operator's tool) is taken.
  tf::ReportErrorToTaskRequest about;
  about.set_error_code(13);
  about.set_error_message("node lost");
  *about.mutable_error_payload()->mutable_source_task() = Task(1);
  tf::ReportErrorToTaskResponse taken;
  ASSERT_TRUE(stub_->ReportErrorToTask(Deadline().get(), about, &taken).ok());
  EXPECT_EQ(State(1), tf::TASKSTATE_ERROR);
}

}  // namespace
}  // namespace wire_limits_test
}  // namespace cohort::testing
