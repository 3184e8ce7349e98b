// The spec-change policy (PlanSpecChange) as a table: the spec each pod of the gang was made
// from -> whether a new gang starts from the job's spec (uncounted).
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller::spec_change_test {
namespace {

// A pod of the job "train" made from the job's spec as it is now ("now": the test puts in its
// hash), from an older one ("old"), or before operators marked pods ("").
ObservedPod Made(ObservedPod pod, const std::string& spec) {
  pod.spec_hash = spec == "old" ? "0123456789abcdef" : spec;
  return pod;
}

struct SpecChangeCase {
  const char* name;
  std::vector<ObservedPod> pods;
  bool restarts;
};

// clang-format off: a row per case, its fields in the order of the struct.
const SpecChangeCase kCases[] = {
    {"PodsOfTheSpecAsItIsGoOn",
     {Made(Coordinator(), "now"), Made(Worker(0), "now"), Made(Worker(1), "now")},
     false},
    {"PodsMadeBeforeOperatorsMarkedThemAreLeftAlone",
     {Made(Coordinator(), ""), Made(Worker(0), ""), Made(Worker(2), "now")},
     false},
    {"AWorkerOfAnOlderSpecStartsANewGang",
     {Made(Coordinator(), "now"), Made(Worker(0), "now"), Made(Worker(1), "old")},
     true},
    {"ACoordinatorOfAnOlderSpecStartsANewGang",
     {Made(Coordinator(), "old"), Made(Worker(0), "now")},
     true},
    {"AFinishedWorkerOfAnOlderSpecCountsToo",
     {Made(Coordinator(), "now"), Made(Exited(2, 0), "old")},
     true},
    {"AWorkerPastTheReplicasMeansTheGangShrank",
     {Made(Coordinator(), "now"), Made(Worker(3), "now")},
     true},
    {"AnEarlierGangsPodIsALeftoverNotAChange",
     {Made(Coordinator(), "now"), Made(Worker(1, /*restart=*/-1), "old"),
      Made(Worker(4, /*restart=*/-1), "now")},
     false},
};
// clang-format on

void PrintTo(const SpecChangeCase& c, std::ostream* os) { *os << c.name; }

class SpecChangeTest : public ::testing::TestWithParam<SpecChangeCase> {};

TEST_P(SpecChangeTest, Decides) {
  const SpecChangeCase& c = GetParam();
  const api::CoordinatedJob job = Job(3, phase::kRunning);
  std::vector<ObservedPod> pods = c.pods;
  for (ObservedPod& p : pods) {
    if (p.spec_hash == "now") p.spec_hash = SpecHash(job);
  }
  const PolicyOutcome out = RunPolicy(job, Everything(pods), [](planning::Planner& P) {
    return planning::PlanSpecChange(P, planning::SortPods(P, /*with_driver=*/false));
  });
  EXPECT_EQ(out.decided, c.restarts);
  EXPECT_EQ(out.plan.status.phase, c.restarts ? phase::kRestarting : phase::kRunning);
  EXPECT_EQ(ReasonOf(out.plan, kConditionRestarting), c.restarts ? "SpecChanged" : "");
  // Not a failure: status.restarts (which maxRestarts bounds) stays.
  EXPECT_EQ(out.plan.status.restarts, 0);
  EXPECT_EQ(out.plan.status.uncounted_restarts, c.restarts ? 1 : 0);
  if (c.restarts) {
    EXPECT_EQ(out.plan.delete_pods.size(), c.pods.size());  // the whole gang goes
  }
}

INSTANTIATE_TEST_SUITE_P(Table, SpecChangeTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::controller::spec_change_test
