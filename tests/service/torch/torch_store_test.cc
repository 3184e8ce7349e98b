// The TCPStore protocol on a real coordination core: a session's commands and replies, the
// torch keys in the coordinator's store, and the server over loopback sockets with many
// clients at once.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_keys.h"
#include "service/torch/torch_store_metrics.h"
#include "service/torch/torch_store_server.h"
#include "service/torch/torch_store_session.h"
#include "tests/service/torch/replies.h"

namespace cohort::torch {
namespace {

using testing::Byte;
using testing::Bytes;
using ::testing::HasSubstr;
using testing::I64;

TEST(TorchKeysTest, KeysAreOnePrintableSegmentAndComeBack) {
  EXPECT_EQ(StoreKey("/default_pg/0//cuda//k"), "torch/%2Fdefault_pg%2F0%2F%2Fcuda%2F%2Fk");
  EXPECT_EQ(StoreKey("init/"), "torch/init%2F");
  EXPECT_EQ(StoreKey(""), "torch/%");
  EXPECT_EQ(StoreKey(std::string("a%b c\x00\xff", 7)), "torch/a%25b%20c%00%FF");
  for (const std::string& key : {std::string("/x"), std::string(), std::string("a%b c\x00\xff", 7),
                                 std::string("torch/%2F")}) {
    std::optional<std::string> back = TorchKey(StoreKey(key));
    ASSERT_TRUE(back.has_value()) << key;
    EXPECT_EQ(*back, key);
    EXPECT_EQ(KeyValueStore::NormalizeKey(StoreKey(key)), StoreKey(key)) << "nothing to normalise";
  }
  EXPECT_EQ(TorchKey("other/x"), std::nullopt);
  EXPECT_EQ(TorchKey("torch/%2"), std::nullopt);
  EXPECT_EQ(TorchKey("torch/%41"), std::nullopt) << "'A' is never escaped";
  EXPECT_EQ(TorchKey("torch/a/b"), std::nullopt);
}

// A session on a real core; what it sends and why it ended, recorded.
class TorchStoreSessionTest : public ::testing::Test {
 protected:
  TorchStoreSessionTest() {
    ServiceConfig config;
    config.jobs.push_back({"worker", 2});
    config.heartbeat_timeout = absl::Hours(1);
    service_ = std::move(*CoordinationService::Create(config, &clock_));
  }

  // `id` names the connection for SentTo.
  std::shared_ptr<TorchStoreSession> Open(int id = 0) {
    auto session = std::make_shared<TorchStoreSession>(
        service_.get(), CodecLimits{},
        [this, id](const std::string& bytes) {
          absl::MutexLock lock(&mu_);
          sent_ += bytes;
          sent_to_[id] += bytes;
        },
        [this](absl::Status why) {
          absl::MutexLock lock(&mu_);
          ended_ = std::move(why);
        });
    session->Received(EncodeCommand({Query::kValidate, {}, {}, kValidationMagic}));
    return session;
  }

  std::string TakeSent() {
    absl::MutexLock lock(&mu_);
    sent_to_.clear();
    return std::exchange(sent_, "");
  }
  // What connection `id` was sent since the last TakeSent.
  std::string SentTo(int id) {
    absl::MutexLock lock(&mu_);
    return sent_to_[id];
  }
  int64_t Parked() { return service_->ParkedCalls(ParkKind::kTorchStoreWait); }
  absl::Status ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

  ManualClock clock_;
  std::unique_ptr<CoordinationService> service_;
  absl::Mutex mu_;
  std::string sent_;
  std::map<int, std::string> sent_to_;
  absl::Status ended_;
};

TEST_F(TorchStoreSessionTest, CommandsAnswerAsTorchsServerDoes) {
  auto s = Open();
  s->Received(EncodeCommand({Query::kSet, {"/k"}, {"v"}, 0}) +
              EncodeCommand({Query::kGet, {"/k"}, {}, 0}) +
              EncodeCommand({Query::kGet, {"/missing"}, {}, 0}) +
              EncodeCommand({Query::kAdd, {"init/"}, {}, 3}) +
              EncodeCommand({Query::kCompareSet, {"/absent"}, {"x", "y"}, 0}) +
              EncodeCommand({Query::kCheck, {"/k", "init/"}, {}, 0}) +
              EncodeCommand({Query::kGetNumKeys, {}, {}, 0}) +
              EncodeCommand({Query::kDeleteKey, {"/k"}, {}, 0}) +
              EncodeCommand({Query::kDeleteKey, {"/k"}, {}, 0}) +
              EncodeCommand({Query::kPing, {}, {}, 77}));
  std::string want = Bytes("v") + Bytes("") + I64(3) + Bytes("x") + std::string(1, '\0') + I64(2) +
                     I64(1) + I64(0);
  AppendU32(77, &want);
  EXPECT_EQ(TakeSent(), want);
  EXPECT_TRUE(ended().ok()) << ended();
  EXPECT_EQ(service_->TryGetKeyValue("torch/init%2F").value(), "3");
}

TEST_F(TorchStoreSessionTest, AWaitAnswersOnceEveryKeyIsWrittenByAnotherConnection) {
  auto waiter = Open();
  auto writer = Open();
  waiter->Received(EncodeCommand({Query::kWait, {"/a", "/b"}, {}, 0}));
  // One call per key, which its value or an item in the queue of its name ends.
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 2);
  writer->Received(EncodeCommand({Query::kSet, {"/a"}, {"1"}, 0}));
  EXPECT_EQ(TakeSent(), "");
  EXPECT_EQ(Parked(), 1) << "/a's call is done";
  writer->Received(EncodeCommand({Query::kAppend, {"/b"}, {"2"}, 0}));
  EXPECT_EQ(TakeSent(), std::string(1, kStopWaiting));
  EXPECT_EQ(Parked(), 0);
}

TEST_F(TorchStoreSessionTest, CancelWaitEndsTheWaitAndTheConnectionGoesOn) {
  auto s = Open();
  s->Received(EncodeCommand({Query::kWait, {"/never"}, {}, 0}));
  s->Received(EncodeCommand({Query::kCancelWait, {}, {}, 0}));
  EXPECT_EQ(TakeSent(), std::string(1, kWaitCanceled));
  EXPECT_EQ(Parked(), 0);
  ASSERT_TRUE(service_->InsertKeyValue(StoreKey("/never"), "now", false).ok());
  EXPECT_EQ(TakeSent(), "") << "the cancelled wait answers nothing";
  s->Received(EncodeCommand({Query::kGet, {"/never"}, {}, 0}));
  EXPECT_EQ(TakeSent(), Bytes("now"));
}

TEST_F(TorchStoreSessionTest, ABarrierReleasesEveryArrivalAtTheWorldSize) {
  std::vector<std::shared_ptr<TorchStoreSession>> ranks;
  for (int i = 0; i < 3; ++i) {
    ranks.push_back(Open());
    ranks.back()->Received(EncodeCommand({Query::kBarrier, {"/b"}, {}, 3}));
    if (i < 2) {
      EXPECT_EQ(TakeSent(), "") << "arrival " << i;
    }
  }
  EXPECT_EQ(TakeSent(), std::string(3, kStopWaiting));
  EXPECT_EQ(service_->TryGetKeyValue(StoreKey("/b")).value(), "3");
}

TEST_F(TorchStoreSessionTest, AFailedCommandEndsTheConnectionAndChangesNothing) {
  auto s = Open();
  ASSERT_TRUE(service_->InsertKeyValue(StoreKey("/word"), "abc", false).ok());
  s->Received(EncodeCommand({Query::kAdd, {"/word"}, {}, 1}) +
              EncodeCommand({Query::kSet, {"/after"}, {"x"}, 0}));
  EXPECT_EQ(ended().code(), absl::StatusCode::kFailedPrecondition) << ended();
  EXPECT_THAT(ended().ToString(), HasSubstr("ADD"));
  EXPECT_EQ(service_->TryGetKeyValue(StoreKey("/word")).value(), "abc");
  EXPECT_EQ(service_->TryGetKeyValue(StoreKey("/after")).status().code(),
            absl::StatusCode::kNotFound)
      << "nothing after the failed command is carried out";
}

TEST_F(TorchStoreSessionTest, AWaitThatCannotParkEveryKeyParksNoneAndEndsTheConnection) {
  auto s = Open();
  // The middle key is past --max-key-bytes (4096) once escaped: its get fails at once.
  s->Received(EncodeCommand({Query::kWait, {"/a", std::string(3000, '/'), "/b"}, {}, 0}) +
              EncodeCommand({Query::kSet, {"/after"}, {"x"}, 0}));
  EXPECT_EQ(ended().code(), absl::StatusCode::kResourceExhausted) << ended();
  EXPECT_EQ(Parked(), 0);
  EXPECT_EQ(service_->TryGetKeyValue(StoreKey("/after")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(TakeSent(), "");
}

TEST_F(TorchStoreSessionTest, AClosedConnectionsWaitsAreCancelled) {
  auto s = Open();
  s->Received(EncodeCommand({Query::kWait, {"/x", "/y"}, {}, 0}));
  EXPECT_EQ(Parked(), 2);
  s->Closed();
  EXPECT_EQ(Parked(), 0);
  EXPECT_EQ(TakeSent(), "");
}

TEST_F(TorchStoreSessionTest, AKeyTooLongForAQueueItemWaitsForItsValueOnly) {
  auto s = Open();
  // "torch/" and the key fit the limit (4096); "torch-queue/", the key and an item's 21 do not.
  const std::string key(4080, 'k');
  s->Received(EncodeCommand({Query::kWait, {key}, {}, 0}));
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 1);
  EXPECT_TRUE(ended().ok()) << ended();
  ASSERT_TRUE(service_->InsertKeyValue(StoreKey(key), "v", false).ok());
  EXPECT_EQ(TakeSent(), std::string(1, kStopWaiting));
}

TEST_F(TorchStoreSessionTest, QueuesAnswerAsTorchsServerDoes) {
  auto s = Open();
  s->Received(EncodeCommand({Query::kCheck, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kQueuePush, {"/q"}, {"first"}, 0}) +
              EncodeCommand({Query::kQueuePush, {"/q"}, {std::string("\0two", 4)}, 0}) +
              EncodeCommand({Query::kQueueLen, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kCheck, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kGet, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kGetNumKeys, {}, {}, 0}) +
              EncodeCommand({Query::kQueuePop, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kQueuePop, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kQueuePop, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kQueueLen, {"/q"}, {}, 0}) +
              EncodeCommand({Query::kQueueLen, {"/never"}, {}, 0}));
  std::string want = std::string(1, kCheckNotReady) + I64(2) + std::string(1, kCheckReady) +
                     Bytes("") + I64(0) + I64(2) + Bytes("first") + I64(1) +
                     Bytes(std::string("\0two", 4)) + I64(0) + I64(0) + I64(0);
  EXPECT_EQ(TakeSent(), want);
  EXPECT_TRUE(ended().ok()) << ended();
}

TEST_F(TorchStoreSessionTest, QueueItemsAreTheCoordinatorsKeysAndKeepTheirOrder) {
  auto s = Open();
  for (int i = 0; i < 12; ++i) {
    s->Received(EncodeCommand({Query::kQueuePush, {"/work"}, {absl::StrCat("item ", i)}, 0}));
  }
  std::vector<KeyValueEntry> items = service_->GetKeyValueDir(QueueKey("/work"));
  ASSERT_EQ(items.size(), 12u);
  EXPECT_EQ(items[0].key, "torch-queue/%2Fwork/00000000000000000001");
  EXPECT_EQ(items[11].key, "torch-queue/%2Fwork/00000000000000000012");
  EXPECT_EQ(items[11].value, "item 11");
  std::string want;
  for (int i = 0; i < 12; ++i) {
    s->Received(EncodeCommand({Query::kQueuePop, {"/work"}, {}, 0}));
    want += I64(12 - i) + Bytes(absl::StrCat("item ", i));
  }
  EXPECT_EQ(TakeSent(), want) << "first in, first out, past item 9 too";
  EXPECT_TRUE(service_->GetKeyValueDir(QueueKey("/work")).empty());
}

TEST_F(TorchStoreSessionTest, APushEndsOneWaitOnItsNameTheLongestWaiting) {
  auto first = Open(1), second = Open(2), pusher = Open(3);
  first->Received(EncodeCommand({Query::kWait, {"/q"}, {}, 0}));
  second->Received(EncodeCommand({Query::kWait, {"/q"}, {}, 0}));
  EXPECT_EQ(Parked(), 2);
  pusher->Received(EncodeCommand({Query::kQueuePush, {"/q"}, {"a"}, 0}));
  EXPECT_EQ(SentTo(1), std::string(1, kStopWaiting));
  EXPECT_EQ(SentTo(2), "") << "one push ends one wait";
  EXPECT_EQ(Parked(), 1);
  // The woken one pops (torch's queue_pop(block=True)); the other is woken by the next push.
  first->Received(EncodeCommand({Query::kQueuePop, {"/q"}, {}, 0}));
  pusher->Received(EncodeCommand({Query::kQueuePush, {"/q"}, {"b"}, 0}));
  EXPECT_EQ(SentTo(1), std::string(1, kStopWaiting) + I64(1) + Bytes("a"));
  EXPECT_EQ(SentTo(2), std::string(1, kStopWaiting));
  EXPECT_EQ(Parked(), 0);
  // A WAIT on a name whose queue has an item answers at once.
  second->Received(EncodeCommand({Query::kWait, {"/q"}, {}, 0}));
  EXPECT_EQ(SentTo(2), std::string(2, kStopWaiting));
  EXPECT_EQ(Parked(), 0);
}

TEST_F(TorchStoreSessionTest, ASetOnAQueuesNameEndsEveryWaitOnIt) {
  auto first = Open(1), second = Open(2), setter = Open(3);
  first->Received(EncodeCommand({Query::kWait, {"/q"}, {}, 0}));
  second->Received(EncodeCommand({Query::kWait, {"/q", "/other"}, {}, 0}));
  setter->Received(EncodeCommand({Query::kSet, {"/q"}, {"v"}, 0}));
  EXPECT_EQ(SentTo(1), std::string(1, kStopWaiting));
  EXPECT_EQ(SentTo(2), "");
  EXPECT_EQ(Parked(), 1) << "/other's call";
  // The set took the ended waits' calls off /q's queue too: a push into /q is nobody's, and
  // one into /other ends second's wait.
  setter->Received(EncodeCommand({Query::kQueuePush, {"/q"}, {"x"}, 0}));
  EXPECT_EQ(SentTo(1), std::string(1, kStopWaiting)) << "nothing more";
  EXPECT_EQ(SentTo(2), "");
  setter->Received(EncodeCommand({Query::kQueuePush, {"/other"}, {"x"}, 0}));
  EXPECT_EQ(SentTo(2), std::string(1, kStopWaiting));
  EXPECT_EQ(Parked(), 0);
}

// A blocking client socket on loopback, validated.
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    Send(EncodeCommand({Query::kValidate, {}, {}, kValidationMagic}));
  }
  ~Client() { close(fd_); }
  bool ok() const { return ok_; }
  void Send(const std::string& bytes) {
    size_t sent = 0;
    while (ok_ && sent < bytes.size()) {
      ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) ok_ = false;
      sent += n > 0 ? n : 0;
    }
  }
  // Exactly n bytes; fewer if the server closed the connection.
  std::string Read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      ssize_t r = recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += r;
    }
    out.resize(got);
    return out;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// A server on loopback over a real core (jobs of `tasks` tasks: the park limits scale with it).
class TorchStoreServerTest : public ::testing::Test {
 protected:
  void Start(int tasks, const std::string& listen = "127.0.0.1:0") {
    ServiceConfig config;
    config.jobs.push_back({"worker", tasks});
    service_ = std::move(*CoordinationService::Create(config, &clock_));
    TorchStoreServerOptions options;
    options.listen = listen;
    options.metrics = &metrics_;
    server_ = std::make_unique<TorchStoreServer>(service_.get(), options);
    started_ = server_->Start();
  }

  // Whether the exposition has `line` (a series and its value).
  bool Shows(const std::string& line) const {
    return absl::StrContains(registry_.Render(), absl::StrCat("\n", line, "\n"));
  }

  ManualClock clock_;
  MetricsRegistry registry_;
  TorchStoreMetrics metrics_{registry_, "cohort_coordinator", /*held=*/false};
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<TorchStoreServer> server_;
  absl::Status started_;
};

TEST_F(TorchStoreServerTest, ManyClientsMeetAtABarrierOverLoopback) {
  constexpr int kClients = 64;
  Start(kClients);
  ASSERT_TRUE(started_.ok()) << started_;
  std::vector<std::string> answers(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      Client client(server_->port());
      client.Send(EncodeCommand({Query::kSet, {"/rank/" + std::to_string(i)}, {"up"}, 0}) +
                  EncodeCommand({Query::kBarrier, {"/all"}, {}, kClients}));
      answers[i] = client.Read(1);
      // One command at a time, as torch's client sends them.
      client.Send(EncodeCommand({Query::kGetNumKeys, {}, {}, 0}));
      answers[i] += client.Read(8);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(answers[i], std::string(1, kStopWaiting) + I64(kClients + 1)) << "client " << i;
  }
  server_->Stop();
}

TEST_F(TorchStoreServerTest, BadInputClosesTheConnectionAndTheServerGoesOn) {
  Start(1);
  ASSERT_TRUE(started_.ok()) << started_;
  Client bad(server_->port());
  bad.Send(std::string(1, '\x13'));
  EXPECT_EQ(bad.Read(1), "") << "closed";
  Client good(server_->port());
  good.Send(EncodeCommand({Query::kPing, {}, {}, 5}));
  std::string want;
  AppendU32(5, &want);
  EXPECT_EQ(good.Read(4), want);
  // A connection that stays open while the server stops is closed, its wait cancelled.
  Client waiting(server_->port());
  waiting.Send(EncodeCommand({Query::kWait, {"/never"}, {}, 0}));
  waiting.Send(EncodeCommand({Query::kPing, {}, {}, 6}));  // answered: the WAIT is parked
  EXPECT_EQ(waiting.Read(4).size(), 4u);
  EXPECT_TRUE(Shows("cohort_coordinator_torch_store_connections 2"));
  server_->Stop();
  EXPECT_EQ(waiting.Read(1), "");
  EXPECT_EQ(service_->ParkedCalls(ParkKind::kTorchStoreWait), 0);
  // What the job's dashboard row reads: commands by kind (the bad byte is none), connections
  // open, and how they ended.
  for (const char* line :
       {"cohort_coordinator_torch_store_commands_total{command=\"VALIDATE\"} 3",
        "cohort_coordinator_torch_store_commands_total{command=\"PING\"} 2",
        "cohort_coordinator_torch_store_commands_total{command=\"WAIT\"} 1",
        "cohort_coordinator_torch_store_commands_total{command=\"SET\"} 0",
        "cohort_coordinator_torch_store_connections 0",
        "cohort_coordinator_torch_store_connections_closed_total{result=\"error\"} 1",
        "cohort_coordinator_torch_store_connections_closed_total{result=\"closed\"} 2"}) {
    EXPECT_TRUE(Shows(line)) << line << " in\n" << registry_.Render();
  }
}

TEST_F(TorchStoreServerTest, RepliesTheClientDoesNotReadYetAreKeptAndLeaveInOrder) {
  Start(1);
  ASSERT_TRUE(started_.ok()) << started_;
  Client client(server_->port());
  // A value far past the connection's first read (a few bytes): the rest is drained.
  const std::string value(1 << 20, 'v');
  client.Send(EncodeCommand({Query::kSet, {"/big"}, {value}, 0}));
  // 32 MiB of answers to commands sent at once and not read yet: more than the socket takes,
  // so most wait in the server and go out as the client reads; a PING numbers each.
  constexpr int kGets = 32;
  std::string commands;
  for (int i = 0; i < kGets; ++i) {
    commands += EncodeCommand({Query::kGet, {"/big"}, {}, 0}) +
                EncodeCommand({Query::kPing, {}, {}, static_cast<int64_t>(i)});
  }
  client.Send(commands);
  for (int i = 0; i < kGets; ++i) {
    std::string want = Bytes(value);
    AppendU32(static_cast<uint32_t>(i), &want);
    ASSERT_EQ(client.Read(want.size()), want) << "answer " << i;
  }
  server_->Stop();
}

// A handler that counts what it is given and says it is full until told otherwise.
class HoldingHandler final : public TorchStoreHandler {
 public:
  void Received(absl::string_view bytes) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    bytes_ += bytes.size();
  }
  void Closed() override {}
  bool Full() override {
    absl::MutexLock lock(&mu_);
    return full_;
  }
  void OnResume(const std::function<void()>& resume) override {
    absl::MutexLock lock(&mu_);
    resume_ = resume;
  }
  void Resume() {
    std::function<void()> resume;
    {
      absl::MutexLock lock(&mu_);
      full_ = false;
      resume = resume_;
    }
    resume();
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // Waits until `n` bytes came; whether they did within 30 s.
  bool AwaitBytes(size_t n) {
    absl::MutexLock lock(&mu_);
    auto all = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return bytes_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30));
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool full_ ABSL_GUARDED_BY(mu_) = true;
  std::function<void()> resume_ ABSL_GUARDED_BY(mu_);
};

TEST(TorchStoreServerFlowTest, AFullHandlersConnectionReadsNoMoreUntilItResumes) {
  auto handler = std::make_shared<HoldingHandler>();
  TorchStoreServerOptions options;
  options.listen = "127.0.0.1:0";
  TorchStoreServer server(
      [handler](const TorchStoreHandler::Send&, const TorchStoreHandler::End&) { return handler; },
      options);
  ASSERT_TRUE(server.Start().ok());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server.port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  // Write without blocking until the kernel's buffers are full: with the server reading on,
  // that would take far more than the buffers hold, and many reads.
  const std::string chunk(64 * 1024, 'x');
  size_t sent = 0;
  bool blocked = false;
  while (!blocked && sent < (size_t{256} << 20)) {
    ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else {
      ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << strerror(errno);
      blocked = true;
    }
  }
  ASSERT_TRUE(blocked) << sent << " bytes went and the client never had to wait";
  ASSERT_TRUE(handler->AwaitBytes(1));
  EXPECT_EQ(handler->calls(), 1) << "the connection read again after its handler was full";
  handler->Resume();
  EXPECT_TRUE(handler->AwaitBytes(sent)) << "every byte comes once the handler takes more";
  close(fd);
  server.Stop();
}

TEST_F(TorchStoreServerTest, AnAddressThatIsNotHostPortIsRefused) {
  Start(1, "no-port");
  EXPECT_EQ(started_.code(), absl::StatusCode::kInvalidArgument) << started_;
}

}  // namespace
}  // namespace cohort::torch
