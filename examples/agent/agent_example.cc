// cohort-agent-example: a small C++ workload on the cohort agent. Each task connects,
// publishes its address, watches the job's configuration, passes a barrier per training
// step and shuts down through the shutdown barrier, printing what it does.
//
// Identity comes from the env the cohort operator injects (COHORT_COORDINATOR_ADDRESS,
// COHORT_JOB_NAME, COHORT_TASK_ID, COHORT_NUM_TASKS, COHORT_RECOVERABLE); flags override it.
//
// --hold-key KEY makes every task wait for KEY before its first step, so that a test can
// act on a running job that cannot finish before it does.
//
// Recoverable (--recoverable, or COHORT_RECOVERABLE=true in a job with
// spec.coordinator.recoverable): a task that starts again while the others run on rejoins
// them. It finds that it ran before (demo/started/<task>), publishes its address anew, and
// resumes after the last step it finished (demo/progress/<task>); each step has a barrier of
// its own (demo/step/<n>), which the others wait at until it arrives.
//
// After each step it tells its sidecar (cohort::ReportProgress, agent/progress.h: a write to
// $COHORT_PROGRESS_FILE), which is what hang and straggler detection see of it.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/coordination_agent.h"
#include "agent/grpc_status.h"
#include "agent/progress.h"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/logging.h"
#include "common/process.h"
#include "spdlog/spdlog.h"

namespace {

int task_id = 0;

void Say(const std::string& what) {
  std::printf("[task %d] %s\n", task_id, what.c_str());
  std::fflush(stdout);
}

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "[task %d] %s failed: %s\n", task_id, what.c_str(),
               cohort::DescribeStatus(status).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
  CLI::App app{
      "cohort-agent-example: a workload task on the cohort agent. It connects, publishes its\n"
      "address, watches demo/config, passes one barrier per step and shuts down.",
      "cohort-agent-example"};
  cohort::AgentConfig config;
  config.coordinator_address = cohort::EnvOr("COHORT_COORDINATOR_ADDRESS", "localhost:8476");
  config.job_name = cohort::EnvOr("COHORT_JOB_NAME", "worker");
  int num_tasks = std::atoi(cohort::EnvOr("COHORT_NUM_TASKS", "1").c_str());
  task_id = std::atoi(cohort::EnvOr("COHORT_TASK_ID", "0").c_str());
  int steps = 3, exit_at_step = -1, exit_code = 1, exit_task = -1;
  bool recoverable = cohort::EnvOr("COHORT_RECOVERABLE", "false") == "true";
  double step_seconds = 0.2;
  std::string hold_key;
  app.add_option("--coordinator", config.coordinator_address,
                 "coordinator address ($COHORT_COORDINATOR_ADDRESS)")
      ->capture_default_str();
  app.add_option("--job", config.job_name, "job name ($COHORT_JOB_NAME)")->capture_default_str();
  app.add_option("--task", task_id, "task id ($COHORT_TASK_ID)")->capture_default_str();
  app.add_option("--num-tasks", num_tasks, "tasks in the job ($COHORT_NUM_TASKS)")
      ->capture_default_str();
  app.add_option("--steps", steps, "training steps, one barrier each")->capture_default_str();
  app.add_option("--step-seconds", step_seconds, "time each step takes")->capture_default_str();
  app.add_option("--exit-at-step", exit_at_step,
                 "exit with --exit-code at this step, as a crashing worker would (-1: never)");
  app.add_option("--exit-code", exit_code, "exit status for --exit-at-step")->capture_default_str();
  app.add_option("--exit-task", exit_task,
                 "only this task exits at --exit-at-step (-1: every task); a recoverable task "
                 "that rejoins never does")
      ->capture_default_str();
  app.add_option("--hold-key", hold_key,
                 "before the first step, wait until this key is in the store (a go signal, e.g. "
                 "cohortctl kv put KEY 1), however long that takes")
      ->type_name("KEY");
  app.add_flag("--recoverable,!--no-recoverable", recoverable,
               "rejoin a running job when started again: resume after the last finished step "
               "($COHORT_RECOVERABLE)")
      ->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  if (num_tasks < 1 || task_id < 0 || task_id >= num_tasks) {
    std::fprintf(stderr, "cohort-agent-example: --task %d is not one of --num-tasks %d (0..%d)\n",
                 task_id, num_tasks, num_tasks - 1);
    return 2;
  }
  config.task_id = task_id;
  config.recoverable = recoverable;
  spdlog::set_level(spdlog::level::warn);

  cohort::CoordinationAgent agent;
  // The job's failure while this task runs; a failed Connect is said once, below.
  std::atomic<bool> connected{false};
  if (auto s = agent.Initialize(config,
                                [&connected](const absl::Status& error) {
                                  if (!connected) return;
                                  Say(absl::StrCat("the job failed: ", error.message()));
                                });
      !s.ok()) {
    return Fail("initialize", s);
  }
  Say(absl::StrCat("connecting to ", config.coordinator_address, " as /job:", config.job_name,
                   "/task:", task_id, " of ", num_tasks));
  if (auto s = agent.Connect(); !s.ok()) return Fail("connect", s);
  connected = true;
  // The job must be as big as this task was told: the coordinator knows every task id.
  if (auto last = agent.GetTaskState({{config.job_name, num_tasks - 1}}); !last.ok()) {
    return Fail(absl::StrCat("check --num-tasks ", num_tasks), last.status());
  }
  // A recoverable task that ran before rejoins the others where it left off.
  bool rejoining = false;
  int first_step = 0;
  if (recoverable) {
    const absl::Status first = agent.InsertKeyValue(absl::StrCat("demo/started/", task_id), "1");
    rejoining = absl::IsAlreadyExists(first);
    if (!first.ok() && !rejoining) return Fail("mark started", first);
    auto progress = agent.TryGetKeyValue(absl::StrCat("demo/progress/", task_id));
    if (progress.ok()) {
      int done = -1;
      if (!absl::SimpleAtoi(*progress, &done) || done < 0) {
        return Fail("resume", absl::DataLossError(
                                  absl::StrCat("demo/progress/", task_id, " holds \"", *progress,
                                               "\", not the number of a finished step")));
      }
      first_step = done + 1;
    } else if (!absl::IsNotFound(progress.status())) {
      return Fail("read progress", progress.status());
    }
  }
  if (rejoining) {
    Say(absl::StrCat("registered again: rejoining the running job at step ", first_step));
  } else {
    Say("registered; every task of the job is here");
  }

  // Watch the job's configuration: task 0 writes it, everyone sees it change.
  absl::Notification config_seen;
  auto watch = agent.StartWatchKey("demo/config", [&](absl::StatusOr<cohort::KeyChange> change) {
    if (!change.ok()) return Say(absl::StrCat("config watch ended: ", change.status().message()));
    Say(absl::StrCat("saw ", cohort::KeyChangeTypeName(change->type), " ", change->key, " = ",
                     change->value, " (revision ", change->revision, ")"));
    if (change->key == "demo/config/learning_rate" && !config_seen.HasBeenNotified()) {
      config_seen.Notify();
    }
  });
  if (!watch.ok()) return Fail("watch demo/config", watch.status());

  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  std::string address = absl::StrCat(host, ":", 9000 + task_id);
  const std::string peer_key = absl::StrCat("demo/peers/", task_id);
  if (auto s = rejoining ? agent.UpdateKeyValue(peer_key, address)
                         : agent.InsertKeyValue(peer_key, address);
      !s.ok()) {
    return Fail("publish address", s);
  }
  if (auto s = agent.WaitAtBarrier("demo/peers-published", absl::Minutes(5)); !s.ok()) {
    return Fail("barrier peers-published", s);
  }
  auto peers = agent.GetKeyValueDir("demo/peers");
  if (!peers.ok()) return Fail("read peers", peers.status());
  // Past the barrier every task has published its address.
  if (peers->size() != static_cast<size_t>(num_tasks)) {
    std::string found;
    for (const auto& [key, value] : *peers) absl::StrAppend(&found, " ", key, "=", value);
    return Fail("read peers",
                absl::InternalError(absl::StrCat("demo/peers holds ", peers->size(),
                                                 " addresses after the barrier, not ", num_tasks,
                                                 ":", found.empty() ? " none" : found)));
  }
  Say(absl::StrCat("found ", cohort::Plural(static_cast<long long>(peers->size()), "peer"),
                   ", e.g. ", peers->front().first, " -> ", peers->front().second));

  if (rejoining && agent.TryGetKeyValue("demo/config/learning_rate").ok()) {
    config_seen.Notify();  // written before this task started again: the watch will not see it
  }
  if (task_id == 0 && !rejoining &&
      !agent.InsertKeyValue("demo/config/learning_rate", "0.01").ok()) {
    return Fail("write config", absl::InternalError("insert failed"));
  }
  if (!config_seen.WaitForNotificationWithTimeout(absl::Minutes(5))) {
    return Fail("config watch", absl::DeadlineExceededError("no config within 5 minutes"));
  }

  if (!hold_key.empty()) {
    Say(absl::StrCat("holding until ", hold_key, " is in the store"));
    if (auto go = agent.GetKeyValue(hold_key); !go.ok()) {
      return Fail(absl::StrCat("wait for ", hold_key), go.status());
    }
    Say(absl::StrCat(hold_key, " is set: training"));
  }

  for (int step = first_step; step < steps; ++step) {
    if (step == exit_at_step && !rejoining && (exit_task < 0 || exit_task == task_id)) {
      Say(absl::StrCat("exiting with status ", exit_code, " at step ", step, " as asked"));
      std::fflush(stdout);
      _exit(exit_code);
    }
    absl::SleepFor(absl::Seconds(step_seconds));
    auto done = agent.IncrementKeyValue("demo/steps_done", 1);
    if (!done.ok()) return Fail("count step", done.status());
    // One barrier id for every step (the agent counts its instances), or, for a task that
    // may rejoin, one per step: a task started again has no count of the instances it missed.
    const std::string barrier = recoverable ? absl::StrCat("demo/step/", step) : "demo/step";
    if (auto s = agent.WaitAtBarrier(barrier, absl::Minutes(5)); !s.ok()) {
      return Fail(absl::StrCat("barrier of step ", step), s);
    }
    if (recoverable) {
      if (auto s =
              agent.UpdateKeyValue(absl::StrCat("demo/progress/", task_id), absl::StrCat(step));
          !s.ok()) {
        return Fail("record progress", s);
      }
    }
    cohort::ReportProgress(step + 1);  // steps done; a no-op without $COHORT_PROGRESS_FILE
    Say(absl::StrCat("step ", step, " done (", *done, " task-steps so far)"));
  }
  agent.StopWatchKey(*watch);
  if (auto s = agent.Shutdown(); !s.ok()) return Fail("shutdown", s);
  Say("shut down cleanly");
  return 0;
}
