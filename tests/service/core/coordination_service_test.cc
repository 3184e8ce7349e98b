// The task lifecycle of CoordinationService: configuration, task names, registration,
// heartbeats and error propagation.
#include "service/core/coordination_service.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "common/task_progress.h"
#include "gtest/gtest.h"
#include "service/core/errors.h"
#include "tests/service/core/callback_result.h"
#include "tests/service/core/coordination_service_fixture.h"

namespace cohort {
namespace {

using ::cohort::testing::CoordinationServiceTest;
using ::cohort::testing::kSidecar0;
using ::cohort::testing::kW0;
using ::cohort::testing::kW1;
using ::cohort::testing::kW2;
using ::cohort::testing::Mentions;
using ::cohort::testing::StatusResult;

// ---- Configuration -------------------------------------------------------------------

ServiceConfig OneJob() {
  ServiceConfig config;
  config.jobs.push_back({"worker", 2});
  return config;
}

TEST(ServiceConfigTest, ConfigWithOneWorkloadJobIsValid) {
  EXPECT_TRUE(ValidateConfig(OneJob()).ok());
}

TEST(ServiceConfigTest, ConfigWithoutJobsIsInvalid) {
  EXPECT_EQ(ValidateConfig(ServiceConfig{}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, JobWithAnEmptyNameIsInvalid) {
  ServiceConfig config = OneJob();
  config.jobs.push_back({"", 1});
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, JobWithoutTasksIsInvalid) {
  ServiceConfig config = OneJob();
  config.jobs[0].num_tasks = 0;
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, JobDeclaredTwiceIsInvalid) {
  ServiceConfig config = OneJob();
  config.jobs.push_back({"worker", 1, /*auxiliary=*/true});
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, ConfigWithOnlyAuxiliaryJobsIsInvalid) {
  ServiceConfig config;
  config.jobs.push_back({"sidecar", 1, /*auxiliary=*/true});
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, DefaultJobThatIsNotDeclaredIsInvalid) {
  ServiceConfig config = OneJob();
  config.default_job = "trainer";
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, SeveralWorkloadJobsNeedADefaultJob) {
  ServiceConfig config = OneJob();
  config.jobs.push_back({"trainer", 1});
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);

  config.default_job = "trainer";
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ServiceConfigTest, HeartbeatTimeoutMustBePositive) {
  ServiceConfig config = OneJob();
  config.heartbeat_timeout = absl::ZeroDuration();
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, RegisterTimeoutMustBePositive) {
  ServiceConfig config = OneJob();
  config.register_timeout = -absl::Seconds(1);
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, ShutdownBarrierTimeoutMayBeZeroButNotNegative) {
  ServiceConfig config = OneJob();
  config.shutdown_barrier_timeout = absl::ZeroDuration();
  EXPECT_TRUE(ValidateConfig(config).ok());

  config.shutdown_barrier_timeout = -absl::Seconds(1);
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, CreateRefusesAnInvalidConfig) {
  ManualClock clock;
  EXPECT_EQ(CoordinationService::Create(ServiceConfig{}, &clock).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConfigTest, ConfiguredServiceIncarnationIsKept) {
  ManualClock clock;
  ServiceConfig config = OneJob();
  config.service_incarnation = 42;
  EXPECT_EQ((*CoordinationService::Create(config, &clock))->service_incarnation(), 42u);
}

// ---- Task names ----------------------------------------------------------------------

class ResolveTaskTest : public CoordinationServiceTest {};

TEST_F(ResolveTaskTest, EmptyJobNameMeansTheFirstWorkloadJob) {
  ServiceConfig config;
  config.jobs.push_back({"sidecar", 1, /*auxiliary=*/true});
  config.jobs.push_back({"worker", 2});
  Start(config);

  auto task = service_->ResolveTask("", 1);

  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(*task, (TaskName{"worker", 1}));
}

TEST_F(ResolveTaskTest, EmptyJobNameMeansTheConfiguredDefaultJob) {
  ServiceConfig config;
  config.jobs.push_back({"worker", 2});
  config.jobs.push_back({"trainer", 2});
  config.default_job = "trainer";
  Start(config);

  EXPECT_EQ(service_->ResolveTask("", 0).value(), (TaskName{"trainer", 0}));
  EXPECT_EQ(service_->ResolveTask("worker", 0).value(), (TaskName{"worker", 0}));
}

TEST_F(ResolveTaskTest, UnknownJobIsInvalidArgument) {
  EXPECT_EQ(service_->ResolveTask("trainer", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ResolveTaskTest, TaskIdOutOfRangeIsInvalidArgument) {
  EXPECT_EQ(service_->ResolveTask("worker", 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->ResolveTask("worker", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Registration --------------------------------------------------------------------

class RegisterTest : public CoordinationServiceTest {};

TEST_F(RegisterTest, RegisterBlocksUntilEveryWorkloadTaskRegisters) {
  StatusResult w0 = Register(kW0), w1 = Register(kW1);
  EXPECT_FALSE(w0.fired());
  EXPECT_FALSE(w1.fired());
  EXPECT_FALSE(service_->ClusterRegistered());

  StatusResult w2 = Register(kW2);

  for (const StatusResult* r : {&w0, &w1, &w2}) {
    ASSERT_TRUE(r->fired());
    EXPECT_TRUE(r->value().ok()) << r->value();
  }
  EXPECT_TRUE(service_->ClusterRegistered());
}

TEST_F(RegisterTest, TasksWaitingAtTheRegisterBarrierStayDisconnected) {
  StatusResult w0 = Register(kW0), w1 = Register(kW1);

  EXPECT_EQ(StateOf(kW0), TaskState::kDisconnected);
  EXPECT_EQ(StateOf(kW1), TaskState::kDisconnected);
  StatusResult w2 = Register(kW2);
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
  EXPECT_EQ(StateOf(kW2), TaskState::kConnected);
}

TEST_F(RegisterTest, AuxiliaryTaskRegistersWithoutWaiting) {
  StatusResult sidecar = Register(kSidecar0);

  ASSERT_TRUE(sidecar.fired());
  EXPECT_TRUE(sidecar.value().ok());
  EXPECT_EQ(StateOf(kSidecar0), TaskState::kConnected);
  EXPECT_FALSE(service_->ClusterRegistered());
}

TEST_F(RegisterTest, RegisterBarrierDoesNotWaitForAuxiliaryTasks) {
  RegisterWorkers();

  EXPECT_TRUE(service_->ClusterRegistered());
  EXPECT_EQ(StateOf(kSidecar0), TaskState::kDisconnected);
}

TEST_F(RegisterTest, WithoutTheRegisterBarrierATaskConnectsAtOnce) {
  ServiceConfig config = Config();
  config.register_barrier = false;
  Start(config);

  StatusResult w0 = Register(kW0);

  ASSERT_TRUE(w0.fired());
  EXPECT_TRUE(w0.value().ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(RegisterTest, RegisterBarrierTimeoutIsDeadlineExceededNamingTheMissingTasks) {
  StatusResult w0 = Register(kW0), w1 = Register(kW1);

  Advance(Config().register_timeout - absl::Seconds(1));
  EXPECT_FALSE(w0.fired());
  Advance(absl::Seconds(1));

  ASSERT_TRUE(w0.fired());
  ASSERT_TRUE(w1.fired());
  EXPECT_EQ(w0.value().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w1.value().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Mentions(w0.value(), kW2)) << w0.value();
  EXPECT_FALSE(Mentions(w0.value(), kW0)) << w0.value();
  EXPECT_FALSE(Mentions(w0.value(), kW1)) << w0.value();
}

TEST_F(RegisterTest, RegisterBarrierTimeoutPutsEveryTaskInError) {
  StatusResult sidecar = Register(kSidecar0);
  StatusResult w0 = Register(kW0);

  Advance(Config().register_timeout);

  for (const TaskStateInfo& info : service_->AllTasks()) {
    EXPECT_EQ(info.state, TaskState::kError) << info.task.ToString();
  }
}

TEST_F(RegisterTest, RegisterAgainWithTheSameIncarnationIsOk) {
  RegisterWorkers();

  StatusResult again = Register(kW0, 1);

  ASSERT_TRUE(again.fired());
  EXPECT_TRUE(again.value().ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(RegisterTest, RegisterWithANewIncarnationWhileConnectedIsAborted) {
  RegisterWorkers();

  StatusResult restarted = Register(kW0, 2);

  ASSERT_TRUE(restarted.fired());
  EXPECT_EQ(restarted.value().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(StateOf(kW0), TaskState::kError);
}

TEST_F(RegisterTest, RestartOfAConnectedTaskReachesTheOtherTasksPolls) {
  RegisterWorkers();
  StatusResult poll = Poll(kW1);

  StatusResult restarted = Register(kW0, 2);

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kAborted);
  auto info = GetServiceError(poll.value());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->source, kW0);
}

TEST_F(RegisterTest, TaskInErrorCannotRegisterAgain) {
  RegisterWorkers();
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("oom")).ok());

  StatusResult again = Register(kW0, 2);

  ASSERT_TRUE(again.fired());
  EXPECT_FALSE(again.value().ok());
  EXPECT_EQ(StateOf(kW0), TaskState::kError);
}

TEST_F(RegisterTest, NewerAttemptOfAWaitingTaskSupersedesTheEarlierOne) {
  StatusResult first = Register(kW0, 1);

  StatusResult second = Register(kW0, 2);

  ASSERT_TRUE(first.fired());
  EXPECT_EQ(first.value().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(second.fired());
  StatusResult w1 = Register(kW1), w2 = Register(kW2);
  ASSERT_TRUE(second.fired());
  EXPECT_TRUE(second.value().ok());
  EXPECT_EQ(Info(kW0).incarnation, 2u);
}

TEST_F(RegisterTest, NewerAttemptTakesThePlaceOfTheWaitingOneAtTheParkedCallLimit) {
  ServiceConfig config = Config();
  config.parked.max_per_task = 1;
  Start(config);
  StatusResult first = Register(kW0, 1);

  StatusResult second = Register(kW0, 2);

  EXPECT_EQ(first.value().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(second.fired());
  StatusResult w1 = Register(kW1), w2 = Register(kW2);
  ASSERT_TRUE(second.fired());
  EXPECT_TRUE(second.value().ok()) << second.value();
}

TEST_F(RegisterTest, RequestCarryingAnotherIncarnationIsAborted) {
  RegisterWorkers();

  EXPECT_TRUE(service_->CheckIncarnation(kW0, 1).ok());
  EXPECT_EQ(service_->CheckIncarnation(kW0, 2).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(RegisterTest, UnknownTaskCannotRegister) {
  StatusResult unknown = Register(TaskName{"worker", 3});

  ASSERT_TRUE(unknown.fired());
  EXPECT_EQ(unknown.value().code(), absl::StatusCode::kInvalidArgument);
}

class RecoverableJobTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    ServiceConfig config = Config();
    config.jobs[0].recoverable = true;
    Start(config);
    RegisterWorkers();
  }
};

TEST_F(RecoverableJobTest, RecoverableTaskMayRegisterAgainAfterAnError) {
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("preempted")).ok());
  ASSERT_EQ(StateOf(kW0), TaskState::kError);

  StatusResult again = Register(kW0, 2);

  ASSERT_TRUE(again.fired());
  EXPECT_TRUE(again.value().ok()) << again.value();
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
  EXPECT_EQ(Info(kW0).incarnation, 2u);
}

TEST_F(RecoverableJobTest, RecoverableTaskMayRegisterWithANewIncarnationWhileConnected) {
  StatusResult again = Register(kW0, 2);

  ASSERT_TRUE(again.fired());
  EXPECT_TRUE(again.value().ok()) << again.value();
  EXPECT_EQ(Info(kW0).incarnation, 2u);
}

TEST_F(RecoverableJobTest, ErrorOfARecoverableTaskDoesNotPropagate) {
  StatusResult poll = Poll(kW1);

  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("preempted")).ok());

  EXPECT_EQ(StateOf(kW0), TaskState::kError);
  EXPECT_FALSE(poll.fired());
}

// ---- Heartbeats ----------------------------------------------------------------------

class HeartbeatTest : public CoordinationServiceTest {
 protected:
  static constexpr absl::Duration kTimeout = absl::Seconds(10);
  void SetUp() override {
    ServiceConfig config = Config();
    config.heartbeat_timeout = kTimeout;
    Start(config);
  }
};

TEST_F(HeartbeatTest, HeartbeatOfAConnectedTaskIsOk) {
  RegisterWorkers();

  EXPECT_TRUE(service_->Heartbeat(kW0, 1).ok());
}

TEST_F(HeartbeatTest, HeartbeatBeforeRegisteringIsInvalidArgument) {
  EXPECT_EQ(service_->Heartbeat(kW0, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HeartbeatTest, HeartbeatWithAnotherIncarnationIsAbortedAndPutsTheTaskInError) {
  RegisterWorkers();

  EXPECT_EQ(service_->Heartbeat(kW0, 2).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(StateOf(kW0), TaskState::kError);
}

TEST_F(HeartbeatTest, HeartbeatOfATaskInErrorIsAborted) {
  RegisterWorkers();
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("oom")).ok());

  EXPECT_EQ(service_->Heartbeat(kW0, 1).code(), absl::StatusCode::kAborted);
}

TEST_F(HeartbeatTest, HeartbeatsKeepATaskConnected) {
  RegisterWorkers();

  for (int i = 0; i < 5; ++i) {
    Advance(kTimeout / 2);
    for (const TaskName& task : {kW0, kW1, kW2}) ASSERT_TRUE(service_->Heartbeat(task, 1).ok());
  }

  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(HeartbeatTest, TaskWithoutHeartbeatsForTheTimeoutGoesToErrorUnavailable) {
  RegisterWorkers();
  Advance(kTimeout / 2);
  ASSERT_TRUE(service_->Heartbeat(kW0, 1).ok());
  ASSERT_TRUE(service_->Heartbeat(kW1, 1).ok());

  Advance(kTimeout / 2 + absl::Seconds(1));

  TaskStateInfo stale = Info(kW2);
  EXPECT_EQ(stale.state, TaskState::kError);
  EXPECT_EQ(stale.error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
  EXPECT_EQ(StateOf(kW1), TaskState::kConnected);
}

TEST_F(HeartbeatTest, StaleTaskErrorReachesTheOtherTasksPollsNamingItsSource) {
  RegisterWorkers();
  StatusResult poll = Poll(kW0);
  Advance(kTimeout / 2);
  ASSERT_TRUE(service_->Heartbeat(kW0, 1).ok());
  ASSERT_TRUE(service_->Heartbeat(kW1, 1).ok());

  Advance(kTimeout / 2 + absl::Seconds(1));

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kUnavailable);
  auto info = GetServiceError(poll.value());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->source, kW2);
}

TEST_F(HeartbeatTest, TaskWaitingAtTheRegisterBarrierIsNotTimedOut) {
  StatusResult w0 = Register(kW0);

  Advance(kTimeout * 3);

  EXPECT_FALSE(w0.fired());
  EXPECT_EQ(StateOf(kW0), TaskState::kDisconnected);
  StatusResult w1 = Register(kW1), w2 = Register(kW2);
  ASSERT_TRUE(w0.fired());
  EXPECT_TRUE(w0.value().ok());
}

TEST_F(HeartbeatTest, HeartbeatShortlyAfterAResetIsStillAccepted) {
  RegisterWorkers();
  ASSERT_TRUE(service_->ResetTask(kW0).ok());

  EXPECT_TRUE(service_->Heartbeat(kW0, 1).ok());
  Advance(kTimeout);
  EXPECT_EQ(service_->Heartbeat(kW0, 1).code(), absl::StatusCode::kInvalidArgument);
}

// ---- Progress on heartbeats (in memory only) -----------------------------------------

TEST_F(HeartbeatTest, AHeartbeatsProgressIsTheTasksAndOneWithoutProgressLeavesTheLast) {
  RegisterWorkers();
  EXPECT_TRUE(Info(kW0).progress.empty());

  ASSERT_TRUE(service_->Heartbeat(kW0, 1, TaskProgress{120, 0.25}).ok());
  EXPECT_EQ(Info(kW0).progress, (TaskProgress{120, 0.25}));
  EXPECT_TRUE(Info(kW1).progress.empty());

  ASSERT_TRUE(service_->Heartbeat(kW0, 1).ok());
  EXPECT_EQ(Info(kW0).progress, (TaskProgress{120, 0.25}));

  // A newer one replaces it whole, a field it lacks included.
  ASSERT_TRUE(service_->Heartbeat(kW0, 1, TaskProgress{121, std::nullopt}).ok());
  EXPECT_EQ(Info(kW0).progress, (TaskProgress{121, std::nullopt}));
}

TEST_F(HeartbeatTest, AHeartbeatThatDoesNotCountKeepsNoProgress) {
  EXPECT_FALSE(service_->Heartbeat(kW0, 1, TaskProgress{5, 1.0}).ok());
  EXPECT_TRUE(Info(kW0).progress.empty());

  RegisterWorkers();
  ASSERT_TRUE(service_->ReportError(kW1, absl::InternalError("oom")).ok());
  EXPECT_FALSE(service_->Heartbeat(kW1, 1, TaskProgress{5, 1.0}).ok());
  EXPECT_TRUE(Info(kW1).progress.empty());
}

TEST_F(HeartbeatTest, ProgressIsClearedWhenTheTaskIsReset) {
  RegisterWorkers();
  ASSERT_TRUE(service_->Heartbeat(kW0, 1, TaskProgress{7, 0.5}).ok());

  ASSERT_TRUE(service_->ResetTask(kW0).ok());

  EXPECT_TRUE(Info(kW0).progress.empty());
}

TEST_F(HeartbeatTest, ProgressIsClearedWhenTheTasksShutDown) {
  RegisterWorkers();
  for (const TaskName& task : {kW0, kW1, kW2}) {
    ASSERT_TRUE(service_->Heartbeat(task, 1, TaskProgress{7, 0.5}).ok());
  }

  std::vector<StatusResult> shutdowns;
  for (const TaskName& task : {kW0, kW1, kW2}) shutdowns.push_back(Shutdown(task));

  for (const StatusResult& r : shutdowns) {
    ASSERT_TRUE(r.fired());
    ASSERT_TRUE(r.value().ok()) << r.value();
  }
  for (const TaskName& task : {kW0, kW1, kW2}) EXPECT_TRUE(Info(task).progress.empty());
}

TEST_F(RecoverableJobTest, ProgressIsClearedWhenTheTaskRegistersAnew) {
  ASSERT_TRUE(service_->Heartbeat(kW0, 1, TaskProgress{300, 2.0}).ok());

  // The same incarnation again (a retry whose answer was lost): the same run, kept.
  StatusResult retry = Register(kW0, 1);
  ASSERT_TRUE(retry.fired());
  ASSERT_TRUE(retry.value().ok()) << retry.value();
  EXPECT_EQ(Info(kW0).progress, (TaskProgress{300, 2.0}));

  StatusResult again = Register(kW0, 2);
  ASSERT_TRUE(again.fired());
  ASSERT_TRUE(again.value().ok()) << again.value();
  EXPECT_TRUE(Info(kW0).progress.empty());
  // The old incarnation's heartbeats bring none back.
  ASSERT_TRUE(service_->Heartbeat(kW0, 1, TaskProgress{301, 2.0}).ok());
  EXPECT_TRUE(Info(kW0).progress.empty());
}

// ---- Error propagation ---------------------------------------------------------------

class ErrorPropagationTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {
    CoordinationServiceTest::SetUp();
    RegisterWorkers();
  }
};

TEST_F(ErrorPropagationTest, ReportedErrorReachesEveryPollAsAReportedError) {
  StatusResult w1 = Poll(kW1), w2 = Poll(kW2);

  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("out of memory")).ok());

  EXPECT_EQ(StateOf(kW0), TaskState::kError);
  for (const StatusResult* poll : {&w1, &w2}) {
    ASSERT_TRUE(poll->fired());
    EXPECT_EQ(poll->value().code(), absl::StatusCode::kInternal);
    EXPECT_TRUE(absl::StrContains(poll->value().message(), "out of memory"));
    auto info = GetServiceError(poll->value());
    ASSERT_TRUE(info.has_value());
    EXPECT_TRUE(info->is_reported_error);
    EXPECT_EQ(info->source, kW0);
  }
}

TEST_F(ErrorPropagationTest, ReportingAnOkStatusIsInvalidArgument) {
  EXPECT_EQ(service_->ReportError(kW0, absl::OkStatus()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(kW0), TaskState::kConnected);
}

TEST_F(ErrorPropagationTest, PollAnswersAtOnceWhenAnErrorWasAlreadyPropagated) {
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("oom")).ok());

  StatusResult poll = Poll(kW1);

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(GetServiceError(poll.value())->source, kW0);
}

TEST_F(ErrorPropagationTest, OnlyTheFirstErrorIsPropagated) {
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("first")).ok());
  ASSERT_TRUE(service_->ReportError(kW1, absl::DataLossError("second")).ok());

  StatusResult poll = Poll(kW2);

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(GetServiceError(poll.value())->source, kW0);
}

TEST_F(ErrorPropagationTest, NewPollOfATaskCancelsItsEarlierPoll) {
  StatusResult first = Poll(kW1);

  StatusResult second = Poll(kW1);

  ASSERT_TRUE(first.fired());
  EXPECT_EQ(first.value().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(second.fired());
  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError("oom")).ok());
  EXPECT_EQ(second.value().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(first.count(), 1);
}

TEST_F(ErrorPropagationTest, PollOfAnUnregisteredTaskIsFailedPrecondition) {
  StatusResult poll = Poll(kSidecar0);

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ErrorPropagationTest, ErrorOfAnAuxiliaryTaskReachesWorkloadPolls) {
  ASSERT_TRUE(Register(kSidecar0).value().ok());
  StatusResult poll = Poll(kW0);

  ASSERT_TRUE(service_->ReportError(kSidecar0, absl::UnavailableError("proxy died")).ok());

  ASSERT_TRUE(poll.fired());
  EXPECT_EQ(poll.value().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetServiceError(poll.value())->source, kSidecar0);
}

}  // namespace
}  // namespace cohort
