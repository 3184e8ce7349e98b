// cohortctl, the binary, against a live coordinator on loopback.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/coordination_agent.h"
#include "common/task_progress.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/service/integration/test_server.h"
#include "tests/support/build_paths.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::testing {
namespace {

using Result = ProcessResult;

// How long any cohortctl may take to answer before the test fails rather than hangs.
constexpr absl::Duration kDeadline = absl::Seconds(30);

std::vector<std::string> WithBinary(std::vector<std::string> args) {
  args.insert(args.begin(), ::cohort::testing::BinDir() + "/cohortctl");
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
  // With why: an error reported about the task, which named no reason.
  EXPECT_NE(status.out.find("REASON"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("reported_error"), std::string::npos) << status.out;
  auto json = nlohmann::json::parse(Run({"-o", "json", "tasks"}).out);
  bool found = false;
  for (const auto& task : json) {
    if (task["job"] == "worker" && task["task"] == 1) {
      found = true;
      EXPECT_EQ(task["error"]["reason"], "reported_error") << task.dump();
    }
  }
  EXPECT_TRUE(found) << json.dump();
}

TEST_F(CohortctlTest, TasksShowTheProgressTheirHeartbeatsCarried) {
  ConnectWorkers();
  ASSERT_TRUE(
      coordinator_.service()
          .Heartbeat(TaskName{"worker", 0}, agents_[0]->incarnation(), TaskProgress{1234, 0.375})
          .ok());
  Result table = Run({"tasks"});
  EXPECT_NE(table.out.find("STEP"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("BUSY S/STEP"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("1234"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("0.375"), std::string::npos) << table.out;

  auto json = nlohmann::json::parse(Run({"-o", "json", "tasks"}).out);
  int seen = 0;
  for (const auto& task : json) {
    if (task["job"] != "worker") continue;
    ++seen;
    if (task["task"] == 0) {
      EXPECT_EQ(task["step"], 1234) << task.dump();
      EXPECT_EQ(task["busy_seconds_per_step"], 0.375) << task.dump();
    } else {
      // Its heartbeats carried none: no fields, rather than zeros.
      EXPECT_FALSE(task.contains("step")) << task.dump();
      EXPECT_FALSE(task.contains("busy_seconds_per_step")) << task.dump();
    }
  }
  EXPECT_EQ(seen, 2) << json.dump();
}

TEST_F(CohortctlTest, StatusSaysWhatTheJobIsDoingInTermsANewcomerReads) {
  // Before anyone registered: the sidecars are NOT-REGISTERED, not merely DISCONNECTED.
  Result before = Run({"status"});
  EXPECT_EQ(before.out.rfind("coordinator incarnation ", 0), 0u) << before.out;
  EXPECT_NE(before.out.find(", default job \"worker\": 0/2 workload tasks connected"),
            std::string::npos)
      << before.out;
  EXPECT_NE(before.out.find("NOT-REGISTERED"), std::string::npos) << before.out;
  ConnectWorkers();
  // An error reported by a task reaches everyone: the job has failed, though both tasks are
  // still CONNECTED; the table keeps one line per task however long the error.
  const std::string long_error(300, 'x');
  ASSERT_EQ(
      Run({"report-error", "--task", "worker/1", "GPU 3 fell off the bus " + long_error}).exit_code,
      0);
  ASSERT_TRUE(Eventually([&] { return agents_[0]->state() == AgentState::kError; }));
  Result after = Run({"status"});
  EXPECT_NE(after.out.find("\nthe job failed: "), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("GPU 3 fell off the bus"), std::string::npos) << after.out;
  for (absl::string_view line : absl::StrSplit(after.out, '\n')) {
    EXPECT_LE(line.size(), 240u) << line;
  }
  auto json = nlohmann::json::parse(Run({"status", "-o", "json"}).out);
  EXPECT_NE(json["job_error"].get<std::string>().find(long_error), std::string::npos);
}

TEST_F(CohortctlTest, ValuesAreWhatWasMeantAndOneLineEach) {
  // A value piped in is stored without the newline echo adds.
  Result piped = Subprocess({"/bin/sh", "-c",
                             absl::StrCat("echo 0.01 | ", ::cohort::testing::BinDir(),
                                          "/cohortctl --coordinator ", coordinator_.address(),
                                          " kv put cfg/lr -")})
                     .Wait(kDeadline);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(Run({"kv", "get", "cfg/lr"}).out, "0.01");  // raw: no newline off a terminal
  // A value with newlines is one line in ls (as \n), and itself in JSON and get.
  ASSERT_TRUE(coordinator_.service().InsertKeyValue("cfg/multi", "a\nb", false).ok());
  EXPECT_EQ(Run({"kv", "ls", "cfg"}).out, "cfg/lr\t0.01\ncfg/multi\ta\\nb\n");
  EXPECT_EQ(nlohmann::json::parse(Run({"-o", "json", "kv", "ls", "cfg"}).out)["cfg/multi"], "a\nb");
  // A watch from an earlier revision says so, and replays from there.
  Cohortctl watch({"--coordinator", coordinator_.address(), "kv", "watch", "cfg", "--rev", "1"});
  ASSERT_TRUE(watch.WaitForStderr("watching \"cfg\" from revision 1 (now 2; Ctrl-C to stop)\n"));
  EXPECT_EQ(watch.ReadLines(2, kDeadline),
            (std::vector<std::string>{"insert cfg/lr 0.01", "insert cfg/multi a\\nb"}));
  watch.Signal(SIGINT);
  EXPECT_EQ(watch.Wait(kDeadline).exit_code, 0);
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

TEST_F(CohortctlTest, UsageErrorsExit2NamingWhatWasWrongAndWhatWouldDo) {
  const std::string commands =
      "(commands: status, tasks, objects, kv, barrier, report-error; see cohortctl --help)";
  Result unknown = Run({"foo"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err, "cohortctl: unknown command \"foo\" " + commands + "\n");
  Result none = Run({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.err, "cohortctl: no command given " + commands + "\n");
  Result kv = Run({"kv", "frobnicate"});
  EXPECT_EQ(kv.exit_code, 2);
  EXPECT_EQ(kv.err,
            "cohortctl: unknown command \"frobnicate\" for kv (commands: get, put, ls, rm, watch, "
            "incr; see cohortctl kv --help)\n");
  Result bare_kv = Run({"kv"});
  EXPECT_EQ(bare_kv.exit_code, 2);
  EXPECT_NE(bare_kv.err.find("cohortctl: kv needs a command (commands: get, put"),
            std::string::npos)
      << bare_kv.err;
  Result timeout = Run({"--dial-timeout", "5", "status"});
  EXPECT_EQ(timeout.exit_code, 2);
  EXPECT_EQ(timeout.err, "cohortctl: --dial-timeout \"5\" is not a duration such as 10s\n");
  Result flag = Run({"status", "--bogus"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_EQ(flag.err.rfind("cohortctl: ", 0), 0u) << flag.err;
  EXPECT_NE(flag.err.find("--bogus"), std::string::npos) << flag.err;
  EXPECT_EQ(std::count(flag.err.begin(), flag.err.end(), '\n'), 1) << flag.err;
  EXPECT_EQ(coordinator_.service().KeyValueStats().revision, 0);
}

// Every program says its name and version, and exits 0; a flag it does not know is one line
// naming it, exit 2.
TEST(CohortBinariesTest, EveryProgramHasVersionAndOneLineUsageErrors) {
  for (const std::string program :
       {"cohortctl", "cohort-coordinator", "cohort-sidecar", "cohort-operator", "cohort-objstore",
        "cohort-worker", "cohort-agent-example", "cohort-gpu-info", "cohort-loadgen",
        "cohort-failure-bench", "cohort-restart-bench"}) {
    SCOPED_TRACE(program);
    const std::string path = ::cohort::testing::BinDir() + "/" + program;
    Result version = Subprocess({path, "--version"}).Wait(kDeadline);
    EXPECT_EQ(version.exit_code, 0) << version.err;
    EXPECT_EQ(version.out, program + " " + COHORT_VERSION + "\n");
    Result bad = Subprocess({path, "--no-such-flag"}).Wait(kDeadline);
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_EQ(bad.err.rfind(program + ": ", 0), 0u) << bad.err;
    EXPECT_NE(bad.err.find("--no-such-flag"), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    // Help names what options take, in the formatter's words, not CLI11's raw ones.
    Result help = Subprocess({path, "--help"}).Wait(kDeadline);
    EXPECT_EQ(help.exit_code, 0) << help.err;
    EXPECT_NE(help.out.find("--version"), std::string::npos) << help.out;
    for (const std::string raw : {"BOOLEAN", " INT", " UINT", "{false}", "{true}", ",--no-"}) {
      EXPECT_EQ(help.out.find(raw), std::string::npos) << raw << " in:\n" << help.out;
    }
  }
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
