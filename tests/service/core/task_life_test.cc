#include "service/core/task_life.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/failure_reason.h"
#include "gtest/gtest.h"
#include "service/core/durable_state.h"
#include "service/core/errors.h"
#include "service/core/heartbeat_monitor.h"
#include "service/core/job_directory.h"
#include "service/core/parked_call.h"
#include "service/core/service_config.h"
#include "service/core/timer_queue.h"
#include "tests/service/core/callback_result.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace task_life_test {
namespace {

using ::cohort::testing::StatusResult;

const TaskName kW0{"worker", 0};
const TaskName kW1{"worker", 1};
// A report that names no reason: the coordinator decides.
constexpr FailureReason kNoReason = FailureReason::kUnspecified;

// Writes down the task-life records it is told, one line each.
class RecordingJournal : public StateJournal {
 public:
  std::vector<std::string> records;

  void TaskChanged(const DurableTask& task) override {
    records.push_back(absl::StrCat("task ", task.task.ToString(), " ", TaskStateName(task.state)));
  }
  void WholeBarrierChanged(WholeBarrierKind kind, const DurableWholeBarrier& barrier) override {
    records.push_back(absl::StrCat(Name(kind), " barrier state ", barrier.state));
  }
  void WholeBarrierWaiting(WholeBarrierKind kind, const TaskName& task, bool waiting) override {
    records.push_back(absl::StrCat(Name(kind), " barrier ", waiting ? "+" : "-", task.ToString()));
  }
  void FirstError(const absl::Status& error) override {
    records.push_back(absl::StrCat("first error ", error.message()));
  }
  void DeviceGroupChanged(const std::vector<TaskName>&, const DurableDeviceGroup*) override {
    records.push_back("device group");
  }
  void KeyPut(const std::string&, const std::string&, int64_t) override {}
  void KeyDeleted(const std::string&, int64_t) override {}
  void KeysChanged(const std::vector<KeyJournalChange>&) override {}
  void BarrierStarted(const DurableBarrier&) override {}
  void BarrierArrived(const std::string&, int64_t, const TaskName&) override {}
  void BarrierDone(const std::string&, int64_t, const absl::Status&) override {}
  void BarrierForgotten(const std::string&) override {}

 private:
  static const char* Name(WholeBarrierKind kind) {
    return kind == WholeBarrierKind::kRegister ? "register" : "shutdown";
  }
};

// Two workload tasks behind the register and shutdown barriers, driven as the service drives
// them: each call under (here: in place of) its lock, the effects carried out after.
class TaskLifeTest : public ::testing::Test {
 protected:
  static ServiceConfig Config() {
    ServiceConfig config;
    config.jobs.push_back({"worker", 2});
    config.default_job = "worker";
    config.register_timeout = absl::Seconds(60);
    config.shutdown_barrier_timeout = absl::Seconds(30);
    return config;
  }

  std::shared_ptr<TaskLife::StatusCall> Call(const TaskName& task, ParkKind kind,
                                             const StatusResult& result) {
    return std::make_shared<TaskLife::StatusCall>(++next_id_, kind, task, result.Callback());
  }
  std::optional<absl::Status> Register(const TaskName& task, const StatusResult& result) {
    return life_.Register(task, 1, Call(task, ParkKind::kRegister, result), fx_);
  }
  void RegisterBoth() {
    StatusResult first;
    StatusResult second;
    Register(kW0, first);
    Register(kW1, second);
    CarryOut();
    ASSERT_TRUE(first.value().ok());
    ASSERT_TRUE(second.value().ok());
  }
  void CarryOut() {
    for (auto& fn : fx_.after) fn();
    fx_ = TaskEffects{};
  }
  // A TaskLife over the fixture's pieces; `on_register_timeout` runs when the register
  // barrier's timer fires.
  TaskLife NewLife(std::function<void()> on_register_timeout) {
    return TaskLife{config_,
                    jobs_,
                    &clock_,
                    &heartbeats_,
                    &parked_,
                    &timers_,
                    [](const std::function<void()>& fn) { fn(); },
                    std::move(on_register_timeout),
                    [] {}};
  }

  const ServiceConfig config_ = Config();
  const JobDirectory jobs_{config_.jobs, config_.default_job};
  ManualClock clock_;
  HeartbeatMonitor heartbeats_{absl::Hours(1)};
  ParkedCallRegistry parked_{ParkLimits{}};
  TimerQueue timers_;
  int register_timeouts_ = 0;
  TaskLife life_ = NewLife([this] { ++register_timeouts_; });
  TaskEffects fx_;
  WaiterId next_id_ = 0;
};

TEST_F(TaskLifeTest, RegistrationWaitsAtTheBarrierUntilEveryWorkloadTaskArrives) {
  StatusResult first;
  EXPECT_FALSE(Register(kW0, first).has_value());
  CarryOut();
  EXPECT_FALSE(first.fired());
  EXPECT_EQ(life_.tasks().Find(kW0)->state, TaskState::kDisconnected);
  EXPECT_FALSE(life_.Registered());

  StatusResult second;
  EXPECT_FALSE(Register(kW1, second).has_value());
  CarryOut();

  EXPECT_TRUE(first.value().ok());
  EXPECT_TRUE(second.value().ok());
  EXPECT_EQ(life_.tasks().Find(kW0)->state, TaskState::kConnected);
  EXPECT_TRUE(life_.Registered());
}

TEST_F(TaskLifeTest, ARegisterTimeoutFailsTheWaitingAndPutsEveryTaskInError) {
  StatusResult waiting;
  Register(kW0, waiting);
  CarryOut();
  timers_.RunDue(clock_.Now() + absl::Seconds(60));
  ASSERT_EQ(register_timeouts_, 1);

  life_.RegisterTimedOut(fx_);
  CarryOut();

  EXPECT_EQ(waiting.value().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(waiting.value().message(), "missing: /job:worker/task:1"));
  EXPECT_EQ(life_.tasks().Find(kW0)->state, TaskState::kError);
  EXPECT_EQ(life_.tasks().Find(kW1)->state, TaskState::kError);
  EXPECT_EQ(life_.tasks().Find(kW0)->reason, FailureReason::kRegisterTimeout);
  EXPECT_EQ(life_.tasks().Find(kW1)->reason, FailureReason::kRegisterTimeout);
  EXPECT_EQ(life_.first_error().code(), absl::StatusCode::kInternal);
}

TEST_F(TaskLifeTest, AReportedErrorReachesEveryPollAndIsPropagatedOnce) {
  RegisterBoth();
  StatusResult poll;
  EXPECT_FALSE(
      life_.PollForError(kW1, false, Call(kW1, ParkKind::kPollForError, poll), fx_).has_value());

  EXPECT_TRUE(life_
                  .ReportError(kW0, absl::InternalError("boom"), ErrorReporter::kTheTask, kNoReason,
                               1000, fx_)
                  .ok());
  ASSERT_EQ(fx_.propagated.size(), 1u);
  EXPECT_EQ(fx_.propagated[0].first, kW0);
  ASSERT_EQ(fx_.failed_tasks.size(), 1u);
  CarryOut();

  EXPECT_EQ(poll.value().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(poll.value().message(), "error reported by /job:worker/task:0: boom");
  EXPECT_EQ(life_.tasks().Find(kW0)->state, TaskState::kError);
}

TEST_F(TaskLifeTest, AReportedErrorBeyondTheLimitIsCutAndSaysSo) {
  RegisterBoth();
  ASSERT_TRUE(life_
                  .ReportError(kW0, absl::InternalError("abcdefgh"), ErrorReporter::kTheTask,
                               kNoReason, 4, fx_)
                  .ok());
  CarryOut();

  EXPECT_EQ(life_.first_error().message(),
            "error reported by /job:worker/task:0: abcd [4 more bytes cut by the coordinator]");
}

TEST_F(TaskLifeTest, ATaskThatSentNoHeartbeatIsInErrorForAHeartbeatTimeout) {
  RegisterBoth();
  life_.FailStale({kW0}, clock_.Now() + absl::Hours(2), fx_);
  CarryOut();

  const TaskRecord& task = *life_.tasks().Find(kW0);
  EXPECT_EQ(task.state, TaskState::kError);
  EXPECT_EQ(task.reason, FailureReason::kHeartbeatTimeout);
  EXPECT_EQ(life_.tasks().Info(task).reason, FailureReason::kHeartbeatTimeout);
  EXPECT_EQ(life_.tasks().Find(kW1)->reason, FailureReason::kUnspecified);  // not in error
}

TEST_F(TaskLifeTest, AReportKeepsTheReasonItsReporterGave) {
  RegisterBoth();
  ASSERT_TRUE(life_
                  .ReportError(kW0, absl::UnavailableError("worker 0 failed: exited with code 1"),
                               ErrorReporter::kTheTask, FailureReason::kWorkloadExit, 1000, fx_)
                  .ok());
  CarryOut();

  EXPECT_EQ(life_.tasks().Find(kW0)->reason, FailureReason::kWorkloadExit);
  EXPECT_EQ(life_.tasks().Info(*life_.tasks().Find(kW0)).reason, FailureReason::kWorkloadExit);
}

TEST_F(TaskLifeTest, AReportThatNamesNoReasonIsAReportedError) {
  RegisterBoth();
  ASSERT_TRUE(life_
                  .ReportError(kW0, absl::InternalError("boom"), ErrorReporter::kTheTask, kNoReason,
                               1000, fx_)
                  .ok());
  CarryOut();

  EXPECT_EQ(life_.tasks().Find(kW0)->reason, FailureReason::kReportedError);
}

// What jaxlib's GPU client reports when its execution watchdog fires (errors.cc cites where).
TEST_F(TaskLifeTest, JaxlibsReportOfAGpuExecutionThatNeverFinishedIsAHang) {
  RegisterBoth();
  ASSERT_TRUE(life_
                  .ReportError(kW0,
                               absl::DeadlineExceededError(
                                   "[0] XLA GPU execution `jit_train_step` failed to finish in 5m"),
                               ErrorReporter::kTheTask, kNoReason, 1000, fx_)
                  .ok());
  // The same words under another code, or with a reason given, are not jaxlib's watchdog.
  ASSERT_TRUE(life_
                  .ReportError(kW1,
                               absl::InternalError(
                                   "[0] XLA GPU execution `jit_train_step` failed to finish in 5m"),
                               ErrorReporter::kTheTask, kNoReason, 1000, fx_)
                  .ok());
  CarryOut();

  EXPECT_EQ(life_.tasks().Find(kW0)->reason, FailureReason::kHang);
  EXPECT_EQ(life_.tasks().Find(kW1)->reason, FailureReason::kReportedError);
  EXPECT_EQ(ReportedErrorReason(absl::DeadlineExceededError("the step failed to finish in 5m")),
            FailureReason::kReportedError);
}

TEST_F(TaskLifeTest, ATaskThatCameBackWithANewIncarnationIsInErrorAsRestarted) {
  RegisterBoth();
  StatusResult again;
  std::optional<absl::Status> answer =
      life_.Register(kW0, 2, Call(kW0, ParkKind::kRegister, again), fx_);
  CarryOut();

  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(life_.tasks().Find(kW0)->reason, FailureReason::kTaskRestarted);

  // So is one whose heartbeat names another incarnation.
  EXPECT_EQ(life_.HeartbeatOfAnotherIncarnation(kW1, 5, fx_).code(), absl::StatusCode::kAborted);
  CarryOut();
  EXPECT_EQ(life_.tasks().Find(kW1)->reason, FailureReason::kTaskRestarted);
}

TEST_F(TaskLifeTest, ATaskMissingWhenTheShutdownBarrierTimesOutIsInErrorAsSuch) {
  RegisterBoth();
  StatusResult first;
  EXPECT_FALSE(life_.Shutdown(kW0, Call(kW0, ParkKind::kShutdown, first), fx_).has_value());
  CarryOut();
  life_.ShutdownTimedOut(fx_);
  CarryOut();

  EXPECT_EQ(first.value().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(life_.tasks().Find(kW1)->state, TaskState::kError);
  EXPECT_EQ(life_.tasks().Find(kW1)->reason, FailureReason::kShutdownTimeout);
}

TEST_F(TaskLifeTest, TheShutdownBarrierPassesWhenEveryWorkloadTaskArrivesAndDisconnectsThem) {
  RegisterBoth();
  StatusResult first;
  StatusResult second;
  EXPECT_FALSE(life_.Shutdown(kW0, Call(kW0, ParkKind::kShutdown, first), fx_).has_value());
  EXPECT_FALSE(life_.Shutdown(kW1, Call(kW1, ParkKind::kShutdown, second), fx_).has_value());
  CarryOut();

  EXPECT_TRUE(first.value().ok());
  EXPECT_TRUE(second.value().ok());
  EXPECT_EQ(life_.tasks().Find(kW0)->state, TaskState::kDisconnected);
}

TEST_F(TaskLifeTest, TheJournalHearsEachChangeOnceInOrder) {
  RecordingJournal journal;
  RegisterBoth();
  life_.Journal(&journal);
  EXPECT_EQ(journal.records,
            (std::vector<std::string>{
                "task /job:worker/task:0 connected", "task /job:worker/task:1 connected",
                "register barrier state 2", "register barrier +/job:worker/task:0",
                "register barrier +/job:worker/task:1", "register barrier -/job:worker/task:0",
                "register barrier -/job:worker/task:1"}));

  journal.records.clear();
  life_.Journal(&journal);
  EXPECT_TRUE(journal.records.empty());

  ASSERT_TRUE(life_
                  .ReportError(kW0, absl::InternalError("boom"), ErrorReporter::kTheTask, kNoReason,
                               1000, fx_)
                  .ok());
  CarryOut();
  life_.Journal(nullptr);  // not journaling: the changes are taken all the same
  life_.Journal(&journal);
  EXPECT_TRUE(journal.records.empty());
}

TEST_F(TaskLifeTest, ARestoredStateIsNoChangeToRecord) {
  RegisterBoth();
  DurableState saved;
  life_.Capture(&saved);

  TaskLife restored = NewLife([] {});
  ASSERT_TRUE(restored.Restore(saved, clock_.Now()).ok());
  RecordingJournal journal;
  restored.Journal(&journal);

  EXPECT_TRUE(journal.records.empty());
  EXPECT_EQ(restored.tasks().Find(kW1)->state, TaskState::kConnected);
  EXPECT_TRUE(restored.Registered());
}

TEST_F(TaskLifeTest, ARestoredTaskKeepsTheReasonOfItsError) {
  RegisterBoth();
  ASSERT_TRUE(life_
                  .ReportError(kW0, absl::InternalError("GPU 0 is unhealthy"),
                               ErrorReporter::kTheTask, FailureReason::kGpuFault, 1000, fx_)
                  .ok());
  CarryOut();
  DurableState saved;
  life_.Capture(&saved);
  ASSERT_EQ(saved.tasks.front().reason, FailureReason::kGpuFault);

  TaskLife restored = NewLife([] {});
  ASSERT_TRUE(restored.Restore(saved, clock_.Now()).ok());

  EXPECT_EQ(restored.tasks().Find(kW0)->state, TaskState::kError);
  EXPECT_EQ(restored.tasks().Find(kW0)->reason, FailureReason::kGpuFault);
}

}  // namespace
}  // namespace task_life_test
}  // namespace cohort
