// The cohort-coordinator binary as users run it: flags, YAML config, TLS, SIGTERM.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/build_paths.h"
#include "tests/support/eventually.h"
#include "tests/support/free_port.h"

namespace cohort::testing {
namespace {

namespace tf = tensorflow;

std::string Bin() { return ::cohort::testing::BinDir() + "/cohort-coordinator"; }

// A loopback port for the coordinator to take (below the ephemeral range: free_port.h).
int FreePort() { return PickFreePort(); }

// A running coordinator process, stopped by its pid.
class Process {
 public:
  explicit Process(std::vector<std::string> args) {
    log_ = absl::StrCat(::testing::TempDir(), "/coordinator-", getpid(), "-", ++count_, ".log");
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> argv;
      std::string bin = Bin();
      argv.push_back(bin.data());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int Terminate() {
    kill(pid_, SIGTERM);
    return Wait();
  }
  int Kill() {
    kill(pid_, SIGKILL);
    return Wait();
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  pid_t pid() const { return pid_; }
  std::string Log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  static inline int count_ = 0;
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

// A process's peak resident memory so far in KiB (VmHWM of /proc/PID/status): a message held
// even for an instant shows in it. -1 when it cannot be read.
long PeakResidentKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

bool WaitReady(const std::shared_ptr<grpc::Channel>& channel) {
  return channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20));
}

// Its /metrics, fetched with curl; empty when it cannot be read.
std::string Metrics(int http_port) {
  std::string out;
  FILE* pipe = popen(
      absl::StrCat("curl -sf --max-time 2 http://127.0.0.1:", http_port, "/metrics").c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

TEST(CoordinatorBinaryTest, SigtermEndsParkedCallsWithAClearStatusAndExitsCleanly) {
  int port = FreePort();
  int http_port = FreePort();
  Process p({"--listen", absl::StrCat("127.0.0.1:", port), "--http-listen",
             absl::StrCat("127.0.0.1:", http_port), "--job", "worker=1"});
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(WaitReady(channel)) << p.Log();
  auto stub = tf::CoordinationService::NewStub(channel);
  tf::GetKeyValueRequest get;
  get.set_key("never");
  tf::GetKeyValueResponse response;
  auto parked = std::async(std::launch::async,
                           [&] { return stub->GetKeyValue(Deadline().get(), get, &response); });
  // SIGTERM only once the get is parked inside the coordinator.
  ASSERT_TRUE(Eventually([&] {
    return Metrics(http_port).find("cohort_coordinator_parked_calls{kind=\"key_value_get\"} 1") !=
           std::string::npos;
  })) << Metrics(http_port);
  EXPECT_EQ(parked.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(p.Terminate(), 0) << p.Log();
  grpc::Status s = parked.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("shutting down"), std::string::npos) << s.error_message();
  EXPECT_NE(p.Log().find("received SIGTERM"), std::string::npos) << p.Log();
}

// 100 calls of 256 MiB each without the job's token: each is refused UNAUTHENTICATED once its
// metadata has arrived, so the coordinator never holds their messages: its peak memory stays
// where it was. (A coordinator that read them before refusing them peaks 256 MiB higher.)
TEST(CoordinatorBinaryTest, AnonymousCallsOf256MiBLeaveItsMemoryWhereItWas) {
  int port = FreePort();
  std::string token_file = absl::StrCat(::testing::TempDir(), "/rss-token");
  std::ofstream(token_file) << "rss-test-token\n";
  // Under AddressSanitizer freed memory waits in a quarantine (256 MiB) before it is used
  // again, so the peak would add up every call's short-lived buffers; without the quarantine
  // it shows what the coordinator holds at once, as in the other builds (which ignore the
  // variable).
  const char* asan_before = std::getenv("ASAN_OPTIONS");
  const std::string asan_kept = asan_before != nullptr ? asan_before : "";
  setenv("ASAN_OPTIONS", absl::StrCat(asan_kept, ":quarantine_size_mb=0").c_str(), 1);
  Process p({"--listen", absl::StrCat("127.0.0.1:", port), "--http-listen", "", "--job", "worker=1",
             "--auth-token-file", token_file});
  if (asan_before != nullptr) {
    setenv("ASAN_OPTIONS", asan_kept.c_str(), 1);
  } else {
    unsetenv("ASAN_OPTIONS");
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                           grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(WaitReady(channel)) << p.Log();
  grpc::GenericStub stub(channel);
  // A well-formed InsertKeyValue of a 256 MiB value: a server that read it could parse it.
  std::string big;
  {
    tf::InsertKeyValueRequest insert;
    insert.mutable_kv()->set_key("big");
    insert.mutable_kv()->set_value(std::string(size_t{256} << 20, 'k'));
    ASSERT_TRUE(insert.SerializeToString(&big));
  }
  grpc::Slice slice(big);
  big.clear();
  big.shrink_to_fit();
  auto call = [&] {
    grpc::ByteBuffer request(&slice, 1);  // the slice shared, not copied
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, "/tensorflow.CoordinationService/InsertKeyValue", grpc::StubOptions(),
                   &request, &response, [&](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  };
  // The first call sets up the connection's own buffers, which count in the baseline.
  grpc::Status first = call();
  ASSERT_EQ(first.error_code(), grpc::StatusCode::UNAUTHENTICATED) << first.error_message();
  const long before = PeakResidentKiB(p.pid());
  ASSERT_GT(before, 0);
  for (int i = 0; i < 100; ++i) {
    grpc::Status s = call();
    ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << i << ": " << s.error_message();
    ASSERT_NE(s.error_message().find("has none"), std::string::npos) << s.error_message();
  }
  const long after = PeakResidentKiB(p.pid());
  EXPECT_LT(after - before, 64 * 1024) << "peak KiB before " << before << ", after " << after;
  EXPECT_EQ(p.Terminate(), 0) << p.Log();
}

TEST(CoordinatorBinaryTest, YamlConfigIsReadAndFlagsOverrideIt) {
  int port = FreePort();
  std::string config = absl::StrCat(::testing::TempDir(), "/coordinator-config.yaml");
  std::ofstream(config) << "listen: 127.0.0.1:1\nhttp_listen: \"\"\njob: [worker=3]\n"
                           "heartbeat-timeout: 7s\nlog-format: json\n";
  Process p({"--config", config, "--listen", absl::StrCat("127.0.0.1:", port)});
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(WaitReady(channel)) << p.Log();
  auto stub = tf::CoordinationService::NewStub(channel);
  tf::RegisterTaskRequest reg;
  reg.mutable_source_task()->set_job_name("worker");
  reg.mutable_source_task()->set_task_id(3);  // the config says 3 tasks: ids 0..2
  tf::RegisterTaskResponse rr;
  grpc::Status s = stub->RegisterTask(Deadline().get(), reg, &rr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("3 tasks"), std::string::npos) << s.error_message();
  EXPECT_EQ(p.Terminate(), 0);
  EXPECT_NE(p.Log().find("\"msg\":\"job worker: 3 tasks\""), std::string::npos) << p.Log();
}

// What the coordinator logs reads as words: one task is "1 task", incarnations are hex (as
// every other line and status shows them), an error is its message without payload bytes.
TEST(CoordinatorBinaryTest, LogLinesSayCountsInWordsAndIncarnationsInHexOnly) {
  const int port = FreePort();
  Process p({"--job", "worker=1", "--auxiliary-job", "sidecar=2", "--listen",
             absl::StrCat("127.0.0.1:", port), "--http-listen", ""});
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(WaitReady(channel)) << p.Log();
  auto stub = tf::CoordinationService::NewStub(channel);
  tf::RegisterTaskRequest reg;
  reg.mutable_source_task()->set_job_name("worker");
  reg.mutable_source_task()->set_task_id(0);
  reg.set_incarnation(0xabc);
  tf::RegisterTaskResponse rr;
  ASSERT_TRUE(stub->RegisterTask(Deadline().get(), reg, &rr).ok());
  // The task "restarts": it registers again with a new incarnation while connected.
  reg.set_incarnation(0xdef);
  grpc::Status again = stub->RegisterTask(Deadline().get(), reg, &rr);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(again.error_message().find("registered again with incarnation 0xdef while connected "
                                       "with incarnation 0xabc"),
            std::string::npos)
      << again.error_message();
  EXPECT_EQ(p.Terminate(), 0);
  const std::string log = p.Log();
  EXPECT_NE(log.find("job worker: 1 task\n"), std::string::npos) << log;
  EXPECT_NE(log.find("job sidecar: 2 tasks (auxiliary)"), std::string::npos) << log;
  EXPECT_NE(log.find("every workload task registered (1 task)"), std::string::npos) << log;
  EXPECT_NE(log.find("task /job:worker/task:0 connected with incarnation 0xabc"), std::string::npos)
      << log;
  EXPECT_NE(log.find("task /job:worker/task:0 (incarnation 0xabc) is in error: "
                     "/job:worker/task:0 registered again with incarnation 0xdef"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("1 tasks"), std::string::npos) << log;
  EXPECT_EQ(log.find("2748"), std::string::npos) << "0xabc in decimal: " << log;
  EXPECT_EQ(log.find("3567"), std::string::npos) << "0xdef in decimal: " << log;
  EXPECT_EQ(log.find("type.googleapis.com"), std::string::npos) << "payload bytes: " << log;
}

TEST(CoordinatorBinaryTest, BadInputIsRefusedWithAClearMessage) {
  // A config file whose key is a mapping (the fuzzer's first find: it threw out of main).
  const std::string complex_key = absl::StrCat(::testing::TempDir(), "/complex-key.yaml");
  std::ofstream(complex_key) << "? {job: worker=1}\n: 3\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--job", "worker"}, "is not NAME=COUNT"},
      {{"--job", "worker=0"}, "need at least 1"},
      {{"--job", "w=2", "--heartbeat-timeout", "soon"}, "is not a duration"},
      {{"--job", "w=2", "--recoverable-job", "other"}, "is not a job"},
      {{}, "no jobs configured"},
      {{"--job", "a=1", "--job", "b=1"}, "--default-job"},
      {{"--job", "w=1", "--log-format", "xml"}, "unknown log format"},
      {{"--job", "w=1", "--listen", "256.1.1.1:99999", "--http-listen", ""}, "cannot serve gRPC"},
      {{"--job", "w=1", "--auth-token-file", "/no/such/token"},
       "--auth-token-file: cannot read the token file /no/such/token"},
      {{"--job", "w=1", "--auth-token-file", "/dev/null"}, "is empty"},
      {{"--config", complex_key}, "keys must be option names, not lists or mappings (line 1)"},
      {{"--job", "w=131073"}, "at most 131072 tasks per job"},
      {{"--job", "w=1", "--max-barrier-id-bytes", "0"}, "must be at least 1"},
      {{"--job", "w=1", "--finished-barrier-retention", "soon"}, "is not a duration"},
  };
  for (const Case& c : cases) {
    Process p(c.args);
    EXPECT_NE(p.Wait(), 0) << c.message;
    EXPECT_NE(p.Log().find(c.message), std::string::npos) << "log: " << p.Log();
  }
}

TEST(CoordinatorBinaryTest, APortInUseIsOneLineThatSaysSoAndNoSecondCoordinatorSharesIt) {
  // Another program listens on the port.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  Process p({"--job", "w=1", "--listen", taken, "--http-listen", ""});
  EXPECT_EQ(p.Wait(), 2);
  std::string log = p.Log();
  EXPECT_NE(log.find(absl::StrCat("cohort-coordinator: cannot serve gRPC on ", taken,
                                  ": the address is already in use")),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("chttp2"), std::string::npos) << "gRPC's own trace: " << log;
  EXPECT_EQ(log.find("shutting down"), std::string::npos) << "it never served: " << log;
  close(fd);

  // A second coordinator on a running one's port is refused (gRPC would share the port).
  const int port = FreePort();
  Process first(
      {"--job", "w=1", "--listen", absl::StrCat("127.0.0.1:", port), "--http-listen", ""});
  ASSERT_TRUE(WaitReady(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials())));
  Process second(
      {"--job", "w=1", "--listen", absl::StrCat("127.0.0.1:", port), "--http-listen", ""});
  EXPECT_EQ(second.Wait(), 2);
  EXPECT_NE(second.Log().find("already in use"), std::string::npos) << second.Log();
  EXPECT_EQ(first.Terminate(), 0);
}

TEST(CoordinatorBinaryTest, ServesTlsWithCertificatesFromFiles) {
  std::string dir = ::testing::TempDir();
  std::string key = dir + "/tls.key", cert = dir + "/tls.crt";
  std::string cmd = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ",
      key, " -out ", cert, " >/dev/null 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl failed: " << cmd;
  int port = FreePort();
  Process p({"--listen", absl::StrCat("127.0.0.1:", port), "--http-listen", "", "--job", "worker=1",
             "--tls-cert", cert, "--tls-key", key});
  std::ifstream in(cert);
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = std::string(std::istreambuf_iterator<char>(in), {});
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                           grpc::SslCredentials(options), args);
  ASSERT_TRUE(WaitReady(channel)) << p.Log();
  auto stub = tf::CoordinationService::NewStub(channel);
  tf::RegisterTaskRequest reg;
  reg.mutable_source_task()->set_job_name("worker");
  reg.set_incarnation(1);
  tf::RegisterTaskResponse rr;
  EXPECT_TRUE(stub->RegisterTask(Deadline().get(), reg, &rr).ok());
  // A plaintext client gets nowhere.
  auto plain = tf::CoordinationService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  EXPECT_FALSE(plain->RegisterTask(Deadline(absl::Seconds(2)).get(), reg, &rr).ok());
  EXPECT_EQ(p.Terminate(), 0);
}

tf::CoordinatedTask Worker(int id) {
  tf::CoordinatedTask task;
  task.set_job_name("worker");
  task.set_task_id(id);
  return task;
}

TEST(CoordinatorBinaryTest, KillNineLosesNothingWithAStateDir) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/state-", getpid());
  std::filesystem::remove_all(dir);
  const int port = FreePort();
  const int http_port = FreePort();
  const std::vector<std::string> args = {"--listen",      absl::StrCat("127.0.0.1:", port),
                                         "--http-listen", absl::StrCat("127.0.0.1:", http_port),
                                         "--job",         "worker=2",
                                         "--state-dir",   dir};
  auto first = std::make_unique<Process>(args);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  ASSERT_TRUE(WaitReady(channel)) << first->Log();
  auto stub = tf::CoordinationService::NewStub(channel);

  // Both tasks register (the register barrier passes), a key, a barrier that passes.
  uint64_t service_incarnation = 0;
  std::vector<std::future<grpc::Status>> calls;
  for (int id : {0, 1}) {
    calls.push_back(std::async(std::launch::async, [&, id] {
      tf::RegisterTaskRequest reg;
      *reg.mutable_source_task() = Worker(id);
      reg.set_incarnation(100 + id);
      tf::RegisterTaskResponse response;
      grpc::Status s = stub->RegisterTask(Deadline().get(), reg, &response);
      if (id == 0) service_incarnation = response.leader_incarnation();
      return s;
    }));
  }
  for (auto& c : calls) ASSERT_TRUE(c.get().ok());
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("checkpoint/step");
  insert.mutable_kv()->set_value("1200");
  tf::InsertKeyValueResponse inserted;
  ASSERT_TRUE(stub->InsertKeyValue(Deadline().get(), insert, &inserted).ok());
  calls.clear();
  for (int id : {0, 1}) {
    calls.push_back(std::async(std::launch::async, [&, id] {
      tf::BarrierRequest barrier;
      barrier.set_barrier_id("save");
      barrier.set_barrier_timeout_in_ms(20000);
      *barrier.mutable_source_task() = Worker(id);
      tf::BarrierResponse response;
      return stub->Barrier(Deadline().get(), barrier, &response);
    }));
  }
  for (auto& c : calls) ASSERT_TRUE(c.get().ok());
  const std::string before = Metrics(http_port);
  EXPECT_NE(before.find("cohort_coordinator_state_restored 0"), std::string::npos) << before;
  EXPECT_NE(before.find("cohort_coordinator_state_records_total "), std::string::npos) << before;

  EXPECT_EQ(first->Kill(), 128 + SIGKILL);
  Process second(args);
  // A new connection: the old one may not have noticed yet that its server is gone.
  channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  stub = tf::CoordinationService::NewStub(channel);
  ASSERT_TRUE(WaitReady(channel)) << second.Log();
  // The same service incarnation; the tasks still registered with theirs.
  tf::RegisterTaskRequest again;
  *again.mutable_source_task() = Worker(1);
  again.set_incarnation(101);
  tf::RegisterTaskResponse response;
  grpc::Status registered = stub->RegisterTask(Deadline().get(), again, &response);
  ASSERT_TRUE(registered.ok()) << registered.error_message() << "\n" << second.Log();
  EXPECT_EQ(response.leader_incarnation(), service_incarnation);
  tf::HeartbeatRequest heartbeat;
  *heartbeat.mutable_source_task() = Worker(0);
  heartbeat.set_incarnation(100);
  tf::HeartbeatResponse beat;
  EXPECT_TRUE(stub->Heartbeat(Deadline().get(), heartbeat, &beat).ok());
  // The key, and the barrier's outcome for a repeated call.
  tf::TryGetKeyValueRequest get;
  get.set_key("checkpoint/step");
  tf::TryGetKeyValueResponse got;
  ASSERT_TRUE(stub->TryGetKeyValue(Deadline().get(), get, &got).ok());
  EXPECT_EQ(got.kv().value(), "1200");
  tf::BarrierRequest repeat;
  repeat.set_barrier_id("save");
  repeat.set_barrier_timeout_in_ms(20000);
  *repeat.mutable_source_task() = Worker(1);
  tf::BarrierResponse passed;
  EXPECT_TRUE(stub->Barrier(Deadline(absl::Seconds(5)).get(), repeat, &passed).ok());
  EXPECT_NE(second.Log().find("restored the saved state"), std::string::npos) << second.Log();
  const std::string after = Metrics(http_port);
  EXPECT_NE(after.find("cohort_coordinator_state_restored 1"), std::string::npos) << after;
  EXPECT_EQ(second.Terminate(), 0);

  // Bad input: the directory of another job, and a damaged log, refuse the start.
  Process other({"--listen", absl::StrCat("127.0.0.1:", FreePort()), "--http-listen", "", "--job",
                 "trainer=2", "--state-dir", dir});
  EXPECT_EQ(other.Wait(), 2);
  EXPECT_NE(other.Log().find("holds the state of a coordinator of other jobs"), std::string::npos)
      << other.Log();
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("snapshot-", 0) != 0) continue;
    std::fstream f(e.path(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-2, std::ios::end);
    f.put('\x55');
  }
  Process damaged(args);
  EXPECT_EQ(damaged.Wait(), 2);
  EXPECT_NE(damaged.Log().find("is damaged at byte"), std::string::npos) << damaged.Log();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::testing
