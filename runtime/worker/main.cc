// cohort-worker: C++ workers of the task runtime, with the built-in functions.
#include <csignal>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/grpc_auth.h"
#include "common/logging.h"
#include "common/process.h"
#include "runtime/worker/builtin_functions.h"
#include "runtime/worker/cpp_worker.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
  cohort::DisableMutexDeadlockDetection();
  std::string functions;
  for (const auto& f : cohort::runtime::BuiltinFunctions()) {
    functions += (functions.empty() ? "" : ", ") + f.name;
  }
  CLI::App app{
      "cohort-worker: C++ workers of the task runtime. Each registers with the "
      "scheduler (the coordinator's gRPC port) and runs tasks of the built-in "
      "functions (" +
          functions + ") with its node's object store.",
      "cohort-worker"};
  cohort::runtime::CppWorkerOptions options;
  int workers = 1;
  std::string token_file;
  std::string log_format = "text";
  std::string log_level = "info";
  app.add_option("--scheduler", options.scheduler,
                 "the coordinator's gRPC HOST:PORT ($COHORT_SCHEDULER)")
      ->envname("COHORT_SCHEDULER")
      ->required();
  app.add_option("--objstore", options.objstore,
                 "this node's object store HOST:PORT ($COHORT_OBJSTORE)")
      ->envname("COHORT_OBJSTORE")
      ->required();
  app.add_option("--workers", workers,
                 "how many workers (one task each at a time) ($COHORT_TASK_WORKERS)")
      ->envname("COHORT_TASK_WORKERS")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--listen-host", options.listen_host,
                 "the host each worker serves WorkerService on, an unused port each "
                 "($COHORT_NODE_IP)")
      ->envname("COHORT_NODE_IP")
      ->capture_default_str();
  app.add_option("--auth-token-file", token_file,
                 "the job's token: sent on every call and required of every call "
                 "($COHORT_AUTH_TOKEN_FILE)")
      ->envname("COHORT_AUTH_TOKEN_FILE");
  app.add_flag("--insecure-no-auth", options.insecure_no_auth,
               "serve beyond loopback without --auth-token-file: anyone who reaches a worker's "
               "port can send it tasks (refused otherwise)");
  app.add_option("--max-message-bytes", options.max_message_bytes,
                 "largest gRPC message taken from the scheduler (a task with its inline "
                 "arguments)")
      ->capture_default_str()
      ->check(CLI::Range(1 << 20, std::numeric_limits<int>::max()));
  app.add_option("--log-format", log_format, "text or json")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  if (auto s = cohort::SetUpLogging("worker", log_format, log_level); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!token_file.empty()) {
    auto token = cohort::ReadAuthTokenFile(token_file, "--auth-token-file");
    if (!token.ok()) {
      spdlog::error("{}", std::string(token.status().message()));
      return 2;
    }
    options.auth_token = *token;
  }
  // SIGUSR1: the main thread's word that every worker ended.
  const cohort::StopSignals signals({SIGUSR1});

  std::vector<std::unique_ptr<cohort::runtime::CppWorker>> pool;
  for (int i = 0; i < workers; ++i) {
    pool.push_back(std::make_unique<cohort::runtime::CppWorker>(options));
    if (auto s = pool.back()->Start(); !s.ok()) {
      spdlog::error("starting worker {}: {}", i, std::string(s.message()));
      return 1;
    }
  }
  std::thread stopper([&] {
    const int signal = signals.Wait();
    if (signal == SIGUSR1) return;
    // Drained, as a pod being deleted is: each finishes the task at hand and tells the
    // scheduler it leaves, so that nothing new is sent to it.
    spdlog::info("workers leaving ({}): finishing the tasks at hand",
                 cohort::StopSignals::Name(signal));
    for (auto& w : pool) w->Leave();
  });
  int code = 0;
  for (auto& w : pool) {
    if (auto s = w->Wait(); !s.ok()) code = 1;
  }
  // Every worker ended (Die, or the scheduler lost them): release the signal thread.
  pthread_kill(stopper.native_handle(), SIGUSR1);
  stopper.join();
  return code;
}
