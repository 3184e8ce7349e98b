#include "operator/controller/work_queue.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/time/clock.h"

namespace cohort::controller {
namespace {

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
  WorkQueue q;
  const absl::Time start = absl::Now();
  q.AddAfter("ns/later", absl::Milliseconds(100));
  q.Add("ns/now");
  EXPECT_EQ(q.Get(), "ns/now");
  EXPECT_EQ(q.Get(), "ns/later");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(WorkQueueTest, FailuresBackOffExponentiallyUntilForgotten) {
  WorkQueue q(absl::Milliseconds(10), absl::Milliseconds(35));
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    q.AddRateLimited("ns/a");
    auto key = q.Get();
    q.Done(*key);
    EXPECT_GE(absl::Now() - start, std::min(absl::Milliseconds(10 << i), absl::Milliseconds(35)));
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
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (q.Idle() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(q.Idle(), 1);
  q.ShutDown();
  worker.join();
  EXPECT_FALSE(got.has_value());
  q.Add("ns/a");  // ignored once shut down
  EXPECT_EQ(q.Depth(), 0u);
}

}  // namespace
}  // namespace cohort::controller
