// The agent against a real coordinator over gRPC on loopback.
#include "agent/coordination_agent.h"

#include <atomic>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/grpc_status.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "gtest/gtest.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"

namespace cohort::testing {
namespace {

// Counts error callbacks and keeps the last error.
struct ErrorLog {
  absl::Mutex mu;
  int count = 0;
  absl::Status last;

  CoordinationAgent::ErrorCallback Callback() {
    return [this](const absl::Status& error) {
      absl::MutexLock lock(&mu);
      ++count;
      last = error;
    };
  }
  int Count() {
    absl::MutexLock lock(&mu);
    return count;
  }
  absl::Status Last() {
    absl::MutexLock lock(&mu);
    return last;
  }
  // Waits until at least `n` errors arrived; false after `timeout`.
  bool WaitFor(int n, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu);
    auto reached = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return count >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }
};

// Counts an agent's heartbeats (AgentConfig::on_heartbeat) by outcome.
struct HeartbeatLog {
  absl::Mutex mu;
  int succeeded = 0;
  int failed = 0;

  std::function<void(absl::Duration, const absl::Status&)> Callback() {
    return [this](absl::Duration, const absl::Status& status) {
      absl::MutexLock lock(&mu);
      ++(status.ok() ? succeeded : failed);
    };
  }
  int Sent() {
    absl::MutexLock lock(&mu);
    return succeeded + failed;
  }
  // Each waits until at least `n` heartbeats of that kind; false after `timeout`.
  bool WaitForSent(int n, absl::Duration timeout = absl::Seconds(20)) {
    return Await([this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return succeeded + failed >= n; },
                 timeout);
  }
  bool WaitForSucceeded(int n, absl::Duration timeout = absl::Seconds(20)) {
    return Await([this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return succeeded >= n; }, timeout);
  }
  bool WaitForFailed(int n, absl::Duration timeout = absl::Seconds(20)) {
    return Await([this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return failed >= n; }, timeout);
  }

 private:
  template <typename Predicate>
  bool Await(Predicate reached, absl::Duration timeout) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }
};

// Collects watch events as "insert k=v@3" lines.
struct EventLog {
  absl::Mutex mu;
  std::vector<std::string> lines;
  absl::Status end;

  KeyWatcher::EventCallback Callback(absl::Duration delay = absl::ZeroDuration()) {
    return [this, delay](absl::StatusOr<KeyChange> change) {
      if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
      absl::MutexLock lock(&mu);
      if (!change.ok()) {
        end = change.status();
        return;
      }
      lines.push_back(absl::StrCat(KeyChangeTypeName(change->type), " ", change->key, "=",
                                   change->value, "@", change->revision));
    };
  }
  bool WaitForLines(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu);
    auto reached = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return lines.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }
  bool WaitForEnd(absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu);
    auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return !end.ok(); };
    return mu.AwaitWithTimeout(absl::Condition(&ended), timeout);
  }
  std::vector<std::string> Lines() {
    absl::MutexLock lock(&mu);
    return lines;
  }
};

class AgentTest : public ::testing::Test {
 protected:
  static ServiceConfig Config(int workers) {
    ServiceConfig config = Jobs(workers, absl::Seconds(10));
    return config;
  }

  void StartCoordinator(ServiceConfig config, std::string listen = "127.0.0.1:0") {
    coordinator_ = std::make_unique<TestCoordinator>(std::move(config), std::move(listen));
  }

  AgentConfig AgentFor(int task, const std::string& job = "worker") {
    AgentConfig config;
    config.coordinator_address = coordinator_->address();
    config.job_name = job;
    config.task_id = task;
    config.heartbeat_interval = absl::Milliseconds(200);
    config.unreachable_timeout = absl::Seconds(2);
    config.register_timeout = absl::Seconds(20);
    config.shutdown_timeout = absl::Seconds(20);
    if (task >= 0 && task < static_cast<int>(std::size(heartbeats_))) {
      config.on_heartbeat = heartbeats_[task].Callback();
    }
    return config;
  }

  // Initializes and connects `n` workload agents (the register barrier needs them all).
  std::vector<std::unique_ptr<CoordinationAgent>> ConnectAll(int n, std::vector<ErrorLog>* logs) {
    std::vector<std::unique_ptr<CoordinationAgent>> agents;
    for (int i = 0; i < n; ++i) {
      agents.push_back(std::make_unique<CoordinationAgent>());
      EXPECT_TRUE(agents[i]->Initialize(AgentFor(i), (*logs)[i].Callback()).ok());
    }
    std::vector<std::future<absl::Status>> connects;
    for (auto& agent : agents) {
      connects.push_back(std::async(std::launch::async, [&agent] { return agent->Connect(); }));
    }
    for (auto& c : connects) EXPECT_TRUE(c.get().ok());
    return agents;
  }

  // Of workload tasks 0..3 (for AgentFor's configs); they outlive the test's agents.
  HeartbeatLog heartbeats_[4];
  std::unique_ptr<TestCoordinator> coordinator_;
};

TEST_F(AgentTest, ConnectPassesTheRegisterBarrierAndHeartbeatsKeepTasksConnected) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  EXPECT_EQ(agents[0]->state(), AgentState::kConnected);
  EXPECT_EQ(agents[0]->leader_incarnation(), coordinator_->service().service_incarnation());
  ASSERT_TRUE(heartbeats_[0].WaitForSucceeded(3));
  ASSERT_TRUE(heartbeats_[1].WaitForSucceeded(3));
  // The coordinator hears the heartbeats that follow: every task's last heartbeat moves on.
  const std::vector<TaskStateInfo> before = coordinator_->service().AllTasks();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_TRUE(Eventually([&] {
    std::vector<TaskStateInfo> now = coordinator_->service().AllTasks();
    if (now.size() != before.size()) return false;
    for (size_t i = 0; i < now.size(); ++i) {
      if (now[i].last_heartbeat == before[i].last_heartbeat) return false;
    }
    return true;
  }));
  for (const TaskStateInfo& info : coordinator_->service().AllTasks()) {
    EXPECT_EQ(info.state, TaskState::kConnected) << info.task.ToString();
  }
  auto states = agents[1]->GetTaskState({{"worker", 0}, {"worker", 1}});
  ASSERT_TRUE(states.ok()) << states.status();
  ASSERT_EQ(states->size(), 2u);
  EXPECT_EQ((*states)[0].state, tensorflow::TASKSTATE_CONNECTED);
  EXPECT_EQ((*states)[0].incarnation, agents[0]->incarnation());
  EXPECT_EQ(logs[0].Count() + logs[1].Count(), 0);
}

TEST_F(AgentTest, InitializeRefusesBadConfigAndCallsNeedTheRightState) {
  StartCoordinator(Config(1));
  CoordinationAgent agent;
  EXPECT_EQ(agent.Connect().code(), absl::StatusCode::kFailedPrecondition);
  AgentConfig bad = AgentFor(0);
  bad.job_name = "";
  EXPECT_EQ(agent.Initialize(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = AgentFor(-1);
  EXPECT_EQ(agent.Initialize(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = AgentFor(0);
  bad.unreachable_timeout = absl::Milliseconds(10);
  EXPECT_EQ(agent.Initialize(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(agent.IsInitialized());
  ASSERT_TRUE(agent.Initialize(AgentFor(0)).ok());
  EXPECT_EQ(agent.Initialize(AgentFor(0)).code(), absl::StatusCode::kFailedPrecondition);
  absl::Status s = agent.InsertKeyValue("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("DISCONNECTED"), std::string::npos) << s;
  EXPECT_EQ(agent.Reset().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(agent.Shutdown().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(AgentTest, ConnectRetriesUntilTheCoordinatorComesUp) {
  StartCoordinator(Config(1));
  std::string address = coordinator_->address();
  AgentConfig config = AgentFor(0);
  coordinator_.reset();  // the port is free again, nobody listens
  absl::Mutex mu;
  std::vector<absl::Status> failed_attempts;
  config.on_connect_retry = [&](int attempt, const absl::Status& error) {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(attempt, static_cast<int>(failed_attempts.size()) + 1);
    failed_attempts.push_back(error);
  };
  CoordinationAgent agent;
  ASSERT_TRUE(agent.Initialize(config).ok());
  auto connect = std::async(std::launch::async, [&agent] { return agent.Connect(); });
  // The coordinator comes up only once an attempt has failed: connecting needs a retry.
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return !failed_attempts.empty();
  }));
  StartCoordinator(Config(1), address);
  absl::Status s = connect.get();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(agent.state(), AgentState::kConnected);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(failed_attempts[0].code(), absl::StatusCode::kUnavailable) << failed_attempts[0];
}

TEST_F(AgentTest, ConnectRefusedByTheCoordinatorIsNotRetriedAndEntersError) {
  StartCoordinator(Config(1));
  ErrorLog log;
  AgentConfig config = AgentFor(7);  // no task 7
  std::atomic<int> retries{0};
  config.on_connect_retry = [&retries](int, const absl::Status&) { ++retries; };
  CoordinationAgent agent;
  ASSERT_TRUE(agent.Initialize(config, log.Callback()).ok());
  absl::Status s = agent.Connect();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(IsCoordinationServiceError(s));
  // One attempt, not retried for the register timeout.
  EXPECT_EQ(retries.load(), 0);
  EXPECT_EQ(s.message().find("attempts"), std::string::npos) << s;
  EXPECT_EQ(agent.state(), AgentState::kError);
  EXPECT_EQ(log.Count(), 1);
}

TEST_F(AgentTest, KeyValueCallsFollowTheStoreContract) {
  StartCoordinator(Config(1));
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  CoordinationAgent& a = *agents[0];
  ASSERT_TRUE(a.InsertKeyValue("cfg/lr", "0.1").ok());
  EXPECT_EQ(a.InsertKeyValue("/cfg//lr/", "0.2").code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(a.UpdateKeyValue("cfg/lr", "0.2").ok());
  EXPECT_EQ(*a.TryGetKeyValue("cfg/lr"), "0.2");
  EXPECT_EQ(a.TryGetKeyValue("cfg/absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*a.GetKeyValue("cfg/lr", absl::Seconds(5)), "0.2");
  absl::StatusOr<std::string> late = a.GetKeyValue("cfg/never", absl::Milliseconds(200));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(a.InsertKeyValue("cfg/sub/x", "1").ok());
  auto dir = a.GetKeyValueDir("cfg");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir->size(), 2u);
  EXPECT_EQ((*dir)[0].first, "cfg/lr");
  EXPECT_EQ((*dir)[1].first, "cfg/sub/x");
  EXPECT_EQ(*a.IncrementKeyValue("steps", 5), 5);
  EXPECT_EQ(*a.IncrementKeyValue("steps", int64_t{1} << 40), (int64_t{1} << 40) + 5);
  EXPECT_EQ(a.IncrementKeyValue("cfg/lr", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a.DeleteKeyValue("cfg").ok());  // recursive
  EXPECT_TRUE(a.GetKeyValueDir("cfg")->empty());
  std::string big(8 << 20, 'x');
  ASSERT_TRUE(a.InsertKeyValue("big", big).ok());
  EXPECT_EQ(a.TryGetKeyValue("big")->size(), big.size());
}

TEST_F(AgentTest, BlockingGetReturnsWhenAnotherTaskSetsTheKey) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  auto get = std::async(std::launch::async,
                        [&] { return agents[0]->GetKeyValue("addr", absl::Seconds(20)); });
  // Set the key only once the get waits for it at the coordinator.
  ASSERT_TRUE(
      Eventually([&] { return coordinator_->service().ParkedCalls(ParkKind::kKeyValueGet) == 1; }));
  ASSERT_TRUE(agents[1]->InsertKeyValue("addr", "10.0.0.1:1234").ok());
  auto value = get.get();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "10.0.0.1:1234");
}

TEST_F(AgentTest, AsyncGetAnswersOnceAndCanBeCancelled) {
  StartCoordinator(Config(1));
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  CoordinationAgent& a = *agents[0];

  std::promise<absl::StatusOr<std::string>> set_promise;
  a.GetKeyValueAsync("later",
                     [&](const absl::StatusOr<std::string>& v) { set_promise.set_value(v); });
  ASSERT_TRUE(a.InsertKeyValue("later", "v").ok());
  auto set = set_promise.get_future().get();
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(*set, "v");

  std::promise<absl::StatusOr<std::string>> cancel_promise;
  auto pending = a.GetKeyValueAsync(
      "never", [&](const absl::StatusOr<std::string>& v) { cancel_promise.set_value(v); });
  pending->Cancel();
  EXPECT_EQ(cancel_promise.get_future().get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(
      Eventually([&] { return coordinator_->service().ParkedCalls(ParkKind::kKeyValueGet) == 0; }));
}

TEST_F(AgentTest, ShutdownAndResetCancelPendingAsyncGets) {
  StartCoordinator(Config(1));
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  CoordinationAgent& a = *agents[0];
  std::atomic<int> answers{0};
  absl::Status seen;
  absl::Mutex mu;
  a.GetKeyValueAsync("never", [&](const absl::StatusOr<std::string>& v) {
    absl::MutexLock lock(&mu);
    seen = v.status();
    ++answers;
  });
  ASSERT_TRUE(a.Shutdown().ok());
  EXPECT_EQ(answers.load(), 1);  // answered before Shutdown returned
  EXPECT_EQ(seen.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(logs[0].Count(), 0);  // a clean shutdown is no error

  // Reset from ERROR, reconnect, and a pending get ends with the reset too.
  ASSERT_TRUE(a.Connect().ok());
  a.GetKeyValueAsync("never", [&](const absl::StatusOr<std::string>& v) {
    absl::MutexLock lock(&mu);
    seen = v.status();
    ++answers;
  });
  ASSERT_TRUE(a.ReportError(absl::InternalError("disk full")).ok());
  ASSERT_TRUE(a.Reset().ok());
  EXPECT_EQ(answers.load(), 2);
  EXPECT_EQ(seen.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(a.state(), AgentState::kDisconnected);
}

TEST_F(AgentTest, BarriersKeepCountersPerIdAndCanBeCancelled) {
  StartCoordinator(Config(3));
  std::vector<ErrorLog> logs(3);
  auto agents = ConnectAll(3, &logs);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::future<absl::Status>> waits;
    for (auto& agent : agents) {
      waits.push_back(std::async(std::launch::async, [&agent] {
        return agent->WaitAtBarrier("step", absl::Seconds(10));
      }));
    }
    for (auto& w : waits) EXPECT_TRUE(w.get().ok()) << "round " << round;
  }
  // A subset of the tasks.
  std::vector<TaskId> pair = {{"worker", 0}, {"worker", 2}};
  auto w0 = std::async(std::launch::async,
                       [&] { return agents[0]->WaitAtBarrier("pair", absl::Seconds(10), pair); });
  EXPECT_TRUE(agents[2]->WaitAtBarrier("pair", absl::Seconds(10), pair).ok());
  EXPECT_TRUE(w0.get().ok());
  // Cancelled while waiting: the waiter gets CANCELLED, and so do the latecomers to that
  // instance (its cached result); then every task is on the next instance and it passes.
  auto waiting = std::async(std::launch::async,
                            [&] { return agents[0]->WaitAtBarrier("c", absl::Seconds(20)); });
  ASSERT_TRUE(Eventually([&] { return coordinator_->ArrivedAtBarrier("c", {"worker", 0}); }));
  ASSERT_TRUE(agents[0]->CancelBarrier("c").ok());
  EXPECT_EQ(waiting.get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(agents[1]->WaitAtBarrier("c", absl::Seconds(20)).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(agents[2]->WaitAtBarrier("c", absl::Seconds(20)).code(), absl::StatusCode::kCancelled);
  std::vector<std::future<absl::Status>> again;
  for (auto& agent : agents) {
    again.push_back(std::async(std::launch::async,
                               [&agent] { return agent->WaitAtBarrier("c", absl::Seconds(10)); }));
  }
  for (auto& w : again) EXPECT_TRUE(w.get().ok());
}

TEST_F(AgentTest, BarrierTimeoutNamesTheMissingTasks) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  absl::Status s = agents[0]->WaitAtBarrier("lonely", absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("/job:worker/task:1"), std::string::npos) << s;
  EXPECT_EQ(GetBarrierCounter(s), 0);
}

TEST_F(AgentTest, AliveTasksAndDeviceExchange) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  std::vector<TaskId> both = {{"worker", 0}, {"worker", 1}};
  auto alive0 = std::async(std::launch::async, [&] { return agents[0]->GetAliveTasks(both); });
  auto alive1 = agents[1]->GetAliveTasks(both);
  ASSERT_TRUE(alive1.ok()) << alive1.status();
  ASSERT_EQ(alive1->size(), 2u);
  EXPECT_EQ((*alive1)[1].incarnation, agents[1]->incarnation());
  EXPECT_TRUE(alive0.get().ok());

  auto devices = [](const std::string& name) {
    tensorflow::DeviceInfo info;
    tensorflow::CoordinatedTask marker;  // any message packs into Any
    marker.set_job_name(name);
    info.add_device()->PackFrom(marker);
    return info;
  };
  auto other =
      std::async(std::launch::async, [&] { return agents[1]->WaitForAllTasks(devices("gpu-b")); });
  ASSERT_TRUE(agents[0]->WaitForAllTasks(devices("gpu-a")).ok());
  ASSERT_TRUE(other.get().ok());
  tensorflow::DeviceInfo cluster = agents[1]->GetClusterDeviceInfo();
  ASSERT_EQ(cluster.device_size(), 2);
  tensorflow::CoordinatedTask first;
  ASSERT_TRUE(cluster.device(0).UnpackTo(&first));
  EXPECT_EQ(first.job_name(), "gpu-a");  // task order
}

TEST_F(AgentTest, AnErrorReportedByOneTaskReachesTheOthersOnce) {
  StartCoordinator(Config(3));
  std::vector<ErrorLog> logs(3);
  auto agents = ConnectAll(3, &logs);
  ASSERT_TRUE(agents[2]->ReportError(absl::InternalError("worker 2: NaN loss")).ok());
  EXPECT_EQ(agents[2]->state(), AgentState::kError);
  ASSERT_TRUE(logs[0].WaitFor(1));
  ASSERT_TRUE(logs[1].WaitFor(1));
  EXPECT_NE(logs[0].Last().message().find("NaN loss"), std::string::npos) << logs[0].Last();
  auto source = GetErrorSource(logs[0].Last());
  ASSERT_TRUE(source.has_value());
  EXPECT_EQ(source->task_id, 2);
  EXPECT_TRUE(source->is_reported_error);
  // Two more heartbeats each (the reporter's now fail): still one callback.
  ASSERT_TRUE(heartbeats_[0].WaitForSent(heartbeats_[0].Sent() + 2));
  ASSERT_TRUE(heartbeats_[2].WaitForFailed(2));
  EXPECT_EQ(logs[0].Count(), 1);
  EXPECT_EQ(logs[2].Count(), 1);
  EXPECT_EQ(agents[0]->state(), AgentState::kError);
  EXPECT_EQ(agents[0]->InsertKeyValue("k", "v").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(AgentTest, AReportSaysWhyAndTheCoordinatorKeepsTheReason) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  ASSERT_TRUE(agents[1]
                  ->ReportError(absl::DeadlineExceededError("worker 1 made no progress"),
                                FailureReason::kHang)
                  .ok());
  auto states = coordinator_->service().GetTaskStates({{"worker", 1}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front().reason, FailureReason::kHang);
}

TEST_F(AgentTest, AReportGivenNoReasonIsAReportedError) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  ASSERT_TRUE(agents[0]->ReportError(absl::InternalError("worker 0: NaN loss")).ok());
  auto states = coordinator_->service().GetTaskStates({{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front().reason, FailureReason::kReportedError);
}

TEST_F(AgentTest, AReasonThatIsNoneIsRefusedAndNothingIsReported) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  absl::Status refused =
      agents[0]->ReportError(absl::InternalError("boom"), static_cast<FailureReason>(42));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_EQ(agents[0]->state(), AgentState::kConnected);
  auto states = coordinator_->service().GetTaskStates({{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front().state, TaskState::kConnected);
}

TEST_F(AgentTest, HeartbeatsCarryTheProgressLastSetAndTheCoordinatorKeepsIt) {
  StartCoordinator(Config(1));
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  auto progress = [&] {
    auto states = coordinator_->service().GetTaskStates({{"worker", 0}});
    return states.ok() ? states->front().progress : TaskProgress{};
  };
  agents[0]->SetProgress(TaskProgress{5, 1.25});
  ASSERT_TRUE(Eventually([&] { return progress() == TaskProgress{5, 1.25}; }));
  agents[0]->SetProgress(TaskProgress{6, std::nullopt});
  ASSERT_TRUE(Eventually([&] { return progress() == TaskProgress{6, std::nullopt}; }));
}

TEST_F(AgentTest, AProgressThatIsNotValidIsNotSentAndTheTaskStaysConnected) {
  StartCoordinator(Config(1));
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  agents[0]->SetProgress(TaskProgress{5, 1.0});
  ASSERT_TRUE(Eventually([&] {
    auto states = coordinator_->service().GetTaskStates({{"worker", 0}});
    return states.ok() && states->front().progress == TaskProgress{5, 1.0};
  }));

  agents[0]->SetProgress(TaskProgress{-1, std::numeric_limits<double>::quiet_NaN()});
  const int sent = heartbeats_[0].Sent();
  ASSERT_TRUE(heartbeats_[0].WaitForSucceeded(sent + 3));
  auto states = coordinator_->service().GetTaskStates({{"worker", 0}});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front().progress, (TaskProgress{5, 1.0}));
  EXPECT_EQ(agents[0]->state(), AgentState::kConnected);
  EXPECT_EQ(logs[0].Count(), 0);
}

TEST_F(AgentTest, AHungTaskIsDetectedByHeartbeatTimeoutAndTheOthersAreTold) {
  StartCoordinator(Jobs(2, absl::Seconds(1)));
  std::vector<ErrorLog> logs(2);
  CoordinationAgent live;
  ASSERT_TRUE(live.Initialize(AgentFor(0), logs[0].Callback()).ok());
  // Task 1 registers by hand and never heartbeats.
  auto stub = tensorflow::CoordinationService::NewStub(coordinator_->Channel());
  auto hung = std::async(std::launch::async, [&] {
    tensorflow::RegisterTaskRequest request;
    request.mutable_source_task()->set_job_name("worker");
    request.mutable_source_task()->set_task_id(1);
    request.set_incarnation(99);
    tensorflow::RegisterTaskResponse response;
    return stub->RegisterTask(Deadline().get(), request, &response).ok();
  });
  ASSERT_TRUE(live.Connect().ok());
  ASSERT_TRUE(hung.get());
  ASSERT_TRUE(logs[0].WaitFor(1, absl::Seconds(10)));
  EXPECT_EQ(logs[0].Last().code(), absl::StatusCode::kUnavailable) << logs[0].Last();
  EXPECT_NE(logs[0].Last().message().find("/job:worker/task:1"), std::string::npos);
}

TEST_F(AgentTest, CoordinatorRestartMovesTheAgentToErrorAndResetReconnects) {
  StartCoordinator(Config(1));
  std::string address = coordinator_->address();
  ErrorLog log;
  CoordinationAgent agent;
  ASSERT_TRUE(agent.Initialize(AgentFor(0), log.Callback()).ok());
  ASSERT_TRUE(agent.Connect().ok());
  uint64_t first_incarnation = agent.incarnation();
  coordinator_.reset();
  StartCoordinator(Config(1), address);
  ASSERT_TRUE(log.WaitFor(1, absl::Seconds(10)));
  EXPECT_EQ(agent.state(), AgentState::kError);
  // Every later heartbeat meets the new coordinator too: still one callback.
  ASSERT_TRUE(heartbeats_[0].WaitForSent(heartbeats_[0].Sent() + 2));
  EXPECT_EQ(log.Count(), 1);
  ASSERT_TRUE(agent.Reset().ok());
  EXPECT_NE(agent.incarnation(), first_incarnation);
  ASSERT_TRUE(agent.Connect().ok());
  EXPECT_EQ(agent.leader_incarnation(), coordinator_->service().service_incarnation());
  ASSERT_TRUE(agent.InsertKeyValue("after", "restart").ok());
  ASSERT_TRUE(agent.Shutdown().ok());
}

TEST_F(AgentTest, ShutdownWaitsForEveryTaskAtTheShutdownBarrier) {
  StartCoordinator(Config(2));
  std::vector<ErrorLog> logs(2);
  auto agents = ConnectAll(2, &logs);
  auto first = std::async(std::launch::async, [&] { return agents[0]->Shutdown(); });
  ASSERT_TRUE(
      Eventually([&] { return coordinator_->service().ParkedCalls(ParkKind::kShutdown) == 1; }));
  // Held at the barrier: the first shutdown has not returned while the other task is missing.
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(agents[0]->state(), AgentState::kConnected);
  ASSERT_TRUE(agents[1]->Shutdown().ok());
  EXPECT_TRUE(first.get().ok());
  EXPECT_EQ(agents[0]->state(), AgentState::kDisconnected);
  EXPECT_TRUE(Eventually(
      [&] { return coordinator_->service().ParkedCalls(ParkKind::kPollForError) == 0; }));
}

TEST_F(AgentTest, AbandonEndsTheHeartbeatsAndThePollWithoutTellingTheCoordinator) {
  // One task, and a heartbeat timeout of a second: the coordinator notices the silence soon.
  StartCoordinator(Jobs(1, absl::Seconds(1)));
  ErrorLog log;
  CoordinationAgent agent;
  ASSERT_TRUE(agent.Initialize(AgentFor(0), log.Callback()).ok());
  ASSERT_TRUE(agent.Connect().ok());
  ASSERT_TRUE(heartbeats_[0].WaitForSucceeded(1));
  agent.Abandon();
  EXPECT_EQ(agent.state(), AgentState::kDisconnected);
  const int sent = heartbeats_[0].Sent();
  // Not told of the end, the coordinator finds the task silent: with heartbeats still going,
  // it never would. The error it records reaches no abandoned agent (its poll ended).
  auto connected = [&] {
    return coordinator_->service().AllTasks().at(0).state == TaskState::kConnected;
  };
  EXPECT_TRUE(Eventually([&] { return !connected(); }));
  EXPECT_EQ(heartbeats_[0].Sent(), sent);
  EXPECT_EQ(log.Count(), 0);
  agent.Abandon();  // again: nothing to do
  EXPECT_EQ(agent.state(), AgentState::kDisconnected);
}

TEST_F(AgentTest, WatchSeesEveryChangeUnderTheKeyInOrder) {
  StartCoordinator(Config(1));
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  CoordinationAgent& a = *agents[0];
  ASSERT_TRUE(a.InsertKeyValue("before", "x").ok());  // revision 1, before the watch
  EventLog events;
  auto id = a.StartWatchKey("cfg", events.Callback());
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(a.InsertKeyValue("cfg/a", "1").ok());
  ASSERT_TRUE(a.InsertKeyValue("other", "1").ok());
  ASSERT_TRUE(a.UpdateKeyValue("cfg/a", "2").ok());
  ASSERT_TRUE(a.IncrementKeyValue("cfg/n", 3).ok());
  ASSERT_TRUE(a.DeleteKeyValue("cfg").ok());
  ASSERT_TRUE(events.WaitForLines(5));
  EXPECT_EQ(events.Lines(),
            (std::vector<std::string>{"insert cfg/a=1@2", "update cfg/a=2@4", "insert cfg/n=3@5",
                                      "delete cfg/a=@6", "delete cfg/n=@6"}));
  a.StopWatchKey(*id);
  // A change after the stop reaches a watch still open (so it was sent), not the stopped one.
  EventLog witness;
  auto witness_id = a.StartWatchKey("cfg", witness.Callback());
  ASSERT_TRUE(witness_id.ok()) << witness_id.status();
  ASSERT_TRUE(a.InsertKeyValue("cfg/b", "after stop").ok());
  ASSERT_TRUE(witness.WaitForLines(1));
  EXPECT_EQ(witness.Lines(), (std::vector<std::string>{"insert cfg/b=after stop@7"}));
  EXPECT_EQ(events.Lines().size(), 5u);
  a.StopWatchKey(*witness_id);
  EXPECT_TRUE(
      Eventually([&] { return coordinator_->service().ParkedCalls(ParkKind::kWatchKeys) == 0; }));
}

TEST_F(AgentTest, WatchThatFellBehindResumesWithoutLosingEvents) {
  ServiceConfig config = Config(1);
  config.key_value.watch_queue_events = 4;  // the server drops a watcher 4 events behind
  StartCoordinator(config);
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  EventLog events;
  // A slow consumer: the server's queue overflows while it sleeps, and the stream is
  // reopened from the next revision.
  auto id = agents[0]->StartWatchKey("k", events.Callback(absl::Milliseconds(20)));
  ASSERT_TRUE(id.ok());
  constexpr int kWrites = 60;
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(agents[0]->UpdateKeyValue("k", std::to_string(i)).ok());
  }
  ASSERT_TRUE(events.WaitForLines(kWrites, absl::Seconds(30)));
  std::vector<std::string> lines = events.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kWrites));
  for (int i = 0; i < kWrites; ++i) {
    EXPECT_EQ(lines[i], absl::StrCat(i == 0 ? "insert" : "update", " k=", i, "@", i + 1));
  }
  agents[0]->StopWatchKey(*id);
}

TEST_F(AgentTest, WatchAcrossACoordinatorRestartEndsWithAnError) {
  StartCoordinator(Config(1));
  std::string address = coordinator_->address();
  std::vector<ErrorLog> logs(1);
  auto agents = ConnectAll(1, &logs);
  ASSERT_TRUE(agents[0]->InsertKeyValue("k", "1").ok());
  ASSERT_TRUE(agents[0]->InsertKeyValue("j", "1").ok());
  EventLog events;
  auto id = agents[0]->StartWatchKey("k", events.Callback());
  ASSERT_TRUE(id.ok());
  coordinator_.reset();
  StartCoordinator(Config(1), address);  // an empty store at revision 0
  ASSERT_TRUE(events.WaitForEnd());
  EXPECT_EQ(events.end.code(), absl::StatusCode::kOutOfRange) << events.end;
  agents[0]->StopWatchKey(*id);
}

}  // namespace
}  // namespace cohort::testing
