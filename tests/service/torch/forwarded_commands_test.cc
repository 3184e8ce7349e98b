// TCPStore commands forwarded to the coordinator (cohort.v1 TorchStore), on a real coordination
// core through the coordinator's own backend: each command carried out once however often it is
// sent, what may not be forwarded refused with nothing changed, waits answered and cancelled;
// and a sidecar's proxy session over that backend answering as the coordinator's own session.
#include "service/torch/forwarded_commands.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/backend/local_backend.h"
#include "service/core/coordination_service.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_keys.h"
#include "service/torch/torch_store_proxy_session.h"
#include "service/torch/torch_store_session.h"
#include "tests/service/torch/replies.h"

namespace cohort::torch {
namespace {

using testing::Byte;
using testing::Bytes;
using ::testing::HasSubstr;
using testing::I64;

class ForwardedCommandsTest : public ::testing::Test {
 protected:
  ForwardedCommandsTest() {
    ServiceConfig config;
    config.jobs.push_back({"worker", 2});
    config.heartbeat_timeout = absl::Hours(1);
    config.key_value.max_value_bytes = kMaxValueBytes;  // a write the store refuses: past it
    service_ = std::move(*CoordinationService::Create(config, &clock_));
    backend_ = std::make_unique<LocalBackend>(service_.get());
  }

  static constexpr size_t kMaxValueBytes = 4096;

  // A call whose answer is kept (nullopt until it comes).
  struct Call {
    WaiterId waiter = 0;
    std::shared_ptr<std::optional<absl::StatusOr<std::string>>> answer =
        std::make_shared<std::optional<absl::StatusOr<std::string>>>();
  };

  Call Start(const std::string& client, uint64_t sequence, const Command& command) {
    ForwardedTorchCommand forwarded;
    forwarded.client = client;
    forwarded.sequence = sequence;
    forwarded.command = EncodeCommand(command);
    return StartRaw(forwarded);
  }
  Call StartRaw(const ForwardedTorchCommand& forwarded) {
    Call call;
    call.waiter = backend_->NewWaiterId();
    backend_->TorchStoreCommand(CallContext{call.waiter, absl::InfiniteFuture()}, forwarded,
                                [answer = call.answer](absl::StatusOr<std::string> reply) {
                                  ASSERT_FALSE(answer->has_value()) << "answered twice";
                                  *answer = std::move(reply);
                                });
    return call;
  }
  // A call that answers at once.
  absl::StatusOr<std::string> Run(const std::string& client, uint64_t sequence,
                                  const Command& command) {
    Call call = Start(client, sequence, command);
    EXPECT_TRUE(call.answer->has_value()) << QueryName(command.query) << " did not answer at once";
    if (!call.answer->has_value()) return absl::InternalError("no answer");
    return **call.answer;
  }
  static ForwardedTorchCommand Entry(std::string client, uint64_t sequence, std::string command) {
    ForwardedTorchCommand entry;
    entry.client = std::move(client);
    entry.sequence = sequence;
    entry.command = std::move(command);
    return entry;
  }
  // A batch, answered at once by the coordinator's backend.
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> Batch(
      const std::vector<ForwardedTorchCommand>& entries) {
    std::optional<absl::StatusOr<std::vector<absl::StatusOr<std::string>>>> answer;
    backend_->TorchStoreBatch(
        CallContext{backend_->NewWaiterId(), absl::InfiniteFuture()}, entries,
        [&answer](absl::StatusOr<std::vector<absl::StatusOr<std::string>>> results) {
          answer = std::move(results);
        });
    EXPECT_TRUE(answer.has_value()) << "a batch answers at once";
    if (!answer.has_value()) return absl::InternalError("no answer");
    if (answer->ok()) {
      EXPECT_EQ((*answer)->size(), entries.size());
    }
    return *std::move(answer);
  }
  std::string Value(absl::string_view torch_key) {
    return service_->TryGetKeyValue(StoreKey(torch_key)).value_or("<absent>");
  }

  ManualClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<LocalBackend> backend_;
};

TEST_F(ForwardedCommandsTest, ACommandSentAgainIsAnsweredAgainNotCarriedOutTwice) {
  const Command add{Query::kAdd, {"init/"}, {}, 5};
  EXPECT_EQ(Run("a", 1, add).value(), I64(5));
  EXPECT_EQ(Run("a", 1, add).value(), I64(5)) << "the same answer, from the record";
  EXPECT_EQ(Value("init/"), "5");
  EXPECT_EQ(Run("b", 1, add).value(), I64(10)) << "another client's command 1 is its own";
  EXPECT_EQ(Run("a", 2, add).value(), I64(15));
  EXPECT_EQ(Value("init/"), "15");
  absl::StatusOr<std::string> stale = Run("a", 1, add);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_EQ(Value("init/"), "15");

  // A pop sent again gets the same item; the queue lost one.
  ASSERT_TRUE(Run("a", 3, {Query::kQueuePush, {"q"}, {"x"}, 0}).ok());
  ASSERT_TRUE(Run("a", 4, {Query::kQueuePush, {"q"}, {"y"}, 0}).ok());
  const Command pop{Query::kQueuePop, {"q"}, {}, 0};
  EXPECT_EQ(Run("a", 5, pop).value(), I64(2) + Bytes("x"));
  EXPECT_EQ(Run("a", 5, pop).value(), I64(2) + Bytes("x"));
  EXPECT_EQ(Run("a", 0, {Query::kQueueLen, {"q"}, {}, 0}).value(), I64(1));
  // So is a delete: it answers what the first attempt did.
  ASSERT_TRUE(Run("a", 6, {Query::kSet, {"/d"}, {"v"}, 0}).ok());
  EXPECT_EQ(Run("a", 7, {Query::kDeleteKey, {"/d"}, {}, 0}).value(), I64(1));
  EXPECT_EQ(Run("a", 7, {Query::kDeleteKey, {"/d"}, {}, 0}).value(), I64(1));
  // Reads need no number, and are carried out each time.
  EXPECT_EQ(Run("a", 0, {Query::kGet, {"init/"}, {}, 0}).value(), Bytes("15"));
  // The record is the coordinator's key, and goes when the client ends.
  EXPECT_TRUE(service_->TryGetKeyValue(ForwardedCommands::LedgerKey("a")).ok());
  ForwardedTorchCommand end;
  end.client = "a";
  end.end_client = true;
  Call ended = StartRaw(end);
  ASSERT_TRUE(ended.answer->has_value());
  EXPECT_TRUE(ended.answer->value().ok()) << ended.answer->value().status();
  EXPECT_FALSE(service_->TryGetKeyValue(ForwardedCommands::LedgerKey("a")).ok());
}

TEST_F(ForwardedCommandsTest, WhatMayNotBeForwardedIsRefusedAndChangesNothing) {
  ASSERT_TRUE(Run("a", 1, {Query::kSet, {"/k"}, {"v"}, 0}).ok());
  const KeyValueStore::Stats before = service_->KeyValueStats();
  const std::string set = EncodeCommand({Query::kSet, {"/k"}, {"w"}, 0});
  struct Case {
    const char* what;
    ForwardedTorchCommand request;
    const char* says;
  };
  auto request = [](std::string client, uint64_t sequence, std::string command,
                    bool end_client = false) {
    ForwardedTorchCommand r;
    r.client = std::move(client);
    r.sequence = sequence;
    r.command = std::move(command);
    r.end_client = end_client;
    return r;
  };
  const std::vector<Case> cases = {
      {"no client", request("", 2, set), "client name"},
      {"a client that is no path segment", request("a/b", 2, set), "[A-Za-z0-9._-]"},
      {"a client too long", request(std::string(129, 'c'), 2, set), "1 to 128"},
      {"no command", request("a", 2, ""), "no command"},
      {"half a command", request("a", 2, set.substr(0, set.size() - 1)), "ends before"},
      {"a write and half a command", request("a", 2, set + set.substr(0, 3)), "ends before"},
      {"a read behind a write", request("a", 2, set + EncodeCommand({Query::kGet, {"/k"}, {}, 0})),
       "(SET then GET)"},
      {"a GET of another key behind a WAIT",
       request("a", 0,
               EncodeCommand({Query::kWait, {"/k"}, {}, 0}) +
                   EncodeCommand({Query::kGet, {"/j"}, {}, 0})),
       "(WAIT then GET)"},
      {"a GET behind a WAIT of two keys",
       request("a", 0,
               EncodeCommand({Query::kWait, {"/k", "/j"}, {}, 0}) +
                   EncodeCommand({Query::kGet, {"/k"}, {}, 0})),
       "(WAIT then GET)"},
      {"two GETs behind a WAIT",
       request("a", 0,
               EncodeCommand({Query::kWait, {"/k"}, {}, 0}) +
                   EncodeCommand({Query::kGet, {"/k"}, {}, 0}) +
                   EncodeCommand({Query::kGet, {"/k"}, {}, 0})),
       "(WAIT then GET)"},
      {"a write behind an ADD", request("a", 2, EncodeCommand({Query::kAdd, {"/n"}, {}, 1}) + set),
       "(ADD then SET)"},
      {"a write behind a WAIT", request("a", 2, EncodeCommand({Query::kWait, {"/k"}, {}, 0}) + set),
       "(WAIT then SET)"},
      {"an unknown query byte", request("a", 2, std::string(1, '\x7f')), "not a TCPStore"},
      {"VALIDATE", request("a", 2, EncodeCommand({Query::kValidate, {}, {}, kValidationMagic})),
       "VALIDATE"},
      {"CANCEL_WAIT", request("a", 2, EncodeCommand({Query::kCancelWait, {}, {}, 0})),
       "not forwarded"},
      {"a change with no number", request("a", 0, set), "sequence number"},
      {"an end with a command", request("a", 0, set, true), "carries no command"},
  };
  for (const Case& c : cases) {
    Call call = StartRaw(c.request);
    ASSERT_TRUE(call.answer->has_value()) << c.what;
    absl::Status status = call.answer->value().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.says)) << c.what;
  }
  const KeyValueStore::Stats after = service_->KeyValueStats();
  EXPECT_EQ(after.revision, before.revision);
  EXPECT_EQ(after.keys, before.keys);
  EXPECT_EQ(Value("/k"), "v");
  // A command the store refuses changes nothing either, and leaves no record.
  ASSERT_TRUE(Run("a", 2, {Query::kSet, {"/text"}, {"abc"}, 0}).ok());
  absl::StatusOr<std::string> add = Run("a", 3, {Query::kAdd, {"/text"}, {}, 1});
  EXPECT_FALSE(add.ok());
  EXPECT_EQ(Value("/text"), "abc");
  EXPECT_EQ(Run("a", 3, {Query::kSet, {"/x"}, {"1"}, 0}).status().code(), absl::StatusCode::kOk)
      << "number 3 was not used up by the refused command";
}

TEST_F(ForwardedCommandsTest, WritesSentTogetherAreCarriedOutInOrderAsOneAndOnce) {
  // A burst of writes that answer nothing, numbered 1 to 4, in one request.
  ForwardedTorchCommand burst;
  burst.client = "a";
  burst.sequence = 1;
  burst.command = EncodeCommand({Query::kSet, {"/x"}, {"1"}, 0}) +
                  EncodeCommand({Query::kAppend, {"/x"}, {"2"}, 0}) +
                  EncodeCommand({Query::kMultiSet, {"/y", "/z"}, {"y", "z"}, 0}) +
                  EncodeCommand({Query::kQueuePush, {"q"}, {"item"}, 0});
  const int64_t revision = service_->KeyValueStats().revision;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second: its answer was lost
    Call call = StartRaw(burst);
    ASSERT_TRUE(call.answer->has_value());
    EXPECT_EQ(call.answer->value().value_or("<failed>"), "") << attempt;
    EXPECT_EQ(Value("/x"), "12") << "in order, and the APPEND once";
    EXPECT_EQ(Value("/y") + Value("/z"), "yz");
    EXPECT_EQ(Run("a", 0, {Query::kQueueLen, {"q"}, {}, 0}).value(), I64(1)) << "pushed once";
  }
  // Six keys changed (x twice, y, z, the queue's item, the record) and nothing more.
  EXPECT_EQ(service_->KeyValueStats().revision, revision + 6);
  std::string record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("a")).value();
  EXPECT_EQ(static_cast<uint8_t>(record[0]), 4) << "the number of the request's last command";
  EXPECT_EQ(Run("a", 5, {Query::kAdd, {"/n"}, {}, 1}).value(), I64(1));
  burst.sequence = 1;  // 1 to 4, after 5 was answered: older
  Call stale = StartRaw(burst);
  EXPECT_EQ(stale.answer->value().status().code(), absl::StatusCode::kFailedPrecondition);

  // The third of four refused (a key longer than the store takes): the two before it stay,
  // with a record of the second; sent again, only the third and fourth are tried.
  ForwardedTorchCommand refused;
  refused.client = "a";
  refused.sequence = 6;
  refused.command = EncodeCommand({Query::kSet, {"/r"}, {"1"}, 0}) +
                    EncodeCommand({Query::kAppend, {"/r"}, {"2"}, 0}) +
                    EncodeCommand({Query::kSet, {std::string(5000, 'k')}, {"v"}, 0}) +
                    EncodeCommand({Query::kAppend, {"/r"}, {"3"}, 0});
  for (int attempt = 0; attempt < 2; ++attempt) {
    Call call = StartRaw(refused);
    ASSERT_TRUE(call.answer->has_value());
    ASSERT_FALSE(call.answer->value().ok()) << attempt;
    EXPECT_THAT(std::string(call.answer->value().status().message()),
                HasSubstr("command 3 of 4 (SET)"));
    EXPECT_EQ(Value("/r"), "12") << attempt;
    record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("a")).value();
    EXPECT_EQ(static_cast<uint8_t>(record[0]), 7) << attempt;
  }
  EXPECT_TRUE(Run("a", 8, {Query::kSet, {"/s"}, {"1"}, 0}).ok())
      << "number 8 was not used up by the refused command";
}

TEST_F(ForwardedCommandsTest, AWaitAnswersOnceItsKeysAreThereAndCancelEndsIt) {
  Call wait = Start("w", 0, {Query::kWait, {"/a", "/b"}, {}, 0});
  EXPECT_FALSE(wait.answer->has_value());
  ASSERT_TRUE(Run("s", 1, {Query::kSet, {"/a"}, {"1"}, 0}).ok());
  EXPECT_FALSE(wait.answer->has_value());
  ASSERT_TRUE(Run("s", 2, {Query::kQueuePush, {"/b"}, {"item"}, 0}).ok());
  ASSERT_TRUE(wait.answer->has_value()) << "a queue item counts as the key";
  EXPECT_EQ(wait.answer->value().value(), Byte(kStopWaiting));
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0);

  Call never = Start("w", 0, {Query::kWait, {"/never"}, {}, 0});
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 1);
  backend_->Cancel(never.waiter, absl::CancelledError("the caller left"));
  ASSERT_TRUE(never.answer->has_value());
  EXPECT_EQ(never.answer->value().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0);
  ASSERT_TRUE(Run("s", 3, {Query::kSet, {"/never"}, {"now"}, 0}).ok());  // answers nothing
}

TEST_F(ForwardedCommandsTest, AWaitAndAGetOfItAnswerTogetherOnceTheWaitEnds) {
  const std::string get =
      EncodeCommand({Query::kWait, {"/k"}, {}, 0}) + EncodeCommand({Query::kGet, {"/k"}, {}, 0});
  ForwardedTorchCommand request;
  request.client = "a";
  request.command = get;
  request.waits = true;
  Call call = StartRaw(request);
  EXPECT_FALSE(call.answer->has_value()) << "the key is not there";
  ASSERT_TRUE(Run("b", 1, {Query::kSet, {"/k"}, {"v1"}, 0}).ok());
  ASSERT_TRUE(call.answer->has_value());
  EXPECT_EQ(call.answer->value().value_or("<failed>"), Byte(kStopWaiting) + Bytes("v1"));
  ASSERT_TRUE(Run("b", 2, {Query::kSet, {"/k"}, {"v2"}, 0}).ok());
  Call again = StartRaw(request);
  ASSERT_TRUE(again.answer->has_value()) << "there now: at once";
  EXPECT_EQ(again.answer->value().value_or("<failed>"), Byte(kStopWaiting) + Bytes("v2"));
  // Cancelled while it waits: one answer, the cancellation's.
  request.command = EncodeCommand({Query::kWait, {"/never"}, {}, 0}) +
                    EncodeCommand({Query::kGet, {"/never"}, {}, 0});
  Call cancelled = StartRaw(request);
  backend_->Cancel(cancelled.waiter, absl::CancelledError("gone"));
  ASSERT_TRUE(cancelled.answer->has_value());
  EXPECT_EQ(cancelled.answer->value().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0);
}

TEST_F(ForwardedCommandsTest, ABarrierSentAgainArrivesOnce) {
  const Command barrier{Query::kBarrier, {"/b"}, {}, 2};
  Call first = Start("a", 1, barrier);
  EXPECT_FALSE(first.answer->has_value());
  EXPECT_EQ(Value("/b"), "1");
  // Its answer was lost (the coordinator went away): sent again, it waits again.
  backend_->Cancel(first.waiter, absl::UnavailableError("the connection broke"));
  Call again = Start("a", 1, barrier);
  EXPECT_FALSE(again.answer->has_value());
  EXPECT_EQ(Value("/b"), "1") << "arrived once";
  Call other = Start("b", 1, barrier);
  ASSERT_TRUE(other.answer->has_value());
  EXPECT_EQ(other.answer->value().value(), Byte(kStopWaiting));
  ASSERT_TRUE(again.answer->has_value());
  EXPECT_EQ(again.answer->value().value(), Byte(kStopWaiting));
  EXPECT_EQ(Value("/b"), "2");
}

TEST_F(ForwardedCommandsTest, ABatchOfSeveralClientsIsCarriedOutInOrderEachAnsweredAndOnce) {
  const std::vector<ForwardedTorchCommand> batch = {
      Entry("a", 1,
            EncodeCommand({Query::kSet, {"/x"}, {"1"}, 0}) +
                EncodeCommand({Query::kAppend, {"/x"}, {"2"}, 0})),
      Entry("b", 1, EncodeCommand({Query::kAdd, {"/n"}, {}, 5})),
      Entry("c", 0, EncodeCommand({Query::kGet, {"/x"}, {}, 0})),
      Entry("a", 3, EncodeCommand({Query::kQueuePush, {"q"}, {"item"}, 0})),
      Entry("a", 4, EncodeCommand({Query::kAdd, {"/n"}, {}, 2})),
      Entry("c", 0, EncodeCommand({Query::kQueueLen, {"q"}, {}, 0})),
  };
  const int64_t revision = service_->KeyValueStats().revision;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second: its answer was lost
    auto results = Batch(batch);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), batch.size());
    EXPECT_EQ((*results)[0].value_or("<failed>"), "") << "writes answer nothing";
    EXPECT_EQ((*results)[1].value_or("<failed>"), I64(5)) << attempt;
    EXPECT_EQ((*results)[2].value_or("<failed>"), Bytes("12")) << "reads what came before it";
    EXPECT_EQ((*results)[3].value_or("<failed>"), "");
    EXPECT_EQ((*results)[4].value_or("<failed>"), I64(7)) << attempt << ": from the record";
    EXPECT_EQ((*results)[5].value_or("<failed>"), I64(1)) << "pushed once";
    EXPECT_EQ(Value("/x"), "12") << "the APPEND once";
    EXPECT_EQ(Value("/n"), "7") << "each ADD once";
  }
  // The entries that change the store between two reads are one change, with one record per
  // client: x twice, n, a's and b's records; then the queue item, n, a's record again. Sent
  // again, nothing.
  EXPECT_EQ(service_->KeyValueStats().revision, revision + 2 + 1 + 1 + 1 + 1 + 1 + 1);
  std::string record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("a")).value();
  EXPECT_EQ(absl::little_endian::Load64(record.data()), 4u);
  // The client's own numbers go on after the batch's, in batches or alone.
  EXPECT_EQ(Run("a", 5, {Query::kAdd, {"/n"}, {}, 1}).value(), I64(8));
}

TEST_F(ForwardedCommandsTest, ACommandOfABatchTheStoreRefusesEndsOnlyItsClientsPart) {
  ASSERT_TRUE(Run("a", 1, {Query::kSet, {"/text"}, {"abc"}, 0}).ok());
  const std::string too_big(kMaxValueBytes + 1, 'v');
  auto results = Batch({
      Entry("a", 2, EncodeCommand({Query::kAdd, {"/text"}, {}, 1})),
      Entry("b", 1,
            EncodeCommand({Query::kSet, {"/b1"}, {"1"}, 0}) +
                EncodeCommand({Query::kSet, {"/big"}, {too_big}, 0}) +
                EncodeCommand({Query::kSet, {"/b3"}, {"3"}, 0})),
      Entry("c", 1, EncodeCommand({Query::kSet, {"/c"}, {"c"}, 0})),
      Entry("a", 3, EncodeCommand({Query::kSet, {"/a"}, {"a"}, 0})),
      Entry("b", 0, EncodeCommand({Query::kGet, {"/b1"}, {}, 0})),
      Entry("c", 0, EncodeCommand({Query::kGet, {"/c"}, {}, 0})),
  });
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_FALSE((*results)[0].ok());
  EXPECT_THAT(std::string((*results)[1].status().message()), HasSubstr("command 2 of 3 (SET)"));
  EXPECT_EQ((*results)[2].value_or("<failed>"), "");
  EXPECT_EQ((*results)[3].status().code(), absl::StatusCode::kAborted) << (*results)[3].status();
  EXPECT_EQ((*results)[4].status().code(), absl::StatusCode::kAborted) << "a later read too";
  EXPECT_EQ((*results)[5].value_or("<failed>"), Bytes("c")) << "the other clients go on";
  EXPECT_EQ(Value("/text"), "abc");
  EXPECT_EQ(Value("/a"), "<absent>") << "not tried";
  EXPECT_EQ(Value("/b1"), "1") << "the writes before the refused one were carried out";
  EXPECT_EQ(Value("/b3"), "<absent>");
  // Sent again, b's entry tries only the rest (and is refused again at the same write).
  std::string record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("b")).value();
  EXPECT_EQ(absl::little_endian::Load64(record.data()), 1u);
  EXPECT_EQ(Run("a", 2, {Query::kSet, {"/a2"}, {"x"}, 0}).status().code(), absl::StatusCode::kOk)
      << "a's number 2 was not used up by the refused ADD";
}

TEST_F(ForwardedCommandsTest, ARefusedCommandOfABatchLeavesTheRecordOfTheOneBeforeIt) {
  ASSERT_TRUE(Run("a", 1, {Query::kSet, {"/text"}, {"abc"}, 0}).ok());
  auto results = Batch({Entry("a", 2, EncodeCommand({Query::kAdd, {"/n"}, {}, 4})),
                        Entry("a", 3, EncodeCommand({Query::kAdd, {"/text"}, {}, 1}))});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].value_or("<failed>"), I64(4));
  EXPECT_FALSE((*results)[1].ok());
  EXPECT_EQ(Run("a", 2, {Query::kAdd, {"/n"}, {}, 4}).value(), I64(4))
      << "sent again, the first ADD gets its own answer from the record";
  EXPECT_EQ(Value("/n"), "4");
}

TEST_F(ForwardedCommandsTest, ABatchWithAnEntryThatMayNotBeSentSoIsRefusedAndChangesNothing) {
  const std::string set = EncodeCommand({Query::kSet, {"/k"}, {"w"}, 0});
  struct Case {
    const char* what;
    std::vector<ForwardedTorchCommand> batch;
    const char* says;
  };
  ForwardedTorchCommand end = Entry("a", 0, "");
  end.end_client = true;
  const std::vector<Case> cases = {
      {"nothing", {}, "no commands"},
      {"a WAIT",
       {Entry("a", 1, set), Entry("b", 0, EncodeCommand({Query::kWait, {"/k"}, {}, 0}))},
       "entry 2 of 2 (client \"b\"): WAIT waits"},
      {"a BARRIER", {Entry("b", 1, EncodeCommand({Query::kBarrier, {"/b"}, {}, 2}))}, "BARRIER"},
      {"an end", {Entry("a", 1, set), end}, "does not end its client"},
      {"numbers going back", {Entry("a", 5, set + set), Entry("a", 6, set)}, "not after"},
      {"a change with no number", {Entry("a", 0, set)}, "sequence number"},
      {"a bad client", {Entry("a b", 1, set)}, "[A-Za-z0-9._-]"},
      {"half a command", {Entry("a", 1, set.substr(1))}, "entry 1 of 1"},
      {"too many",
       std::vector<ForwardedTorchCommand>(
           4097, Entry("a", 0, EncodeCommand({Query::kGetNumKeys, {}, {}, 0}))),
       "at most 4096"},
  };
  const KeyValueStore::Stats before = service_->KeyValueStats();
  for (const Case& c : cases) {
    auto results = Batch(c.batch);
    EXPECT_EQ(results.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(results.status().message()), HasSubstr(c.says)) << c.what;
  }
  EXPECT_EQ(service_->KeyValueStats().revision, before.revision);
  EXPECT_EQ(Value("/k"), "<absent>");
}

TEST(WriteOrderTest, ACommandWaitsForEveryWriteReceivedBeforeItAnsweredInAnyOrder) {
  WriteOrder order;
  EXPECT_TRUE(order.DoneUpTo(order.issued(), [] { FAIL() << "nothing to wait for"; }));
  const uint64_t first = order.Issue();
  const uint64_t second = order.Issue();
  int ran = 0;
  EXPECT_FALSE(order.DoneUpTo(second, [&ran] { ++ran; }));
  EXPECT_FALSE(order.DoneUpTo(first, [&ran] { ran += 10; }));
  order.Done(second);
  EXPECT_EQ(ran, 0) << "the first write is still out";
  const uint64_t third = order.Issue();  // received after: waited for by neither
  order.Done(first);
  EXPECT_EQ(ran, 11);
  EXPECT_TRUE(order.DoneUpTo(second, [] { FAIL() << "done already"; }));
  EXPECT_FALSE(order.DoneUpTo(third, [&ran] { ran += 100; }));
  order.Done(third);
  EXPECT_EQ(ran, 111);
}

// A sidecar's proxy session, over the coordinator's own backend here (the sidecar's forwards
// over gRPC; tests/compat runs that with torch's client). The proxy's command stream may be
// held, as behind a coordinator that has not answered yet.
class TorchStoreProxySessionTest : public ForwardedCommandsTest {
 protected:
  using Results = absl::StatusOr<std::vector<absl::StatusOr<std::string>>>;

  std::shared_ptr<CommandStream> MakeStream(
      size_t max_held_bytes = CommandStream::kDefaultMaxHeldBytes,
      size_t max_held_commands = CommandStream::kDefaultMaxHeldCommands,
      TorchStoreMetrics* metrics = nullptr) {
    return std::make_shared<CommandStream>(
        [this](std::vector<ForwardedTorchCommand> commands,
               CoordinationBackend::Done<std::vector<absl::StatusOr<std::string>>> done) {
          {
            absl::MutexLock lock(&gate_mu_);
            ++requests_;
            if (hold_) {
              held_.push_back(
                  [this, commands = std::move(commands), done = std::move(done)]() mutable {
                    backend_->TorchStoreBatch(CallContext{}, commands, std::move(done));
                  });
              return;
            }
          }
          backend_->TorchStoreBatch(CallContext{}, commands, std::move(done));
        },
        std::make_shared<WriteOrder>(), max_held_bytes, max_held_commands, metrics);
  }

  std::shared_ptr<TorchStoreProxySession> Open(
      const std::string& client,
      size_t max_held_bytes = TorchStoreProxySession::kDefaultMaxHeldBytes,
      size_t max_held_commands = TorchStoreProxySession::kDefaultMaxHeldCommands,
      TorchStoreMetrics* metrics = nullptr,
      const std::shared_ptr<CommandStream>& stream = nullptr) {
    auto session = std::make_shared<TorchStoreProxySession>(
        backend_.get(), stream ? stream : stream_, client, CodecLimits{},
        [this](const std::string& bytes) {
          absl::MutexLock lock(&mu_);
          sent_ += bytes;
        },
        [this](absl::Status why) {
          absl::MutexLock lock(&mu_);
          ended_ = std::move(why);
        },
        max_held_bytes, max_held_commands, metrics);
    session->Received(EncodeCommand({Query::kValidate, {}, {}, kValidationMagic}));
    return session;
  }
  std::string TakeSent() {
    absl::MutexLock lock(&mu_);
    return std::exchange(sent_, "");
  }
  absl::Status ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  WriteOrder& order() { return *stream_->order(); }
  // Requests upstream wait until Release.
  void Hold() {
    absl::MutexLock lock(&gate_mu_);
    hold_ = true;
  }
  void Release() {
    std::vector<std::function<void()>> held;
    {
      absl::MutexLock lock(&gate_mu_);
      hold_ = false;
      held = std::exchange(held_, {});
    }
    for (auto& send : held) send();
  }
  int requests() {
    absl::MutexLock lock(&gate_mu_);
    return requests_;
  }

  absl::Mutex gate_mu_;
  bool hold_ ABSL_GUARDED_BY(gate_mu_) = false;
  std::vector<std::function<void()>> held_ ABSL_GUARDED_BY(gate_mu_);
  int requests_ ABSL_GUARDED_BY(gate_mu_) = 0;
  std::shared_ptr<CommandStream> stream_ = MakeStream();
  absl::Mutex mu_;
  std::string sent_;
  absl::Status ended_;
};

TEST_F(TorchStoreProxySessionTest, CommandsAnswerAsOnTheCoordinatorsOwnPort) {
  const std::string commands =
      EncodeCommand({Query::kSet, {"/k"}, {"v"}, 0}) + EncodeCommand({Query::kGet, {"/k"}, {}, 0}) +
      EncodeCommand({Query::kGet, {"/missing"}, {}, 0}) +
      EncodeCommand({Query::kAdd, {"init/"}, {}, 3}) +
      EncodeCommand({Query::kCompareSet, {"/absent"}, {"x", "y"}, 0}) +
      EncodeCommand({Query::kCheck, {"/k", "init/"}, {}, 0}) +
      EncodeCommand({Query::kGetNumKeys, {}, {}, 0}) +
      EncodeCommand({Query::kDeleteKey, {"/k"}, {}, 0}) +
      EncodeCommand({Query::kDeleteKey, {"/k"}, {}, 0}) + EncodeCommand({Query::kPing, {}, {}, 77});
  auto proxy = Open("p");
  // Byte by byte: commands split anywhere.
  for (char c : commands) proxy->Received(absl::string_view(&c, 1));
  std::string through_proxy = TakeSent();
  // The same commands on a session of the coordinator's own port, on a fresh store.
  ASSERT_TRUE(Run("p", 0, {Query::kGet, {"/k"}, {}, 0}).ok());
  ServiceConfig config;
  config.jobs.push_back({"worker", 2});
  auto fresh = std::move(*CoordinationService::Create(config, &clock_));
  std::string direct;
  auto session = std::make_shared<TorchStoreSession>(
      fresh.get(), CodecLimits{}, [&direct](const std::string& b) { direct += b; },
      [](const absl::Status&) {});
  session->Received(EncodeCommand({Query::kValidate, {}, {}, kValidationMagic}) + commands);
  EXPECT_EQ(through_proxy, direct);
  EXPECT_TRUE(ended().ok()) << ended();
  // It changed the store four times (SET, ADD, COMPARE_SET, DELETE_KEY twice: five numbers).
  std::string record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("p")).value();
  EXPECT_EQ(static_cast<uint8_t>(record[0]), 5);
  proxy->Closed();
  EXPECT_FALSE(service_->TryGetKeyValue(ForwardedCommands::LedgerKey("p")).ok())
      << "a closed connection's record is forgotten";
}

TEST_F(TorchStoreProxySessionTest, ABurstOfWritesGoesUpstreamInFewRequests) {
  // Each request upstream writes the connection's record once: the store's revision counts
  // the requests. The first waits upstream.
  Hold();
  auto proxy = Open("p");
  std::string burst;
  for (int i = 0; i < 300; ++i)
    burst += EncodeCommand({Query::kSet, {absl::StrCat("/k", i)}, {"v"}, 0});
  proxy->Received(burst + EncodeCommand({Query::kGet, {"/k299"}, {}, 0}));
  EXPECT_EQ(TakeSent(), "") << "the GET waits for the writes before it";
  int64_t revision = service_->KeyValueStats().revision;
  Release();
  EXPECT_EQ(TakeSent(), Bytes("v"));
  EXPECT_EQ(service_->KeyValueStats().revision, revision + 300 + 2)
      << "300 keys, and a record for each of two runs (256 writes at most in one)";
  std::string record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("p")).value();
  EXPECT_EQ(absl::little_endian::Load64(record.data()), 300u);
  EXPECT_EQ(requests(), 3) << "the first run, the second, then the GET";

  // The writes of several connections received while a request is out go in the next one.
  auto other = Open("q");
  Hold();
  other->Received(EncodeCommand({Query::kSet, {"/q0"}, {"0"}, 0}));
  proxy->Received(EncodeCommand({Query::kSet, {"/a1"}, {"1"}, 0}));
  other->Received(EncodeCommand({Query::kAppend, {"/q0"}, {"1"}, 0}));
  proxy->Received(EncodeCommand({Query::kSet, {"/a2"}, {"2"}, 0}));
  EXPECT_EQ(requests(), 4) << "one out, the rest waiting for it";
  EXPECT_EQ(Value("/q0"), "<absent>");
  Release();
  EXPECT_EQ(requests(), 5);
  EXPECT_EQ(Value("/q0"), "01");
  EXPECT_EQ(Value("/a1") + Value("/a2"), "12");
  record = service_->TryGetKeyValue(ForwardedCommands::LedgerKey("p")).value();
  EXPECT_EQ(absl::little_endian::Load64(record.data()), 302u);
  EXPECT_TRUE(ended().ok()) << ended();
}

TEST_F(TorchStoreProxySessionTest, ItCountsTheCommandsItReadsAndThoseItHolds) {
  MetricsRegistry registry;
  TorchStoreMetrics metrics(registry, "cohort_sidecar", /*held=*/true);
  auto shows = [&registry](const std::string& line) {
    return absl::StrContains(registry.Render(), absl::StrCat("\n", line, "\n"));
  };
  stream_ = MakeStream(CommandStream::kDefaultMaxHeldBytes, CommandStream::kDefaultMaxHeldCommands,
                       &metrics);
  Hold();
  auto proxy = Open("p", TorchStoreProxySession::kDefaultMaxHeldBytes,
                    TorchStoreProxySession::kDefaultMaxHeldCommands, &metrics);
  proxy->Received(EncodeCommand({Query::kSet, {"/a"}, {"1"}, 0}));  // sent, not answered
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_held_commands 0")) << registry.Render();
  // One write waits in the stream behind that request, the GET for both writes.
  proxy->Received(EncodeCommand({Query::kSet, {"/b"}, {"2"}, 0}) +
                  EncodeCommand({Query::kGet, {"/b"}, {}, 0}));
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_held_commands 2")) << registry.Render();
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_commands_total{command=\"SET\"} 2"));
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_commands_total{command=\"VALIDATE\"} 1"));
  Release();
  EXPECT_EQ(TakeSent(), Bytes("2"));
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_held_commands 0")) << registry.Render();
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_commands_total{command=\"GET\"} 1"));
  // A connection gone with commands it will not send: they leave the count with it.
  auto refused = Open("q", TorchStoreProxySession::kDefaultMaxHeldBytes,
                      TorchStoreProxySession::kDefaultMaxHeldCommands, &metrics);
  const uint64_t blocker = order().Issue();  // another connection's write, not yet answered
  refused->Received(EncodeCommand({Query::kGet, {"/c"}, {}, 0}));
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_held_commands 1")) << registry.Render();
  refused.reset();
  EXPECT_TRUE(shows("cohort_sidecar_torch_store_held_commands 0")) << registry.Render();
  order().Done(blocker);
}

TEST_F(TorchStoreProxySessionTest, CancelWaitEndsTheWaitOutAndTheConnectionGoesOn) {
  auto proxy = Open("p");
  proxy->Received(EncodeCommand({Query::kWait, {"/never"}, {}, 0}));
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 1);
  // What comes behind the WAIT waits its turn.
  proxy->Received(EncodeCommand({Query::kCancelWait, {}, {}, 0}) +
                  EncodeCommand({Query::kGet, {"/never"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Byte(kWaitCanceled) + Bytes(""));
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0);
  // A WAIT answered before its CANCEL_WAIT came: STOP_WAITING, then WAIT_CANCELED.
  proxy->Received(EncodeCommand({Query::kWait, {"/soon"}, {}, 0}));
  ASSERT_TRUE(Run("s", 1, {Query::kSet, {"/soon"}, {"1"}, 0}).ok());
  proxy->Received(EncodeCommand({Query::kCancelWait, {}, {}, 0}));
  EXPECT_EQ(TakeSent(), Byte(kStopWaiting) + Byte(kWaitCanceled));
  EXPECT_TRUE(ended().ok()) << ended();
}

TEST_F(TorchStoreProxySessionTest, WritesReceivedBeforeTheClientLeftStillGoAndWaitsDoNot) {
  // The coordinator has not answered yet.
  Hold();
  auto proxy = Open("p");
  proxy->Received(EncodeCommand({Query::kSet, {"/x"}, {"1"}, 0}) +
                  EncodeCommand({Query::kAppend, {"/x"}, {"2"}, 0}) +
                  EncodeCommand({Query::kWait, {"/never"}, {}, 0}));
  EXPECT_EQ(Value("/x"), "<absent>");
  proxy->Closed();  // torch's set() returned once the bytes were sent; the process exited
  proxy.reset();
  Release();
  EXPECT_EQ(Value("/x"), "12") << "what the client sent before it left was carried out";
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0) << "a gone client's wait ends";
  EXPECT_FALSE(service_->TryGetKeyValue(ForwardedCommands::LedgerKey("p")).ok())
      << "then the coordinator forgot the connection";
  EXPECT_EQ(TakeSent(), "");
}

TEST_F(TorchStoreProxySessionTest, AConnectionHoldingTooMuchStopsReadingUntilHalfOfItWent) {
  // The coordinator has not answered the first writes.
  Hold();
  auto proxy = Open("p", /*max_held_bytes=*/1000);
  int resumed = 0;
  proxy->OnResume([&resumed] { ++resumed; });
  const std::string value(100, 'v');
  int sets = 0;
  while (!proxy->Full()) {
    proxy->Received(EncodeCommand({Query::kSet, {absl::StrCat("/k", sets)}, {value}, 0}));
    ASSERT_LT(++sets, 100) << "never full";
  }
  EXPECT_GT(sets, 1) << "one command is never too much";
  EXPECT_TRUE(proxy->Full()) << "still full: nothing went";
  EXPECT_EQ(Value("/k0"), "<absent>");
  EXPECT_EQ(resumed, 0);
  Release();
  EXPECT_EQ(resumed, 1) << "told once, when half had gone";
  EXPECT_EQ(Value(absl::StrCat("/k", sets - 1)), value) << "every write was carried out";
  EXPECT_FALSE(proxy->Full());
  EXPECT_TRUE(ended().ok()) << ended();

  // Small commands: their number.
  const uint64_t later = order().Issue();  // another connection's write, not yet answered
  auto many = Open("q", TorchStoreProxySession::kDefaultMaxHeldBytes, /*max_held_commands=*/8);
  many->OnResume([&resumed] { ++resumed; });
  for (int i = 0; i < 8; ++i) {
    many->Received(EncodeCommand({Query::kAdd, {"/n"}, {}, 1}));
    EXPECT_FALSE(many->Full()) << i;
  }
  many->Received(EncodeCommand({Query::kAdd, {"/n"}, {}, 1}));
  EXPECT_TRUE(many->Full());
  order().Done(later);
  EXPECT_EQ(resumed, 2);
  EXPECT_EQ(Value("/n"), "9");
}

TEST_F(TorchStoreProxySessionTest, ACancelWaitForAWaitNotYetSentEndsItThere) {
  const uint64_t earlier = order().Issue();  // another connection's write, not yet answered
  auto proxy = Open("p");
  proxy->Received(EncodeCommand({Query::kWait, {"/never"}, {}, 0}));
  proxy->Received(EncodeCommand({Query::kCancelWait, {}, {}, 0}));
  order().Done(earlier);
  EXPECT_EQ(TakeSent(), Byte(kWaitCanceled));
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0) << "the WAIT was never sent";
  proxy->Received(EncodeCommand({Query::kGet, {"/never"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Bytes("")) << "the connection goes on";
}

TEST_F(TorchStoreProxySessionTest, ACommandTheCoordinatorRefusesEndsTheConnection) {
  auto proxy = Open("p");
  proxy->Received(EncodeCommand({Query::kSet, {"/t"}, {"text"}, 0}) +
                  EncodeCommand({Query::kAdd, {"/t"}, {}, 1}) +
                  EncodeCommand({Query::kSet, {"/after"}, {"x"}, 0}));
  EXPECT_FALSE(ended().ok());
  EXPECT_THAT(std::string(ended().message()), HasSubstr("ADD"));
  EXPECT_EQ(Value("/after"), "<absent>") << "nothing after the refused command runs";
  // Bad bytes end it too, before anything goes upstream.
  auto bad = Open("q");
  bad->Received(std::string(1, '\x7f'));
  EXPECT_THAT(std::string(ended().message()), HasSubstr("unknown"));
}

TEST_F(TorchStoreProxySessionTest, TheProxysWritesPastItsLimitStopEveryConnectionUntilHalfWent) {
  auto stream = MakeStream(CommandStream::kDefaultMaxHeldBytes, /*max_held_commands=*/4);
  Hold();
  auto p = Open("p", TorchStoreProxySession::kDefaultMaxHeldBytes,
                TorchStoreProxySession::kDefaultMaxHeldCommands, nullptr, stream);
  auto q = Open("q", TorchStoreProxySession::kDefaultMaxHeldBytes,
                TorchStoreProxySession::kDefaultMaxHeldCommands, nullptr, stream);
  int resumed_p = 0, resumed_q = 0;
  p->OnResume([&resumed_p] { ++resumed_p; });
  q->OnResume([&resumed_q] { ++resumed_q; });
  for (int i = 0; i < 5; ++i) {
    auto& proxy = i % 2 == 0 ? p : q;
    EXPECT_FALSE(proxy->Full()) << i;
    proxy->Received(EncodeCommand({Query::kSet, {absl::StrCat("/k", i)}, {"v"}, 0}));
  }
  EXPECT_TRUE(p->Full()) << "five writes, past the proxy's four";
  EXPECT_TRUE(q->Full()) << "whichever connection sent them";
  Release();
  EXPECT_EQ(resumed_p, 1);
  EXPECT_EQ(resumed_q, 1);
  EXPECT_FALSE(p->Full());
  EXPECT_EQ(Value("/k4"), "v");
}

TEST_F(TorchStoreProxySessionTest, AWriteTheCoordinatorRefusesEndsOnlyItsConnection) {
  Hold();
  auto p = Open("p");
  auto q = Open("q");
  q->Received(EncodeCommand({Query::kSet, {"/q"}, {"1"}, 0}));  // out, held
  p->Received(EncodeCommand({Query::kSet, {"/big"}, {std::string(kMaxValueBytes + 1, 'v')}, 0}) +
              EncodeCommand({Query::kSet, {"/after"}, {"x"}, 0}));
  q->Received(EncodeCommand({Query::kSet, {"/q2"}, {"2"}, 0}) +
              EncodeCommand({Query::kGet, {"/q2"}, {}, 0}));
  Release();
  EXPECT_FALSE(ended().ok()) << "p ended";
  EXPECT_THAT(std::string(ended().message()), HasSubstr("the coordinator"));
  EXPECT_EQ(Value("/after"), "<absent>") << "p's writes after the refused one are not carried out";
  EXPECT_EQ(TakeSent(), Bytes("2")) << "q goes on";
  EXPECT_EQ(Value("/q") + Value("/q2"), "12");
}

TEST_F(TorchStoreProxySessionTest, TorchsGetIsOneRoundTripUnlessAWriteCameInBetween) {
  auto proxy = Open("p");
  auto other = Open("q");
  // get(): a WAIT, then, once it ends, a GET of its key, answered with the WAIT.
  proxy->Received(EncodeCommand({Query::kWait, {"/k"}, {}, 0}));
  ASSERT_TRUE(Run("s", 1, {Query::kSet, {"/k"}, {"v1"}, 0}).ok());
  EXPECT_EQ(TakeSent(), Byte(kStopWaiting));
  const int before = requests();
  proxy->Received(EncodeCommand({Query::kGet, {"/k"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Bytes("v1"));
  EXPECT_EQ(requests(), before) << "the GET did not go upstream";

  // A write through the proxy between the WAIT and the GET: the GET reads it upstream.
  proxy->Received(EncodeCommand({Query::kWait, {"/k"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Byte(kStopWaiting));
  other->Received(EncodeCommand({Query::kSet, {"/k"}, {"v2"}, 0}));
  proxy->Received(EncodeCommand({Query::kGet, {"/k"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Bytes("v2"));
  // A GET of another key, or one after another command, asks too.
  proxy->Received(EncodeCommand({Query::kWait, {"/k"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Byte(kStopWaiting));
  proxy->Received(EncodeCommand({Query::kPing, {}, {}, 7}));
  ASSERT_TRUE(Run("s", 2, {Query::kSet, {"/k"}, {"v3"}, 0}).ok());  // not through the proxy
  proxy->Received(EncodeCommand({Query::kGet, {"/k"}, {}, 0}));
  std::string pong;
  AppendU32(7, &pong);
  EXPECT_EQ(TakeSent(), pong + Bytes("v3"));
  EXPECT_TRUE(ended().ok()) << ended();
}

}  // namespace
}  // namespace cohort::torch
