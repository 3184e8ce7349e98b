// proxy_test_client: one task of a test workload on the cohort agent, run as its own
// process behind a sidecar proxy. Step k starts once the file go-k exists in --go-dir:
// insert a key (without overwrite), pass a barrier of every task, read every other task's
// key. It keeps a blocking get parked all along. It prints "connected", then "step k begins"
// and "step k ok" per step, and "done"
// after the shutdown barrier; any error is printed and ends it with status 1.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/coordination_agent.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace {

int Fail(const std::string& what, const absl::Status& status) {
  std::printf("error: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

bool WaitForFile(const std::string& path, absl::Duration timeout) {
  for (absl::Time end = absl::Now() + timeout; absl::Now() < end;) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"proxy_test_client"};
  std::string address, go_dir;
  int task = 0, tasks = 1, steps = 1;
  app.add_option("--address", address)->required();
  app.add_option("--task", task)->required();
  app.add_option("--tasks", tasks)->required();
  app.add_option("--steps", steps)->required();
  app.add_option("--go-dir", go_dir)->required();
  CLI11_PARSE(app, argc, argv);
  // stdout is for the test to read.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("agent"));
  spdlog::set_level(spdlog::level::warn);

  cohort::AgentConfig config;
  config.coordinator_address = address;
  config.job_name = "worker";
  config.task_id = task;
  config.heartbeat_interval = absl::Milliseconds(500);
  config.unreachable_timeout = absl::Seconds(10);
  config.rpc_timeout = absl::Seconds(60);
  cohort::CoordinationAgent agent;
  auto on_error = [](const absl::Status& error) {
    std::printf("error: the agent: %s\n", error.ToString().c_str());
    std::fflush(stdout);
    std::_Exit(1);
  };
  if (auto s = agent.Initialize(config, on_error); !s.ok()) return Fail("initialize", s);
  if (auto s = agent.Connect(); !s.ok()) return Fail("connect", s);
  std::printf("connected\n");
  std::fflush(stdout);
  // Parked for the whole run: must come through every outage without an answer.
  auto parked = agent.GetKeyValueAsync("never", [](const absl::StatusOr<std::string>& value) {
    if (value.status().code() == absl::StatusCode::kCancelled) return;
    std::printf("error: the parked get ended: %s\n", value.status().ToString().c_str());
    std::fflush(stdout);
    std::_Exit(1);
  });

  for (int step = 1; step <= steps; ++step) {
    if (!WaitForFile(absl::StrCat(go_dir, "/go-", step), absl::Seconds(120))) {
      return Fail(absl::StrCat("step ", step), absl::DeadlineExceededError("no go file"));
    }
    std::printf("step %d begins\n", step);
    std::fflush(stdout);
    std::string mine = absl::StrCat("data/", step, "/", task);
    if (auto s = agent.InsertKeyValue(mine, absl::StrCat("value ", step, " of ", task)); !s.ok()) {
      return Fail(absl::StrCat("insert at step ", step), s);
    }
    if (auto s = agent.WaitAtBarrier("step", absl::Seconds(120)); !s.ok()) {
      return Fail(absl::StrCat("barrier at step ", step), s);
    }
    for (int other = 0; other < tasks; ++other) {
      auto value = agent.GetKeyValue(absl::StrCat("data/", step, "/", other), absl::Seconds(60));
      if (!value.ok()) return Fail(absl::StrCat("get at step ", step), value.status());
      if (*value != absl::StrCat("value ", step, " of ", other)) {
        return Fail(absl::StrCat("get at step ", step), absl::DataLossError(*value));
      }
    }
    std::printf("step %d ok\n", step);
    std::fflush(stdout);
  }
  parked->Cancel();
  if (auto s = agent.Shutdown(); !s.ok()) return Fail("shutdown", s);
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}
