// The success policy (PlanSuccess) as a table: successPolicy and the workers' exits -> whether
// the job succeeded, and why.
#include <ostream>
#include <string>
#include <vector>

#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller::success_test {
namespace {

struct SuccessCase {
  const char* name;
  api::SuccessPolicy policy;
  std::vector<ObservedPod> workers;  // of a job of 3, with its coordinator running
  bool decided;
  std::string reason;  // of the Succeeded condition
};

// clang-format off: a row per case, its fields in the order of the struct.
const SuccessCase kCases[] = {
    {"EveryWorkerExitingZeroSucceeds",
     api::SuccessPolicy::kAllWorkers,
     {Exited(0, 0), Exited(1, 0), Exited(2, 0)},
     true,
     "AllWorkersSucceeded"},
    {"TwoOfThreeIsNotYetSuccess",
     api::SuccessPolicy::kAllWorkers,
     {Exited(0, 0), Exited(1, 0), Worker(2)},
     false,
     ""},
    {"AFailedWorkerIsNoSuccessEvenWhenTheOthersExitedZero",
     api::SuccessPolicy::kAllWorkers,
     {Exited(0, 0), Exited(1, 0), Exited(2, 1)},
     false,
     ""},
    {"Worker0ExitingZeroIsEnoughUnderWorker0",
     api::SuccessPolicy::kWorker0,
     {Exited(0, 0), Worker(1), Worker(2)},
     true,
     "Worker0Succeeded"},
    {"Worker0ExitingZeroIsNotEnoughUnderAllWorkers",
     api::SuccessPolicy::kAllWorkers,
     {Exited(0, 0), Worker(1), Worker(2)},
     false,
     ""},
    {"AnotherWorkerExitingZeroIsNotEnoughUnderWorker0",
     api::SuccessPolicy::kWorker0,
     {Worker(0), Exited(1, 0), Worker(2)},
     false,
     ""},
    {"Worker0FailingIsNoSuccessUnderWorker0",
     api::SuccessPolicy::kWorker0,
     {Exited(0, 2), Worker(1), Worker(2)},
     false,
     ""},
    {"NoWorkerYetIsNoSuccess", api::SuccessPolicy::kWorker0, {}, false, ""},
};
// clang-format on

void PrintTo(const SuccessCase& c, std::ostream* os) { *os << c.name; }

class SuccessTest : public ::testing::TestWithParam<SuccessCase> {};

TEST_P(SuccessTest, Decides) {
  const SuccessCase& c = GetParam();
  api::CoordinatedJob job = Job(3, phase::kRunning);
  job.spec.success_policy = c.policy;
  std::vector<ObservedPod> pods = c.workers;
  pods.push_back(Coordinator());
  const PolicyOutcome out = RunPolicy(job, Everything(pods), [](planning::Planner& P) {
    const planning::JobPods sorted = planning::SortPods(P, /*with_driver=*/false);
    return planning::PlanSuccess(P, sorted, planning::CountGang(P, sorted));
  });
  EXPECT_EQ(out.decided, c.decided);
  EXPECT_EQ(out.plan.status.phase, c.decided ? phase::kSucceeded : phase::kRunning);
  EXPECT_EQ(ReasonOf(out.plan, kConditionSucceeded), c.reason);
  if (c.decided) {
    EXPECT_EQ(out.plan.status.completion_time, kNow);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, SuccessTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::controller::success_test
