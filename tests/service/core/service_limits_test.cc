// The coordinator's limits on what callers can make it hold: barrier ids, open and finished
// barriers, blocking calls that name no task, tasks per job and reported errors. Each limit
// answers with an error that names it, and a refused call changes nothing.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "service/core/service_config.h"
#include "tests/service/core/callback_result.h"
#include "tests/service/core/coordination_service_fixture.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace service_limits_test {
namespace {

using ::cohort::testing::CoordinationServiceTest;
using ::cohort::testing::kW0;
using ::cohort::testing::kW1;
using BarrierResult = ::cohort::testing::ValueResult<int64_t>;
using GetResult = ::cohort::testing::ValueResult<std::string>;

constexpr absl::Duration kTimeout = absl::Seconds(10);

class LimitsTest : public CoordinationServiceTest {
 protected:
  void SetUp() override {}

  void StartWith(BarrierLimits barriers, ParkLimits parked = {}) {
    ServiceConfig config = Config();
    config.barriers = barriers;
    config.parked = parked;
    Start(config);
    RegisterWorkers();
  }

  BarrierResult Arrive(const std::string& id, const TaskName& caller, int64_t counter = 0,
                       std::vector<TaskName> tasks = {kW0, kW1}) {
    BarrierResult result;
    service_->Barrier(id, counter, kTimeout, caller, std::move(tasks), service_->NewWaiterId(),
                      result.Callback());
    return result;
  }

  // Instance `counter` of barrier `id`, over w0 and w1, passed.
  void Pass(const std::string& id, int64_t counter = 0) {
    BarrierResult a = Arrive(id, kW0, counter), b = Arrive(id, kW1, counter);
    ASSERT_TRUE(b.fired());
    ASSERT_TRUE(b.value().ok()) << b.value().status();
  }

  GetResult Get(const std::string& key) {
    GetResult result;
    service_->GetKeyValue(key, service_->NewWaiterId(), std::nullopt, std::nullopt,
                          result.Callback());
    return result;
  }
};

TEST_F(LimitsTest, ABarrierIdOverTheLimitIsRefusedQuotingOnlyItsStartAndStartsNothing) {
  StartWith({.max_id_bytes = 100});
  const std::string id(120 * 1024, 'x');

  BarrierResult refused = Arrive(id, kW0);
  absl::Status cancel = service_->CancelBarrier(id, 0, kW0);

  ASSERT_TRUE(refused.fired());
  const absl::Status& s = refused.value().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "122880 bytes")) << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), "--max-barrier-id-bytes")) << s.message();
  EXPECT_LT(s.message().size(), 300u);
  EXPECT_EQ(cancel.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(service_->OpenBarriers().empty());
  EXPECT_EQ(service_->FinishedBarriersKept(), 0u);
  // An id at the limit is fine.
  Pass(std::string(100, 'y'));
}

TEST_F(LimitsTest, AnIdJustOverASmallLimitIsQuotedWhole) {
  StartWith({.max_id_bytes = 16});
  const std::string id(40, 'z');

  BarrierResult refused = Arrive(id, kW0);

  ASSERT_TRUE(refused.fired());
  EXPECT_EQ(refused.value().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.value().status().message(), "starts \"" + id + "\""))
      << refused.value().status();
}

TEST_F(LimitsTest, FinishedBarriersMustBeKeptForSomeTime) {
  ServiceConfig config = Config();
  config.barriers.max_finished = 0;
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
  config = Config();
  config.barriers.finished_retention = absl::ZeroDuration();
  EXPECT_TRUE(absl::StrContains(ValidateConfig(config).message(), "must be positive"));
}

TEST_F(LimitsTest, BarriersOverTheOpenLimitAreRefusedUntilOnePasses) {
  StartWith({.max_open = 2});
  BarrierResult a = Arrive("a", kW0), b = Arrive("b", kW0);

  BarrierResult c = Arrive("c", kW0);
  absl::Status cancel_ahead = service_->CancelBarrier("d", 0, kW0);

  ASSERT_TRUE(c.fired());
  EXPECT_EQ(c.value().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(c.value().status().message(), "--max-open-barriers"));
  EXPECT_EQ(cancel_ahead.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_->OpenBarriers().size(), 2u);
  EXPECT_FALSE(a.fired());
  EXPECT_FALSE(b.fired());
  // Arrivals at the open ones still count, and a passed one makes room.
  BarrierResult a1 = Arrive("a", kW1);
  ASSERT_TRUE(a1.fired());
  EXPECT_TRUE(a1.value().ok());
  BarrierResult c_again = Arrive("c", kW0);
  EXPECT_FALSE(c_again.fired());
}

TEST_F(LimitsTest, FinishedBarriersOverTheCountAreForgottenOldestFirst) {
  StartWith({.max_finished = 2});
  Pass("a");
  Pass("b");
  // Within the limit a repeated call is answered from the kept result at once.
  BarrierResult repeat = Arrive("a", kW0);
  ASSERT_TRUE(repeat.fired());
  EXPECT_EQ(repeat.value().value(), 0);

  Pass("c");

  EXPECT_EQ(service_->FinishedBarriersKept(), 2u);
  // "a" finished first and is forgotten: the same call now starts a new instance, which waits.
  BarrierResult a_again = Arrive("a", kW0);
  EXPECT_FALSE(a_again.fired());
  BarrierResult b_again = Arrive("b", kW0);
  ASSERT_TRUE(b_again.fired());
  EXPECT_EQ(b_again.value().value(), 0);
}

TEST_F(LimitsTest, FinishedBarriersAreForgottenAfterTheRetention) {
  StartWith({.finished_retention = absl::Minutes(10)});
  Pass("a");
  Advance(absl::Minutes(9));
  BarrierResult kept = Arrive("a", kW0);
  ASSERT_TRUE(kept.fired());
  EXPECT_EQ(kept.value().value(), 0);

  Advance(absl::Minutes(2));
  Pass("other");

  EXPECT_EQ(service_->FinishedBarriersKept(), 1u);
  BarrierResult forgotten = Arrive("a", kW0);
  EXPECT_FALSE(forgotten.fired());
}

TEST_F(LimitsTest, AForgottenBarrierStartsAfreshAtTheInstanceItsCallersName) {
  StartWith({.max_finished = 1});
  Pass("step", 0);
  Pass("step", 1);
  Pass("other");  // "step" is forgotten

  Pass("step", 2);

  // And a caller that disagrees with the restarted instance still fails it for everyone.
  BarrierResult w0 = Arrive("step", kW0, 3);
  BarrierResult w1 = Arrive("step", kW1, 5);
  ASSERT_TRUE(w0.fired());
  EXPECT_EQ(w0.value().status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(w1.value().status().code(), absl::StatusCode::kInternal);
}

TEST_F(LimitsTest, BlockingCallsThatNameNoTaskShareAPoolPerKind) {
  StartWith({}, {.max_per_task = 64, .max_total = 1 << 20, .max_without_task_per_kind = 2});
  GetResult a = Get("k/a"), b = Get("k/b");

  GetResult c = Get("k/c");

  ASSERT_TRUE(c.fired());
  EXPECT_EQ(c.value().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(c.value().status().message(), "--max-parked-calls-without-task"))
      << c.value().status();
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 2);
  // Another kind has its own pool, and an answered get makes room.
  auto watch = service_->WatchKeys("k", 0, service_->NewWaiterId(), [] {});
  EXPECT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(service_->InsertKeyValue("k/a", "1", false).ok());
  ASSERT_TRUE(a.fired());
  GetResult d = Get("k/d");
  EXPECT_FALSE(d.fired());
  EXPECT_FALSE(b.fired());
}

TEST_F(LimitsTest, TheDefaultPoolOfCallsWithoutTaskScalesWithTheJob) {
  StartWith({}, {.max_per_task = 1, .max_total = 1 << 20, .max_without_task_per_kind = 0});
  // Five tasks in all (three workers, two sidecars), one call each.
  std::vector<GetResult> gets;
  for (int i = 0; i < 5; ++i) gets.push_back(Get("k/" + std::to_string(i)));

  GetResult over = Get("k/over");

  for (const GetResult& g : gets) EXPECT_FALSE(g.fired());
  ASSERT_TRUE(over.fired());
  EXPECT_EQ(over.value().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(LimitsTest, AJobOverTheTaskLimitIsRefusedAtStart) {
  ServiceConfig config = Config();
  config.jobs[0].num_tasks = kMaxTasksPerJob + 1;

  absl::Status s = ValidateConfig(config);

  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "at most 131072 tasks per job")) << s;
  config.jobs[0].num_tasks = kMaxTasksPerJob;
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST_F(LimitsTest, AReportedErrorOverTheLimitIsCutAndStillReachesEveryone) {
  StartWith({});
  testing::StatusResult poll = Poll(kW1);
  const std::string message(100 * 1024, 'e');

  ASSERT_TRUE(service_->ReportError(kW0, absl::InternalError(message)).ok());

  ASSERT_TRUE(poll.fired());
  const absl::Status& seen = poll.value();
  EXPECT_EQ(seen.code(), absl::StatusCode::kInternal);
  EXPECT_LT(seen.message().size(), kMaxReportedErrorBytes + 200);
  EXPECT_TRUE(absl::StrContains(seen.message(), "more bytes cut by the coordinator")) << seen;
  EXPECT_TRUE(absl::StrContains(seen.message(), std::string(1000, 'e')));
}

}  // namespace
}  // namespace service_limits_test
}  // namespace cohort
