// cohortctl, the binary, against a live coordinator on loopback.
#include <signal.h>

#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "agent/coordination_agent.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::testing {
namespace {

using Result = ProcessResult;

// How long any cohortctl may take to answer before the test fails rather than hangs.
constexpr absl::Duration kDeadline = absl::Seconds(30);

std::vector<std::string> WithBinary(std::vector<std::string> args) {
  args.insert(args.begin(), std::string(COHORT_BIN_DIR) + "/cohortctl");
  return args;
}

// A running cohortctl.
class Cohortctl : public Subprocess {
 public:
  explicit Cohortctl(std::vector<std::string> args) : Subprocess(WithBinary(std::move(args))) {}
};

class CohortctlTest : public ::testing::Test {
 protected:
  CohortctlTest() : coordinator_(Config()) {}

  static ServiceConfig Config() {
    ServiceConfig config = Jobs(2);
    config.jobs.push_back({"sidecar", 2, /*auxiliary=*/true});
    return config;
  }

  Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--coordinator", coordinator_.address()});
    return Cohortctl(std::move(args)).Wait(kDeadline);
  }

  // Connects both workers, as a workload would.
  void ConnectWorkers() {
    for (int i = 0; i < 2; ++i) {
      agents_[i] = std::make_unique<CoordinationAgent>();
      AgentConfig config;
      config.coordinator_address = coordinator_.address();
      config.job_name = "worker";
      config.task_id = i;
      ASSERT_TRUE(agents_[i]->Initialize(config).ok());
    }
    auto other = std::async(std::launch::async, [this] { return agents_[1]->Connect(); });
    ASSERT_TRUE(agents_[0]->Connect().ok());
    ASSERT_TRUE(other.get().ok());
  }

  TestCoordinator coordinator_;
  std::unique_ptr<CoordinationAgent> agents_[2];
};

TEST_F(CohortctlTest, PutGetLsIncrAndRm) {
  EXPECT_EQ(Run({"kv", "put", "cfg/lr", "0.1"}).exit_code, 0);
  Result exists = Run({"kv", "put", "cfg/lr", "0.2"});
  EXPECT_EQ(exists.exit_code, 1);
  EXPECT_EQ(exists.err, "cohortctl: key \"cfg/lr\" exists; use --overwrite to replace it\n");
  EXPECT_EQ(Run({"kv", "put", "cfg/lr", "0.2", "--overwrite"}).exit_code, 0);
  Result get = Run({"kv", "get", "cfg/lr"});
  EXPECT_EQ(get.exit_code, 0);
  EXPECT_EQ(get.out, "0.2");  // raw: no newline when stdout is not a terminal
  EXPECT_EQ(Run({"kv", "incr", "cfg/steps", "41"}).out, "41\n");
  EXPECT_EQ(Run({"kv", "incr", "cfg/steps"}).out, "42\n");
  EXPECT_EQ(Run({"kv", "ls", "cfg"}).out, "cfg/lr\t0.2\ncfg/steps\t42\n");
  auto listed = nlohmann::json::parse(Run({"-o", "json", "kv", "ls", "cfg"}).out);
  EXPECT_EQ(listed["cfg/steps"], "42");

  Result refused = Run({"kv", "rm", "cfg"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("use --prefix"), std::string::npos) << refused.err;
  EXPECT_EQ(coordinator_.service().KeyValueStats().keys, 2u);  // nothing changed
  EXPECT_EQ(Run({"kv", "rm", "cfg/lr"}).exit_code, 0);
  EXPECT_EQ(Run({"kv", "rm", "cfg", "--prefix"}).exit_code, 0);
  EXPECT_EQ(coordinator_.service().KeyValueStats().keys, 0u);

  Result missing = Run({"kv", "get", "cfg/lr"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.out, "");
  EXPECT_EQ(missing.err, "cohortctl: key \"cfg/lr\" not found\n");
}

TEST_F(CohortctlTest, GetWithWaitBlocksUntilTheKeyIsSet) {
  Cohortctl waiting(
      {"--coordinator", coordinator_.address(), "kv", "get", "ready", "--wait", "20s"});
  // Set the key only once cohortctl's get waits for it at the coordinator.
  ASSERT_TRUE(
      Eventually([&] { return coordinator_.service().ParkedCalls(ParkKind::kKeyValueGet) == 1; }));
  ASSERT_TRUE(coordinator_.service().InsertKeyValue("ready", "yes", false).ok());
  Result result = waiting.Wait(kDeadline);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "yes");
  Result late = Run({"kv", "get", "never", "--wait", "200ms"});
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.err.find("was not set within 200ms"), std::string::npos) << late.err;
}

TEST_F(CohortctlTest, WatchPrintsEveryChangeUntilInterrupted) {
  ASSERT_TRUE(coordinator_.service().InsertKeyValue("cfg/old", "1", false).ok());
  Cohortctl watch({"--coordinator", coordinator_.address(), "kv", "watch", "cfg"});
  // The coordinator has accepted the watch once cohortctl says so; changes from then on show.
  ASSERT_TRUE(watch.WaitForStderr("watching \"cfg\" after revision 1 (Ctrl-C to stop)\n"));
  EXPECT_EQ(Run({"kv", "put", "cfg/a", "1"}).exit_code, 0);
  EXPECT_EQ(Run({"kv", "put", "cfg/a", "2", "--overwrite"}).exit_code, 0);
  EXPECT_EQ(Run({"kv", "rm", "cfg", "--prefix"}).exit_code, 0);
  EXPECT_EQ(watch.ReadLines(4, kDeadline),
            (std::vector<std::string>{"insert cfg/a 1", "update cfg/a 2", "delete cfg/a",
                                      "delete cfg/old"}));
  watch.Signal(SIGINT);
  Result result = watch.Wait(kDeadline);
  // Its stderr says why when it fails (under ThreadSanitizer, exit 66 is a race report).
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "");  // nothing after the four changes
}

TEST_F(CohortctlTest, StatusShowsTasksAndTheMissingTasksOfOpenBarriers) {
  ConnectWorkers();
  auto waiting = std::async(
      std::launch::async, [this] { return agents_[0]->WaitAtBarrier("ckpt", absl::Seconds(30)); });
  ASSERT_TRUE(Eventually([&] { return coordinator_.ArrivedAtBarrier("ckpt", {"worker", 0}); }));
  Result table = Run({"status"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("2/2 workload tasks connected, 0 in error"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("sidecar/0*"), std::string::npos);
  EXPECT_NE(table.out.find("ckpt"), std::string::npos);
  EXPECT_NE(table.out.find("/job:worker/task:1"), std::string::npos) << table.out;

  auto json = nlohmann::json::parse(Run({"status", "-o", "json"}).out);
  ASSERT_EQ(json["tasks"].size(), 4u);
  EXPECT_EQ(json["tasks"][2]["job"], "worker");
  EXPECT_EQ(json["tasks"][2]["state"], "CONNECTED");
  EXPECT_EQ(json["tasks"][0]["state"], "DISCONNECTED");
  EXPECT_TRUE(json["tasks"][0]["auxiliary"].get<bool>());
  ASSERT_EQ(json["barriers"].size(), 1u);
  EXPECT_EQ(json["barriers"][0]["id"], "ckpt");
  EXPECT_EQ(json["barriers"][0]["missing"], nlohmann::json::array({"/job:worker/task:1"}));
  EXPECT_EQ(json["barriers"][0]["arrived"], nlohmann::json::array({"/job:worker/task:0"}));

  // The missing task arrives through cohortctl; both pass.
  Result arrive = Run({"barrier", "wait", "ckpt", "--task", "worker/1", "--timeout", "30s"});
  EXPECT_EQ(arrive.exit_code, 0) << arrive.err;
  EXPECT_EQ(arrive.out, "barrier ckpt passed (counter 0)\n");
  EXPECT_TRUE(waiting.get().ok());

  auto tasks = nlohmann::json::parse(Run({"-o", "json", "tasks"}).out);
  EXPECT_EQ(tasks.size(), 4u);
}

TEST_F(CohortctlTest, BarrierCancelAndReportErrorReachTheTasks) {
  ConnectWorkers();
  auto waiting = std::async(std::launch::async,
                            [this] { return agents_[0]->WaitAtBarrier("b", absl::Seconds(30)); });
  ASSERT_TRUE(Eventually([&] { return coordinator_.ArrivedAtBarrier("b", {"worker", 0}); }));
  EXPECT_EQ(Run({"barrier", "cancel", "b", "--task", "worker/1"}).exit_code, 0);
  EXPECT_EQ(waiting.get().code(), absl::StatusCode::kCancelled);

  Result report = Run({"report-error", "--task", "worker/1", "GPU 3 fell off the bus"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  ASSERT_TRUE(Eventually([&] { return agents_[0]->state() == AgentState::kError; }));
  EXPECT_NE(agents_[0]->last_error().message().find("GPU 3 fell off the bus"), std::string::npos);
  Result status = Run({"tasks"});
  EXPECT_NE(status.out.find("ERROR"), std::string::npos) << status.out;
}

TEST_F(CohortctlTest, BadInputIsAClearErrorAndChangesNothing) {
  Result task = Run({"barrier", "wait", "b", "--task", "worker"});
  EXPECT_EQ(task.exit_code, 2);
  EXPECT_EQ(task.err, "cohortctl: task \"worker\" is not JOB/N (for example worker/0)\n");
  Result unknown = Run({"report-error", "--task", "nosuch/0", "x"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("nosuch"), std::string::npos) << unknown.err;
  Result usage = Run({"kv", "frobnicate"});
  EXPECT_NE(usage.exit_code, 0);
  Result empty = Run({"kv", "put", "//", "v"});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("empty"), std::string::npos) << empty.err;
  EXPECT_EQ(coordinator_.service().KeyValueStats().revision, 0);
}

TEST_F(CohortctlTest, UnreachableCoordinatorIsAClearMessageNotAHang) {
  Result result =
      Cohortctl({"--coordinator", "127.0.0.1:1", "--dial-timeout", "1s", "status"}).Wait(kDeadline);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.err,
            "cohortctl: cannot reach the coordinator at 127.0.0.1:1 within 1s (is it running?)\n");
}

TEST(CohortctlAuthTest, ACoordinatorWithATokenTakesItFromAFileAndRefusesCallsWithout) {
  TestCoordinator coordinator(Jobs(1), "127.0.0.1:0", "tok-42");
  std::string token_file = ::testing::TempDir() + "/cohortctl-token";
  std::ofstream(token_file) << "tok-42\n";
  Result with = Cohortctl({"--coordinator", coordinator.address(), "--auth-token-file", token_file,
                           "kv", "put", "k", "v"})
                    .Wait(kDeadline);
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(*coordinator.service().TryGetKeyValue("k"), "v");

  Result without =
      Cohortctl({"--coordinator", coordinator.address(), "kv", "put", "k2", "v"}).Wait(kDeadline);
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_NE(without.err.find("token"), std::string::npos) << without.err;
  EXPECT_FALSE(coordinator.service().TryGetKeyValue("k2").ok());

  Result unreadable = Cohortctl({"--coordinator", coordinator.address(), "--auth-token-file",
                                 token_file + ".missing", "status"})
                          .Wait(kDeadline);
  EXPECT_NE(unreadable.exit_code, 0);
  EXPECT_NE(unreadable.err.find("cannot read the token file"), std::string::npos) << unreadable.err;
}

}  // namespace
}  // namespace cohort::testing
