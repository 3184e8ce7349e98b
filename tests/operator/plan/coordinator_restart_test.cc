// The coordinator-restart policy (FollowCoordinator), shared by gangs and the task runtime, as
// a table: the state volume, the coordinator's pod and what the status remembers of it ->
// restarts counted, a pod made again, or a loss and its words.
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller::coordinator_restart_test {
namespace {

struct CoordinatorCase {
  const char* name;
  api::StateVolume volume;
  std::function<void(api::CoordinatedJob&, Observed&)> given;  // pods, claim, status
  bool started;
  // Its fate:
  bool recreate;
  bool lost;
  std::string loss;  // {claim}: the claim's name
  int counted;       // status.coordinatorRestarts after
  std::vector<std::string> events;
  std::optional<absl::Time> went_away;
};

ObservedPod Ended(ObservedPod pod, int code, const std::string& reason = "") {
  pod.phase = "Failed";
  pod.ready = false;
  pod.exit_code = code;
  pod.finished_at = kNow - absl::Seconds(4);
  pod.reason = reason;
  return pod;
}
ObservedPod Deleted(ObservedPod pod) {
  pod.terminating = true;
  pod.deletion_requested_at = kNow - absl::Seconds(3);
  return pod;
}
// The claim exists (`usable`), or is being deleted.
void Claim(Observed& o, bool usable) {
  o.coordinator_state_claim = true;
  o.coordinator_state_claim_terminating = !usable;
}

const auto kNoPod = [](api::CoordinatedJob&, Observed&) {};

// clang-format off: a row per case, its fields in the order of the struct.
const CoordinatorCase kCases[] = {
    {"ARunningCoordinatorWithoutAVolumeIsNothingToCount",
     api::StateVolume::kNone,
     [](api::CoordinatedJob&, Observed& o) { o.pods = {Coordinator()}; },
     true,
     false,
     false,
     "",
     0,
     {},
     std::nullopt},
    {"WithoutAVolumeAnExitIsALoss",
     api::StateVolume::kNone,
     [](api::CoordinatedJob&, Observed& o) { o.pods = {Ended(Coordinator(), 1)}; },
     true,
     false,
     true,
     "the coordinator exited with code 1",
     0,
     {},
     std::nullopt},
    {"AnExitIsALossBeforeTheJobStartedToo",
     api::StateVolume::kNone,
     [](api::CoordinatedJob&, Observed& o) { o.pods = {Ended(Coordinator(), 2)}; },
     false,
     false,
     true,
     "the coordinator exited with code 2",
     0,
     {},
     std::nullopt},
    {"AMissingPodOfAStartedJobIsALoss",
     api::StateVolume::kNone,
     kNoPod,
     true,
     false,
     true,
     "the coordinator pod train-coordinator was deleted",
     0,
     {},
     std::nullopt},
    {"AMissingPodOfAJobNotStartedIsOneToMake",
     api::StateVolume::kNone,
     kNoPod,
     false,
     false,
     false,
     "",
     0,
     {},
     std::nullopt},
    {"AContainerRestartedInPlaceIsCounted",
     api::StateVolume::kEmptyDir,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job);
       o.pods = {KnownCoordinator(2)};
     },
     true,
     false,
     false,
     "",
     2,
     {"CoordinatorRestarted"},
     kNow - absl::Seconds(5)},
    {"RestartsCountedBeforeAreNotCountedAgain",
     api::StateVolume::kEmptyDir,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job, 2);
       o.pods = {KnownCoordinator(2)};
     },
     true,
     false,
     false,
     "",
     0,
     {},
     kNow - absl::Seconds(5)},
    {"ANewPodsRestartsAreCountedFromZero",
     api::StateVolume::kEmptyDir,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job, 3);
       ObservedPod pod = KnownCoordinator(1);
       pod.uid = "c2";
       o.pods = {pod};
     },
     true,
     false,
     false,
     "",
     1,
     {"CoordinatorRestarted"},
     kNow - absl::Seconds(5)},
    {"AnEvictedCoordinatorInAnEmptyDirIsALoss",
     api::StateVolume::kEmptyDir,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job);
       o.pods = {Ended(KnownCoordinator(), -1, "Evicted")};
     },
     true,
     false,
     true,
     "the coordinator pod train-coordinator failed (Evicted)",
     0,
     {},
     std::nullopt},
    {"ACoordinatorDeletedWithItsStateOnAClaimIsMadeAgainAndCounted",
     api::StateVolume::kPersistentVolumeClaim,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job);
       Claim(o, true);
       o.pods = {Deleted(KnownCoordinator())};
     },
     true,
     true,
     false,
     "",
     1,
     {"CoordinatorRestarted"},
     kNow - absl::Seconds(3)},
    {"ARunningCoordinatorOnAClaimBeingDeletedStays",
     api::StateVolume::kPersistentVolumeClaim,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job);
       Claim(o, false);
       o.pods = {KnownCoordinator()};
     },
     true,
     true,
     false,
     "",
     0,
     {},
     std::nullopt},
    {"ACoordinatorLostWithItsClaimIsALoss",
     api::StateVolume::kPersistentVolumeClaim,
     [](api::CoordinatedJob& job, Observed& o) {
       job = Known(job);
       Claim(o, false);
     },
     true,
     false,
     true,
     "the coordinator pod train-coordinator was deleted and its PersistentVolumeClaim {claim} is "
     "gone",
     0,
     {},
     std::nullopt},
};
// clang-format on

void PrintTo(const CoordinatorCase& c, std::ostream* os) { *os << c.name; }

class CoordinatorRestartTest : public ::testing::TestWithParam<CoordinatorCase> {};

TEST_P(CoordinatorRestartTest, Follows) {
  const CoordinatorCase& c = GetParam();
  api::CoordinatedJob job = WithState(Job(3, phase::kRunning), c.volume);
  Observed o = Everything({});
  c.given(job, o);
  planning::CoordinatorFate fate;
  const PolicyOutcome out = RunPolicy(job, o, [&](planning::Planner& P) {
    fate = planning::FollowCoordinator(P, planning::SortPods(P, false).coordinator, c.started);
    return false;
  });
  EXPECT_EQ(fate.recreate, c.recreate);
  EXPECT_EQ(fate.lost, c.lost);
  EXPECT_EQ(fate.loss, absl::StrReplaceAll(c.loss, {{"{claim}", CoordinatorStateClaimName(job)}}));
  EXPECT_EQ(out.plan.status.coordinator_restarts, c.counted);
  EXPECT_EQ(EventReasons(out.plan), c.events);
  EXPECT_EQ(fate.went_away, c.went_away);
  // A restart is never the gang's: nothing else of the plan changes.
  EXPECT_TRUE(out.plan.delete_pods.empty());
  EXPECT_EQ(out.plan.status.restarts, 0);
}

INSTANTIATE_TEST_SUITE_P(Table, CoordinatorRestartTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::controller::coordinator_restart_test
