#include "service/core/key_value_store.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "service/core/parked_call.h"
#include "service/core/timer_queue.h"
#include "tests/service/core/callback_result.h"

namespace cohort {
namespace {

using ::cohort::testing::ValueResult;
using GetResult = ValueResult<std::string>;

const TaskName kWorker0{"worker", 0};

std::vector<std::string> Keys(const std::vector<KeyValueEntry>& entries) {
  std::vector<std::string> keys;
  for (const KeyValueEntry& e : entries) keys.push_back(e.key);
  return keys;
}

// The store as the service wires it: its parked-call registry and timer queue.
class KeyValueStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(KeyValueLimits{}); }

  void Start(KeyValueLimits limits) {
    ServiceConfig config;
    config.jobs.push_back({"worker", 2});
    config.heartbeat_timeout = absl::Hours(1);
    config.key_value = limits;
    auto service = CoordinationService::Create(config, &clock_);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }

  GetResult Get(const std::string& key, std::optional<absl::Time> deadline = std::nullopt,
                WaiterId waiter = 0) {
    GetResult result;
    if (waiter == 0) waiter = service_->NewWaiterId();
    service_->GetKeyValue(key, waiter, kWorker0, deadline, result.Callback());
    return result;
  }

  void Advance(absl::Duration d) {
    clock_.Advance(d);
    service_->RunTimers();
  }

  ManualClock clock_;
  std::unique_ptr<CoordinationService> service_;
};

TEST_F(KeyValueStoreTest, KeysAreNormalised) {
  EXPECT_EQ(KeyValueStore::NormalizeKey("/a//b/"), "a/b");
  ASSERT_TRUE(service_->InsertKeyValue("//a///b/", "v", /*allow_overwrite=*/false).ok());

  EXPECT_EQ(service_->TryGetKeyValue("a/b").value(), "v");
  EXPECT_EQ(service_->TryGetKeyValue("/a/b//").value(), "v");
  EXPECT_EQ(Keys(service_->GetKeyValueDir("a")), std::vector<std::string>{"a/b"});
}

TEST_F(KeyValueStoreTest, InsertWithoutOverwriteOfExistingKeyIsAlreadyExists) {
  ASSERT_TRUE(service_->InsertKeyValue("k", "first", false).ok());

  absl::Status s = service_->InsertKeyValue("/k/", "second", false);

  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_EQ(service_->TryGetKeyValue("k").value(), "first");
}

TEST_F(KeyValueStoreTest, InsertWithOverwriteReplacesValue) {
  ASSERT_TRUE(service_->InsertKeyValue("k", "first", false).ok());

  ASSERT_TRUE(service_->InsertKeyValue("k", "second", /*allow_overwrite=*/true).ok());

  EXPECT_EQ(service_->TryGetKeyValue("k").value(), "second");
  EXPECT_EQ(service_->KeyValueStats().keys, 1u);
  EXPECT_EQ(service_->KeyValueStats().bytes,
            std::string("k").size() + std::string("second").size());
}

TEST_F(KeyValueStoreTest, TryGetOfMissingKeyIsNotFound) {
  EXPECT_EQ(service_->TryGetKeyValue("missing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KeyValueStoreTest, GetOfExistingKeyAnswersAtOnce) {
  ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());

  GetResult get = Get("k");

  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().value(), "v");
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
}

TEST_F(KeyValueStoreTest, GetOfMissingKeyWaitsUntilItIsInserted) {
  GetResult get = Get("k");
  EXPECT_FALSE(get.fired());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 1);

  ASSERT_TRUE(service_->InsertKeyValue("/k", "v", false).ok());

  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().value(), "v");
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
}

TEST_F(KeyValueStoreTest, EveryGetWaitingOnAKeyIsAnswered) {
  GetResult first = Get("k");
  GetResult second = Get("k/");

  ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());

  ASSERT_TRUE(first.fired());
  ASSERT_TRUE(second.fired());
  EXPECT_EQ(first.value().value(), "v");
  EXPECT_EQ(second.value().value(), "v");
}

TEST_F(KeyValueStoreTest, GetOfMissingKeyIsAnsweredByIncrement) {
  GetResult get = Get("counter");

  ASSERT_EQ(service_->IncrementKeyValue("counter", 5).value(), 5);

  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().value(), "5");
}

TEST_F(KeyValueStoreTest, TimedGetEndsDeadlineExceededWhenNoValueArrives) {
  GetResult get = Get("k", clock_.Now() + absl::Seconds(5));

  Advance(absl::Seconds(4));
  EXPECT_FALSE(get.fired());
  Advance(absl::Seconds(1));

  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
}

TEST_F(KeyValueStoreTest, TimedGetAnsweredBeforeItsDeadlineIsFinishedOnce) {
  GetResult get = Get("k", clock_.Now() + absl::Seconds(5));
  ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());

  Advance(absl::Seconds(10));

  EXPECT_EQ(get.count(), 1);
  EXPECT_EQ(get.value().value(), "v");
}

TEST_F(KeyValueStoreTest, CancelledGetGetsTheCancelStatusAndStopsWaiting) {
  WaiterId waiter = service_->NewWaiterId();
  GetResult get = Get("k", std::nullopt, waiter);

  service_->Cancel(waiter, absl::CancelledError("client went away"));

  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().status(), absl::CancelledError("client went away"));
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
  ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());
  EXPECT_EQ(get.count(), 1);
}

TEST_F(KeyValueStoreTest, GetCancelledThroughItsRegistryGetsTheCancelStatus) {
  ParkedCallRegistry registry{ParkLimits{}};
  TimerQueue timers;
  KeyValueStore standalone(KeyValueLimits{}, &registry, &timers);
  GetResult get;
  WaiterId waiter = registry.NextId();
  standalone.Get("k", waiter, kWorker0, std::nullopt, get.Callback());
  ASSERT_EQ(registry.Total(), 1);

  registry.Cancel(waiter, absl::DeadlineExceededError("rpc deadline"));

  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().status(), absl::DeadlineExceededError("rpc deadline"));
  EXPECT_EQ(registry.Total(), 0);
  ASSERT_TRUE(standalone.Insert("k", "v", false).ok());
  EXPECT_EQ(get.count(), 1);
}

TEST_F(KeyValueStoreTest, GetDirReturnsEntriesUnderDirectoryInKeyOrder) {
  for (const char* key : {"dir/b", "dir/a", "dir/sub/c", "dir", "dirx/d", "di"}) {
    ASSERT_TRUE(service_->InsertKeyValue(key, key, false).ok());
  }

  std::vector<KeyValueEntry> entries = service_->GetKeyValueDir("/dir/");

  EXPECT_EQ(Keys(entries), (std::vector<std::string>{"dir/a", "dir/b", "dir/sub/c"}));
  EXPECT_EQ(entries[0].value, "dir/a");
}

TEST_F(KeyValueStoreTest, GetDirOfMissingDirectoryIsEmpty) {
  ASSERT_TRUE(service_->InsertKeyValue("other/k", "v", false).ok());

  EXPECT_TRUE(service_->GetKeyValueDir("dir").empty());
}

TEST_F(KeyValueStoreTest, DeleteRemovesKeyAndEverythingUnderIt) {
  for (const char* key : {"a", "a/b", "a/b/c", "ab", "b"}) {
    ASSERT_TRUE(service_->InsertKeyValue(key, "v", false).ok());
  }

  ASSERT_TRUE(service_->DeleteKeyValue("/a/").ok());

  EXPECT_EQ(service_->TryGetKeyValue("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->TryGetKeyValue("a/b/c").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(service_->TryGetKeyValue("ab").ok());
  EXPECT_TRUE(service_->TryGetKeyValue("b").ok());
  EXPECT_EQ(service_->KeyValueStats().keys, 2u);
  EXPECT_EQ(service_->KeyValueStats().bytes, std::string("abv").size() + std::string("bv").size());
}

TEST_F(KeyValueStoreTest, DeleteOfMissingKeyIsOk) {
  int64_t revision = service_->KeyValueStats().revision;

  EXPECT_TRUE(service_->DeleteKeyValue("missing").ok());
  EXPECT_EQ(service_->KeyValueStats().revision, revision);
}

TEST_F(KeyValueStoreTest, IncrementOfMissingKeyStartsFromZero) {
  EXPECT_EQ(service_->IncrementKeyValue("n", 7).value(), 7);
  EXPECT_EQ(service_->TryGetKeyValue("n").value(), "7");
}

TEST_F(KeyValueStoreTest, IncrementStoresA64BitDecimalSum) {
  ASSERT_TRUE(service_->InsertKeyValue("n", "4294967296", false).ok());

  EXPECT_EQ(service_->IncrementKeyValue("n", 1).value(), 4294967297);
  EXPECT_EQ(service_->IncrementKeyValue("n", -4294967300).value(), -3);
  EXPECT_EQ(service_->TryGetKeyValue("n").value(), "-3");
}

TEST_F(KeyValueStoreTest, IncrementOfNonNumericValueIsFailedPrecondition) {
  ASSERT_TRUE(service_->InsertKeyValue("n", "abc", false).ok());

  EXPECT_EQ(service_->IncrementKeyValue("n", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->TryGetKeyValue("n").value(), "abc");
}

TEST_F(KeyValueStoreTest, IncrementThatOverflowsIsOutOfRange) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  ASSERT_EQ(service_->IncrementKeyValue("n", max).value(), max);

  EXPECT_EQ(service_->IncrementKeyValue("n", 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(service_->TryGetKeyValue("n").value(), std::to_string(max));
}

// PyTorch's store calls (service/torch): compare-and-set as torch's compare_set.
TEST_F(KeyValueStoreTest, CompareAndSetFollowsTorchsTable) {
  // Absent, expected empty: set.
  EXPECT_EQ(service_->CompareAndSetKeyValue("k", "", "one").value(), "one");
  // Present and equal: replaced.
  EXPECT_EQ(service_->CompareAndSetKeyValue("k", "one", "two").value(), "two");
  // Present and different: unchanged, the current value answered.
  EXPECT_EQ(service_->CompareAndSetKeyValue("k", "one", "three").value(), "two");
  EXPECT_EQ(service_->TryGetKeyValue("k").value(), "two");
  // Absent, expected not empty: nothing set, nothing answered.
  int64_t revision = service_->KeyValueStats().revision;
  EXPECT_EQ(service_->CompareAndSetKeyValue("absent", "x", "y").value(), std::nullopt);
  EXPECT_EQ(service_->TryGetKeyValue("absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->KeyValueStats().revision, revision);
}

TEST_F(KeyValueStoreTest, ACompareAndSetThatCreatesTheKeyAnswersItsWaiters) {
  GetResult get = Get("k");
  ASSERT_FALSE(get.fired());
  ASSERT_EQ(service_->CompareAndSetKeyValue("k", "nope", "v").value(), std::nullopt);
  EXPECT_FALSE(get.fired());
  ASSERT_EQ(service_->CompareAndSetKeyValue("k", "", "v").value(), "v");
  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().value(), "v");
}

TEST_F(KeyValueStoreTest, AppendCreatesThenExtendsAndAnswersWaiters) {
  GetResult get = Get("log");
  ASSERT_TRUE(service_->AppendKeyValue("log", "ab").ok());
  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().value(), "ab");
  ASSERT_TRUE(service_->AppendKeyValue("log", std::string("\0c", 2)).ok());
  EXPECT_EQ(service_->TryGetKeyValue("log").value(), std::string("ab\0c", 4));
}

TEST_F(KeyValueStoreTest, EraseRemovesOneKeyAndSaysWhetherItWasThere) {
  ASSERT_TRUE(service_->InsertKeyValue("a", "1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("a!", "2", false).ok());
  EXPECT_EQ(service_->EraseKeyValue("a").value(), true);
  EXPECT_EQ(service_->EraseKeyValue("a").value(), false);
  EXPECT_EQ(service_->TryGetKeyValue("a!").value(), "2");
  // A key with keys under it is not erased alone (a restart would read it back as deleting
  // them all).
  ASSERT_TRUE(service_->InsertKeyValue("d", "1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("d/e", "2", false).ok());
  EXPECT_EQ(service_->EraseKeyValue("d").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->TryGetKeyValue("d").value(), "1");
}

TEST_F(KeyValueStoreTest, KeysAndCountsUnderADirectoryCopyNoValues) {
  for (const char* key : {"t/b", "t/a", "t/c/d", "u/a"}) {
    ASSERT_TRUE(service_->InsertKeyValue(key, "v", false).ok());
  }
  EXPECT_EQ(service_->KeyValueKeys("t"), (std::vector<std::string>{"t/a", "t/b", "t/c/d"}));
  EXPECT_EQ(service_->CountKeyValues("t"), 3u);
  EXPECT_EQ(service_->CountKeyValues(""), 4u);
  EXPECT_EQ(service_->CountKeyValues("none"), 0u);
}

TEST_F(KeyValueStoreTest, WaitAtLeastAnswersOnceTheCountReachesItsThreshold) {
  ::cohort::testing::StatusResult early, late;
  service_->WaitKeyValueAtLeast("n", 2, service_->NewWaiterId(), std::nullopt, std::nullopt,
                                early.Callback());
  service_->WaitKeyValueAtLeast("n", 3, service_->NewWaiterId(), std::nullopt, std::nullopt,
                                late.Callback());
  ASSERT_EQ(service_->IncrementKeyValue("n", 1).value(), 1);
  EXPECT_FALSE(early.fired());
  ASSERT_EQ(service_->IncrementKeyValue("n", 1).value(), 2);
  ASSERT_TRUE(early.fired());
  EXPECT_TRUE(early.value().ok()) << early.value();
  EXPECT_FALSE(late.fired());
  ASSERT_TRUE(service_->InsertKeyValue("n", "not a number", true).ok());
  EXPECT_FALSE(late.fired());
  ASSERT_TRUE(service_->InsertKeyValue("n", "7", true).ok());
  ASSERT_TRUE(late.fired());
  EXPECT_EQ(late.count(), 1);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
  // Reached already: answered at once.
  ::cohort::testing::StatusResult now;
  service_->WaitKeyValueAtLeast("n", 7, service_->NewWaiterId(), std::nullopt, std::nullopt,
                                now.Callback());
  ASSERT_TRUE(now.fired());
  EXPECT_TRUE(now.value().ok());
}

TEST_F(KeyValueStoreTest, WaitAtLeastEndsAtItsDeadlineOrWhenCancelled) {
  ::cohort::testing::StatusResult timed, cancelled;
  service_->WaitKeyValueAtLeast("n", 5, service_->NewWaiterId(), std::nullopt,
                                clock_.Now() + absl::Seconds(10), timed.Callback());
  WaiterId waiter = service_->NewWaiterId();
  service_->WaitKeyValueAtLeast("n", 5, waiter, std::nullopt, std::nullopt, cancelled.Callback());
  service_->Cancel(waiter, absl::CancelledError("CANCEL_WAIT"));
  ASSERT_TRUE(cancelled.fired());
  EXPECT_EQ(cancelled.value(), absl::CancelledError("CANCEL_WAIT"));
  Advance(absl::Seconds(11));
  ASSERT_TRUE(timed.fired());
  EXPECT_EQ(timed.value().code(), absl::StatusCode::kDeadlineExceeded) << timed.value();
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
  ASSERT_EQ(service_->IncrementKeyValue("n", 9).value(), 9);
  EXPECT_EQ(timed.count(), 1);
  EXPECT_EQ(cancelled.count(), 1);
}

TEST_F(KeyValueStoreTest, AQueueIsFirstInFirstOutOverKeysOfItsOwn) {
  ASSERT_TRUE(service_->QueuePushKeyValue("/q/", "a").ok());
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "b").ok());
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "").ok());
  EXPECT_EQ(Keys(service_->GetKeyValueDir("q")),
            (std::vector<std::string>{"q/00000000000000000001", "q/00000000000000000002",
                                      "q/00000000000000000003"}));
  EXPECT_EQ(service_->CountKeyValues("q"), 3u);
  for (auto [length, item] :
       std::vector<std::pair<int64_t, std::string>>{{3, "a"}, {2, "b"}, {1, ""}}) {
    absl::StatusOr<KeyValueStore::Popped> popped = service_->QueuePopKeyValue("q");
    ASSERT_TRUE(popped.ok()) << popped.status();
    EXPECT_EQ(popped->length, length);
    EXPECT_EQ(popped->item, std::optional<std::string>(item));
  }
  absl::StatusOr<KeyValueStore::Popped> empty = service_->QueuePopKeyValue("q");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->length, 0);
  EXPECT_EQ(empty->item, std::nullopt);
  // Emptied, a queue numbers from 1 again; a key of the same name is another thing.
  ASSERT_TRUE(service_->InsertKeyValue("q", "a key", false).ok());
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "c").ok());
  EXPECT_EQ(Keys(service_->GetKeyValueDir("q")),
            (std::vector<std::string>{"q/00000000000000000001"}));
  EXPECT_EQ(service_->TryGetKeyValue("q").value(), "a key");
}

TEST_F(KeyValueStoreTest, AKeyUnderAQueueThatIsNotAnItemStopsItsPushesAndChangesNothing) {
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "a").ok());
  ASSERT_TRUE(service_->InsertKeyValue("q/zz", "by hand", false).ok());
  int64_t revision = service_->KeyValueStats().revision;
  absl::Status pushed = service_->QueuePushKeyValue("q", "b");
  EXPECT_EQ(pushed.code(), absl::StatusCode::kFailedPrecondition) << pushed;
  EXPECT_NE(pushed.message().find("q/zz"), absl::string_view::npos) << pushed;
  EXPECT_EQ(service_->KeyValueStats().revision, revision);
  // Pops and counts see the items only.
  EXPECT_EQ(service_->QueueLengthKeyValue("q"), 1u);
  absl::StatusOr<KeyValueStore::Popped> popped = service_->QueuePopKeyValue("q");
  ASSERT_TRUE(popped.ok());
  EXPECT_EQ(popped->length, 1);
  EXPECT_EQ(popped->item, std::optional<std::string>("a"));
  EXPECT_EQ(service_->QueuePopKeyValue("q")->length, 0);
  EXPECT_EQ(service_->TryGetKeyValue("q/zz").value(), "by hand");
  // An item with keys under it is not popped: the journal's removal would take them too.
  ASSERT_TRUE(service_->DeleteKeyValue("q/zz").ok());
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "b").ok());
  ASSERT_TRUE(service_->InsertKeyValue("q/00000000000000000001/under", "x", false).ok());
  absl::StatusOr<KeyValueStore::Popped> refused = service_->QueuePopKeyValue("q");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_EQ(service_->QueueLengthKeyValue("q"), 1u);
}

TEST_F(KeyValueStoreTest, APushWakesOneQueueWaitTheLongestParked) {
  ::cohort::testing::StatusResult first, cancelled, second, third;
  service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              first.Callback());
  WaiterId gone = service_->NewWaiterId();
  service_->WaitKeyValueQueue("q", gone, std::nullopt, std::nullopt, cancelled.Callback());
  service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              second.Callback());
  service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt,
                              clock_.Now() + absl::Seconds(5), third.Callback());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 4);
  service_->Cancel(gone, absl::CancelledError("CANCEL_WAIT"));
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "a").ok());
  EXPECT_TRUE(first.fired());
  EXPECT_FALSE(second.fired()) << "one push, one wait";
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "b").ok());
  ASSERT_TRUE(second.fired()) << "the cancelled wait took no push";
  EXPECT_TRUE(second.value().ok());
  EXPECT_FALSE(third.fired());
  Advance(absl::Seconds(6));
  ASSERT_TRUE(third.fired());
  EXPECT_EQ(third.value().code(), absl::StatusCode::kDeadlineExceeded) << third.value();
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
  // A queue with an item answers at once; a write of the key of its name is no push.
  ::cohort::testing::StatusResult now, later;
  service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              now.Callback());
  EXPECT_TRUE(now.fired());
  service_->WaitKeyValueQueue("empty", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              later.Callback());
  ASSERT_TRUE(service_->InsertKeyValue("empty", "v", false).ok());
  EXPECT_FALSE(later.fired());
  EXPECT_EQ(first.count() + second.count() + third.count() + cancelled.count(), 4);
}

TEST_F(KeyValueStoreTest, AWakeUpPassedOnEndsTheNextQueueWaitWhileAnItemIsThere) {
  ::cohort::testing::StatusResult first, second;
  for (auto* result : {&first, &second}) {
    service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                                result->Callback());
  }
  service_->PassQueueWake("q");
  EXPECT_FALSE(first.fired()) << "no item: nothing to pass on";
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "a").ok());
  ASSERT_TRUE(first.fired());
  EXPECT_FALSE(second.fired());
  // The first did not want it after all: the item is still there, so the next one is told.
  service_->PassQueueWake("q");
  ASSERT_TRUE(second.fired());
  EXPECT_TRUE(second.value().ok());
  EXPECT_EQ(service_->QueueLengthKeyValue("q"), 1u);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
}

TEST_F(KeyValueStoreTest, AKeyOrQueueWaitEndsOnAWriteOrAPushInTurnAndLeavesNothingBehind) {
  // Ready at once: the key is there, or the queue holds an item.
  ::cohort::testing::StatusResult key_there, item_there;
  ASSERT_TRUE(service_->InsertKeyValue("k0", "v", false).ok());
  service_->WaitKeyValueOrQueue("k0", "q0", service_->NewWaiterId(), std::nullopt, std::nullopt,
                                key_there.Callback());
  ASSERT_TRUE(service_->QueuePushKeyValue("q1", "x").ok());
  service_->WaitKeyValueOrQueue("k1", "q1", service_->NewWaiterId(), std::nullopt, std::nullopt,
                                item_there.Callback());
  EXPECT_TRUE(key_there.fired());
  EXPECT_TRUE(item_there.fired());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);

  // In the queue's turn order: a WaitQueue call, then two on the key "k" or the queue "q".
  ::cohort::testing::StatusResult queue_only, first, second, cancelled;
  service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              queue_only.Callback());
  service_->WaitKeyValueOrQueue("k", "q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                                first.Callback());
  WaiterId gone = service_->NewWaiterId();
  service_->WaitKeyValueOrQueue("k", "q", gone, std::nullopt, std::nullopt, cancelled.Callback());
  service_->WaitKeyValueOrQueue("k", "q", service_->NewWaiterId(), std::nullopt,
                                clock_.Now() + absl::Seconds(5), second.Callback());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 4);
  service_->Cancel(gone, absl::CancelledError("CANCEL_WAIT"));
  ASSERT_TRUE(cancelled.fired());
  EXPECT_EQ(cancelled.value().code(), absl::StatusCode::kCancelled);
  // A push ends the longest parked call on the queue, of either kind.
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "a").ok());
  EXPECT_TRUE(queue_only.fired());
  EXPECT_FALSE(first.fired());
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "b").ok());
  ASSERT_TRUE(first.fired()) << "the next push: the first key-or-queue call";
  EXPECT_TRUE(first.value().ok());
  EXPECT_FALSE(second.fired()) << "one push, one call";
  // A write of the key ends what is left, and takes it off the queue's turn: a later push
  // ends a call parked after it.
  ASSERT_TRUE(service_->InsertKeyValue("k", "set", false).ok());
  ASSERT_TRUE(second.fired());
  EXPECT_TRUE(second.value().ok());
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
  ASSERT_TRUE(service_->QueuePopKeyValue("q").ok());
  ASSERT_TRUE(service_->QueuePopKeyValue("q").ok());
  ::cohort::testing::StatusResult later;
  service_->WaitKeyValueQueue("q", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              later.Callback());
  ASSERT_TRUE(service_->QueuePushKeyValue("q", "c").ok());
  EXPECT_TRUE(later.fired());
  Advance(absl::Seconds(6));  // second's deadline timer went with its answer
  EXPECT_EQ(second.count(), 1);
  EXPECT_EQ(first.count() + cancelled.count() + queue_only.count() + later.count(), 4);

  // A deadline ends a call the same way, off both lists.
  ::cohort::testing::StatusResult timed;
  service_->WaitKeyValueOrQueue("t", "tq", service_->NewWaiterId(), std::nullopt,
                                clock_.Now() + absl::Seconds(1), timed.Callback());
  Advance(absl::Seconds(2));
  ASSERT_TRUE(timed.fired());
  EXPECT_EQ(timed.value().code(), absl::StatusCode::kDeadlineExceeded) << timed.value();
  ASSERT_TRUE(service_->InsertKeyValue("t", "v", false).ok());
  ASSERT_TRUE(service_->QueuePushKeyValue("tq", "v").ok());
  EXPECT_EQ(timed.count(), 1);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kKeyValueGet), 0);
}

TEST_F(KeyValueStoreTest, ABatchIsSeenWholeAndWakesTheWaitersOfEveryKeyItSets) {
  GetResult a = Get("a");
  GetResult b = Get("b");
  ::cohort::testing::StatusResult q1, q2;
  service_->WaitKeyValueQueue("q1", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              q1.Callback());
  service_->WaitKeyValueQueue("q2", service_->NewWaiterId(), std::nullopt, std::nullopt,
                              q2.Callback());
  const int64_t revision = service_->KeyValueStats().revision;
  service_->KeyValueAtomically([&](KeyValueStore::Batch& kv) {
    ASSERT_TRUE(kv.Insert("a", "1", false).ok());
    ASSERT_TRUE(kv.Increment("b", 2).ok());
    EXPECT_EQ(kv.TryGet("b").value_or("<absent>"), "2") << "a batch reads its own changes";
    ASSERT_TRUE(kv.QueuePush("q1", "x").ok());
    ASSERT_TRUE(kv.QueuePush("q2", "y").ok());
    EXPECT_FALSE(a.fired()) << "a waiter hears of a batch once it is whole";
  });
  ASSERT_TRUE(a.fired());
  EXPECT_EQ(a.value().value_or("<error>"), "1");
  ASSERT_TRUE(b.fired());
  EXPECT_EQ(b.value().value_or("<error>"), "2");
  EXPECT_TRUE(q1.fired());
  EXPECT_TRUE(q2.fired());
  EXPECT_EQ(service_->KeyValueStats().revision, revision + 4);
}

TEST_F(KeyValueStoreTest, ACallThatFailsInABatchChangesNothingItselfAndKeepsWhatCameBefore) {
  ASSERT_TRUE(service_->InsertKeyValue("text", "abc", false).ok());
  absl::Status failed;
  service_->KeyValueAtomically([&](KeyValueStore::Batch& kv) {
    ASSERT_TRUE(kv.Insert("first", "1", false).ok());
    failed = kv.Increment("text", 1).status();
    EXPECT_EQ(kv.Insert("text", "x", false).code(), absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(kv.TryGet("").status().code(), absl::StatusCode::kInvalidArgument);
  });
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition) << failed;
  EXPECT_EQ(service_->TryGetKeyValue("text").value_or("<absent>"), "abc");
  EXPECT_EQ(service_->TryGetKeyValue("first").value_or("<absent>"), "1");
}

TEST_F(KeyValueStoreTest, KeyOverTheLimitIsResourceExhaustedAndNotStored) {
  KeyValueLimits limits;
  limits.max_key_bytes = 8;
  Start(limits);

  EXPECT_TRUE(service_->InsertKeyValue("/12345678/", "v", false).ok());
  EXPECT_EQ(service_->InsertKeyValue("123456789", "v", false).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_->IncrementKeyValue("123456789", 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_->KeyValueStats().keys, 1u);
}

TEST_F(KeyValueStoreTest, ValueOverTheLimitIsResourceExhaustedAndKeepsTheOldValue) {
  KeyValueLimits limits;
  limits.max_value_bytes = 4;
  Start(limits);
  ASSERT_TRUE(service_->InsertKeyValue("k", "abcd", false).ok());
  int64_t revision = service_->KeyValueStats().revision;

  EXPECT_EQ(service_->InsertKeyValue("k", "abcde", true).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_->TryGetKeyValue("k").value(), "abcd");
  EXPECT_EQ(service_->KeyValueStats().revision, revision);
}

TEST_F(KeyValueStoreTest, StoreOverItsTotalLimitIsResourceExhaustedAndUnchanged) {
  KeyValueLimits limits;
  limits.max_total_bytes = 10;
  Start(limits);
  ASSERT_TRUE(service_->InsertKeyValue("a", "12345", false).ok());  // 6 bytes

  EXPECT_EQ(service_->InsertKeyValue("b", "12345", false).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_->TryGetKeyValue("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(service_->KeyValueStats().bytes, 6u);
}

TEST_F(KeyValueStoreTest, OverwriteCountsOnlyTheNewSizeAgainstTheTotalLimit) {
  KeyValueLimits limits;
  limits.max_total_bytes = 10;
  Start(limits);
  ASSERT_TRUE(service_->InsertKeyValue("a", "12345", false).ok());

  EXPECT_TRUE(service_->InsertKeyValue("a", "123456789", true).ok());
  EXPECT_EQ(service_->KeyValueStats().bytes, 10u);
}

TEST_F(KeyValueStoreTest, EmptyKeyIsInvalidArgument) {
  EXPECT_EQ(service_->InsertKeyValue("", "v", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->InsertKeyValue("///", "v", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->IncrementKeyValue("/", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->DeleteKeyValue("//").code(), absl::StatusCode::kInvalidArgument);
  GetResult get = Get("/");
  ASSERT_TRUE(get.fired());
  EXPECT_EQ(get.value().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->KeyValueStats().keys, 0u);
}

TEST_F(KeyValueStoreTest, RevisionAdvancesOnEveryChangeOnly) {
  int64_t start = service_->KeyValueStats().revision;
  ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());
  EXPECT_EQ(service_->KeyValueStats().revision, start + 1);

  EXPECT_FALSE(service_->InsertKeyValue("k", "w", false).ok());
  EXPECT_EQ(service_->KeyValueStats().revision, start + 1);

  ASSERT_TRUE(service_->IncrementKeyValue("n", 1).ok());
  ASSERT_TRUE(service_->DeleteKeyValue("k").ok());
  EXPECT_EQ(service_->KeyValueStats().revision, start + 3);
}

// A journal whose volume can be full (StateStore's RoomForValues), counting the key records.
class VolumeJournal : public StateJournal {
 public:
  bool full = false;
  int key_records = 0;
  absl::Status RoomForValues() const override {
    return full ? absl::ResourceExhaustedError("the coordinator's state volume is full")
                : absl::OkStatus();
  }
  void TaskChanged(const DurableTask&) override {}
  void WholeBarrierChanged(WholeBarrierKind, const DurableWholeBarrier&) override {}
  void WholeBarrierWaiting(WholeBarrierKind, const TaskName&, bool) override {}
  void FirstError(const absl::Status&) override {}
  void DeviceGroupChanged(const std::vector<TaskName>&, const DurableDeviceGroup*) override {}
  void KeyPut(const std::string&, const std::string&, int64_t) override { ++key_records; }
  void KeyDeleted(const std::string&, int64_t) override { ++key_records; }
  void KeysChanged(const std::vector<KeyJournalChange>&) override { ++key_records; }
  void BarrierStarted(const DurableBarrier&) override {}
  void BarrierArrived(const std::string&, int64_t, const TaskName&) override {}
  void BarrierDone(const std::string&, int64_t, const absl::Status&) override {}
  void BarrierForgotten(const std::string&) override {}
};

TEST(KeyValueFullVolumeTest, EveryWriteIsRefusedUnchangedWhileReadsAndDeletesGoOn) {
  ServiceConfig config;
  config.jobs.push_back({"worker", 2});
  ManualClock clock;
  VolumeJournal journal;
  auto created = CoordinationService::Create(config, &clock, nullptr, &journal);
  ASSERT_TRUE(created.ok()) << created.status();
  CoordinationService& service = **created;
  ASSERT_TRUE(service.InsertKeyValue("a", "1", false).ok());
  ASSERT_TRUE(service.InsertKeyValue("q/00000000000000000001", "x", false).ok());
  ASSERT_TRUE(service.InsertKeyValue("gone", "x", false).ok());
  const int64_t revision = service.KeyValueStats().revision;
  const int records = journal.key_records;

  journal.full = true;
  EXPECT_EQ(service.InsertKeyValue("b", "2", false).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service.InsertKeyValue("a", "3", true).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service.IncrementKeyValue("n", 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::Status batch;
  service.KeyValueAtomically([&](KeyValueStore::Batch& kv) {
    batch = kv.Insert("c", "4", true);
    if (batch.ok()) batch = kv.Append("a", "5");
    if (batch.ok()) batch = kv.QueuePush("q", "y");
  });
  EXPECT_EQ(batch.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service.KeyValueStats().revision, revision);
  EXPECT_EQ(journal.key_records, records);  // nothing changed, nothing logged
  EXPECT_EQ(*service.TryGetKeyValue("a"), "1");
  EXPECT_EQ(service.TryGetKeyValue("b").status().code(), absl::StatusCode::kNotFound);
  // Deleting frees space and is still taken.
  EXPECT_TRUE(service.DeleteKeyValue("gone").ok());
  EXPECT_EQ(service.TryGetKeyValue("gone").status().code(), absl::StatusCode::kNotFound);

  journal.full = false;
  EXPECT_TRUE(service.InsertKeyValue("b", "2", false).ok());
  EXPECT_EQ(*service.TryGetKeyValue("b"), "2");
}

}  // namespace
}  // namespace cohort
