// tensorflow.CoordinationService over real gRPC on loopback, with plain generated stubs.
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"

namespace cohort::testing {
namespace {

using tensorflow::CoordinationService;
namespace tf = tensorflow;

tf::CoordinatedTask Task(int id, const std::string& job = "worker") {
  tf::CoordinatedTask t;
  t.set_job_name(job);
  t.set_task_id(id);
  return t;
}

class TensorflowProtocolTest : public ::testing::Test {
 protected:
  TensorflowProtocolTest()
      : coordinator_(Jobs(2)), stub_(CoordinationService::NewStub(coordinator_.Channel())) {}

  grpc::Status Register(int id, uint64_t incarnation,
                        tf::RegisterTaskResponse* response = nullptr) {
    tf::RegisterTaskRequest request;
    *request.mutable_source_task() = Task(id);
    request.set_incarnation(incarnation);
    tf::RegisterTaskResponse ignored;
    return stub_->RegisterTask(Deadline().get(), request, response ? response : &ignored);
  }
  void RegisterAll() {
    auto other = std::async(std::launch::async, [this] { return Register(1, 11); });
    ASSERT_TRUE(Register(0, 10).ok());
    ASSERT_TRUE(other.get().ok());
  }

  TestCoordinator coordinator_;
  std::unique_ptr<CoordinationService::Stub> stub_;
};

TEST_F(TensorflowProtocolTest, RegisterBlocksUntilEveryTaskRegisteredAndReturnsLeaderIncarnation) {
  tf::RegisterTaskResponse first;
  auto pending = std::async(std::launch::async, [&] { return Register(0, 10, &first); });
  ASSERT_TRUE(
      Eventually([&] { return coordinator_.service().ParkedCalls(ParkKind::kRegister) == 1; }));
  EXPECT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  tf::RegisterTaskResponse second;
  ASSERT_TRUE(Register(1, 11, &second).ok());
  ASSERT_TRUE(pending.get().ok());
  EXPECT_EQ(first.leader_incarnation(), coordinator_.service().service_incarnation());
  EXPECT_EQ(second.leader_incarnation(), first.leader_incarnation());
}

TEST_F(TensorflowProtocolTest, UnknownTaskIsInvalidArgumentWithServicePayload) {
  grpc::Status s = Register(7, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("out of range"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Payloads(s).count("type.googleapis.com/tensorflow.CoordinationServiceError"));
}

TEST_F(TensorflowProtocolTest, LegacyRegisterWorkerAndHeartbeatFieldsWork) {
  auto other = std::async(std::launch::async, [this] { return Register(1, 11); });
  tf::RegisterTaskRequest request;
  request.set_job("worker");
  request.set_task(0);
  request.set_incarnation(10);
  tf::RegisterTaskResponse response;
  ASSERT_TRUE(stub_->RegisterWorker(Deadline().get(), request, &response).ok());
  ASSERT_TRUE(other.get().ok());
  tf::HeartbeatRequest hb;
  hb.set_job("worker");
  hb.set_task(0);
  hb.set_incarnation(10);
  tf::HeartbeatResponse hb_response;
  ASSERT_TRUE(stub_->Heartbeat(Deadline().get(), hb, &hb_response).ok());
  EXPECT_EQ(hb_response.leader_incarnation(), coordinator_.service().service_incarnation());
  hb.set_incarnation(99);
  EXPECT_EQ(stub_->Heartbeat(Deadline().get(), hb, &hb_response).error_code(),
            grpc::StatusCode::ABORTED);
}

TEST_F(TensorflowProtocolTest, KeyValueContract) {
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("/dir//a/");
  insert.mutable_kv()->set_value("1");
  tf::InsertKeyValueResponse ir;
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  EXPECT_EQ(stub_->InsertKeyValue(Deadline().get(), insert, &ir).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  insert.set_allow_overwrite(true);
  insert.mutable_kv()->set_value("2");
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  insert.mutable_kv()->set_key("dir/b/c");
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  insert.mutable_kv()->set_key("dirx");
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());

  tf::TryGetKeyValueRequest try_get;
  try_get.set_key("dir/a");
  tf::TryGetKeyValueResponse tr;
  ASSERT_TRUE(stub_->TryGetKeyValue(Deadline().get(), try_get, &tr).ok());
  EXPECT_EQ(tr.kv().value(), "2");
  try_get.set_key("missing");
  grpc::Status missing = stub_->TryGetKeyValue(Deadline().get(), try_get, &tr);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);

  tf::GetKeyValueDirRequest dir;
  dir.set_directory_key("dir");
  tf::GetKeyValueDirResponse dr;
  ASSERT_TRUE(stub_->GetKeyValueDir(Deadline().get(), dir, &dr).ok());
  ASSERT_EQ(dr.kv_size(), 2);
  EXPECT_EQ(dr.kv(0).key(), "dir/a");
  EXPECT_EQ(dr.kv(1).key(), "dir/b/c");

  tf::IncrementKeyValueRequest incr;
  incr.set_key("counter");
  incr.set_increment(int64_t{1} << 40);
  tf::IncrementKeyValueResponse incr_r;
  ASSERT_TRUE(stub_->IncrementKeyValue(Deadline().get(), incr, &incr_r).ok());
  ASSERT_TRUE(stub_->IncrementKeyValue(Deadline().get(), incr, &incr_r).ok());
  EXPECT_EQ(incr_r.kv().value(), std::to_string(int64_t{1} << 41));

  tf::DeleteKeyValueRequest del;
  del.set_key("dir");
  tf::DeleteKeyValueResponse del_r;
  ASSERT_TRUE(stub_->DeleteKeyValue(Deadline().get(), del, &del_r).ok());
  ASSERT_TRUE(stub_->GetKeyValueDir(Deadline().get(), dir, &dr).ok());
  EXPECT_EQ(dr.kv_size(), 0);
  try_get.set_key("dirx");
  EXPECT_TRUE(stub_->TryGetKeyValue(Deadline().get(), try_get, &tr).ok());
}

TEST_F(TensorflowProtocolTest, BlockingGetIsAnsweredWhenTheKeyIsSet) {
  tf::GetKeyValueRequest get;
  get.set_key("later");
  tf::GetKeyValueResponse gr;
  auto pending = std::async(std::launch::async,
                            [&] { return stub_->GetKeyValue(Deadline().get(), get, &gr); });
  ASSERT_TRUE(
      Eventually([&] { return coordinator_.service().ParkedCalls(ParkKind::kKeyValueGet) == 1; }));
  EXPECT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("later");
  insert.mutable_kv()->set_value(std::string(1 << 20, 'x'));
  tf::InsertKeyValueResponse ir;
  ASSERT_TRUE(stub_->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  ASSERT_TRUE(pending.get().ok());
  EXPECT_EQ(gr.kv().value().size(), size_t{1} << 20);
}

TEST_F(TensorflowProtocolTest, BlockingGetEndsAtTheClientDeadlineAndLeavesNoWaiter) {
  tf::GetKeyValueRequest get;
  get.set_key("never");
  tf::GetKeyValueResponse gr;
  grpc::Status s = stub_->GetKeyValue(Deadline(absl::Milliseconds(200)).get(), get, &gr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(
      Eventually([&] { return coordinator_.service().ParkedCalls(ParkKind::kKeyValueGet) == 0; }));
}

TEST_F(TensorflowProtocolTest, BarrierPassesWithCounterAndConflictingListsFailIt) {
  RegisterAll();
  auto arrive = [this](int id, int64_t counter, const std::vector<int>& tasks) {
    tf::BarrierRequest request;
    request.set_barrier_id("step");
    request.set_barrier_timeout_in_ms(10'000);
    *request.mutable_source_task() = Task(id);
    request.set_counter(counter);
    for (int t : tasks) *request.add_tasks() = Task(t);
    tf::BarrierResponse response;
    grpc::Status s = stub_->Barrier(Deadline().get(), request, &response);
    return std::make_pair(s, response.counter());
  };
  auto other = std::async(std::launch::async, [&] { return arrive(1, 0, {}); });
  auto [s0, c0] = arrive(0, 0, {});
  ASSERT_TRUE(s0.ok()) << s0.error_message();
  ASSERT_TRUE(other.get().first.ok());
  EXPECT_EQ(c0, 0);

  // Task 1 opens instance 1 for both tasks; task 0 then arrives with a list of its own.
  auto conflicting = std::async(std::launch::async, [&] { return arrive(1, 1, {0, 1}); });
  ASSERT_TRUE(Eventually([&] { return coordinator_.ArrivedAtBarrier("step", {"worker", 1}); }));
  auto [s1, c1] = arrive(0, 1, {0});
  EXPECT_EQ(s1.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status other_status = conflicting.get().first;
  EXPECT_TRUE(other_status.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << other_status.error_message();
  EXPECT_TRUE(Payloads(s1).count("type.googleapis.com/tensorflow.BarrierError"));
}

TEST_F(TensorflowProtocolTest, ReportedErrorReachesTheOtherTasksPollForError) {
  RegisterAll();
  tf::PollForErrorRequest poll;
  *poll.mutable_source_task() = Task(1);
  tf::PollForErrorResponse pr;
  auto pending = std::async(std::launch::async,
                            [&] { return stub_->PollForError(Deadline().get(), poll, &pr); });
  ASSERT_TRUE(
      Eventually([&] { return coordinator_.service().ParkedCalls(ParkKind::kPollForError) == 1; }));
  EXPECT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  tf::ReportErrorToServiceRequest report;
  report.set_error_code(static_cast<int>(grpc::StatusCode::INTERNAL));
  report.set_error_message("GPU fell off the bus");
  *report.mutable_error_origin() = Task(0);
  tf::ReportErrorToServiceResponse rr;
  ASSERT_TRUE(stub_->ReportErrorToService(Deadline().get(), report, &rr).ok());
  grpc::Status s = pending.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("GPU fell off the bus"), std::string::npos);
  tf::CoordinationServiceError error;
  ASSERT_TRUE(error.ParseFromString(
      Payloads(s)["type.googleapis.com/tensorflow.CoordinationServiceError"]));
  EXPECT_TRUE(error.is_reported_error());
  EXPECT_EQ(error.source_task().task_id(), 0);

  tf::GetTaskStateRequest states;
  *states.add_source_task() = Task(0);
  *states.add_source_task() = Task(1);
  tf::GetTaskStateResponse sr;
  ASSERT_TRUE(stub_->GetTaskState(Deadline().get(), states, &sr).ok());
  EXPECT_EQ(sr.task_state(0).state(), tf::TASKSTATE_ERROR);
  EXPECT_EQ(sr.task_state(1).state(), tf::TASKSTATE_CONNECTED);
  EXPECT_EQ(sr.task_state(1).incarnation(), 11u);
}

// A worker task as the cluster snapshot shows it.
v1::TaskSnapshot SnapshotTask(TestCoordinator& coordinator, int task_id) {
  auto stub = v1::Coordinator::NewStub(coordinator.Channel());
  v1::ClusterSnapshot snapshot;
  EXPECT_TRUE(stub->GetClusterSnapshot(Deadline().get(), {}, &snapshot).ok());
  for (const v1::TaskSnapshot& task : snapshot.tasks()) {
    if (task.job() == "worker" && task.task_id() == task_id) return task;
  }
  ADD_FAILURE() << "no task " << task_id << " in " << snapshot.DebugString();
  return v1::TaskSnapshot();
}

// The reason a task's error gets, as the cluster snapshot shows it.
v1::FailureReason SnapshotReason(TestCoordinator& coordinator, int task_id) {
  return SnapshotTask(coordinator, task_id).reason();
}

TEST_F(TensorflowProtocolTest, AReportsReasonIsTheOneTheTaskStateAndTheSnapshotShow) {
  RegisterAll();
  tf::ReportErrorToServiceRequest report;
  report.set_error_code(static_cast<int>(grpc::StatusCode::INTERNAL));
  report.set_error_message("GPU 0 is unhealthy: XID 79");
  *report.mutable_error_origin() = Task(0);
  report.set_cohort_failure_reason(v1::FAILURE_REASON_GPU_FAULT);
  tf::ReportErrorToServiceResponse rr;
  ASSERT_TRUE(stub_->ReportErrorToService(Deadline().get(), report, &rr).ok());
  // A TSL client's report, which has no reason: a reported error.
  report.clear_cohort_failure_reason();
  *report.mutable_error_origin() = Task(1);
  ASSERT_TRUE(stub_->ReportErrorToService(Deadline().get(), report, &rr).ok());

  auto states = coordinator_.service().GetTaskStates({{"worker", 0}, {"worker", 1}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0].reason, FailureReason::kGpuFault);
  EXPECT_EQ((*states)[1].reason, FailureReason::kReportedError);
  EXPECT_EQ(SnapshotReason(coordinator_, 0), v1::FAILURE_REASON_GPU_FAULT);
  EXPECT_EQ(SnapshotReason(coordinator_, 1), v1::FAILURE_REASON_REPORTED_ERROR);
}

TEST_F(TensorflowProtocolTest, AReportWithAReasonThatIsNoneIsInvalidArgumentAndChangesNothing) {
  RegisterAll();
  for (int reason : {-1, 9, 1000}) {
    tf::ReportErrorToServiceRequest report;
    report.set_error_code(static_cast<int>(grpc::StatusCode::INTERNAL));
    report.set_error_message("boom");
    *report.mutable_error_origin() = Task(0);
    report.set_cohort_failure_reason(reason);
    tf::ReportErrorToServiceResponse rr;
    grpc::Status s = stub_->ReportErrorToService(Deadline().get(), report, &rr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << reason;
    EXPECT_NE(s.error_message().find(
                  absl::StrCat("cohort_failure_reason ", reason, " is no failure reason")),
              std::string::npos)
        << s.error_message();
  }
  auto states = coordinator_.service().GetTaskStates({{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0].state, TaskState::kConnected);
  EXPECT_TRUE(coordinator_.service().PropagatedError().ok());
  EXPECT_EQ(SnapshotReason(coordinator_, 0), v1::FAILURE_REASON_UNSPECIFIED);
}

tf::HeartbeatRequest HeartbeatOf(int id, uint64_t incarnation) {
  tf::HeartbeatRequest hb;
  *hb.mutable_source_task() = Task(id);
  hb.set_incarnation(incarnation);
  return hb;
}

TEST_F(TensorflowProtocolTest, AHeartbeatsProgressIsKeptAndTheTaskStateAndTheSnapshotShowIt) {
  RegisterAll();
  tf::HeartbeatRequest hb = HeartbeatOf(0, 10);
  hb.mutable_cohort_progress()->set_step(4200);
  hb.mutable_cohort_progress()->set_busy_seconds_per_step(0.75);
  tf::HeartbeatResponse response;
  ASSERT_TRUE(stub_->Heartbeat(Deadline().get(), hb, &response).ok());

  auto states = coordinator_.service().GetTaskStates({{"worker", 0}, {"worker", 1}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0].progress, (TaskProgress{4200, 0.75}));
  EXPECT_TRUE((*states)[1].progress.empty());
  v1::TaskSnapshot task = SnapshotTask(coordinator_, 0);
  ASSERT_TRUE(task.has_step());
  EXPECT_EQ(task.step(), 4200);
  ASSERT_TRUE(task.has_busy_seconds_per_step());
  EXPECT_EQ(task.busy_seconds_per_step(), 0.75);
  // A task whose heartbeats carried none: the fields are absent, not 0.
  v1::TaskSnapshot other = SnapshotTask(coordinator_, 1);
  EXPECT_FALSE(other.has_step());
  EXPECT_FALSE(other.has_busy_seconds_per_step());

  // A TSL client's heartbeat, which has no progress: the last one stays.
  ASSERT_TRUE(stub_->Heartbeat(Deadline().get(), HeartbeatOf(0, 10), &response).ok());
  EXPECT_EQ(SnapshotTask(coordinator_, 0).step(), 4200);
}

TEST_F(TensorflowProtocolTest, AHeartbeatWithProgressThatIsNotValidIsInvalidArgumentAndNotCounted) {
  RegisterAll();
  tf::HeartbeatRequest valid = HeartbeatOf(0, 10);
  valid.mutable_cohort_progress()->set_step(10);
  valid.mutable_cohort_progress()->set_busy_seconds_per_step(1.5);
  tf::HeartbeatResponse response;
  ASSERT_TRUE(stub_->Heartbeat(Deadline().get(), valid, &response).ok());
  auto last_heartbeat = [this] {
    auto states = coordinator_.service().GetTaskStates({{"worker", 0}});
    return states.ok() ? (*states)[0].last_heartbeat : absl::InfinitePast();
  };
  const absl::Time counted = last_heartbeat();

  std::vector<tf::CohortTaskProgress> invalid(5);
  invalid[0].set_step(-1);
  invalid[1].set_busy_seconds_per_step(-0.5);
  invalid[2].set_busy_seconds_per_step(std::numeric_limits<double>::quiet_NaN());
  invalid[3].set_busy_seconds_per_step(std::numeric_limits<double>::infinity());
  invalid[4].set_step(11);  // a valid step does not save an invalid busy time
  invalid[4].set_busy_seconds_per_step(-std::numeric_limits<double>::infinity());
  for (const tf::CohortTaskProgress& progress : invalid) {
    tf::HeartbeatRequest hb = HeartbeatOf(0, 10);
    *hb.mutable_cohort_progress() = progress;
    grpc::Status s = stub_->Heartbeat(Deadline().get(), hb, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << progress.DebugString();
    EXPECT_NE(s.error_message().find("the heartbeat was not counted"), std::string::npos)
        << s.error_message();
  }

  auto states = coordinator_.service().GetTaskStates({{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0].state, TaskState::kConnected);
  EXPECT_EQ((*states)[0].progress, (TaskProgress{10, 1.5}));
  EXPECT_EQ(last_heartbeat(), counted);
}

TEST_F(TensorflowProtocolTest, WaitForAllTasksConcatenatesDevicesInTaskOrder) {
  RegisterAll();
  auto wait = [this](int id) {
    tf::WaitForAllTasksRequest request;
    *request.mutable_source_task() = Task(id);
    request.mutable_device_info()->add_device()->set_type_url("device/" + std::to_string(id));
    tf::WaitForAllTasksResponse response;
    grpc::Status s = stub_->WaitForAllTasks(Deadline().get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  };
  auto other = std::async(std::launch::async, [&] { return wait(1); });
  tf::WaitForAllTasksResponse response = wait(0);
  other.get();
  ASSERT_EQ(response.device_info().device_size(), 2);
  EXPECT_EQ(response.device_info().device(0).type_url(), "device/0");
  EXPECT_EQ(response.device_info().device(1).type_url(), "device/1");
}

TEST_F(TensorflowProtocolTest, WatchJobStateAnswersAtOnceForUnknownVersion) {
  tf::WatchJobStateRequest request;
  request.set_job_name("worker");
  request.set_version_number(-1);
  tf::WatchJobStateResponse response;
  ASSERT_TRUE(stub_->WatchJobState(Deadline().get(), request, &response).ok());
  EXPECT_EQ(response.task_state_size(), 2);
  EXPECT_EQ(response.task_state(0).state(), tf::TASKSTATE_DISCONNECTED);
}

TEST_F(TensorflowProtocolTest, ShutdownWaitsForEveryTask) {
  RegisterAll();
  tf::ShutdownTaskRequest request;
  *request.mutable_source_task() = Task(0);
  tf::ShutdownTaskResponse response;
  auto pending = std::async(std::launch::async, [&] {
    return stub_->ShutdownTask(Deadline().get(), request, &response);
  });
  ASSERT_TRUE(
      Eventually([&] { return coordinator_.service().ParkedCalls(ParkKind::kShutdown) == 1; }));
  EXPECT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  tf::ShutdownTaskRequest other;
  *other.mutable_source_task() = Task(1);
  ASSERT_TRUE(stub_->ShutdownTask(Deadline().get(), other, &response).ok());
  ASSERT_TRUE(pending.get().ok());
  auto states = coordinator_.service().AllTasks();
  EXPECT_EQ(states[0].state, TaskState::kDisconnected);
  EXPECT_EQ(states[1].state, TaskState::kDisconnected);
}

// What a sidecar's proxy sends again after an outage carries a request id (cohort-request
// metadata): each attempt gets the first one's answer, and the change is made once.
class RequestIdTest : public TensorflowProtocolTest {
 protected:
  std::unique_ptr<grpc::ClientContext> With(const std::string& request) {
    auto ctx = Deadline();
    ctx->AddMetadata("cohort-request", request);
    return ctx;
  }
  grpc::Status Increment(const std::string& request, int64_t delta, int64_t* sum) {
    tf::IncrementKeyValueRequest incr;
    incr.set_key("n");
    incr.set_increment(delta);
    tf::IncrementKeyValueResponse response;
    grpc::Status s = stub_->IncrementKeyValue(With(request).get(), incr, &response);
    *sum = std::stoll(response.kv().value().empty() ? "0" : response.kv().value());
    return s;
  }
  grpc::Status Insert(const std::string& request, const std::string& key,
                      const std::string& value) {
    tf::InsertKeyValueRequest insert;
    insert.mutable_kv()->set_key(key);
    insert.mutable_kv()->set_value(value);
    tf::InsertKeyValueResponse ignored;
    return stub_->InsertKeyValue(With(request).get(), insert, &ignored);
  }
  std::string Value(const std::string& key) {
    auto value = coordinator_.service().TryGetKeyValue(key);
    return value.ok() ? *value : value.status().ToString();
  }
};

TEST_F(RequestIdTest, AnIncrementSentAgainIsAnsweredAsTheFirstAndAppliedOnce) {
  int64_t sum = 0;
  ASSERT_TRUE(Increment("a1/1/1", 5, &sum).ok());
  EXPECT_EQ(sum, 5);
  ASSERT_TRUE(Increment("a1/2/1", 10, &sum).ok());  // another request, request 1 still open
  EXPECT_EQ(sum, 15);
  ASSERT_TRUE(Increment("a1/1/1", 5, &sum).ok());  // request 1 again: its own answer
  EXPECT_EQ(sum, 5);
  EXPECT_EQ(Value("n"), "15");
  ASSERT_TRUE(Increment("b2/1/1", 5, &sum).ok());  // the same number in another session
  EXPECT_EQ(sum, 20);
  // Both sessions' answers are kept until a later request's low mark passes them.
  EXPECT_EQ(Value("cohort-requests/a1"), "1 5\n2 15\n");
  ASSERT_TRUE(Increment("a1/3/3", 1, &sum).ok());
  EXPECT_EQ(Value("cohort-requests/a1"), "3 21\n");
  ASSERT_TRUE(Increment("b2/2/2", 1, &sum).ok());
  EXPECT_EQ(sum, 22);
  EXPECT_EQ(Value("cohort-requests/b2"), "2 22\n");
  // Without an id, every call is a new one (a client talking to the coordinator directly).
  tf::IncrementKeyValueRequest plain;
  plain.set_key("n");
  plain.set_increment(1);
  tf::IncrementKeyValueResponse response;
  ASSERT_TRUE(stub_->IncrementKeyValue(Deadline().get(), plain, &response).ok());
  ASSERT_TRUE(stub_->IncrementKeyValue(Deadline().get(), plain, &response).ok());
  EXPECT_EQ(response.kv().value(), "24");
}

TEST_F(RequestIdTest, AnInsertSentAgainIsOkOnlyForTheRequestThatStoredIt) {
  ASSERT_TRUE(Insert("c3/1/1", "k", "mine").ok());
  EXPECT_TRUE(Insert("c3/1/1", "k", "mine").ok());  // the lost answer's attempt again
  // Another writer, even with the same value, finds the key taken.
  EXPECT_EQ(Insert("d4/1/1", "k", "mine").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Insert("c3/2/1", "k", "mine").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // A refused request keeps no answer: sent again, it is refused again.
  EXPECT_EQ(Insert("c3/2/1", "k", "mine").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Value("k"), "mine");
  // Once every request of the session is answered, its record goes.
  ASSERT_TRUE(Insert("c3/3/3", "j", "x").ok());
  ASSERT_TRUE(Insert("c3/4/4", "i", "y").ok());
  EXPECT_EQ(Value("cohort-requests/c3"), "4 ok\n");
}

TEST_F(RequestIdTest, ACancelOrResetSentAgainIsOkWhereItsFirstAttemptTookEffect) {
  RegisterAll();
  tf::CancelBarrierRequest cancel;
  cancel.set_barrier_id("b");
  cancel.set_counter(0);
  *cancel.mutable_source_task() = Task(0);
  tf::CancelBarrierResponse cancelled;
  ASSERT_TRUE(stub_->CancelBarrier(With("e5/1/1").get(), cancel, &cancelled).ok());
  EXPECT_TRUE(stub_->CancelBarrier(With("e5/1/1").get(), cancel, &cancelled).ok());
  EXPECT_EQ(stub_->CancelBarrier(With("e5/2/2").get(), cancel, &cancelled).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(stub_->CancelBarrier(Deadline().get(), cancel, &cancelled).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  tf::ResetTaskRequest reset;
  *reset.mutable_source_task() = Task(1);
  tf::ResetTaskResponse ignored;
  ASSERT_TRUE(stub_->ResetTask(With("e5/3/3").get(), reset, &ignored).ok());
  EXPECT_TRUE(stub_->ResetTask(With("e5/3/3").get(), reset, &ignored).ok());
  EXPECT_EQ(stub_->ResetTask(With("e5/4/4").get(), reset, &ignored).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Back with a new incarnation, the task is not reset again by the old request.
  ASSERT_TRUE(Register(1, 12).ok());
  EXPECT_TRUE(stub_->ResetTask(With("e5/3/3").get(), reset, &ignored).ok());
  auto states = coordinator_.service().GetTaskStates({TaskName{"worker", 1}});
  ASSERT_TRUE(states.ok());
  EXPECT_EQ((*states)[0].state, TaskState::kConnected);
}

TEST_F(RequestIdTest, AMalformedRequestIdIsInvalidArgumentAndChangesNothing) {
  const int64_t revision = coordinator_.service().KeyValueStats().revision;
  for (const char* bad : {"", "a1", "a1/0/0", "a1/2/3", "A1/1/1", "a1/x/1", "a1/1/1/1",
                          "0123456789abcdef0123456789abcdef0/1/1"}) {
    int64_t sum = 0;
    grpc::Status s = Increment(bad, 1, &sum);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(s.error_message().find("cohort-request"), std::string::npos) << s.error_message();
    EXPECT_EQ(Insert(bad, "bad", "x").error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  EXPECT_EQ(coordinator_.service().KeyValueStats().revision, revision);
}

}  // namespace
}  // namespace cohort::testing
