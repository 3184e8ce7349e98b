// cohort-objstore: one object store of the task runtime.
#include <csignal>
#include <limits>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/grpc_auth.h"
#include "common/logging.h"
#include "common/process.h"
#include "runtime/objstore/object_store_server.h"
#include "spdlog/spdlog.h"

namespace {

// "2GiB", "512MiB", "1000000": bytes.
bool ParseBytes(const std::string& text, uint64_t* out) {
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"GiB", uint64_t{1} << 30}, {"MiB", uint64_t{1} << 20}, {"KiB", uint64_t{1} << 10}};
  for (const auto& [suffix, scale] : kUnits) {
    std::string s(suffix);
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(text.substr(0, text.size() - s.size()), &n) || n == 0 ||
          n > UINT64_MAX / scale) {
        return false;
      }
      *out = n * scale;
      return true;
    }
  }
  return absl::SimpleAtoi(text, out) && *out > 0;
}

}  // namespace

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
  cohort::DisableMutexDeadlockDetection();
  CLI::App app{
      "cohort-objstore: one object store of the task runtime. It registers with the scheduler "
      "(the coordinator's gRPC port), holds the objects its node's workers and drivers put and "
      "the ones delivered to it from other stores, and serves them.",
      "cohort-objstore"};
  cohort::runtime::ObjectStoreOptions options;
  std::string capacity = "2GiB";
  std::string token_file;
  std::string log_format = "text";
  std::string log_level = "info";
  app.add_option("--listen", options.listen, "HOST:PORT to serve on (port 0: any)")
      ->capture_default_str();
  app.add_option("--advertise", options.advertise,
                 "HOST:PORT others reach this store at (default: the listen address)");
  app.add_option("--scheduler", options.scheduler, "the coordinator's gRPC HOST:PORT")->required();
  app.add_option("--capacity", capacity,
                 "bytes this store may hold, e.g. 512MiB or 4GiB; a put past it is refused")
      ->capture_default_str();
  app.add_option("--shm-dir", options.shm_dir,
                 "keep objects as files here (a directory of the store's own is made inside) "
                 "that this machine's workers and drivers map instead of copying; empty: in "
                 "the store's memory only")
      ->capture_default_str();
  app.add_option("--auth-token-file", token_file,
                 "the job's token: sent on every call and required of every call");
  app.add_flag("--insecure-no-auth", options.insecure_no_auth,
               "serve beyond loopback without --auth-token-file: anyone who reaches the port "
               "can read, replace and delete objects (refused otherwise)");
  app.add_option("--max-message-bytes", options.max_message_bytes,
                 "largest gRPC message taken from a caller or another store (an object travels "
                 "in chunks of 1 MiB)")
      ->capture_default_str()
      ->check(CLI::Range(1 << 20, std::numeric_limits<int>::max()));
  app.add_option("--log-format", log_format, "text or json")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;

  if (!ParseBytes(capacity, &options.capacity_bytes)) {
    std::fprintf(stderr, "--capacity '%s': expected a positive number of bytes, e.g. 4GiB\n",
                 capacity.c_str());
    return 2;
  }
  if (auto s = cohort::SetUpLogging("objstore", log_format, log_level); !s.ok()) {
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
  const cohort::StopSignals signals;

  cohort::runtime::ObjectStoreServer server(options);
  if (auto s = server.Start(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 1;
  }
  std::thread stopper([&] {
    spdlog::info("object store stopping ({})", cohort::StopSignals::Name(signals.Wait()));
    server.Shutdown();
  });
  server.Wait();
  stopper.join();
  return 0;
}
