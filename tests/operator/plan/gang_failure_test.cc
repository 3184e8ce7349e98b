// The gang-failure policy (PlanGangFailure) as a table: what the gang's pods and its
// coordinator show -> nothing, a wait for the failure to settle, a gang restart (counted or
// not), single workers restarted, or the job failed; and why.
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller::gang_failure_test {
namespace {

struct FailureCase {
  const char* name;
  // Edits to a running gang of 3 (coordinator and workers running, no state volume), whose
  // failure, if any, was first seen 2 s ago.
  std::function<void(api::CoordinatedJob&, Observed&)> given;
  bool decided;
  std::string phase;    // after
  std::string reason;   // of the Restarting or Failed condition; "" neither
  std::string message;  // part of that condition's message
  int restarts;         // status.restarts after (the gang's, counted)
  int uncounted;        // status.uncountedRestarts after
  int worker_restarts;  // status.workerRestarts after
};

absl::Time Ago(double seconds) { return kNow - absl::Seconds(seconds); }

// The workers as given (those not given running), with the coordinator `coordinator`.
std::function<void(api::CoordinatedJob&, Observed&)> Pods(
    const std::vector<ObservedPod>& given,
    const std::optional<ObservedPod>& coordinator = Coordinator()) {
  return [given, coordinator](api::CoordinatedJob&, Observed& o) {
    o.pods.clear();
    if (coordinator) o.pods.push_back(*coordinator);
    for (int i = 0; i < 3; ++i) {
      bool listed = false;
      for (const ObservedPod& p : given) listed = listed || p.index == i;
      if (!listed) o.pods.push_back(Worker(i));
    }
    for (const ObservedPod& p : given) {
      if (p.role != "missing") o.pods.push_back(p);
    }
  };
}
// No pod for worker `index`.
ObservedPod Missing(int index) {
  ObservedPod p;
  p.index = index;
  p.role = "missing";  // listed, so no running worker stands in for it, but not observed
  return p;
}
// Worker `index`'s pod, deleted at `at` and still stopping.
ObservedPod Deleting(int index, absl::Time at) {
  ObservedPod p = Worker(index);
  p.terminating = true;
  p.deletion_requested_at = at;
  return p;
}
ObservedPod CoordinatorExited(int code, absl::Time at) {
  ObservedPod p = Coordinator();
  p.phase = "Failed";
  p.ready = false;
  p.exit_code = code;
  p.finished_at = at;
  return p;
}
std::function<void(api::CoordinatedJob&, Observed&)> Then(
    const std::function<void(api::CoordinatedJob&, Observed&)>& first,
    const std::function<void(api::CoordinatedJob&, Observed&)>& second) {
  return [first, second](api::CoordinatedJob& job, Observed& o) {
    first(job, o);
    second(job, o);
  };
}
std::function<void(api::CoordinatedJob&, Observed&)> Rule(api::FailureAction action,
                                                          const std::vector<int>& codes) {
  return [action, codes](api::CoordinatedJob& job, Observed&) {
    api::FailureRule rule;
    rule.action = action;
    rule.on_exit_codes = codes;
    job.spec.failure_policy.rules.push_back(rule);
  };
}
std::function<void(api::CoordinatedJob&, Observed&)> ReasonRule(api::FailureAction action,
                                                                const std::string& reason) {
  return [action, reason](api::CoordinatedJob& job, Observed&) {
    api::FailureRule rule;
    rule.action = action;
    rule.on_reasons = {reason};
    job.spec.failure_policy.rules.push_back(rule);
  };
}
std::function<void(api::CoordinatedJob&, Observed&)> TaskError(bool auxiliary, int code,
                                                               const std::string& message,
                                                               FailureReason reason) {
  return [=](api::CoordinatedJob&, Observed& o) {
    o.coordinator = CoordinatorView{};
    o.coordinator->errors.push_back({"/job:worker/task:1", auxiliary, code, message, reason});
  };
}
std::function<void(api::CoordinatedJob&, Observed&)> Restarted(int gang, int workers) {
  return [=](api::CoordinatedJob& job, Observed& o) {
    job.status.restarts = gang;
    job.status.worker_restarts = workers;
    for (ObservedPod& p : o.pods) p.restart = gang;
  };
}
// The coordinator's container restarted in place once, `seconds` ago (EmptyDir state).
std::function<void(api::CoordinatedJob&, Observed&)> CoordinatorRestartedInPlace(double seconds) {
  return [seconds](api::CoordinatedJob& job, Observed& o) {
    job = Known(WithState(job, api::StateVolume::kEmptyDir));
    for (ObservedPod& p : o.pods) {
      if (p.role == "coordinator") p = KnownCoordinator(1, Ago(seconds));
    }
  };
}
const auto kNothing = [](api::CoordinatedJob&, Observed&) {};

// clang-format off: a row per case, its fields in the order of the struct.
const FailureCase kCases[] = {
    {"NoFailureDecidesNothing", kNothing, false, phase::kRunning, "", "", 0, 0, 0},
    {"AFailureWaitsToSettle",
     Then(Pods({Exited(2, 137)}),
          [](api::CoordinatedJob&, Observed& o) { o.failure_first_seen.reset(); }),
     true, phase::kRunning, "", "", 0, 0, 0},
    {"ARetryableExitRestartsTheGang", Pods({Exited(2, 137)}), true, phase::kRestarting,
     "WorkerFailed", "gang restart 1 of at most 3: worker 2 exited with code 137 (signal 9)", 1, 0,
     0},
    {"APermanentExitFailsTheJob", Pods({Exited(1, 1)}), true, phase::kFailed, "WorkerFailed",
     "worker 1 exited with code 1, which failurePolicy counts as permanent", 0, 0, 0},
    {"PeersExitingJustAfterAKilledWorkerStillRestart",
     Pods({Exited(2, 137, Ago(5)), Exited(0, 1, Ago(4.5)), Exited(1, 1, Ago(4.2))}), true,
     phase::kRestarting, "WorkerFailed", "worker 2 exited with code 137", 1, 0, 0},
    {"AnExitLongAfterThePermanentOneDoesNotMatter",
     Pods({Exited(1, 1, Ago(10)), Exited(2, 137, Ago(5))}), true, phase::kFailed, "WorkerFailed",
     "worker 1 exited with code 1", 0, 0, 0},
    {"ADeletedWorkerRestartsTheGang", Pods({Missing(2)}), true, phase::kRestarting, "WorkerLost",
     "worker 2 pod train-worker-2 was deleted", 1, 0, 0},
    {"PeersExitingAfterADeletedWorkerStillRestart",
     Pods({Missing(1), Exited(0, 1, Ago(1.5)), Exited(2, 1, Ago(1.2))}), true, phase::kRestarting,
     "WorkerLost", "gang restart 1 of at most 3: worker 1 pod train-worker-1 was deleted", 1, 0, 0},
    {"PeersExitingAfterAWorkerDeletedLongAgoStillRestart",
     Pods({Deleting(1, Ago(10)), Exited(0, 1, Ago(9.5)), Exited(2, 1, Ago(9.2))}), true,
     phase::kRestarting, "WorkerLost", "worker 1 pod train-worker-1 was deleted", 1, 0, 0},
    {"APermanentExitWellBeforeAWorkerWasDeletedStillFailsTheJob",
     Pods({Exited(0, 1, Ago(30)), Missing(1)}), true, phase::kFailed, "WorkerFailed",
     "worker 0 exited with code 1, which failurePolicy counts as permanent", 0, 0, 0},
    {"ATaskInErrorAtTheCoordinatorRestartsTheGang",
     TaskError(false, 14, "sent no heartbeat for 30s", FailureReason::kHeartbeatTimeout), true,
     phase::kRestarting, "TaskError",
     "task /job:worker/task:1 is in error: sent no heartbeat for 30s", 1, 0, 0},
    {"PeersExitingAfterAGpuFaultStillRestart",
     Then(Pods({Exited(0, 1), Exited(2, 1)}),
          TaskError(true, 13, "GPU 0: Xid 79", FailureReason::kGpuFault)),
     true, phase::kRestarting, "TaskError", "the sidecar task /job:worker/task:1 is in error", 0, 1,
     0},
    {"AGpuFaultRestartsTheGangUncounted",
     TaskError(true, 13, "GPU 0: Xid 79", FailureReason::kGpuFault), true, phase::kRestarting,
     "TaskError", "not counted against maxRestarts (a GPU fault", 0, 1, 0},
    {"ARuleOnGpuFaultsCountsTheirRestart",
     Then(TaskError(true, 13, "GPU 0: Xid 79", FailureReason::kGpuFault),
          ReasonRule(api::FailureAction::kRestartGang, "GPUFault")),
     true, phase::kRestarting, "TaskError", "gang restart 1 of at most 3", 1, 0, 0},
    {"AGpuFaultAtMaxRestartsStillRestarts",
     Then(TaskError(true, 13, "GPU 0: Xid 79", FailureReason::kGpuFault), Restarted(3, 0)), true,
     phase::kRestarting, "TaskError", "not counted against maxRestarts", 3, 1, 0},
    {"AHangIsCounted", TaskError(true, 4, "is hung: no progress for 20s", FailureReason::kHang),
     true, phase::kRestarting, "TaskError", "gang restart 1 of at most 3", 1, 0, 0},
    {"ASidecarsReportOfAPermanentExitStillFailsTheJob",
     Then(Pods({Exited(1, 1)}),
          TaskError(true, 14, "workload exited with code 1", FailureReason::kWorkloadExit)),
     true, phase::kFailed, "WorkerFailed", "worker 1 exited with code 1", 0, 0, 0},
    {"RestartsStopAtMaxRestarts", Then(Pods({Exited(2, 137)}), Restarted(3, 0)), true,
     phase::kFailed, "MaxRestartsExceeded", "the gang failed after 3 restarts", 3, 0, 0},
    {"WorkersRestartedAloneCountTowardMaxRestarts", Then(Pods({Exited(2, 137)}), Restarted(2, 1)),
     true, phase::kFailed, "MaxRestartsExceeded", "after 3 restarts (1 of single workers)", 2, 0,
     1},
    {"ALostCoordinatorRestartsTheGang", Pods({}, std::nullopt), true, phase::kRestarting,
     "CoordinatorLost", "the coordinator pod train-coordinator was deleted", 1, 0, 0},
    {"WorkersExitingAfterTheirCoordinatorExitedRestartTheGang",
     Pods({Exited(0, 1, Ago(5)), Exited(1, 1, Ago(5))}, CoordinatorExited(1, Ago(6))), true,
     phase::kRestarting, "CoordinatorLost", "the coordinator exited with code 1", 1, 0, 0},
    {"APermanentExitWellBeforeTheCoordinatorWentAwayStillFailsTheJob",
     Pods({Exited(0, 1, Ago(30))}, CoordinatorExited(1, Ago(5))), true, phase::kFailed,
     "WorkerFailed", "worker 0 exited with code 1", 0, 0, 0},
    {"AnExitSoonAfterTheCoordinatorRestartedIsItsDoing",
     Then(Pods({Exited(0, 1, Ago(5))}), CoordinatorRestartedInPlace(10)), true, phase::kRestarting,
     "CoordinatorRestarted", "worker 0 exited with code 1 after the coordinator restarted", 1, 0,
     0},
    {"AnExitLongAfterACoordinatorRestartIsTheWorkersOwn",
     Then(Pods({Exited(0, 1, Ago(5))}), CoordinatorRestartedInPlace(100)), true, phase::kFailed,
     "WorkerFailed", "worker 0 exited with code 1", 0, 0, 0},
    {"AFailJobRuleFailsTheJob",
     Then(Pods({Exited(2, 137)}), Rule(api::FailureAction::kFailJob, {137})), true, phase::kFailed,
     "FailureRule", "failurePolicy.rules[0]", 0, 0, 0},
    {"ARestartGangUncountedRuleRestartsWithoutCounting",
     Then(Pods({Exited(1, 3)}), Rule(api::FailureAction::kRestartGangUncounted, {3})), true,
     phase::kRestarting, "WorkerFailed", "not counted against maxRestarts", 0, 1, 0},
    {"ARestartGangRuleRestartsAPermanentExit",
     Then(Pods({Exited(1, 1)}), Rule(api::FailureAction::kRestartGang, {1})), true,
     phase::kRestarting, "WorkerFailed", "gang restart 1 of at most 3", 1, 0, 0},
    {"ARestartWorkerRuleRestartsTheFailedWorkerAlone",
     Then(Pods({Exited(1, 3)}), Rule(api::FailureAction::kRestartWorker, {3})), true,
     phase::kRunning, "", "", 0, 0, 1},
    {"ARestartWorkerRuleRestartsTheGangWhenTheCoordinatorIsLost",
     Then(Pods({Exited(1, 3)}, std::nullopt), Rule(api::FailureAction::kRestartWorker, {3})), true,
     phase::kRestarting, "WorkerFailed", "worker 1 exited with code 3", 1, 0, 0},
};
// clang-format on

void PrintTo(const FailureCase& c, std::ostream* os) { *os << c.name; }

class GangFailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(GangFailureTest, Decides) {
  const FailureCase& c = GetParam();
  api::CoordinatedJob job = Job(3, phase::kRunning);
  Observed o = Everything({Coordinator(), Worker(0), Worker(1), Worker(2)});
  o.failure_first_seen = Ago(2);
  c.given(job, o);
  const PolicyOutcome out = RunPolicy(job, o, [](planning::Planner& P) {
    planning::JobPods pods = planning::SortPods(P, /*with_driver=*/false);
    const planning::WorkerRestarts restarts = planning::FollowWorkerRestarts(P, pods.workers);
    const planning::GangCounts counts = planning::CountGang(P, pods);
    const bool started = P.st().phase == phase::kRunning || counts.created > 0;
    const planning::CoordinatorFate fate =
        planning::FollowCoordinator(P, pods.coordinator, started);
    return planning::PlanGangFailure(P, Settings(), pods, restarts, fate);
  });
  EXPECT_EQ(out.decided, c.decided);
  EXPECT_EQ(out.plan.status.phase, c.phase);
  const char* type = c.phase == phase::kFailed ? kConditionFailed : kConditionRestarting;
  EXPECT_EQ(ReasonOf(out.plan, type), c.reason);
  if (!c.message.empty()) {
    const api::Condition* condition = Cond(out.plan, type);
    ASSERT_NE(condition, nullptr);
    EXPECT_NE(condition->message.find(c.message), std::string::npos) << condition->message;
  }
  EXPECT_EQ(out.plan.status.restarts, c.restarts);
  EXPECT_EQ(out.plan.status.uncounted_restarts, c.uncounted);
  EXPECT_EQ(out.plan.status.worker_restarts, c.worker_restarts);
  // A failure is remembered (for the next plan's settling) unless single workers restarting
  // handled it; a settling one is looked at again once it has settled.
  const bool alone = c.worker_restarts > job.status.worker_restarts;
  EXPECT_EQ(out.plan.failure_seen, c.decided && !alone);
  if (c.decided && c.phase == phase::kRunning && !alone) {
    EXPECT_EQ(out.plan.requeue_after, Settings().failure_settle);
  }
  if (alone) {
    EXPECT_EQ(out.plan.delete_pods, (std::vector<std::string>{"train-worker-1"}));
  }
}

INSTANTIATE_TEST_SUITE_P(Table, GangFailureTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::controller::gang_failure_test
