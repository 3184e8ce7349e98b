// The sidecar's proxy with real processes over loopback: cohort-coordinator (durable state
// in --state-dir), cohort-sidecar --proxy-listen, and two workload processes on the agent
// library behind it. The coordinator is killed (SIGKILL) and started again on the same port.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/build_paths.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::testing {
namespace {

std::string Bin(const std::string& name) {
  return absl::StrCat(::cohort::testing::BinDir(), "/", name);
}

class ProxyRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/proxy-restart-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(
        system(absl::StrCat("rm -rf '", dir_, "' && mkdir -p '", dir_, "/state' '", dir_, "/go'")
                   .c_str()),
        0);
    coordinator_port_ = FreePort();
    proxy_port_ = FreePort();
    http_port_ = FreePort();
  }

  void StartCoordinator(int workers) {
    coordinator_ = std::make_unique<Subprocess>(
        std::vector<std::string>{Bin("cohort-coordinator"), "--listen",
                                 absl::StrCat("127.0.0.1:", coordinator_port_), "--http-listen",
                                 "127.0.0.1:0", "--job", absl::StrCat("worker=", workers),
                                 "--auxiliary-job", "sidecar=1", "--heartbeat-timeout", "20s",
                                 "--state-dir", dir_ + "/state"},
        std::map<std::string, std::string>{},
        absl::StrCat(dir_, "/coordinator-", ++coordinator_runs_, ".log"));
  }

  void StartSidecar(const std::string& tolerance) {
    sidecar_ = std::make_unique<Subprocess>(std::vector<std::string>{
        Bin("cohort-sidecar"), "--coordinator", absl::StrCat("127.0.0.1:", coordinator_port_),
        "--proxy-listen", absl::StrCat("127.0.0.1:", proxy_port_), "--outage-tolerance", tolerance,
        "--task", "0", "--num-tasks", "1", "--http-listen", absl::StrCat("127.0.0.1:", http_port_),
        "--log-level", "warn"});
  }

  // A client whose steps start on files in `go` (a directory under the test's).
  std::unique_ptr<Subprocess> StartClient(int task, int tasks, int steps,
                                          const std::string& go = "go") {
    EXPECT_EQ(system(absl::StrCat("mkdir -p '", dir_, "/", go, "'").c_str()), 0);
    return std::make_unique<Subprocess>(std::vector<std::string>{
        Bin("proxy_test_client"), "--address", absl::StrCat("127.0.0.1:", proxy_port_), "--task",
        absl::StrCat(task), "--tasks", absl::StrCat(tasks), "--steps", absl::StrCat(steps),
        "--go-dir", absl::StrCat(dir_, "/", go)});
  }

  // Whether the coordinator has `task` waiting at an open barrier `id` (cohortctl status).
  bool WaitsAtBarrier(const std::string& id, const std::string& task) {
    Subprocess ctl(std::vector<std::string>{Bin("cohortctl"), "--coordinator",
                                            absl::StrCat("127.0.0.1:", coordinator_port_), "-o",
                                            "json", "status"});
    ProcessResult result = ctl.Wait(absl::Seconds(20));
    if (result.exit_code != 0) return false;
    auto status = nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
    if (!status.is_object() || !status.contains("barriers")) return false;
    for (const auto& barrier : status["barriers"]) {
      if (barrier.value("id", "") != id) continue;
      for (const auto& arrived : barrier.value("arrived", nlohmann::json::array())) {
        if (arrived == task) return true;
      }
    }
    return false;
  }

  // The value of the sidecar's metric line that starts with `series` (-1: none).
  double SidecarMetric(const std::string& series) {
    int code = 0;
    std::string body = HttpGet(absl::StrCat("http://127.0.0.1:", http_port_, "/metrics"), &code);
    size_t at = body.find("\n" + series + " ");
    if (code != 200 || at == std::string::npos) return -1;
    return std::stod(body.substr(at + series.size() + 2));
  }

  void Go(int step, const std::string& go = "go") {
    std::ofstream(absl::StrCat(dir_, "/", go, "/go-", step)) << "go\n";
  }

  // The next line of each client is `line`.
  void ExpectLine(std::vector<std::unique_ptr<Subprocess>>& clients, const std::string& line,
                  absl::Duration timeout = absl::Seconds(60)) {
    for (auto& client : clients) {
      auto lines = client->ReadLines(1, timeout);
      ASSERT_EQ(lines.size(), 1u) << "waiting for \"" << line << "\"";
      EXPECT_EQ(lines[0], line);
    }
  }

  std::string dir_;
  int coordinator_port_ = 0;
  int proxy_port_ = 0;
  int http_port_ = 0;
  int coordinator_runs_ = 0;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<Subprocess> sidecar_;
};

TEST_F(ProxyRestartTest, CoordinatorKilledAndRestartedWithinTheToleranceCausesNoClientError) {
  StartCoordinator(2);
  StartSidecar("60s");
  std::vector<std::unique_ptr<Subprocess>> clients;
  clients.push_back(StartClient(0, 2, 3));
  clients.push_back(StartClient(1, 2, 3));
  ExpectLine(clients, "connected");
  Go(1);
  ExpectLine(clients, "step 1 begins");
  ExpectLine(clients, "step 1 ok");

  coordinator_->Signal(SIGKILL);
  EXPECT_EQ(coordinator_->Wait(absl::Seconds(20)).exit_code, 128 + SIGKILL);
  ASSERT_TRUE(sidecar_->WaitForStderr("lost the coordinator"));
  // The clients' next calls (insert, barrier, gets) go out while it is away.
  Go(2);
  ExpectLine(clients, "step 2 begins");
  StartCoordinator(2);  // the same port and state directory

  ExpectLine(clients, "step 2 ok");
  // The proxy saw one outage and sent calls again (the parked ones at least).
  EXPECT_EQ(SidecarMetric("cohort_sidecar_proxy_outages_total"), 1);
  EXPECT_GT(SidecarMetric("cohort_sidecar_proxy_reissued_calls_total"), 0);
  EXPECT_EQ(SidecarMetric("cohort_sidecar_proxy_link_state{state=\"connected\"}"), 1);
  Go(3);
  ExpectLine(clients, "step 3 begins");
  ExpectLine(clients, "step 3 ok");
  ExpectLine(clients, "done");
  for (auto& client : clients) {
    ProcessResult result = client->Wait(absl::Seconds(30));
    EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  }
  sidecar_->Signal(SIGTERM);
  ProcessResult stopped = sidecar_->Wait(absl::Seconds(30));
  // Its warnings say what it was waiting for, should it not end (seen once in CI, under
  // ASan: still running after 30 s).
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err.substr(stopped.err.size() -
                                                        std::min<size_t>(stopped.err.size(), 4000));
}

TEST_F(ProxyRestartTest, CoordinatorStoppedWithSigtermWhileABarrierWaitsCausesNoClientError) {
  // A graceful stop (a node drain, a deleted pod) ends the open barrier UNAVAILABLE, not
  // ABORTED: the proxy holds the arrival, and the coordinator back on its state directory
  // still has the barrier open.
  StartCoordinator(2);
  StartSidecar("60s");
  std::vector<std::unique_ptr<Subprocess>> clients;
  clients.push_back(StartClient(0, 2, 2, "go0"));
  clients.push_back(StartClient(1, 2, 2, "go1"));
  ExpectLine(clients, "connected");
  Go(1, "go0");
  Go(1, "go1");
  ExpectLine(clients, "step 1 begins");
  ExpectLine(clients, "step 1 ok");

  // Task 0 arrives at step 2's barrier; task 1 has not started step 2.
  Go(2, "go0");
  auto first = clients[0]->ReadLines(1, absl::Seconds(60));
  ASSERT_EQ(first, std::vector<std::string>{"step 2 begins"});
  ASSERT_TRUE(
      Eventually([&] { return WaitsAtBarrier("step", "/job:worker/task:0"); }, absl::Seconds(60)));

  // Every thread of both daemons leaves SIGTERM to the one that waits for it.
  EXPECT_EQ(ThreadsNotBlocking(coordinator_->pid(), SIGTERM), std::vector<std::string>{});
  EXPECT_EQ(ThreadsNotBlocking(sidecar_->pid(), SIGTERM), std::vector<std::string>{});
  coordinator_->Signal(SIGTERM);
  EXPECT_EQ(coordinator_->Wait(absl::Seconds(30)).exit_code, 0);
  ASSERT_TRUE(sidecar_->WaitForStderr("lost the coordinator"));
  StartCoordinator(2);  // the same port and state directory
  ASSERT_TRUE(
      Eventually([&] { return WaitsAtBarrier("step", "/job:worker/task:0"); }, absl::Seconds(60)));

  Go(2, "go1");
  auto second = clients[1]->ReadLines(1, absl::Seconds(60));
  ASSERT_EQ(second, std::vector<std::string>{"step 2 begins"});
  ExpectLine(clients, "step 2 ok");
  ExpectLine(clients, "done");
  for (auto& client : clients) {
    ProcessResult result = client->Wait(absl::Seconds(30));
    EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  }
  sidecar_->Signal(SIGTERM);
  ProcessResult stopped = sidecar_->Wait(absl::Seconds(30));
  // Its warnings say what it was waiting for, should it not end (seen once in CI, under
  // ASan: still running after 30 s).
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err.substr(stopped.err.size() -
                                                        std::min<size_t>(stopped.err.size(), 4000));
}

TEST_F(ProxyRestartTest, ClientsGetUnavailableOnceTheOutageOutlastsTheTolerance) {
  StartCoordinator(1);
  StartSidecar("1s");
  std::vector<std::unique_ptr<Subprocess>> clients;
  clients.push_back(StartClient(0, 1, 2));
  ExpectLine(clients, "connected");
  Go(1);
  ExpectLine(clients, "step 1 begins");
  ExpectLine(clients, "step 1 ok");

  coordinator_->Signal(SIGKILL);
  EXPECT_EQ(coordinator_->Wait(absl::Seconds(20)).exit_code, 128 + SIGKILL);
  Go(2);
  ProcessResult result = clients[0]->Wait(absl::Seconds(60));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.out.find("UNAVAILABLE"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("unreachable"), std::string::npos) << result.out;
  sidecar_->Signal(SIGTERM);
  sidecar_->Wait(absl::Seconds(30));
}

}  // namespace
}  // namespace cohort::testing
