#include "operator/controller/work_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "tests/support/eventually.h"

namespace cohort::controller {
namespace {

using ::cohort::testing::Eventually;
using Delays = std::vector<std::pair<absl::Time, std::string>>;

TEST(WorkQueueTest, AKeyIsQueuedOnceHoweverOftenItIsAdded) {
  WorkQueue q;
  q.Add("ns/a");
  q.Add("ns/b");
  q.Add("ns/a");
  EXPECT_EQ(q.Depth(), 2u);
  EXPECT_EQ(q.Get(), "ns/a");
  EXPECT_EQ(q.Get(), "ns/b");
  EXPECT_EQ(q.Depth(), 0u);
}

TEST(WorkQueueTest, AKeyAddedWhileProcessedComesBackAfterDone) {
  WorkQueue q;
  q.Add("ns/a");
  auto key = q.Get();
  q.Add("ns/a");  // not handed to a second worker while the first one works on it
  EXPECT_EQ(q.Depth(), 0u);
  q.Done(*key);
  EXPECT_EQ(q.Depth(), 1u);
  EXPECT_EQ(q.Get(), "ns/a");
}

TEST(WorkQueueTest, AddAfterWaitsForTheDelay) {
  ManualClock clock;
  WorkQueue q(absl::Milliseconds(100), absl::Seconds(60), &clock);
  const absl::Time due = clock.Now() + absl::Milliseconds(100);
  q.AddAfter("ns/later", absl::Milliseconds(100));
  q.Add("ns/now");
  EXPECT_EQ(q.Get(), "ns/now");  // added later, but due at once
  q.Done("ns/now");
  EXPECT_EQ(q.Delayed(), (Delays{{due, "ns/later"}}));
  // A worker waiting for it gets it once the clock reaches the due time, not before.
  std::optional<std::string> got;
  absl::Time got_at;
  std::thread worker([&] {
    got = q.Get();
    got_at = clock.Now();
  });
  EXPECT_TRUE(Eventually([&] { return q.Idle() == 1; }));
  clock.Advance(absl::Milliseconds(99));
  q.Poke();
  EXPECT_EQ(q.Delayed(), (Delays{{due, "ns/later"}}));
  clock.Advance(absl::Milliseconds(1));
  q.Poke();
  worker.join();
  EXPECT_EQ(got, "ns/later");
  EXPECT_EQ(got_at, due);
  EXPECT_TRUE(q.Delayed().empty());
}

TEST(WorkQueueTest, FailuresBackOffExponentiallyUntilForgotten) {
  ManualClock clock;
  WorkQueue q(absl::Milliseconds(10), absl::Milliseconds(35), &clock);
  for (int i = 0; i < 3; ++i) {
    // 10 ms, 20 ms, then 35 ms (40 ms capped).
    const absl::Duration backoff = std::min(absl::Milliseconds(10 << i), absl::Milliseconds(35));
    q.AddRateLimited("ns/a");
    EXPECT_EQ(q.Delayed(), (Delays{{clock.Now() + backoff, "ns/a"}})) << "failure " << i + 1;
    clock.Advance(backoff);
    EXPECT_EQ(q.Get(), "ns/a");  // due now: handed out at once
    q.Done("ns/a");
  }
  EXPECT_EQ(q.Failures("ns/a"), 3);
  q.Forget("ns/a");
  EXPECT_EQ(q.Failures("ns/a"), 0);
}

TEST(WorkQueueTest, ShutDownWakesWaitingWorkers) {
  WorkQueue q;
  std::optional<std::string> got = "unset";
  std::thread worker([&] { got = q.Get(); });
  // Shut down only once the worker is blocked in Get, so the wake-up is what is tested.
  EXPECT_TRUE(Eventually([&] { return q.Idle() == 1; }));
  q.ShutDown();
  worker.join();
  EXPECT_FALSE(got.has_value());
  q.Add("ns/a");  // ignored once shut down
  EXPECT_EQ(q.Depth(), 0u);
}

}  // namespace
}  // namespace cohort::controller
