// The sidecar's proxy in-process: a real coordinator on loopback, a ProxyServer in front of
// it, and clients of every protocol talking to the proxy. What the coordinator answers must
// reach the client unchanged, payloads included.
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/coordination_agent.h"
#include "agent/grpc_status.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/task_progress.h"
#include "gtest/gtest.h"
#include "service/core/errors.h"
#include "service/proxy/proxy_server.h"
#include "service/proxy/upstream_connection.h"
#include "service/proxy/upstream_requests.h"
#include "service/rpc/status_translation.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"
#include "xla/coordination_service.grpc.pb.h"
#include "xla/distributed_runtime.grpc.pb.h"

namespace cohort::testing {
namespace {

namespace tf = tensorflow;
namespace xc = xla::coordination;

struct ErrorLog {
  absl::Mutex mu;
  std::vector<absl::Status> errors ABSL_GUARDED_BY(mu);
  CoordinationAgent::ErrorCallback Callback() {
    return [this](const absl::Status& s) {
      absl::MutexLock lock(&mu);
      errors.push_back(s);
    };
  }
  size_t Count() {
    absl::MutexLock lock(&mu);
    return errors.size();
  }
  absl::Status First() {
    absl::MutexLock lock(&mu);
    return errors.empty() ? absl::OkStatus() : errors.front();
  }
};

class ProxyTest : public ::testing::Test {
 protected:
  void Start(int workers, absl::Duration tolerance = absl::Seconds(30), bool recoverable = false) {
    ServiceConfig config = Jobs(workers);
    config.jobs[0].recoverable = recoverable;
    coordinator_ = std::make_unique<TestCoordinator>(config);
    ProxyOptions options;
    options.listen = "127.0.0.1:0";
    options.upstream.address = coordinator_->address();
    options.upstream.outage_tolerance = tolerance;
    proxy_ = std::make_unique<ProxyServer>(options);
    ASSERT_TRUE(proxy_->Start().ok());
    ASSERT_TRUE(proxy_->backend().AwaitLink(UpstreamBackend::Link::kConnected, absl::Seconds(20)));
  }
  void TearDown() override {
    for (auto& agent : agents_) agent->CancelPendingCalls();
    agents_.clear();
    if (proxy_) proxy_->Shutdown(absl::UnavailableError("test over"));
  }

  std::string ProxyAddress() const { return absl::StrCat("127.0.0.1:", proxy_->port()); }
  std::shared_ptr<grpc::Channel> ProxyChannel() const {
    return grpc::CreateChannel(ProxyAddress(), grpc::InsecureChannelCredentials());
  }

  CoordinationAgent* Agent(int task, CoordinationAgent::ErrorCallback on_error = nullptr) {
    AgentConfig config;
    config.coordinator_address = ProxyAddress();
    config.job_name = "worker";
    config.task_id = task;
    config.heartbeat_interval = absl::Milliseconds(200);
    config.unreachable_timeout = absl::Seconds(10);
    agents_.push_back(std::make_unique<CoordinationAgent>());
    EXPECT_TRUE(agents_.back()->Initialize(config, std::move(on_error)).ok());
    return agents_.back().get();
  }
  // Connects every agent at once (the register barrier waits for all).
  void ConnectAll(const std::vector<CoordinationAgent*>& agents) {
    std::vector<std::thread> threads;
    for (CoordinationAgent* agent : agents) {
      threads.emplace_back([agent] { EXPECT_TRUE(agent->Connect().ok()); });
    }
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<TestCoordinator> coordinator_;
  std::unique_ptr<ProxyServer> proxy_;
  std::vector<std::unique_ptr<CoordinationAgent>> agents_;
};

TEST_F(ProxyTest, TensorflowCallsOfTwoAgentsAreForwarded) {
  Start(2);
  CoordinationAgent* a = Agent(0);
  CoordinationAgent* b = Agent(1);
  ConnectAll({a, b});
  EXPECT_EQ(a->leader_incarnation(), coordinator_->service().service_incarnation());

  ASSERT_TRUE(a->InsertKeyValue("dir/x", "1").ok());
  EXPECT_EQ(b->InsertKeyValue("dir/x", "2").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*b->GetKeyValue("dir/x"), "1");
  EXPECT_EQ(*coordinator_->service().TryGetKeyValue("dir/x"), "1");
  EXPECT_EQ(*b->IncrementKeyValue("counter", 5), 5);
  EXPECT_EQ(*a->IncrementKeyValue("counter", 2), 7);
  auto dir = a->GetKeyValueDir("dir");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir->size(), 1u);
  EXPECT_EQ((*dir)[0].second, "1");
  EXPECT_EQ(a->TryGetKeyValue("missing").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(a->DeleteKeyValue("dir").ok());
  EXPECT_EQ(b->TryGetKeyValue("dir/x").status().code(), absl::StatusCode::kNotFound);

  // A blocking get parked through the proxy is answered by a later insert.
  absl::Notification got;
  std::string value;
  auto pending = a->GetKeyValueAsync("later", [&](const absl::StatusOr<std::string>& v) {
    if (v.ok()) value = *v;
    got.Notify();
  });
  ASSERT_TRUE(b->InsertKeyValue("later", "v").ok());
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(value, "v");

  // A barrier of both, and device exchange.
  std::thread other([b] { EXPECT_TRUE(b->WaitAtBarrier("step", absl::Seconds(20)).ok()); });
  EXPECT_TRUE(a->WaitAtBarrier("step", absl::Seconds(20)).ok());
  other.join();
  tf::DeviceInfo devices_a, devices_b;
  devices_a.add_device()->set_type_url("a");
  devices_b.add_device()->set_type_url("b");
  std::thread exchange([&] { EXPECT_TRUE(b->WaitForAllTasks(devices_b).ok()); });
  ASSERT_TRUE(a->WaitForAllTasks(devices_a).ok());
  exchange.join();
  tf::DeviceInfo cluster = a->GetClusterDeviceInfo();
  ASSERT_EQ(cluster.device_size(), 2);
  EXPECT_EQ(cluster.device(0).type_url(), "a");
  EXPECT_EQ(cluster.device(1).type_url(), "b");

  auto states = a->GetTaskState({{"worker", 0}, {"worker", 1}});
  ASSERT_TRUE(states.ok());
  EXPECT_EQ((*states)[1].state, tf::TASKSTATE_CONNECTED);
  EXPECT_EQ((*states)[1].incarnation, b->incarnation());
}

TEST_F(ProxyTest, AnErrorReportedByOneTaskReachesTheOtherWithItsSource) {
  Start(2);
  ErrorLog errors;
  CoordinationAgent* a = Agent(0);
  CoordinationAgent* b = Agent(1, errors.Callback());
  ConnectAll({a, b});
  ASSERT_TRUE(a->ReportError(absl::InternalError("disk on fire")).ok());
  ASSERT_TRUE(Eventually([&] { return errors.Count() > 0; }));
  absl::Status error = errors.First();
  EXPECT_EQ(error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(error.message().find("disk on fire"), absl::string_view::npos);
  auto source = GetErrorSource(error);
  ASSERT_TRUE(source.has_value());
  EXPECT_TRUE(source->is_reported_error);
  EXPECT_EQ(source->job, "worker");
  EXPECT_EQ(source->task_id, 0);
}

TEST_F(ProxyTest, ReportsAboutATaskAndByATaskReachTheCoordinatorAsSuch) {
  Start(2);
  auto stub = tf::CoordinationService::NewStub(ProxyChannel());
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  };
  // Worker 1 never registered: it may not report its own error (as upstream)...
  tf::ReportErrorToServiceRequest own;
  own.set_error_code(13);
  own.set_error_message("mine");
  own.mutable_error_origin()->set_job_name("worker");
  own.mutable_error_origin()->set_task_id(1);
  tf::ReportErrorToServiceResponse own_response;
  grpc::Status refused = stub->ReportErrorToService(ctx().get(), own, &own_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  auto state_of_worker_1 = [&] {
    auto states = coordinator_->service().GetTaskStates({TaskName{"worker", 1}});
    EXPECT_TRUE(states.ok());
    return states.ok() ? states->front().state : TaskState::kDisconnected;
  };
  EXPECT_EQ(state_of_worker_1(), TaskState::kDisconnected);

  // ...but an error reported about it by someone else goes through the proxy as such.
  tf::ReportErrorToTaskRequest about;
  about.set_error_code(13);
  about.set_error_message("node lost");
  about.mutable_error_payload()->mutable_source_task()->set_job_name("worker");
  about.mutable_error_payload()->mutable_source_task()->set_task_id(1);
  tf::ReportErrorToTaskResponse about_response;
  grpc::Status taken = stub->ReportErrorToTask(ctx().get(), about, &about_response);
  ASSERT_TRUE(taken.ok()) << taken.error_message();
  EXPECT_EQ(state_of_worker_1(), TaskState::kError);
}

TEST_F(ProxyTest, XlaProtocolIsForwardedWithTheCoordinatorsIncarnation) {
  Start(1);
  auto stub = xc::CoordinationService::NewStub(ProxyChannel());
  xc::RegisterTaskRequest reg;
  reg.set_incarnation(7);
  reg.set_source_task_id(0);
  xc::RegisterTaskResponse registered;
  ASSERT_TRUE(stub->RegisterTask(Deadline().get(), reg, &registered).ok());
  const uint64_t incarnation = coordinator_->service().service_incarnation();
  EXPECT_EQ(registered.service_incarnation(), incarnation);

  xc::Incarnations incarnations;
  incarnations.set_task_id(0);
  incarnations.set_task_incarnation(7);
  incarnations.set_service_incarnation(incarnation);
  xc::InsertKeyValueRequest insert;
  *insert.mutable_incarnations() = incarnations;
  insert.mutable_kv()->set_key("k");
  insert.mutable_kv()->set_value("v");
  xc::InsertKeyValueResponse inserted;
  ASSERT_TRUE(stub->InsertKeyValue(Deadline().get(), insert, &inserted).ok());
  xc::GetKeyValueRequest get;
  *get.mutable_incarnations() = incarnations;
  get.set_key("k");
  xc::GetKeyValueResponse got;
  ASSERT_TRUE(stub->GetKeyValue(Deadline().get(), get, &got).ok());
  EXPECT_EQ(got.kv().value(), "v");

  // A barrier error keeps its counter; a stale task incarnation is refused here.
  xc::BarrierRequest barrier;
  *barrier.mutable_incarnations() = incarnations;
  barrier.set_barrier_id("b");
  barrier.set_source_task_id(0);
  barrier.add_task_ids(0);
  barrier.set_counter(0);
  xc::BarrierResponse passed;
  grpc::Status barrier_status = stub->Barrier(Deadline().get(), barrier, &passed);
  ASSERT_TRUE(barrier_status.ok())
      << barrier_status.error_code() << " " << barrier_status.error_message();
  EXPECT_EQ(passed.counter(), 0);
  xc::CancelBarrierRequest cancel;
  *cancel.mutable_incarnations() = incarnations;
  cancel.set_barrier_id("b");
  cancel.set_counter(0);
  cancel.set_source_task_id(0);
  xc::CancelBarrierResponse cancelled;
  grpc::Status late = stub->CancelBarrier(Deadline().get(), cancel, &cancelled);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  auto payloads = Payloads(late);
  EXPECT_TRUE(payloads.count(kCoordinationServiceErrorUrl));

  xc::WatchTasksRequest watch;
  *watch.mutable_incarnations() = incarnations;
  watch.set_version_number(-1);
  xc::WatchTasksResponse tasks;
  ASSERT_TRUE(stub->WatchTasks(Deadline().get(), watch, &tasks).ok());
  ASSERT_EQ(tasks.task_state_size(), 1);
  EXPECT_EQ(tasks.task_state(0).state(), xc::CONNECTED);
  EXPECT_EQ(tasks.task_state(0).incarnation(), 7u);

  incarnations.set_task_incarnation(8);
  *get.mutable_incarnations() = incarnations;
  xc::PollForErrorRequest poll;
  *poll.mutable_incarnations() = incarnations;
  poll.set_source_task_id(0);
  xc::PollForErrorResponse polled;
  EXPECT_EQ(stub->PollForError(Deadline().get(), poll, &polled).error_code(),
            grpc::StatusCode::ABORTED);

  incarnations.set_service_incarnation(incarnation + 1);
  *get.mutable_incarnations() = incarnations;
  grpc::Status mismatch = stub->GetKeyValue(Deadline().get(), get, &got);
  EXPECT_EQ(mismatch.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(Payloads(mismatch).count(kServiceMismatchErrorUrl));
}

TEST_F(ProxyTest, DistributedRuntimeProtocolIsForwarded) {
  Start(1);
  auto stub = xla::DistributedRuntimeService::NewStub(ProxyChannel());
  xla::ConnectRequest connect;
  connect.set_protocol_version(2);
  connect.set_node_id(0);
  connect.set_client_id(42);
  xla::ConnectResponse connected;
  ASSERT_TRUE(stub->Connect(Deadline().get(), connect, &connected).ok());
  EXPECT_EQ(connected.session_id(), coordinator_->service().service_incarnation());

  xla::KeyValueSetRequest set;
  set.set_session_id(connected.session_id());
  set.set_key("k");
  set.set_value("v");
  xla::KeyValueSetResponse was_set;
  ASSERT_TRUE(stub->KeyValueSet(Deadline().get(), set, &was_set).ok());
  xla::KeyValueGetRequest get;
  get.set_session_id(connected.session_id());
  get.set_key("k");
  get.set_timeout_milliseconds(1000);
  xla::KeyValueGetResponse got;
  ASSERT_TRUE(stub->KeyValueGet(Deadline().get(), get, &got).ok());
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.value(), "v");
  get.set_key("missing");
  get.set_timeout_milliseconds(100);
  grpc::Status timed_out = stub->KeyValueGet(Deadline().get(), get, &got);
  EXPECT_EQ(timed_out.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(timed_out.error_message().find("missing"), std::string::npos);

  xla::HeartbeatRequest heartbeat;
  heartbeat.set_session_id(connected.session_id());
  heartbeat.set_node_id(0);
  xla::HeartbeatResponse beat;
  EXPECT_TRUE(stub->Heartbeat(Deadline().get(), heartbeat, &beat).ok());
}

TEST_F(ProxyTest, CohortSnapshotAndKeyWatchesAreForwarded) {
  Start(1);
  CoordinationAgent* a = Agent(0);
  ASSERT_TRUE(a->Connect().ok());
  auto stub = v1::Coordinator::NewStub(ProxyChannel());
  v1::ClusterSnapshot snapshot;
  ASSERT_TRUE(
      stub->GetClusterSnapshot(Deadline().get(), v1::GetClusterSnapshotRequest(), &snapshot).ok());
  EXPECT_EQ(snapshot.service_incarnation(), coordinator_->service().service_incarnation());
  ASSERT_EQ(snapshot.tasks_size(), 1);
  EXPECT_EQ(snapshot.tasks(0).state(), v1::CONNECTED);
  EXPECT_TRUE(snapshot.cluster_registered());

  auto ctx = Deadline();
  v1::WatchKeysRequest request;
  request.set_key("cfg");
  auto reader = stub->WatchKeys(ctx.get(), request);
  v1::WatchKeysResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_TRUE(response.created());
  ASSERT_TRUE(a->InsertKeyValue("cfg/lr", "0.1").ok());
  ASSERT_TRUE(a->InsertKeyValue("other", "x").ok());
  ASSERT_TRUE(a->UpdateKeyValue("cfg/lr", "0.2").ok());
  std::vector<v1::KeyEvent> events;
  while (events.size() < 2 && reader->Read(&response)) {
    for (const auto& e : response.events()) events.push_back(e);
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type(), v1::KeyEvent::INSERTED);
  EXPECT_EQ(events[1].type(), v1::KeyEvent::UPDATED);
  EXPECT_EQ(events[1].value(), "0.2");
  ctx->TryCancel();
  reader->Finish();
}

TEST_F(ProxyTest, AReportsReasonReachesTheCoordinatorAndItsSnapshotThroughTheProxy) {
  Start(1);
  CoordinationAgent* a = Agent(0);
  ASSERT_TRUE(a->Connect().ok());
  ASSERT_TRUE(
      a->ReportError(absl::UnavailableError("worker 0 exited"), FailureReason::kWorkloadExit).ok());
  auto states = coordinator_->service().GetTaskStates({TaskName{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front().reason, FailureReason::kWorkloadExit);

  auto stub = v1::Coordinator::NewStub(ProxyChannel());
  v1::ClusterSnapshot snapshot;
  ASSERT_TRUE(
      stub->GetClusterSnapshot(Deadline().get(), v1::GetClusterSnapshotRequest(), &snapshot).ok());
  ASSERT_EQ(snapshot.tasks_size(), 1);
  EXPECT_EQ(snapshot.tasks(0).reason(), v1::FAILURE_REASON_WORKLOAD_EXIT);
}

// A task registered through the proxy has its heartbeats answered here; the heartbeats the
// proxy sends the coordinator for it carry the progress the task's last carried.
TEST_F(ProxyTest, AnAgentsProgressReachesTheCoordinatorInTheHeartbeatsTheProxySends) {
  Start(1);
  CoordinationAgent* a = Agent(0);
  ASSERT_TRUE(a->Connect().ok());
  auto progress_at_coordinator = [&] {
    auto states = coordinator_->service().GetTaskStates({TaskName{"worker", 0}});
    return states.ok() ? states->front().progress : TaskProgress{};
  };
  a->SetProgress(TaskProgress{42, 0.5});
  ASSERT_TRUE(Eventually([&] {
    return progress_at_coordinator() == TaskProgress{42, 0.5};
  })) << "step "
      << progress_at_coordinator().step.value_or(-1);
  a->SetProgress(TaskProgress{43, 0.625});
  ASSERT_TRUE(Eventually([&] { return progress_at_coordinator() == TaskProgress{43, 0.625}; }));

  // The snapshot read through the proxy shows it too.
  auto stub = v1::Coordinator::NewStub(ProxyChannel());
  v1::ClusterSnapshot snapshot;
  ASSERT_TRUE(
      stub->GetClusterSnapshot(Deadline().get(), v1::GetClusterSnapshotRequest(), &snapshot).ok());
  ASSERT_EQ(snapshot.tasks_size(), 1);
  EXPECT_EQ(snapshot.tasks(0).step(), 43);
  EXPECT_EQ(snapshot.tasks(0).busy_seconds_per_step(), 0.625);
}

TEST_F(ProxyTest, AHeartbeatOfATaskNotRegisteredHereIsForwardedWithItsProgress) {
  Start(1);
  // Registered at the coordinator itself, not through the proxy.
  tf::RegisterTaskRequest reg;
  reg.mutable_source_task()->set_job_name("worker");
  reg.mutable_source_task()->set_task_id(0);
  reg.set_incarnation(5);
  tf::RegisterTaskResponse registered;
  ASSERT_TRUE(tf::CoordinationService::NewStub(coordinator_->Channel())
                  ->RegisterTask(Deadline().get(), reg, &registered)
                  .ok());

  tf::HeartbeatRequest heartbeat;
  *heartbeat.mutable_source_task() = reg.source_task();
  heartbeat.set_incarnation(5);
  heartbeat.mutable_cohort_progress()->set_step(9);
  heartbeat.mutable_cohort_progress()->set_busy_seconds_per_step(3.5);
  tf::HeartbeatResponse beat;
  grpc::Status sent = tf::CoordinationService::NewStub(ProxyChannel())
                          ->Heartbeat(Deadline().get(), heartbeat, &beat);
  ASSERT_TRUE(sent.ok()) << sent.error_message();
  auto states = coordinator_->service().GetTaskStates({TaskName{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front().progress, (TaskProgress{9, 3.5}));
}

TEST_F(ProxyTest, ThePodsWaitingCallsShareOneParkStreamToTheCoordinator) {
  Start(3);
  std::vector<CoordinationAgent*> agents = {Agent(0), Agent(1), Agent(2)};
  ConnectAll(agents);
  struct Got {
    absl::Notification done;
    absl::StatusOr<std::string> value;
  };
  std::vector<std::unique_ptr<Got>> got;
  std::vector<std::shared_ptr<AsyncGet>> gets;
  for (int t = 0; t < 3; ++t) {
    Got* g = got.emplace_back(std::make_unique<Got>()).get();
    gets.push_back(
        agents[t]->GetKeyValueAsync(absl::StrCat("k", t), [g](absl::StatusOr<std::string> v) {
          g->value = std::move(v);
          g->done.Notify();
        }));
  }
  // Three error polls (the proxy's own, one per task) and three gets wait at the
  // coordinator, all of them on the proxy's one park stream.
  CoordinationService& service = coordinator_->service();
  ASSERT_TRUE(Eventually([&] {
    return service.ParkedCalls(ParkKind::kPollForError) == 3 &&
           service.ParkedCalls(ParkKind::kKeyValueGet) == 3;
  }));
  EXPECT_EQ(proxy_->backend().parked_calls(), 6);

  // A client that gives up takes its call off the stream and out of the coordinator.
  gets[1]->Cancel();
  ASSERT_TRUE(got[1]->done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(got[1]->value.status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(Eventually([&] {
    return service.ParkedCalls(ParkKind::kKeyValueGet) == 2 &&
           proxy_->backend().parked_calls() == 5;
  }));

  ASSERT_TRUE(service.InsertKeyValue("k0", "zero", false).ok());
  ASSERT_TRUE(service.InsertKeyValue("k2", "two", false).ok());
  for (int t : {0, 2}) {
    ASSERT_TRUE(got[t]->done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    ASSERT_TRUE(got[t]->value.ok()) << got[t]->value.status();
  }
  EXPECT_EQ(*got[0]->value, "zero");
  EXPECT_EQ(*got[2]->value, "two");
  EXPECT_TRUE(Eventually([&] { return proxy_->backend().parked_calls() == 3; }));

  // A barrier of the three waits on the stream too, and passes.
  std::vector<std::thread> barrier;
  std::atomic<int> passed{0};
  for (int t = 0; t < 3; ++t) {
    barrier.emplace_back([&, t] {
      if (agents[t]->WaitAtBarrier("all", absl::Seconds(30), {}).ok()) ++passed;
    });
  }
  for (auto& thread : barrier) thread.join();
  EXPECT_EQ(passed.load(), 3);
  EXPECT_EQ(proxy_->backend().reissued_calls(), 0);
}

// The sidecar's signs of its workload's progress: its calls that finished, not the heartbeats
// and error polls a stuck process keeps up; and the calls it waits in on its peers.
TEST_F(ProxyTest, FinishedCallsCountTheWorkloadsCallsNotItsHeartbeatsAndWaitsAreSeen) {
  Start(2);
  CoordinationAgent* a = Agent(0);
  CoordinationAgent* b = Agent(1);
  ConnectAll({a, b});
  UpstreamBackend& backend = proxy_->backend();
  const uint64_t start = backend.finished_calls();
  EXPECT_GE(start, 2u);                   // the two registrations
  EXPECT_EQ(backend.waiting_calls(), 0);  // the proxy's own error polls do not wait on peers

  // Two heartbeats of task 0 forwarded by the proxy reach the coordinator: nothing counted.
  CoordinationService& service = coordinator_->service();
  auto last_heartbeat = [&] {
    auto states = service.GetTaskStates({TaskName{"worker", 0}});
    return states.ok() ? (*states)[0].last_heartbeat : absl::InfinitePast();
  };
  for (int i = 0; i < 2; ++i) {
    const absl::Time before = last_heartbeat();
    ASSERT_TRUE(Eventually([&] { return last_heartbeat() > before; }));
  }
  EXPECT_EQ(backend.finished_calls(), start);

  ASSERT_TRUE(a->InsertKeyValue("step", "1").ok());
  EXPECT_EQ(backend.finished_calls(), start + 1);
  EXPECT_EQ(*b->GetKeyValue("step"), "1");
  EXPECT_EQ(backend.finished_calls(), start + 2);

  // A blocking get is no wait on a peer: clients keep them open in the background.
  const int64_t parked = backend.parked_calls();
  auto get = a->GetKeyValueAsync("never", [](const absl::StatusOr<std::string>&) {});
  ASSERT_TRUE(Eventually([&] { return backend.parked_calls() == parked + 1; }));
  EXPECT_EQ(backend.waiting_calls(), 0);

  // Task 0 at a barrier that task 1 has not reached: a call that waits on a peer.
  std::thread at_barrier([a] { EXPECT_TRUE(a->WaitAtBarrier("b", absl::Seconds(30)).ok()); });
  ASSERT_TRUE(Eventually([&] { return backend.waiting_calls() == 1; }));
  EXPECT_EQ(backend.finished_calls(), start + 2);
  EXPECT_TRUE(b->WaitAtBarrier("b", absl::Seconds(30)).ok());
  at_barrier.join();
  EXPECT_TRUE(Eventually([&] { return backend.waiting_calls() == 0; }));
  EXPECT_EQ(backend.finished_calls(), start + 4);
  get->Cancel();
}

TEST_F(ProxyTest, ALinkLostWhileTheParkStreamStaysUpKeepsItsCallsAndSettles) {
  Start(2);
  std::vector<CoordinationAgent*> agents = {Agent(0), Agent(1)};
  ConnectAll(agents);
  absl::Notification got;
  std::string value;
  auto pending = agents[0]->GetKeyValueAsync("later", [&](absl::StatusOr<std::string> v) {
    if (v.ok()) value = *v;
    got.Notify();
  });
  CoordinationService& service = coordinator_->service();
  ASSERT_TRUE(Eventually([&] { return proxy_->backend().parked_calls() == 3; }));

  // A call failed as if the coordinator were gone, but the connection and the stream are
  // fine: the proxy finds the coordinator again and keeps the stream and its calls.
  proxy_->backend().SimulateLinkLossForTest();
  ASSERT_TRUE(proxy_->backend().AwaitLink(UpstreamBackend::Link::kConnected, absl::Seconds(20)));
  // Nothing happens after that: no further outage, the parked calls stay where they are
  // (a proxy that shut the stream down would lose them and go down again, round after round).
  // Rounds counted by the tasks' heartbeats, which the proxy forwards only while it has the
  // coordinator: five in which every task's reached it.
  for (int round = 0; round < 5; ++round) {
    const std::vector<TaskStateInfo> before = service.AllTasks();
    auto every_task_heard = [&] {
      std::vector<TaskStateInfo> now = service.AllTasks();
      if (now.size() != before.size()) return false;
      for (size_t i = 0; i < now.size(); ++i) {
        if (now[i].last_heartbeat == before[i].last_heartbeat) return false;
      }
      return true;
    };
    ASSERT_TRUE(Eventually(every_task_heard)) << "round " << round;
  }
  EXPECT_EQ(proxy_->backend().outages(), 1);
  EXPECT_EQ(proxy_->backend().parked_calls(), 3);
  EXPECT_EQ(service.ParkedCalls(ParkKind::kPollForError), 2);
  EXPECT_EQ(service.ParkedCalls(ParkKind::kKeyValueGet), 1);
  ASSERT_TRUE(service.InsertKeyValue("later", "v", false).ok());
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(value, "v");
}

TEST_F(ProxyTest, CallsWaitWhileTheCoordinatorIsAwayAndFailPastTheTolerance) {
  Start(1, absl::Milliseconds(500));
  ErrorLog errors;
  CoordinationAgent* a = Agent(0, errors.Callback());
  ASSERT_TRUE(a->Connect().ok());
  coordinator_.reset();  // gone for good
  auto value = a->GetKeyValue("never", absl::Seconds(20));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable) << value.status();
  EXPECT_NE(value.status().message().find("unreachable"), absl::string_view::npos);
  EXPECT_TRUE(Eventually([&] { return errors.Count() > 0; }));
  EXPECT_EQ(errors.First().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ProxyTest, HeartbeatsAreAnsweredAndCallsHeldUntilTheCoordinatorIsBack) {
  Start(1);
  CoordinationAgent* a = Agent(0);
  ASSERT_TRUE(a->Connect().ok());
  const uint64_t incarnation = coordinator_->service().service_incarnation();
  const std::string address = coordinator_->address();
  coordinator_.reset();
  ASSERT_TRUE(proxy_->backend().AwaitLink(UpstreamBackend::Link::kDown, absl::Seconds(20)));

  // The coordinator is away: a heartbeat is answered by the proxy, a get waits.
  auto stub = tf::CoordinationService::NewStub(ProxyChannel());
  tf::HeartbeatRequest heartbeat;
  heartbeat.set_incarnation(a->incarnation());
  heartbeat.mutable_source_task()->set_job_name("worker");
  heartbeat.mutable_source_task()->set_task_id(0);
  tf::HeartbeatResponse beat;
  ASSERT_TRUE(stub->Heartbeat(Deadline().get(), heartbeat, &beat).ok());
  EXPECT_EQ(beat.leader_incarnation(), incarnation);
  absl::Notification got;
  std::string value;
  auto pending = a->GetKeyValueAsync("after", [&](const absl::StatusOr<std::string>& v) {
    if (v.ok()) value = *v;
    got.Notify();
  });
  ASSERT_TRUE(Eventually([&] { return proxy_->backend().held_calls() > 0; }));

  // Back on the same port with the same incarnation but no state: the proxy registers the
  // task again and sends the held get.
  ServiceConfig config = Jobs(1);
  config.service_incarnation = incarnation;
  coordinator_ = std::make_unique<TestCoordinator>(config, address);
  ASSERT_TRUE(proxy_->backend().AwaitLink(UpstreamBackend::Link::kConnected, absl::Seconds(20)));
  ASSERT_TRUE(Eventually([&] {
    auto states = coordinator_->service().GetTaskStates({TaskName{"worker", 0}});
    return states.ok() && (*states)[0].state == TaskState::kConnected &&
           (*states)[0].incarnation == a->incarnation();
  }));
  ASSERT_TRUE(coordinator_->service().InsertKeyValue("after", "v", false).ok());
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(value, "v");
  EXPECT_EQ(a->state(), AgentState::kConnected);
  EXPECT_GE(proxy_->backend().reissued_calls(), 1);
}

// jaxlib's tasks name no job: the proxy learns which job that is (the coordinator's default
// job) only once it has reached the coordinator. A task that registered before then is still
// the proxy's to answer for: its heartbeats are answered here through an outage instead of
// being held until the coordinator is back (jaxlib gives a heartbeat half its heartbeat
// timeout, then ends the process).
TEST_F(ProxyTest, AnXlaTaskRegisteredBeforeTheCoordinatorWasReachedIsAnsweredForInAnOutage) {
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  ProxyOptions options;
  options.listen = "127.0.0.1:0";
  options.upstream.address = address;
  proxy_ = std::make_unique<ProxyServer>(options);
  ASSERT_TRUE(proxy_->Start().ok());
  auto stub = xc::CoordinationService::NewStub(ProxyChannel());
  xc::RegisterTaskRequest reg;
  reg.set_incarnation(7);
  reg.set_source_task_id(0);
  xc::RegisterTaskResponse registered;
  grpc::Status registration;
  std::thread registering(
      [&] { registration = stub->RegisterTask(Deadline().get(), reg, &registered); });
  ASSERT_TRUE(Eventually([&] { return proxy_->backend().held_calls() > 0; }));
  coordinator_ = std::make_unique<TestCoordinator>(Jobs(1), address);  // now it comes up
  registering.join();
  ASSERT_TRUE(registration.ok()) << registration.error_message();
  const uint64_t incarnation = coordinator_->service().service_incarnation();

  coordinator_.reset();
  ASSERT_TRUE(proxy_->backend().AwaitLink(UpstreamBackend::Link::kDown, absl::Seconds(20)));
  xc::HeartbeatRequest heartbeat;
  heartbeat.mutable_incarnations()->set_task_id(0);
  heartbeat.mutable_incarnations()->set_task_incarnation(7);
  heartbeat.mutable_incarnations()->set_service_incarnation(incarnation);
  heartbeat.set_incarnation(7);
  heartbeat.set_source_task_id(0);
  xc::HeartbeatResponse beat;
  grpc::Status answered = stub->Heartbeat(Deadline(absl::Seconds(3)).get(), heartbeat, &beat);
  ASSERT_TRUE(answered.ok()) << answered.error_code() << " " << answered.error_message();
  EXPECT_EQ(beat.service_incarnation(), incarnation);
}

TEST_F(ProxyTest, ARecoverableTaskBackWithANewIncarnationGetsItsOwnErrorPoll) {
  Start(1, absl::Seconds(30), /*recoverable=*/true);
  auto stub = tf::CoordinationService::NewStub(ProxyChannel());
  auto register_as = [&](uint64_t incarnation) {
    tf::RegisterTaskRequest request;
    request.set_incarnation(incarnation);
    request.mutable_source_task()->set_job_name("worker");
    request.mutable_source_task()->set_task_id(0);
    tf::RegisterTaskResponse response;
    return stub->RegisterTask(Deadline().get(), request, &response);
  };
  ASSERT_TRUE(register_as(1).ok());
  ASSERT_TRUE(register_as(2).ok());  // the process restarted
  // The client's poll waits in the proxy for the new incarnation's upstream poll, which
  // the task's shutdown ends.
  tf::PollForErrorRequest poll;
  poll.mutable_source_task()->set_job_name("worker");
  poll.mutable_source_task()->set_task_id(0);
  tf::PollForErrorResponse polled;
  grpc::Status poll_status;
  absl::Notification poll_done;
  grpc::ClientContext poll_ctx;
  stub->async()->PollForError(&poll_ctx, &poll, &polled, [&](grpc::Status s) {
    poll_status = std::move(s);
    poll_done.Notify();
  });
  ASSERT_TRUE(Eventually(
      [&] { return coordinator_->service().ParkedCalls(ParkKind::kPollForError) == 1; }));
  tf::ShutdownTaskRequest shutdown;
  shutdown.mutable_source_task()->set_job_name("worker");
  shutdown.mutable_source_task()->set_task_id(0);
  tf::ShutdownTaskResponse shut;
  ASSERT_TRUE(stub->ShutdownTask(Deadline().get(), shutdown, &shut).ok());
  ASSERT_TRUE(poll_done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(poll_status.error_code(), grpc::StatusCode::CANCELLED) << poll_status.error_message();
}

TEST_F(ProxyTest, BadListenAddressesAreRefusedClearly) {
  EXPECT_FALSE(ValidateListenAddress("nonsense").ok());
  EXPECT_FALSE(ValidateListenAddress(":8476").ok());
  EXPECT_FALSE(ValidateListenAddress("127.0.0.1:http").ok());
  EXPECT_FALSE(ValidateListenAddress("127.0.0.1:70000").ok());
  EXPECT_FALSE(ValidateListenAddress("::1:8476").ok());
  EXPECT_TRUE(ValidateListenAddress("127.0.0.1:8476").ok());
  EXPECT_TRUE(ValidateListenAddress("[::1]:0").ok());
  ProxyOptions options;
  options.listen = "nonsense";
  options.upstream.address = "127.0.0.1:1";
  ProxyServer proxy(options);
  absl::Status s = proxy.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("HOST:PORT"), absl::string_view::npos);
}

// A coordinator of our own making, for what a real one does not do on demand: lose the
// answer to a call it carried out, or come back as another service incarnation.
class FlakyCoordinator final : public tf::CoordinationService::CallbackService,
                               public v1::Coordinator::CallbackService {
 public:
  FlakyCoordinator() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(static_cast<tf::CoordinationService::CallbackService*>(this));
    builder.RegisterService(static_cast<v1::Coordinator::CallbackService*>(this));
    server_ = builder.BuildAndStart();
  }
  ~FlakyCoordinator() override { server_->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // The next insert is carried out but answered as if the coordinator had gone away.
  void LoseNextInsertAnswer() {
    absl::MutexLock lock(&mu_);
    lose_insert_answer_ = true;
  }
  void SetIncarnation(uint64_t incarnation) {
    absl::MutexLock lock(&mu_);
    incarnation_ = incarnation;
  }
  // The next get fails as if the coordinator had gone away.
  void DropNextGet() {
    absl::MutexLock lock(&mu_);
    drop_get_ = true;
  }
  int inserts() {
    absl::MutexLock lock(&mu_);
    return inserts_;
  }
  // The request id (cohort-request metadata) of each insert attempt, in order.
  std::vector<std::string> insert_requests() {
    absl::MutexLock lock(&mu_);
    return insert_requests_;
  }

  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const tf::InsertKeyValueRequest* request,
                                           tf::InsertKeyValueResponse*) override {
    absl::MutexLock lock(&mu_);
    ++inserts_;
    std::string id;
    if (auto m = ctx->client_metadata().find("cohort-request"); m != ctx->client_metadata().end()) {
      id = std::string(m->second.data(), m->second.size());
    }
    insert_requests_.push_back(id);
    // As the coordinator does (tensorflow_protocol_test's RequestIdTest checks it there): an
    // attempt of a request it carried out gets that answer again.
    if (!id.empty() && !answered_.insert(id).second) return Answer(ctx, grpc::Status::OK);
    absl::Status status;
    auto [it, added] = keys_.emplace(request->kv().key(), request->kv().value());
    if (!added && !request->allow_overwrite()) {
      status = ServiceError(absl::AlreadyExistsError("exists"));
    }
    if (added && lose_insert_answer_) {
      lose_insert_answer_ = false;
      return Answer(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"));
    }
    return Answer(ctx, ToGrpcStatus(status, Protocol::kTensorflow));
  }
  grpc::ServerUnaryReactor* TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                           const tf::TryGetKeyValueRequest* request,
                                           tf::TryGetKeyValueResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto it = keys_.find(request->key());
    if (it == keys_.end()) {
      return Answer(ctx,
                    ToGrpcStatus(ServiceError(absl::NotFoundError("no")), Protocol::kTensorflow));
    }
    response->mutable_kv()->set_value(it->second);
    return Answer(ctx, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext* ctx,
                                        const tf::GetKeyValueRequest* request,
                                        tf::GetKeyValueResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (drop_get_) {
      drop_get_ = false;
      return Answer(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"));
    }
    response->mutable_kv()->set_value(keys_[request->key()]);
    return Answer(ctx, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* RegisterTask(grpc::CallbackServerContext* ctx,
                                         const tf::RegisterTaskRequest*,
                                         tf::RegisterTaskResponse* response) override {
    absl::MutexLock lock(&mu_);
    response->set_leader_incarnation(incarnation_);
    return Answer(ctx, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* GetClusterSnapshot(grpc::CallbackServerContext* ctx,
                                               const v1::GetClusterSnapshotRequest*,
                                               v1::ClusterSnapshot* response) override {
    absl::MutexLock lock(&mu_);
    response->set_service_incarnation(incarnation_);
    response->set_default_job("worker");
    auto* task = response->add_tasks();
    task->set_job("worker");
    task->set_task_id(0);
    return Answer(ctx, grpc::Status::OK);
  }

 private:
  static grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                          const grpc::Status& status) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);
  bool lose_insert_answer_ ABSL_GUARDED_BY(mu_) = false;
  bool drop_get_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 1;
  int inserts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> insert_requests_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> answered_ ABSL_GUARDED_BY(mu_);
};

class UpstreamBackendTest : public ::testing::Test {
 protected:
  UpstreamBackendTest() {
    UpstreamOptions options;
    options.address = coordinator_.address();
    options.probe_interval = absl::Milliseconds(20);
    backend_ = std::make_unique<UpstreamBackend>(options);
    backend_->Start();
    EXPECT_TRUE(backend_->AwaitLink(UpstreamBackend::Link::kConnected, absl::Seconds(20)));
  }
  absl::Status Insert(const std::string& key, const std::string& value) {
    absl::Notification done;
    absl::Status result;
    backend_->InsertKeyValue(CallContext{backend_->NewWaiterId()}, key, value,
                             /*allow_overwrite=*/false, [&](const absl::Status& s) {
                               result = s;
                               done.Notify();
                             });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return result;
  }

  FlakyCoordinator coordinator_;
  std::unique_ptr<UpstreamBackend> backend_;
};

TEST_F(UpstreamBackendTest, AnInsertWhoseAnswerWasLostIsSentAgainWithItsOwnRequestId) {
  coordinator_.LoseNextInsertAnswer();
  EXPECT_TRUE(Insert("k", "v").ok());
  EXPECT_EQ(coordinator_.inserts(), 2);
  EXPECT_EQ(backend_->reissued_calls(), 1);
  // Another writer's value is still ALREADY_EXISTS, lost answer or not, even an equal one.
  coordinator_.LoseNextInsertAnswer();
  EXPECT_TRUE(Insert("j", "mine").ok());
  EXPECT_EQ(Insert("j", "theirs").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Insert("j", "mine").code(), absl::StatusCode::kAlreadyExists);
  // Both attempts of a call carry the same id; each call its own number, and the low mark
  // says that every earlier one was answered.
  std::vector<std::string> ids = coordinator_.insert_requests();
  ASSERT_EQ(ids.size(), 6u);
  std::vector<RequestId> parsed;
  for (const std::string& id : ids) {
    absl::StatusOr<RequestId> p = ParseRequestId(id);
    ASSERT_TRUE(p.ok()) << p.status();
    parsed.push_back(*p);
  }
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[2], ids[3]);
  for (size_t i = 1; i < parsed.size(); ++i) EXPECT_EQ(parsed[i].session, parsed[0].session);
  std::vector<uint64_t> seqs, lows;
  for (const RequestId& p : parsed) {
    seqs.push_back(p.seq);
    lows.push_back(p.low);
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 1, 2, 2, 3, 4}));
  EXPECT_EQ(lows, seqs);  // one call at a time: nothing earlier still open
}

TEST_F(UpstreamBackendTest, ACoordinatorBackAsAnotherIncarnationFailsTheCallsUnavailable) {
  absl::Notification registered;
  backend_->RegisterTask(CallContext{backend_->NewWaiterId()}, TaskName{"worker", 0}, 7,
                         [&](const absl::Status& s) {
                           EXPECT_TRUE(s.ok()) << s;
                           registered.Notify();
                         });
  ASSERT_TRUE(registered.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(backend_->service_incarnation(), 1u);
  coordinator_.SetIncarnation(2);
  coordinator_.DropNextGet();
  absl::Notification got;
  absl::Status result;
  backend_->GetKeyValue(CallContext{backend_->NewWaiterId()}, "k", std::nullopt,
                        [&](const absl::StatusOr<std::string>& v) {
                          result = v.status();
                          got.Notify();
                        });
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(result.message().find("lost the job"), absl::string_view::npos) << result;
}

TEST_F(UpstreamBackendTest, ACancelledCallLeavesNothingHeldOrInFlight) {
  coordinator_.DropNextGet();
  // The get fails once for want of the coordinator and is held; its caller leaves.
  absl::Notification got;
  absl::Status result;
  WaiterId waiter = backend_->NewWaiterId();
  backend_->GetKeyValue(CallContext{waiter}, "k", std::nullopt,
                        [&](const absl::StatusOr<std::string>& v) {
                          result = v.status();
                          got.Notify();
                        });
  backend_->Cancel(waiter, absl::CancelledError("gone"));
  ASSERT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(result.ok() || result.code() == absl::StatusCode::kCancelled) << result;
  EXPECT_TRUE(Eventually([&] { return backend_->held_calls() == 0; }));
}

// UpstreamConnection on its own, without the backend's translation: requests built by
// upstream_requests.h, and the tasks it is told of.
class UpstreamConnectionTest : public ::testing::Test {
 protected:
  UpstreamConnectionTest() {
    UpstreamOptions options;
    options.address = coordinator_.address();
    options.probe_interval = absl::Milliseconds(20);
    connection_ = std::make_unique<UpstreamConnection>(options);
    connection_->Start();
    EXPECT_TRUE(connection_->AwaitLink(UpstreamConnection::Link::kConnected, absl::Seconds(20)));
  }
  absl::Status Insert(const std::string& key, const std::string& value) {
    absl::Notification done;
    absl::Status result;
    connection_->Send(
        CallContext{connection_->NewWaiterId()},
        upstream::InsertKeyValue(key, value, /*allow_overwrite=*/false, [&](const absl::Status& s) {
          result = s;
          done.Notify();
        }));
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return result;
  }

  FlakyCoordinator coordinator_;
  std::unique_ptr<UpstreamConnection> connection_;
};

TEST_F(UpstreamConnectionTest, ARequestSentThroughItIsCarriedOutUpstream) {
  EXPECT_TRUE(Insert("k", "v").ok());
  EXPECT_EQ(coordinator_.inserts(), 1);
  absl::Notification done;
  absl::StatusOr<std::string> got;
  connection_->Send(CallContext{connection_->NewWaiterId()},
                    upstream::TryGetKeyValue("k", [&](absl::StatusOr<std::string> v) {
                      got = std::move(v);
                      done.Notify();
                    }));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

TEST_F(UpstreamConnectionTest, ATaskRegisteredThroughItIsKeptHereUntilItIsForgotten) {
  const TaskName task{"worker", 0};
  connection_->OnRegistered(task, 7, 3);
  EXPECT_EQ(connection_->service_incarnation(), 3u);
  std::optional<absl::Status> here = connection_->HeartbeatHere(task, 7);
  ASSERT_TRUE(here.has_value());
  EXPECT_TRUE(here->ok()) << *here;
  EXPECT_FALSE(connection_->HeartbeatHere(TaskName{"worker", 1}, 7).has_value());
  EXPECT_FALSE(connection_->CheckIncarnation(task, 8).ok());
  EXPECT_TRUE(connection_->CheckIncarnation(task, 7).ok());
  connection_->Forget(task, absl::CancelledError("worker 0 shut down"));
  EXPECT_FALSE(connection_->HeartbeatHere(task, 7).has_value());
  EXPECT_TRUE(connection_->CheckIncarnation(task, 8).ok());
}

TEST_F(UpstreamConnectionTest, OnceStoppedEveryCallEndsWithTheReason) {
  connection_->Stop(absl::CancelledError("done here"));
  EXPECT_EQ(connection_->link(), UpstreamConnection::Link::kStopped);
  absl::Status result = Insert("k", "v");
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(result.message(), "done here");
  EXPECT_EQ(connection_->PropagatedError().message(), "done here");
  EXPECT_EQ(coordinator_.inserts(), 0);
}

}  // namespace
}  // namespace cohort::testing
