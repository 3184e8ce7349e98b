// Chaos: 64 tasks behind 8 sidecar proxies (cohort-sidecar --proxy-listen), under key-value
// and barrier load, while the coordinator (cohort-coordinator --state-dir) is killed with
// SIGKILL and started again five times. No acknowledged write may be lost, no call may hang
// past its deadline, and no call may fail. Then the coordinator stays down past the
// sidecars' outage tolerance: the tasks' calls must then fail UNAVAILABLE with the proxy's
// outage error (held until the tolerance was over, not until the call's own deadline).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/support/build_paths.h"
#include "tests/support/subprocess.h"

namespace cohort::testing {
namespace {

namespace tf = tensorflow;

constexpr int kTasks = 64;
constexpr int kSidecars = 8;
constexpr int kRounds = 30;
constexpr int kKills = 5;
constexpr absl::Duration kCallDeadline = absl::Seconds(60);
constexpr absl::Duration kTolerance = absl::Seconds(8);

std::string Bin(const std::string& name) {
  return absl::StrCat(::cohort::testing::BinDir(), "/", name);
}
std::string Address(int port) { return absl::StrCat("127.0.0.1:", port); }

std::unique_ptr<grpc::ClientContext> Deadline(absl::Duration d = kCallDeadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
  return ctx;
}

tf::CoordinatedTask Worker(int id) {
  tf::CoordinatedTask task;
  task.set_job_name("worker");
  task.set_task_id(id);
  return task;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool Accepting(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  return channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
}

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/chaos-", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
    StartCoordinator();
    for (int s = 0; s < kSidecars; ++s) {
      int proxy = FreePort();
      proxies_.push_back(Address(proxy));
      http_ports_.push_back(FreePort());
      sidecars_.push_back(std::make_unique<Subprocess>(
          std::vector<std::string>{Bin("cohort-sidecar"), "--coordinator", Address(port_),
                                   "--proxy-listen", Address(proxy), "--outage-tolerance",
                                   absl::StrCat(absl::ToInt64Seconds(kTolerance), "s"),
                                   "--http-listen", Address(http_ports_[s]), "--job", "worker",
                                   "--task", std::to_string(s), "--num-tasks",
                                   std::to_string(kSidecars), "--log-level", "warn"},
          std::map<std::string, std::string>{}, absl::StrCat(dir_, "/sidecar-", s, ".log")));
    }
    for (int s = 0; s < kSidecars; ++s) {
      // The poll's own answer decides: asking once more could time out on a loaded machine
      // (each try gives the connection 200 ms) and fail a sidecar that is up.
      absl::Time deadline = absl::Now() + absl::Seconds(30);
      bool accepting = false;
      while (!(accepting = Accepting(proxies_[s])) && absl::Now() < deadline) {
      }
      ASSERT_TRUE(accepting) << proxies_[s] << ", sidecar " << s << "'s log:\n"
                             << ReadFile(absl::StrCat(dir_, "/sidecar-", s, ".log"));
    }
  }

  void StartCoordinator() {
    coordinator_ = std::make_unique<Subprocess>(
        std::vector<std::string>{Bin("cohort-coordinator"), "--listen", Address(port_),
                                 "--http-listen", "", "--job", absl::StrCat("worker=", kTasks),
                                 "--auxiliary-job", absl::StrCat("sidecar=", kSidecars),
                                 "--heartbeat-timeout", "60s", "--state-dir", dir_ + "/state"},
        std::map<std::string, std::string>{},
        absl::StrCat(dir_, "/coordinator-", ++starts_, ".log"));
  }

  // Task t's stub, on its sidecar (t % kSidecars), one channel per task as one process would.
  std::unique_ptr<tf::CoordinationService::Stub> StubOf(int t) {
    return tf::CoordinationService::NewStub(
        grpc::CreateChannel(proxies_[t % kSidecars], grpc::InsecureChannelCredentials()));
  }

  // The value of sidecar s's metric line that starts with `series` (-1: none).
  double SidecarMetric(int s, const std::string& series) {
    int code = 0;
    std::string body = HttpGet(absl::StrCat("http://", Address(http_ports_[s]), "/metrics"), &code);
    size_t at = body.find("\n" + series + " ");
    if (code != 200 || at == std::string::npos) return -1;
    return std::stod(body.substr(at + series.size() + 2));
  }

  std::string dir_;
  int port_ = 0;
  int starts_ = 0;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::string> proxies_;
  std::vector<int> http_ports_;
  std::vector<std::unique_ptr<Subprocess>> sidecars_;
};

TEST_F(ChaosTest, KilledFiveTimesUnderLoadLosesNothingAndFailsNothing) {
  std::mutex mu;
  std::vector<std::string> errors;  // every call that failed, and why
  std::vector<std::string> acked;   // every key whose insert was acknowledged
  std::atomic<int> hung{0};         // calls that were still waiting at their deadline
  std::atomic<int> finished{0};
  auto record = [&](int t, const std::string& what, const grpc::Status& s) {
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) ++hung;
    if (s.ok()) return true;
    std::lock_guard<std::mutex> l(mu);
    errors.push_back(
        absl::StrCat("task ", t, " ", what, ": ", s.error_code(), " ", s.error_message()));
    return false;
  };

  std::vector<std::thread> tasks;
  for (int t = 0; t < kTasks; ++t) {
    tasks.emplace_back([&, t] {
      auto stub = StubOf(t);
      tf::RegisterTaskRequest reg;
      *reg.mutable_source_task() = Worker(t);
      reg.set_incarnation(1000 + t);
      tf::RegisterTaskResponse registered;
      if (!record(t, "register", stub->RegisterTask(Deadline().get(), reg, &registered))) {
        return;
      }
      for (int r = 0; r < kRounds; ++r) {
        const std::string key = absl::StrCat("chaos/", r, "/", t);
        tf::InsertKeyValueRequest insert;
        insert.mutable_kv()->set_key(key);
        insert.mutable_kv()->set_value(absl::StrCat("v", r, "-", t));
        tf::InsertKeyValueResponse inserted;
        if (record(t, key, stub->InsertKeyValue(Deadline().get(), insert, &inserted))) {
          std::lock_guard<std::mutex> l(mu);
          acked.push_back(key);
        }
        // A blocking read of a neighbour's key of this round.
        tf::GetKeyValueRequest get;
        get.set_key(absl::StrCat("chaos/", r, "/", (t + 1) % kTasks));
        tf::GetKeyValueResponse got;
        record(t, absl::StrCat("get ", get.key()), stub->GetKeyValue(Deadline().get(), get, &got));
        tf::HeartbeatRequest beat;
        *beat.mutable_source_task() = Worker(t);
        beat.set_incarnation(1000 + t);
        tf::HeartbeatResponse beaten;
        record(t, "heartbeat", stub->Heartbeat(Deadline().get(), beat, &beaten));
        tf::BarrierRequest barrier;
        barrier.set_barrier_id(absl::StrCat("chaos-round-", r));
        barrier.set_barrier_timeout_in_ms(absl::ToInt64Milliseconds(kCallDeadline));
        *barrier.mutable_source_task() = Worker(t);
        tf::BarrierResponse passed;
        record(t, barrier.barrier_id(), stub->Barrier(Deadline().get(), barrier, &passed));
      }
      ++finished;
    });
  }

  // The coordinator is killed and started again, kKills times, spread over the run: kill k
  // comes once (k + 1) / (kKills + 1) of the writes were acknowledged, plus a random delay.
  std::mt19937 random(20261124);
  auto acked_count = [&] {
    std::lock_guard<std::mutex> l(mu);
    return acked.size();
  };
  for (int k = 0; k < kKills && finished < kTasks; ++k) {
    const size_t due = static_cast<size_t>(kTasks * kRounds) * (k + 1) / (kKills + 1);
    while (acked_count() < due && finished < kTasks) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 100));
    coordinator_->Signal(SIGKILL);
    coordinator_.reset();  // reaped
    StartCoordinator();
  }
  for (auto& t : tasks) t.join();
  EXPECT_EQ(starts_, 1 + kKills) << "the tasks finished before every kill";
  EXPECT_EQ(finished, kTasks);
  EXPECT_EQ(hung, 0);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_TRUE(errors.empty()) << errors.size() << " calls failed, the first: " << errors[0];
    EXPECT_EQ(acked.size(), static_cast<size_t>(kTasks * kRounds));
  }

  // Every acknowledged write is there, read straight from the coordinator.
  auto direct = tf::CoordinationService::NewStub(
      grpc::CreateChannel(Address(port_), grpc::InsecureChannelCredentials()));
  int lost = 0;
  std::string first_lost;
  for (const std::string& key : acked) {
    tf::TryGetKeyValueRequest get;
    get.set_key(key);
    tf::TryGetKeyValueResponse got;
    auto ctx = Deadline(absl::Seconds(30));
    ctx->set_wait_for_ready(true);  // the last restart may still be starting up
    grpc::Status read = direct->TryGetKeyValue(ctx.get(), get, &got);
    if (!read.ok() && lost++ == 0) first_lost = absl::StrCat(key, ": ", read.error_message());
  }
  EXPECT_EQ(lost, 0) << "acknowledged keys missing after " << kKills << " kills, the first "
                     << first_lost;

  // Down past the tolerance: a task's call is held, then fails UNAVAILABLE because the
  // tolerance is over. The proxy's outage error says so (a call failed any sooner would carry
  // another error; one held past the tolerance would end DEADLINE_EXCEEDED, at its deadline).
  coordinator_->Signal(SIGKILL);
  coordinator_.reset();
  auto stub = StubOf(0);
  tf::TryGetKeyValueRequest get;
  get.set_key("chaos/0/0");
  tf::TryGetKeyValueResponse got;
  grpc::Status s = stub->TryGetKeyValue(Deadline().get(), get, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("longer than the sidecar proxy's outage tolerance"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(SidecarMetric(0, "cohort_sidecar_proxy_link_state{state=\"failed\"}"), 1);
}

}  // namespace
}  // namespace cohort::testing
