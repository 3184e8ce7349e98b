// What CoordinationService does across tasks: shutdown and reset, task states and watches,
// GetAliveTasks, the device exchange, limits on parked calls, and stopping.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "tests/service/core/callback_result.h"
#include "tests/service/core/coordination_service_fixture.h"

namespace cohort {
namespace {

using ::cohort::testing::CoordinationServiceTest;
using ::cohort::testing::kSidecar0;
using ::cohort::testing::kSidecar1;
using ::cohort::testing::kW0;
using ::cohort::testing::kW1;
using ::cohort::testing::kW2;
using ::cohort::testing::Mentions;
using ::cohort::testing::StatusResult;
using ::cohort::testing::ValueResult;

std::vector<TaskName> Names(const std::vector<TaskStateInfo>& infos) {
  std::vector<TaskName> names;
  for (const TaskStateInfo& info : infos) names.push_back(info.task);
  return names;
}

// ---- Shutdown and reset --------------------------------------------------------------

class ShutdownTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    CoordinationServiceTest::SetUp();
    RegisterWorkers();
  }
};

TEST_F(ShutdownTest, ShutdownWaitsForEveryWorkloadTaskThenDisconnectsThem) {
  StatusResult w0 = Shutdown(kW0), w1 = Shutdown(kW1);
  EXPECT_FALSE(w0.fired());
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);

  StatusResult w2 = Shutdown(kW2);

  for (const StatusResult* r : {&w0, &w1, &w2}) {
    ASSERT_TRUE(r->fired());
    EXPECT_TRUE(r->value().ok()) << r->value();
  }
  for (const TaskName& task : {kW0, kW1, kW2}) {
    EXPECT_EQ(StateOf(task), TaskState::kDisconnected);
  }
}

TEST_F(ShutdownTest, ShutdownBarrierTimeoutIsInternalAndPutsTheMissingTasksInError) {
  StatusResult w0 = Shutdown(kW0), w1 = Shutdown(kW1);

  Advance(Config().shutdown_barrier_timeout);

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(w1.value().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Mentions(w0.value(), kW2)) << w0.value();
  EXPECT_EQ(StateOf(kW2), TaskState::kError);
  EXPECT_EQ(StateOf(kW0), TaskState::kDisconnected);
}

TEST_F(ShutdownTest, ShutdownBarrierTimeoutReachesTheMissingTasksPoll) {
  StatusResult poll = Poll(kW2);
  StatusResult w0 = Shutdown(kW0), w1 = Shutdown(kW1);

  Advance(Config().shutdown_barrier_timeout);

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kInternal);
}

TEST_F(ShutdownTest, ShutdownBarrierFailsWhenATaskIsInError) {
  StatusResult w0 = Shutdown(kW0);

  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("oom")).ok());

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().code(), absl::StatusCode::kInternal);
}

TEST_F(ShutdownTest, WithoutAShutdownBarrierShutdownReturnsAtOnce) {
  ServiceConfig config = Config();
  config.shutdown_barrier_timeout = absl::ZeroDuration();
  Start(config);
  RegisterWorkers();

  StatusResult w0 = Shutdown(kW0);

  ASSERT_TRUE(w0.fired());
  EXPECT_TRUE(w0.value().ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kDisconnected);
  EXPECT_EQ(StateOf(kW1), TaskState::kConnected);
}

TEST_F(ShutdownTest, AuxiliaryTaskShutsDownWithoutWaiting) {
  ASSERT_TRUE(Register(kSidecar0).value().ok());

  StatusResult sidecar = Shutdown(kSidecar0);

  ASSERT_TRUE(sidecar.fired());
  EXPECT_TRUE(sidecar.value().ok());
  EXPECT_EQ(StateOf(kSidecar0), TaskState::kDisconnected);
}

TEST_F(ShutdownTest, ShutdownOfADisconnectedTaskIsFailedPrecondition) {
  StatusResult sidecar = Shutdown(kSidecar0);

  ASSERT_TRUE(sidecar.fired());
  EXPECT_EQ(sidecar.value().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ShutdownTest, ShutdownCancelsTheTasksOwnPoll) {
  ASSERT_TRUE(Register(kSidecar0).value().ok());
  StatusResult poll = Poll(kSidecar0);

  StatusResult sidecar = Shutdown(kSidecar0);

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kCancelled);
}

class ResetTaskTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    CoordinationServiceTest::SetUp();
    RegisterWorkers();
  }
};

TEST_F(ResetTaskTest, ResetDisconnectsTheTaskAndLetsItRegisterAgain) {
  ASSERT_TRUE(service_->ResetTask(kW0).ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kDisconnected);

  StatusResult again = Register(kW0, 2);

  ASSERT_TRUE(again.fired());
  EXPECT_TRUE(again.value().ok()) << again.value();
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
  EXPECT_EQ(Info(kW0).incarnation, 2u);
}

TEST_F(ResetTaskTest, ResetOfATaskInErrorClearsItsError) {
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("oom")).ok());

  ASSERT_TRUE(service_->ResetTask(kW0).ok());

  TaskStateInfo info = Info(kW0);
  EXPECT_EQ(info.state, TaskState::kDisconnected);
  EXPECT_TRUE(info.error.ok());
  EXPECT_TRUE(Register(kW0, 2).value().ok());
}

TEST_F(ResetTaskTest, ResetOfADisconnectedTaskIsFailedPrecondition) {
  EXPECT_EQ(service_->ResetTask(kSidecar0).code(), absl::StatusCode::kFailedPrecondition);
}

// ---- Task states ---------------------------------------------------------------------

class TaskStatesTest : public CoordinationServiceTest {};

TEST_F(TaskStatesTest, GetTaskStatesReportsStateIncarnationAndError) {
  StatusResult w0 = Register(kW0, 7), w1 = Register(kW1, 8), w2 = Register(kW2, 9);
  ASSERT_TRUE(service_->ReportError(kW1, absl::DataLossError("disk")).ok());

  auto states = service_->GetTaskStates({kW0, kW1, kSidecar0});

  ASSERT_TRUE(states.ok()) << states.status();
  ASSERT_EQ(states->size(), 3u);
  const TaskStateInfo& w0_info = (*states)[0];
  EXPECT_EQ(w0_info.task, kW0);
  EXPECT_EQ(w0_info.state, TaskState::kConnected);
  EXPECT_EQ(w0_info.incarnation, 7u);
  EXPECT_TRUE(w0_info.error.ok());
  EXPECT_EQ(w0_info.last_heartbeat, clock_.Now());
  const TaskStateInfo& w1_info = (*states)[1];
  EXPECT_EQ(w1_info.state, TaskState::kError);
  EXPECT_EQ(w1_info.error.code(), absl::StatusCode::kDataLoss);
  const TaskStateInfo& sidecar_info = (*states)[2];
  EXPECT_EQ(sidecar_info.state, TaskState::kDisconnected);
  EXPECT_EQ(sidecar_info.last_heartbeat, absl::InfinitePast());
}

TEST_F(TaskStatesTest, GetTaskStatesOfAnUnknownTaskIsInvalidArgument) {
  EXPECT_EQ(service_->GetTaskStates({kW0, TaskName{"ps", 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- WatchJobState -------------------------------------------------------------------

class WatchJobStateTest : public CoordinationServiceTest {
 protected:
  using WatchResult = ValueResult<JobStateView>;

  WatchResult Watch(const std::string& job, int64_t version) {
    WatchResult result;
    service_->WatchJobState(job, version, service_->NewWaiterId(), result.Callback());
    return result;
  }
};

TEST_F(WatchJobStateTest, WatchWithVersionMinusOneAnswersAtOnce) {
  WatchResult watch = Watch("worker", -1);

  ASSERT_TRUE(watch.fired());
  ASSERT_TRUE(watch.value().ok()) << watch.value().status();
  EXPECT_EQ(Names((*watch.value())->tasks), (std::vector<TaskName>{kW0, kW1, kW2}));
}

TEST_F(WatchJobStateTest, WatchWithAnOlderVersionAnswersAtOnce) {
  int64_t before = (*Watch("worker", -1).value())->version;
  ASSERT_TRUE(Register(kSidecar0).value().ok());

  WatchResult watch = Watch("worker", before);

  ASSERT_TRUE(watch.fired());
  EXPECT_NE((*watch.value())->version, before);
}

TEST_F(WatchJobStateTest, WatchWithTheCurrentVersionWaitsForAStateChange) {
  int64_t current = (*Watch("sidecar", -1).value())->version;
  WatchResult watch = Watch("sidecar", current);
  EXPECT_FALSE(watch.fired());

  ASSERT_TRUE(Register(kSidecar1).value().ok());

  ASSERT_TRUE(watch.fired());
  const JobStateSnapshot& snapshot = **watch.value();
  EXPECT_NE(snapshot.version, current);
  ASSERT_EQ(snapshot.tasks.size(), 2u);
  EXPECT_EQ(snapshot.tasks[1].task, kSidecar1);
  EXPECT_EQ(snapshot.tasks[1].state, TaskState::kConnected);
}

TEST_F(WatchJobStateTest, WatchOfAnEmptyJobNameWatchesTheDefaultJob) {
  WatchResult watch = Watch("", -1);

  ASSERT_TRUE(watch.fired());
  EXPECT_EQ(Names((*watch.value())->tasks), (std::vector<TaskName>{kW0, kW1, kW2}));
}

TEST_F(WatchJobStateTest, WatchOfAnUnknownJobIsInvalidArgument) {
  WatchResult watch = Watch("ps", -1);

  ASSERT_TRUE(watch.fired());
  EXPECT_EQ(watch.value().status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- GetAliveTasks -------------------------------------------------------------------

class AliveTasksTest : public CoordinationServiceTest {
 protected:
  using AliveResult = ValueResult<std::vector<AliveTask>>;

  void SetUp() override {
    CoordinationServiceTest::SetUp();
    RegisterWorkers();
  }

  AliveResult Alive(const TaskName& requester, std::vector<TaskName> tasks = {kW0, kW1, kW2}) {
    AliveResult result;
    service_->GetAliveTasks(requester, std::move(tasks), service_->NewWaiterId(),
                            result.Callback());
    return result;
  }

  static std::vector<TaskName> Names(const AliveResult& result) {
    std::vector<TaskName> names;
    for (const AliveTask& t : result.value().value()) names.push_back(t.task);
    return names;
  }
};

TEST_F(AliveTasksTest, GetAliveTasksWaitsForEveryAliveTaskToAsk) {
  AliveResult w0 = Alive(kW0), w1 = Alive(kW1);
  EXPECT_FALSE(w0.fired());

  AliveResult w2 = Alive(kW2);

  for (const AliveResult* r : {&w0, &w1, &w2}) {
    ASSERT_TRUE(r->fired());
    EXPECT_EQ(Names(*r), (std::vector<TaskName>{kW0, kW1, kW2}));
  }
  EXPECT_EQ(w0.value()->front().incarnation, 1u);
}

TEST_F(AliveTasksTest, GetAliveTasksLeavesOutDeadTasks) {
  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("oom")).ok());

  AliveResult w0 = Alive(kW0);
  EXPECT_FALSE(w0.fired());
  AliveResult w1 = Alive(kW1);

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(Names(w0), (std::vector<TaskName>{kW0, kW1}));
  EXPECT_EQ(Names(w1), (std::vector<TaskName>{kW0, kW1}));
}

TEST_F(AliveTasksTest, GetAliveTasksCompletesWhenTheTaskItWaitsForFails) {
  AliveResult w0 = Alive(kW0), w1 = Alive(kW1);

  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("oom")).ok());

  ASSERT_TRUE(w0.fired());
  ASSERT_TRUE(w1.fired());
  EXPECT_EQ(Names(w0), (std::vector<TaskName>{kW0, kW1}));
}

TEST_F(AliveTasksTest, GetAliveTasksFromATaskOutsideTheListIsInvalidArgument) {
  AliveResult w2 = Alive(kW2, {kW0, kW1});

  ASSERT_TRUE(w2.fired());
  EXPECT_EQ(w2.value().status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Device exchange -----------------------------------------------------------------

class DeviceExchangeTest : public CoordinationServiceTest {
 protected:
  using DevicesResult = ValueResult<std::vector<std::string>>;

  DevicesResult Exchange(const TaskName& task, const std::string& devices) {
    DevicesResult result;
    service_->WaitForAllTasks(task, devices, service_->NewWaiterId(), result.Callback());
    return result;
  }
};

TEST_F(DeviceExchangeTest, WaitForAllTasksAnswersEveryTasksDevicesInTaskOrder) {
  RegisterWorkers();
  DevicesResult w2 = Exchange(kW2, "gpu-c"), w0 = Exchange(kW0, "gpu-a");
  EXPECT_FALSE(w2.fired());

  DevicesResult w1 = Exchange(kW1, "gpu-b");

  const std::vector<std::string> expected{"gpu-a", "gpu-b", "gpu-c"};
  for (const DevicesResult* r : {&w0, &w1, &w2}) {
    ASSERT_TRUE(r->fired());
    EXPECT_EQ(r->value().value(), expected);
  }
}

TEST_F(DeviceExchangeTest, AuxiliaryJobExchangesDevicesAmongItsOwnTasks) {
  RegisterWorkers();
  ASSERT_TRUE(Register(kSidecar0).value().ok());
  ASSERT_TRUE(Register(kSidecar1).value().ok());
  DevicesResult w0 = Exchange(kW0, "gpu-a");

  DevicesResult s1 = Exchange(kSidecar1, "cpu-y");
  DevicesResult s0 = Exchange(kSidecar0, "cpu-x");

  ASSERT_TRUE(s0.fired());
  EXPECT_EQ(s0.value().value(), (std::vector<std::string>{"cpu-x", "cpu-y"}));
  EXPECT_EQ(s1.value().value(), (std::vector<std::string>{"cpu-x", "cpu-y"}));
  EXPECT_FALSE(w0.fired());
}

TEST_F(DeviceExchangeTest, DeviceExchangeFailsWhenAMemberFails) {
  RegisterWorkers();
  DevicesResult w0 = Exchange(kW0, "gpu-a");

  ASSERT_TRUE(service_->ReportError(kW2, absl::InternalError("oom")).ok());

  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().status().code(), absl::StatusCode::kInternal);
}

TEST_F(DeviceExchangeTest, DeviceExchangeOfAnUnregisteredTaskIsFailedPrecondition) {
  DevicesResult sidecar = Exchange(kSidecar0, "cpu");

  ASSERT_TRUE(sidecar.fired());
  EXPECT_EQ(sidecar.value().status().code(), absl::StatusCode::kFailedPrecondition);
}

// ---- Parked-call limits --------------------------------------------------------------

class ParkedCallLimitTest : public CoordinationServiceTest {
 protected:
  using GetResult = ValueResult<std::string>;

  void SetUp() override {
    ServiceConfig config = Config();
    config.parked.max_per_task = 2;
    Start(config);
    RegisterWorkers();
  }

  GetResult Get(const TaskName& owner, const std::string& key) {
    GetResult result;
    service_->GetKeyValue(key, service_->NewWaiterId(), owner, std::nullopt, result.Callback());
    return result;
  }
};

TEST_F(ParkedCallLimitTest, TaskOverItsParkedCallLimitIsResourceExhausted) {
  GetResult a = Get(kW0, "a"), b = Get(kW0, "b");

  GetResult c = Get(kW0, "c");
  ValueResult<int64_t> barrier;
  service_->Barrier("b", 0, absl::Seconds(10), kW0, {}, service_->NewWaiterId(),
                    barrier.Callback());

  EXPECT_FALSE(a.fired());
  EXPECT_FALSE(b.fired());
  ASSERT_TRUE(c.fired());
  EXPECT_EQ(c.value().status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(barrier.fired());
  EXPECT_EQ(barrier.value().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ParkedCallLimitTest, ParkedCallLimitIsPerTask) {
  GetResult a = Get(kW0, "a"), b = Get(kW0, "b");

  GetResult other = Get(kW1, "c");

  EXPECT_FALSE(other.fired());
}

TEST_F(ParkedCallLimitTest, FinishedCallFreesItsPlace) {
  GetResult a = Get(kW0, "a"), b = Get(kW0, "b");
  ASSERT_TRUE(service_->InsertKeyValue("a", "v", false).ok());

  GetResult c = Get(kW0, "c");

  EXPECT_FALSE(c.fired());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 2);
}

TEST_F(ParkedCallLimitTest, NewPollTakesThePlaceOfTheEarlierOneAtTheLimit) {
  GetResult a = Get(kW0, "a");
  StatusResult first = Poll(kW0);

  StatusResult second = Poll(kW0);

  ASSERT_TRUE(first.fired());
  EXPECT_EQ(first.value().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(second.fired());
  ASSERT_TRUE(service_->ReportError(kW1, absl::InternalError("oom")).ok());
  ASSERT_TRUE(second.fired());
  EXPECT_EQ(second.value().code(), absl::StatusCode::kInternal);
}

TEST_F(ParkedCallLimitTest, RepeatedBarrierCallTakesThePlaceOfTheEarlierOneAtTheLimit) {
  GetResult a = Get(kW0, "a");
  ValueResult<int64_t> first, second, w1, w2;
  auto arrive = [this](const TaskName& task, ValueResult<int64_t>& result) {
    service_->Barrier("b", 0, absl::Seconds(10), task, {}, service_->NewWaiterId(),
                      result.Callback());
  };
  arrive(kW0, first);

  arrive(kW0, second);

  ASSERT_TRUE(first.fired());
  EXPECT_EQ(first.value().status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(second.fired());
  arrive(kW1, w1);
  arrive(kW2, w2);
  ASSERT_TRUE(second.fired());
  EXPECT_EQ(second.value().value(), 0);
}

// ---- Stopping ------------------------------------------------------------------------

class StopTest : public CoordinationServiceTest {};

TEST_F(StopTest, StopEndsEveryParkedCallWithTheStopStatus) {
  ASSERT_TRUE(Register(kSidecar0).value().ok());
  StatusResult registering = Register(kW0);
  StatusResult poll = Poll(kSidecar0);
  ValueResult<std::string> get;
  service_->GetKeyValue("k", service_->NewWaiterId(), kW0, std::nullopt, get.Callback());
  ValueResult<JobStateView> current, watch;
  service_->WatchJobState("worker", -1, service_->NewWaiterId(), current.Callback());
  service_->WatchJobState("worker", (*current.value())->version, service_->NewWaiterId(),
                          watch.Callback());
  ASSERT_FALSE(registering.fired());
  ASSERT_FALSE(watch.fired());

  const absl::Status stop = absl::UnavailableError("coordinator going down for maintenance");
  service_->Stop(stop);

  ASSERT_TRUE(registering.fired());
  ASSERT_TRUE(poll.fired());
  ASSERT_TRUE(get.fired());
  ASSERT_TRUE(watch.fired());
  for (const absl::Status& s :
       {registering.value(), poll.value(), get.value().status(), watch.value().status()}) {
    EXPECT_EQ(s.code(), stop.code()) << s;
    EXPECT_EQ(s.message(), stop.message()) << s;
  }
  EXPECT_EQ(registering.count(), 1);
}

TEST_F(StopTest, StoppedServiceRefusesNewCalls) {
  service_->Stop(absl::UnavailableError("stopping"));

  StatusResult registering = Register(kW0);
  ValueResult<std::string> get;
  service_->GetKeyValue("k", service_->NewWaiterId(), kW0, std::nullopt, get.Callback());

  ASSERT_TRUE(registering.fired());
  EXPECT_EQ(registering.value().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace cohort
