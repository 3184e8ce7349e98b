// The RPCs the per-protocol tests leave out, each over real gRPC with plain stubs.
#include <future>

#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"
#include "xla/coordination_service.grpc.pb.h"

namespace cohort::testing {
// Its own namespace: the unity builds compile this file with others of its test.
namespace remaining_rpcs_test {
namespace {

namespace tf = tensorflow;
namespace xc = xla::coordination;

tf::CoordinatedTask Task(int id) {
  tf::CoordinatedTask t;
  t.set_job_name("worker");
  t.set_task_id(id);
  return t;
}

class TensorflowMoreTest : public ::testing::Test {
 protected:
  TensorflowMoreTest()
      : coordinator_(Jobs(2)), stub_(tf::CoordinationService::NewStub(coordinator_.Channel())) {}

  grpc::Status Register(int id, uint64_t incarnation) {
    tf::RegisterTaskRequest request;
    *request.mutable_source_task() = Task(id);
    request.set_incarnation(incarnation);
    tf::RegisterTaskResponse response;
    return stub_->RegisterTask(Deadline().get(), request, &response);
  }
  void RegisterAll() {
    auto other = std::async(std::launch::async, [this] { return Register(1, 11); });
    ASSERT_TRUE(Register(0, 10).ok());
    ASSERT_TRUE(other.get().ok());
  }
  tf::CoordinatedTaskState State(int id) {
    tf::GetTaskStateRequest request;
    *request.add_source_task() = Task(id);
    tf::GetTaskStateResponse response;
    EXPECT_TRUE(stub_->GetTaskState(Deadline().get(), request, &response).ok());
    return response.task_state(0).state();
  }

  TestCoordinator coordinator_;
  std::unique_ptr<tf::CoordinationService::Stub> stub_;
};

TEST_F(TensorflowMoreTest, ResetTaskDisconnectsAndAllowsANewIncarnation) {
  RegisterAll();
  tf::ResetTaskRequest reset;
  *reset.mutable_source_task() = Task(1);
  tf::ResetTaskResponse rr;
  ASSERT_TRUE(stub_->ResetTask(Deadline().get(), reset, &rr).ok());
  EXPECT_EQ(State(1), tf::TASKSTATE_DISCONNECTED);
  EXPECT_EQ(stub_->ResetTask(Deadline().get(), reset, &rr).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Register(1, 12).ok());
  EXPECT_EQ(State(1), tf::TASKSTATE_CONNECTED);
}

TEST_F(TensorflowMoreTest, ReportErrorToTaskAndToAgentMarkThePayloadsTaskInError) {
  RegisterAll();
  tf::ReportErrorToTaskRequest request;
  request.set_error_code(static_cast<int>(grpc::StatusCode::INTERNAL));
  request.set_error_message("boom");
  *request.mutable_error_payload()->mutable_source_task() = Task(1);
  tf::ReportErrorToTaskResponse response;
  ASSERT_TRUE(stub_->ReportErrorToTask(Deadline().get(), request, &response).ok());
  EXPECT_EQ(State(1), tf::TASKSTATE_ERROR);
  request.clear_error_payload();
  request.mutable_error_payload()->set_job("worker");  // legacy fields
  request.mutable_error_payload()->set_task(0);
  ASSERT_TRUE(stub_->ReportErrorToAgent(Deadline().get(), request, &response).ok());
  EXPECT_EQ(State(0), tf::TASKSTATE_ERROR);
  request.clear_error_payload();
  EXPECT_EQ(stub_->ReportErrorToTask(Deadline().get(), request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(TensorflowMoreTest, LegacyReportErrorToServiceFieldsNameTheSource) {
  RegisterAll();
  tf::ReportErrorToServiceRequest request;
  request.set_error_code(static_cast<int>(grpc::StatusCode::UNKNOWN));
  request.set_error_message("legacy");
  request.set_source_job("worker");
  request.set_source_task(1);
  tf::ReportErrorToServiceResponse response;
  ASSERT_TRUE(stub_->ReportErrorToService(Deadline().get(), request, &response).ok());
  EXPECT_EQ(State(1), tf::TASKSTATE_ERROR);
  // A poll that arrives after the error is answered at once with it.
  tf::PollForErrorRequest poll;
  *poll.mutable_source_task() = Task(0);
  tf::PollForErrorResponse pr;
  grpc::Status s = stub_->PollForError(Deadline().get(), poll, &pr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_NE(s.error_message().find("legacy"), std::string::npos);
}

TEST_F(TensorflowMoreTest, CancelBarrierCancelsWaitersAndLaterCallers) {
  RegisterAll();
  auto arrive = [this](int id) {
    tf::BarrierRequest request;
    request.set_barrier_id("cancel-me");
    request.set_barrier_timeout_in_ms(10'000);
    *request.mutable_source_task() = Task(id);
    tf::BarrierResponse response;
    return stub_->Barrier(Deadline().get(), request, &response);
  };
  auto waiting = std::async(std::launch::async, [&] { return arrive(0); });
  ASSERT_TRUE(Eventually([&] {
    return coordinator_.ArrivedAtBarrier("cancel-me", {"worker", 0});
  }));
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  tf::CancelBarrierRequest cancel;
  cancel.set_barrier_id("cancel-me");
  *cancel.mutable_source_task() = Task(1);
  tf::CancelBarrierResponse cr;
  ASSERT_TRUE(stub_->CancelBarrier(Deadline().get(), cancel, &cr).ok());
  EXPECT_EQ(waiting.get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(arrive(1).error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(TensorflowMoreTest, GetAliveTasksAnswersEveryAliveTaskWithIncarnations) {
  RegisterAll();
  auto ask = [this](int id) {
    tf::GetAliveTasksRequest request;
    *request.mutable_requesting_task() = Task(id);
    *request.add_tasks() = Task(0);
    *request.add_tasks() = Task(1);
    tf::GetAliveTasksResponse response;
    EXPECT_TRUE(stub_->GetAliveTasks(Deadline().get(), request, &response).ok());
    return response;
  };
  auto other = std::async(std::launch::async, [&] { return ask(1); });
  tf::GetAliveTasksResponse response = ask(0);
  other.get();
  ASSERT_EQ(response.alive_tasks_size(), 2);
  EXPECT_EQ(response.incarnations(0), 10u);
  EXPECT_EQ(response.incarnations(1), 11u);
}

TEST_F(TensorflowMoreTest, LegacyWaitForAllTasksMergesXlaTopologyWithDenseIds) {
  RegisterAll();
  auto wait = [this](int id) {
    tf::WaitForAllTasksRequest request;
    request.set_job("worker");
    request.set_task(id);
    auto* node = request.mutable_local_device_info()->mutable_xla()->mutable_devices()->add_nodes();
    node->set_node_id(id);
    node->add_devices()->set_local_device_ordinal(0);
    node->add_devices()->set_local_device_ordinal(1);
    tf::WaitForAllTasksResponse response;
    EXPECT_TRUE(stub_->WaitForAllTasks(Deadline().get(), request, &response).ok());
    return response;
  };
  auto other = std::async(std::launch::async, [&] { return wait(1); });
  tf::WaitForAllTasksResponse response = wait(0);
  other.get();
  const auto& nodes = response.cluster_device_info().xla().devices().nodes();
  ASSERT_EQ(nodes.size(), 2);
  EXPECT_EQ(nodes[1].devices(1).global_device_id(), 3);
}

TEST(LimitsTest, OversizedValueAndTooManyParkedCallsAreResourceExhausted) {
  ServiceConfig config = Jobs(1);
  config.key_value.max_value_bytes = 16;
  config.parked.max_total = 1;
  TestCoordinator coordinator(config);
  auto stub = tf::CoordinationService::NewStub(coordinator.Channel());
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("big");
  insert.mutable_kv()->set_value(std::string(17, 'x'));
  tf::InsertKeyValueResponse ir;
  grpc::Status s = stub->InsertKeyValue(Deadline().get(), insert, &ir);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("limit"), std::string::npos) << s.error_message();
  EXPECT_EQ(coordinator.service().KeyValueStats().keys, 0u);

  tf::GetKeyValueRequest get;
  get.set_key("never");
  tf::GetKeyValueResponse gr;
  auto ctx = Deadline();
  auto parked =
      std::async(std::launch::async, [&] { return stub->GetKeyValue(ctx.get(), get, &gr); });
  ASSERT_TRUE(
      Eventually([&] { return coordinator.service().ParkedCalls(ParkKind::kKeyValueGet) == 1; }));
  tf::GetKeyValueResponse second;
  EXPECT_EQ(stub->GetKeyValue(Deadline().get(), get, &second).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ctx->TryCancel();
  EXPECT_EQ(parked.get().error_code(), grpc::StatusCode::CANCELLED);
}

class XlaMoreTest : public ::testing::Test {
 protected:
  XlaMoreTest()
      : coordinator_(Jobs(2)), stub_(xc::CoordinationService::NewStub(coordinator_.Channel())) {}
  xc::Incarnations Inc() {
    xc::Incarnations inc;
    inc.set_service_incarnation(coordinator_.service().service_incarnation());
    return inc;
  }
  grpc::Status Register(int id) {
    xc::RegisterTaskRequest request;
    request.set_source_task_id(id);
    request.set_incarnation(7 + id);
    xc::RegisterTaskResponse response;
    return stub_->RegisterTask(Deadline().get(), request, &response);
  }
  void RegisterAll() {
    auto other = std::async(std::launch::async, [this] { return Register(1); });
    ASSERT_TRUE(Register(0).ok());
    ASSERT_TRUE(other.get().ok());
  }
  TestCoordinator coordinator_;
  std::unique_ptr<xc::CoordinationService::Stub> stub_;
};

TEST_F(XlaMoreTest, KeyValueReadsIncrementAndDelete) {
  xc::InsertKeyValueRequest insert;
  *insert.mutable_incarnations() = Inc();
  insert.mutable_kv()->set_key("d/x");
  insert.mutable_kv()->set_value("1");
  xc::InsertKeyValueResponse ir;
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  xc::TryGetKeyValueRequest try_get;
  *try_get.mutable_incarnations() = Inc();
  try_get.set_key("d/x");
  xc::TryGetKeyValueResponse tr;
  ASSERT_TRUE(stub_->TryGetKeyValue(Deadline().get(), try_get, &tr).ok());
  EXPECT_EQ(tr.kv().value(), "1");
  xc::IncrementKeyValueRequest incr;
  *incr.mutable_incarnations() = Inc();
  incr.set_key("d/x");
  incr.set_increment(-3);
  xc::IncrementKeyValueResponse incr_r;
  ASSERT_TRUE(stub_->IncrementKeyValue(Deadline().get(), incr, &incr_r).ok());
  EXPECT_EQ(incr_r.kv().value(), "-2");
  xc::GetKeyValueDirRequest dir;
  *dir.mutable_incarnations() = Inc();
  dir.set_directory_key("d");
  xc::GetKeyValueDirResponse dr;
  ASSERT_TRUE(stub_->GetKeyValueDir(Deadline().get(), dir, &dr).ok());
  ASSERT_EQ(dr.kv_size(), 1);
  xc::DeleteKeyValueRequest del;
  *del.mutable_incarnations() = Inc();
  del.set_key("d");
  del.set_is_directory(true);
  xc::DeleteKeyValueResponse delr;
  ASSERT_TRUE(stub_->DeleteKeyValue(Deadline().get(), del, &delr).ok());
  EXPECT_EQ(stub_->TryGetKeyValue(Deadline().get(), try_get, &tr).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(XlaMoreTest, CancelBarrierReportErrorAndShutdownWithoutBarrierPartner) {
  RegisterAll();
  xc::CancelBarrierRequest cancel;
  *cancel.mutable_incarnations() = Inc();
  cancel.set_barrier_id("b");
  cancel.set_source_task_id(0);
  xc::CancelBarrierResponse cr;
  ASSERT_TRUE(stub_->CancelBarrier(Deadline().get(), cancel, &cr).ok());
  xc::BarrierRequest barrier;
  *barrier.mutable_incarnations() = Inc();
  barrier.set_barrier_id("b");
  barrier.set_source_task_id(1);
  xc::BarrierResponse br;
  EXPECT_EQ(stub_->Barrier(Deadline().get(), barrier, &br).error_code(),
            grpc::StatusCode::CANCELLED);

  xc::ReportErrorToServiceRequest report;
  *report.mutable_incarnations() = Inc();
  report.set_source_task_id(1);
  report.set_error_code(static_cast<int>(grpc::StatusCode::DATA_LOSS));
  report.set_error_message("disk gone");
  xc::ReportErrorToServiceResponse rr;
  ASSERT_TRUE(stub_->ReportErrorToService(Deadline().get(), report, &rr).ok());
  // Task 1 is in error, so the shutdown barrier fails for task 0 instead of waiting.
  xc::ShutdownTaskRequest shutdown;
  *shutdown.mutable_incarnations() = Inc();
  shutdown.set_source_task_id(0);
  xc::ShutdownTaskResponse sr;
  grpc::Status s = stub_->ShutdownTask(Deadline().get(), shutdown, &sr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("/job:worker/task:1"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace remaining_rpcs_test
}  // namespace cohort::testing
