// The lifecycle policy (PlanLifecycle) as a table: a job's phase and spec, and what exists ->
// whether it decided the plan, the phase, Events, pods deleted, when to look again.
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tests/operator/plan/plan_fixtures.h"

namespace cohort::controller::lifecycle_test {
namespace {

struct LifecycleCase {
  const char* name;
  std::string phase_before;
  std::function<void(api::CoordinatedJob&)> spec;  // edits to the job "train" of 3 workers
  std::vector<ObservedPod> pods;
  // What the policy did:
  bool decided;
  std::string phase;
  std::vector<std::string> events;
  std::vector<std::string> deleted;
  std::optional<absl::Duration> requeue;
  bool delete_job;
};

void Nothing(api::CoordinatedJob&) {}
void Completed(api::CoordinatedJob& job) { job.status.completion_time = kNow - absl::Seconds(20); }
std::function<void(api::CoordinatedJob&)> Ttl(int seconds) {
  return [seconds](api::CoordinatedJob& job) {
    Completed(job);
    job.spec.ttl_seconds_after_finished = seconds;
  };
}
void Suspend(api::CoordinatedJob& job) { job.spec.suspend = true; }
// Job() started a minute ago.
std::function<void(api::CoordinatedJob&)> Deadline(int seconds) {
  return [seconds](api::CoordinatedJob& job) { job.spec.active_deadline_seconds = seconds; };
}

// clang-format off: a row per case, its fields in the order of the struct.
const LifecycleCase kCases[] = {
    {"ANewJobIsPendingFromNow",
     "",
     Nothing,
     {},
     false,
     phase::kPending,
     {"Pending"},
     {},
     std::nullopt,
     false},
    {"AJobUnderWayGoesOnUnchanged",
     phase::kRunning,
     Nothing,
     {Coordinator(), Worker(0)},
     false,
     phase::kRunning,
     {},
     {},
     std::nullopt,
     false},
    {"AFinishedJobDeletesWhatStillRunsButItsCoordinatorWhileAWorkloadRuns",
     phase::kSucceeded,
     Completed,
     {Coordinator(), Exited(0, 0), Worker(1)},
     true,
     phase::kSucceeded,
     {},
     {"train-worker-1"},
     std::nullopt,
     false},
    {"AFinishedJobsCoordinatorGoesOnceNoWorkloadRuns",
     phase::kFailed,
     Completed,
     {Coordinator(), Exited(0, 1), Exited(1, 0)},
     true,
     phase::kFailed,
     {},
     {"train-coordinator"},
     std::nullopt,
     false},
    {"AFinishedJobIsLookedAtAgainWhenItsTtlEnds",
     phase::kSucceeded,
     Ttl(60),
     {},
     true,
     phase::kSucceeded,
     {},
     {},
     absl::Seconds(40),
     false},
    {"AFinishedJobPastItsTtlIsDeleted",
     phase::kSucceeded,
     Ttl(15),
     {},
     true,
     phase::kSucceeded,
     {},
     {},
     std::nullopt,
     true},
    {"SuspendingDeletesEveryPodFinishedOrNot",
     phase::kRunning,
     Suspend,
     {Coordinator(), Worker(0), Exited(1, 0)},
     true,
     phase::kSuspended,
     {"Suspended"},
     {"train-coordinator", "train-worker-0", "train-worker-1"},
     std::nullopt,
     false},
    {"ASuspendedJobStaysSuspendedWithoutAnotherEvent",
     phase::kSuspended,
     Suspend,
     {},
     true,
     phase::kSuspended,
     {},
     {},
     std::nullopt,
     false},
    {"ResumingMakesTheJobPendingAgain",
     phase::kSuspended,
     Nothing,
     {},
     false,
     phase::kPending,
     {"Resumed"},
     {},
     std::nullopt,
     false},
    {"APassedDeadlineFailsTheJob",
     phase::kRunning,
     Deadline(30),
     {Coordinator(), Worker(0)},
     true,
     phase::kFailed,
     {"DeadlineExceeded"},
     {"train-worker-0"},
     std::nullopt,
     false},
    {"ADeadlineAheadIsLookedAtAgainThen",
     phase::kRunning,
     Deadline(90),
     {},
     false,
     phase::kRunning,
     {},
     {},
     absl::Seconds(30),
     false},
};
// clang-format on

void PrintTo(const LifecycleCase& c, std::ostream* os) { *os << c.name; }

class LifecycleTest : public ::testing::TestWithParam<LifecycleCase> {};

TEST_P(LifecycleTest, Decides) {
  const LifecycleCase& c = GetParam();
  api::CoordinatedJob job = Job(3, c.phase_before);
  c.spec(job);
  const PolicyOutcome out = RunPolicy(job, Everything(c.pods), [](planning::Planner& P) {
    return planning::PlanLifecycle(P, planning::Resume{});
  });
  EXPECT_EQ(out.decided, c.decided);
  EXPECT_EQ(out.plan.status.phase, c.phase);
  EXPECT_EQ(EventReasons(out.plan), c.events);
  EXPECT_EQ(Sorted(out.plan.delete_pods), Sorted(c.deleted));
  EXPECT_EQ(out.plan.requeue_after, c.requeue);
  EXPECT_EQ(out.plan.delete_job, c.delete_job);
  // Every job that goes on has its clocks and its status's totals.
  EXPECT_EQ(out.plan.status.tasks.total, 3);
  EXPECT_EQ(out.plan.status.observed_generation, 2);
  if (!c.decided) {
    const absl::Time started = c.phase_before.empty() || c.phase_before == phase::kSuspended
                                   ? kNow
                                   : kNow - absl::Minutes(1);
    EXPECT_EQ(out.plan.status.start_time, started);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, LifecycleTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::controller::lifecycle_test
