#include "service/core/key_watch.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "common/durability_gate.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "tests/service/core/coordination_service_fixture.h"

namespace cohort {
namespace {

// "insert a=1@3" style lines: what a watcher saw, in order.
std::vector<std::string> Lines(const std::vector<KeyChangePtr>& events) {
  std::vector<std::string> out;
  for (const KeyChangePtr& e : events) {
    out.push_back(
        absl::StrCat(KeyChangeTypeName(e->type), " ", e->key, "=", e->value, "@", e->revision));
  }
  return out;
}

class KeyWatchTest : public testing::CoordinationServiceTest {
 protected:
  void StartWith(KeyValueLimits limits) {
    ServiceConfig config = Config();
    config.key_value = limits;
    Start(config);
  }

  // A watch whose notifications are counted.
  struct Watcher {
    std::shared_ptr<KeyWatch> watch;
    std::shared_ptr<int> notified = std::make_shared<int>(0);
    WaiterId waiter = 0;
  };
  absl::StatusOr<Watcher> Watch(const std::string& key, int64_t start = 0) {
    Watcher w;
    w.waiter = service_->NewWaiterId();
    auto watch = service_->WatchKeys(key, start, w.waiter, [n = w.notified] { ++*n; });
    if (!watch.ok()) return watch.status();
    w.watch = *watch;
    return w;
  }
};

TEST_F(KeyWatchTest, WatcherSeesInsertsUpdatesAndDeletesUnderItsKeyInOrder) {
  auto w = Watch("job/config");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(service_->InsertKeyValue("job/config", "a", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("job/config/lr", "0.1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("job/configuration", "not under the key", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("job/config", "b", true).ok());
  ASSERT_TRUE(service_->IncrementKeyValue("job/config/step", 5).ok());
  ASSERT_TRUE(service_->DeleteKeyValue("job/config").ok());
  KeyWatch::Batch batch = w->watch->Take(SIZE_MAX);
  EXPECT_EQ(Lines(batch.events),
            (std::vector<std::string>{"insert job/config=a@1", "insert job/config/lr=0.1@2",
                                      "update job/config=b@4", "insert job/config/step=5@5",
                                      "delete job/config=@6", "delete job/config/lr=@6",
                                      "delete job/config/step=@6"}));
  EXPECT_FALSE(batch.end.has_value());
  EXPECT_GE(*w->notified, 1);
}

TEST_F(KeyWatchTest, EmptyKeyWatchesTheWholeStoreAndKeysAreNormalised) {
  auto w = Watch("");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(service_->InsertKeyValue("/a//b/", "1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("c", "2", false).ok());
  EXPECT_EQ(Lines(w->watch->Take(SIZE_MAX).events),
            (std::vector<std::string>{"insert a/b=1@1", "insert c=2@2"}));
}

TEST_F(KeyWatchTest, CreatedRevisionIsTheStoreRevisionAndFailedWritesSendNothing) {
  ASSERT_TRUE(service_->InsertKeyValue("k", "1", false).ok());
  auto w = Watch("k");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->watch->created_revision(), 1);
  EXPECT_EQ(service_->InsertKeyValue("k", "2", false).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(service_->DeleteKeyValue("k/absent").ok());  // removes nothing: no revision
  EXPECT_TRUE(w->watch->Take(SIZE_MAX).events.empty());
  EXPECT_EQ(*w->notified, 0);
  EXPECT_EQ(service_->KeyValueStats().revision, 1);
}

TEST_F(KeyWatchTest, WatchFromAPastRevisionReplaysTheHistoryThenFollowsLiveChanges) {
  ASSERT_TRUE(service_->InsertKeyValue("k", "1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("k", "2", true).ok());
  ASSERT_TRUE(service_->InsertKeyValue("other", "x", false).ok());
  auto w = Watch("k", /*start=*/2);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(service_->InsertKeyValue("k", "3", true).ok());
  EXPECT_EQ(Lines(w->watch->Take(SIZE_MAX).events),
            (std::vector<std::string>{"update k=2@2", "update k=3@4"}));
}

TEST_F(KeyWatchTest, ResumeFromADroppedRevisionIsOutOfRange) {
  KeyValueLimits limits;
  limits.history_events = 2;
  StartWith(limits);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(service_->InsertKeyValue("k", std::to_string(i), true).ok());
  auto w = Watch("k", /*start=*/2);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(w.status().message().find("read the keys again"), std::string::npos);
  EXPECT_TRUE(Watch("k", 3).ok());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kWatchKeys), 1);
}

TEST_F(KeyWatchTest, RevisionPastTheStoreIsOutOfRangeAndNegativeIsInvalid) {
  ASSERT_TRUE(service_->InsertKeyValue("k", "1", false).ok());
  EXPECT_TRUE(Watch("k", 2).ok());  // the next revision: fine
  EXPECT_EQ(Watch("k", 3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Watch("k", -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KeyWatchTest, HistoryNeverKeepsHalfOfARecursiveDelete) {
  KeyValueLimits limits;
  limits.history_events = 3;
  StartWith(limits);
  for (const char* key : {"d/a", "d/b", "d/c"})
    ASSERT_TRUE(service_->InsertKeyValue(key, "v", false).ok());
  ASSERT_TRUE(service_->DeleteKeyValue("d").ok());                // revision 4: three events
  ASSERT_TRUE(service_->InsertKeyValue("d/a", "w", false).ok());  // pushes out one of them
  EXPECT_EQ(Watch("d", 4).status().code(), absl::StatusCode::kOutOfRange);
  auto w = Watch("d", 5);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(Lines(w->watch->Take(SIZE_MAX).events), (std::vector<std::string>{"insert d/a=w@5"}));
}

TEST_F(KeyWatchTest, TakeStopsAtTheByteBudgetButNeverSplitsARevision) {
  auto w = Watch("d");
  ASSERT_TRUE(w.ok());
  for (const char* key : {"d/a", "d/b", "d/c"})
    ASSERT_TRUE(service_->InsertKeyValue(key, "v", false).ok());
  ASSERT_TRUE(service_->DeleteKeyValue("d").ok());
  EXPECT_EQ(w->watch->Take(1).events.size(), 1u);  // revision 1 alone
  EXPECT_EQ(w->watch->Take(1).events.size(), 1u);  // revision 2
  EXPECT_EQ(w->watch->Take(1).events.size(), 1u);  // revision 3
  EXPECT_EQ(w->watch->Take(1).events.size(), 3u);  // the whole delete
}

TEST_F(KeyWatchTest, SlowWatcherIsEndedWithTheRevisionToResumeFrom) {
  KeyValueLimits limits;
  limits.watch_queue_events = 2;
  StartWith(limits);
  auto slow = Watch("k");
  auto other = Watch("other");
  ASSERT_TRUE(slow.ok() && other.ok());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(service_->InsertKeyValue("k", std::to_string(i), true).ok());
  // What was queued still goes out, then the end names the first revision left out.
  KeyWatch::Batch batch = slow->watch->Take(SIZE_MAX);
  EXPECT_EQ(Lines(batch.events), (std::vector<std::string>{"insert k=0@1", "update k=1@2"}));
  ASSERT_TRUE(batch.end.has_value());
  EXPECT_EQ(batch.end->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(batch.end->message().find("resume from revision 3"), std::string::npos)
      << batch.end->message();
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kWatchKeys), 1);  // only the other one
  // The watcher resumes where it was told and misses nothing.
  auto resumed = Watch("k", 3);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(Lines(resumed->watch->Take(SIZE_MAX).events),
            (std::vector<std::string>{"update k=2@3"}));
}

TEST_F(KeyWatchTest, CancellingTheWaiterEndsTheWatchAndStopsDelivery) {
  auto w = Watch("k");
  ASSERT_TRUE(w.ok());
  service_->Cancel(w->waiter, absl::CancelledError("client left"));
  ASSERT_TRUE(service_->InsertKeyValue("k", "1", false).ok());
  KeyWatch::Batch batch = w->watch->Take(SIZE_MAX);
  EXPECT_TRUE(batch.events.empty());
  ASSERT_TRUE(batch.end.has_value());
  EXPECT_EQ(batch.end->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kWatchKeys), 0);
}

TEST_F(KeyWatchTest, StoppingTheServiceEndsEveryWatch) {
  auto w = Watch("k");
  ASSERT_TRUE(w.ok());
  service_->Stop(absl::UnavailableError("going away"));
  KeyWatch::Batch batch = w->watch->Take(SIZE_MAX);
  ASSERT_TRUE(batch.end.has_value());
  EXPECT_EQ(batch.end->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Watch("k").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(KeyWatchTest, DetachedWatchIsNotNotifiedAgain) {
  auto w = Watch("k");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(service_->InsertKeyValue("k", "1", false).ok());
  EXPECT_EQ(*w->notified, 1);
  w->watch->Detach();
  ASSERT_TRUE(service_->InsertKeyValue("k", "2", true).ok());
  EXPECT_EQ(*w->notified, 1);
  EXPECT_EQ(w->watch->Take(SIZE_MAX).events.size(), 2u);
}

TEST_F(KeyWatchTest, WatchesCountAgainstTheParkedCallLimit) {
  ServiceConfig config = Config();
  config.parked.max_total = 1;
  Start(config);
  EXPECT_TRUE(Watch("a").ok());
  EXPECT_EQ(Watch("b").status().code(), absl::StatusCode::kResourceExhausted);
}

// A gate that holds every answer until the test lets it go.
class HeldGate : public DurabilityGate {
 public:
  void AfterDurable(absl::AnyInvocable<void() &&> then) override {
    held_.push_back(std::move(then));
  }
  void ReleaseAll() {
    std::vector<absl::AnyInvocable<void()&&>> held = std::move(held_);
    held_.clear();
    for (auto& then : held) std::move(then)();
  }
  size_t held() const { return held_.size(); }

 private:
  std::vector<absl::AnyInvocable<void() &&>> held_;
};

KeyChangePtr Inserted(const std::string& key, int64_t revision) {
  return std::make_shared<KeyChange>(KeyChange{KeyChange::Type::kInserted, key, "v", revision});
}

// Behind a durability gate, events go out only once the gate has released the notification
// that followed them; an event queued after that notification waits for its own.
TEST(KeyWatchGateTest, EventsGoOutOnlyOnceTheGateReleasesThem) {
  HeldGate gate;
  int notified = 0;
  KeyWatch watch(1, "", [&notified] { ++notified; });
  watch.set_gate(&gate);
  ASSERT_TRUE(watch.Push(Inserted("a", 1), 100, 1 << 20));
  watch.Notify();
  EXPECT_EQ(gate.held(), 1U);
  EXPECT_EQ(notified, 0);
  EXPECT_TRUE(watch.Take(SIZE_MAX).events.empty());
  ASSERT_TRUE(watch.Push(Inserted("b", 2), 100, 1 << 20));  // not yet notified
  gate.ReleaseAll();
  EXPECT_EQ(notified, 1);
  EXPECT_EQ(Lines(watch.Take(SIZE_MAX).events), std::vector<std::string>{"insert a=v@1"});
  EXPECT_TRUE(watch.Take(SIZE_MAX).events.empty());
  watch.Notify();
  watch.FinishWithError(absl::CancelledError("gone"));
  EXPECT_EQ(notified, 1);
  gate.ReleaseAll();
  KeyWatch::Batch last = watch.Take(SIZE_MAX);
  EXPECT_EQ(Lines(last.events), std::vector<std::string>{"insert b=v@2"});
  ASSERT_TRUE(last.end.has_value());
  EXPECT_EQ(last.end->code(), absl::StatusCode::kCancelled);
  // After Detach, a release still under way notifies nobody.
  watch.Notify();
  watch.Detach();
  gate.ReleaseAll();
  EXPECT_EQ(notified, 3);
}

// An answer function made to wait for the gate (a connection's send) may be called many
// times: each call waits, and they run in order once the gate lets them go.
TEST(AnswerAfterDurableTest, EveryCallWaitsForTheGateAndKeepsItsPlace) {
  HeldGate gate;
  std::vector<int> got;
  std::function<void(int)> send =
      AnswerAfterDurable<int>(&gate, [&got](int v) { got.push_back(v); });
  send(1);
  send(2);
  EXPECT_TRUE(got.empty());
  gate.ReleaseAll();
  send(3);
  gate.ReleaseAll();
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
  std::function<void(int)> direct =
      AnswerAfterDurable<int>(nullptr, [&got](int v) { got.push_back(v); });
  direct(4);
  EXPECT_EQ(got.back(), 4);
}

}  // namespace
}  // namespace cohort
