// The startup policy (PlanStartup) as a table: the gang's pods and the job's objects -> the
// workers made, Running, the startup deadline, and the Ready condition's words.
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller::startup_test {
namespace {

using Given = std::function<void(api::CoordinatedJob&, Observed&, planning::ChildrenState&)>;

struct StartupCase {
  const char* name;
  std::string phase_before;
  Given given;
  std::vector<std::string> created;
  std::string phase;  // after
  std::vector<std::string> events;
  bool ready;
  std::string ready_message;   // part of the Ready condition's message
  std::string failed_message;  // part of the Failed condition's message; "" no failure
  std::string restarting;      // the Restarting condition's reason after
  std::optional<absl::Duration> requeue;
};

Given Pods(const std::vector<ObservedPod>& pods) {
  return [pods](api::CoordinatedJob&, Observed& o, planning::ChildrenState&) { o.pods = pods; };
}
Given Then(const Given& first, const Given& second) {
  return [first, second](api::CoordinatedJob& job, Observed& o, planning::ChildrenState& c) {
    first(job, o, c);
    second(job, o, c);
  };
}
// failurePolicy.startupDeadlineSeconds, the gang having started a minute ago.
Given StartupDeadline(int seconds) {
  return [seconds](api::CoordinatedJob& job, Observed&, planning::ChildrenState&) {
    job.spec.failure_policy.startup_deadline_seconds = seconds;
    job.status.gang_start_time = kNow - absl::Minutes(1);
  };
}
ObservedPod Unschedulable(int index) {
  ObservedPod p = Worker(index, 0, "Pending");
  p.unschedulable = "0/3 nodes are available: 3 Insufficient cpu.";
  return p;
}
const std::vector<std::string> kAllWorkers = {"Pod/train-worker-0", "Pod/train-worker-1",
                                              "Pod/train-worker-2"};

// clang-format off: a row per case, its fields in the order of the struct.
const StartupCase kCases[] = {
    {"WorkersAreMadeOnceTheCoordinatorIsReady",
     phase::kPending,
     Pods({Coordinator()}),
     kAllWorkers,
     phase::kPending,
     {},
     false,
     "0 of 3 workers are ready",
     "",
     "",
     std::nullopt},
    {"OnlyMissingWorkersAreMade",
     phase::kPending,
     Pods({Coordinator(), Worker(1)}),
     {"Pod/train-worker-0", "Pod/train-worker-2"},
     phase::kPending,
     {},
     false,
     "1 of 3 workers are ready",
     "",
     "",
     std::nullopt},
    {"NoWorkerBeforeTheCoordinatorIsReady",
     phase::kPending,
     Pods({Coordinator(0, false)}),
     {},
     phase::kPending,
     {},
     false,
     "waiting for the coordinator pod to be ready",
     "",
     "",
     std::nullopt},
    {"TheJobWaitsForItsNetworkPolicy",
     phase::kPending,
     [](api::CoordinatedJob&, Observed&, planning::ChildrenState& c) { c.policy_in_place = false; },
     {},
     phase::kPending,
     {},
     false,
     "waiting for the NetworkPolicy train-isolation",
     "",
     "",
     std::nullopt},
    {"TheJobWaitsForCertManager",
     phase::kPending,
     [](api::CoordinatedJob&, Observed&, planning::ChildrenState& c) {
       c.certificates_ready = false;
     },
     {},
     phase::kPending,
     {},
     false,
     "waiting for cert-manager to issue Secrets train-coordinator-tls and train-client-tls",
     "",
     "",
     std::nullopt},
    {"AllWorkersRunningMakeTheGangRunning",
     phase::kPending,
     Pods({Coordinator(), Worker(0), Worker(1), Worker(2)}),
     {},
     phase::kRunning,
     {"Running"},
     true,
     "all 3 workers are ready",
     "",
     "",
     std::nullopt},
    {"ARestartedGangRunningHasRecovered",
     phase::kRestarting,
     Then(Pods({Coordinator(1), Worker(0, 1), Worker(1, 1), Worker(2, 1)}),
          [](api::CoordinatedJob& job, Observed&, planning::ChildrenState&) {
            job.status.restarts = 1;
          }),
     {},
     phase::kRunning,
     {"Running"},
     true,
     "all 3 workers are ready",
     "",
     "Recovered",
     std::nullopt},
    {"AGangPastItsStartupDeadlineFailsSayingWhatItWaitedFor",
     phase::kPending,
     Then(Pods({Coordinator(), Worker(0), Unschedulable(1)}), StartupDeadline(30)),
     {"Pod/train-worker-2"},
     phase::kFailed,
     {"StartupDeadlineExceeded"},
     false,
     "the job has finished",
     "gang 0 did not start within 30 s (failurePolicy.startupDeadlineSeconds): worker 1 is "
     "Pending: 0/3 nodes are available: 3 Insufficient cpu.; worker 2 was not made yet",
     "",
     std::nullopt},
    {"AStartupDeadlineAheadIsLookedAtAgainThen",
     phase::kPending,
     Then(Pods({Coordinator(), Worker(0), Unschedulable(1)}), StartupDeadline(90)),
     {"Pod/train-worker-2"},
     phase::kPending,
     {},
     false,
     "1 of 3 workers are ready",
     "",
     "",
     absl::Seconds(30)},
    {"ARunningGangHasNoStartupDeadline",
     phase::kRunning,
     Then(Pods({Coordinator(), Worker(0), Worker(1), Worker(2)}), StartupDeadline(30)),
     {},
     phase::kRunning,
     {},
     true,
     "all 3 workers are ready",
     "",
     "",
     std::nullopt},
};
// clang-format on

void PrintTo(const StartupCase& c, std::ostream* os) { *os << c.name; }

class StartupTest : public ::testing::TestWithParam<StartupCase> {};

TEST_P(StartupTest, Decides) {
  const StartupCase& c = GetParam();
  api::CoordinatedJob job = Job(3, c.phase_before);
  Observed o = Everything({});
  planning::ChildrenState children;
  c.given(job, o, children);
  const PolicyOutcome out = RunPolicy(job, o, [&children](planning::Planner& P) {
    const planning::JobPods pods = planning::SortPods(P, /*with_driver=*/false);
    planning::PlanStartup(P, Settings(), pods, planning::CountGang(P, pods), children);
    return false;
  });
  EXPECT_EQ(Names(out.plan.create), c.created);
  EXPECT_EQ(out.plan.status.phase, c.phase);
  EXPECT_EQ(EventReasons(out.plan), c.events);
  const api::Condition* ready = Cond(out.plan, kConditionReady);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->status, c.ready ? "True" : "False");
  EXPECT_NE(ready->message.find(c.ready_message), std::string::npos) << ready->message;
  const api::Condition* failed = Cond(out.plan, kConditionFailed);
  EXPECT_EQ(failed != nullptr, !c.failed_message.empty());
  if (failed) {
    EXPECT_EQ(failed->message, c.failed_message);
  }
  EXPECT_EQ(ReasonOf(out.plan, kConditionRestarting), c.restarting);
  EXPECT_EQ(out.plan.requeue_after, c.requeue);
}

INSTANTIATE_TEST_SUITE_P(Table, StartupTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::controller::startup_test
