// cohort-loadgen: one process simulating the N tasks of a job against a coordination
// service (cohort, or jaxlib's own service over the same xla.coordination protocol), or the
// key-value clients of etcd, or the ranks of a PyTorch job against a TCPStore server
// (--protocol tcpstore: register and barrier, bench/tcpstore_load.h). Prints one JSON object
// of measurements.
//
//   register      N tasks through the register barrier
//   barrier       barrier rounds over N tasks: last arrival to all released
//   heartbeat     N tasks heartbeating at --interval; the server's CPU (--pid)
//   kv            set / get / blocking get with --clients closed loops, --value-bytes values
//   memory        the server's RSS (--pid) per task with three parked calls each
//   failure       task 0 stops heartbeating; time until every other task's poll returns
#include <unistd.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "bench/kv_driver.h"
#include "bench/scenarios.h"
#include "bench/task_client.h"
#include "bench/tcpstore_load.h"
#include "common/command_line.h"
#include "nlohmann/json.hpp"

namespace {

// Prints the result and leaves without running destructors: gRPC's threads may still be
// unwinding from the last callbacks, and tearing the channels down under them can crash
// the process after the measurement is done (and before a buffered stdout is written).
[[noreturn]] void Emit(const nlohmann::json& out, int status) {
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(status);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cohort::bench;
  CLI::App app{"cohort-loadgen: simulated tasks against a running coordination service",
               "cohort-loadgen"};
  std::string address = "127.0.0.1:8476", scenario, protocol = "xla", job = "worker", ops;
  Options o;
  app.add_option("scenario", scenario, "register | barrier | heartbeat | kv | memory | failure")
      ->required();
  app.add_option("--coordinator", address, "server address")->capture_default_str();
  app.add_option("--protocol", protocol,
                 "xla | tensorflow | etcd (kv only) | tcpstore (register, barrier, memory)")
      ->capture_default_str();
  app.add_option("--job", job, "tensorflow: the job name")->capture_default_str();
  app.add_option("--tasks", o.tasks, "tasks to simulate (the server's job size)")
      ->capture_default_str();
  app.add_option("--channels", o.channels, "gRPC connections to spread tasks or clients over")
      ->capture_default_str();
  app.add_option("--pid", o.pid, "the server's pid, to read its RSS and CPU");
  app.add_option("--rounds", o.rounds, "barrier: rounds")->capture_default_str();
  app.add_option("--seconds", o.seconds, "heartbeat, kv: seconds per measured phase")
      ->capture_default_str();
  app.add_option("--interval", o.interval, "heartbeat, failure: heartbeat interval, seconds")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout,
                 "failure: the server's heartbeat timeout, seconds")
      ->capture_default_str();
  app.add_option("--clients", o.clients, "kv: concurrent clients")->capture_default_str();
  app.add_option("--value-bytes", o.value_bytes, "kv: value size")->capture_default_str();
  app.add_option("--ops", ops, "kv: comma-separated phases (set,get,blocking_get)");
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  if (!ops.empty()) {
    o.ops.clear();
    for (size_t start = 0; start <= ops.size();) {
      size_t comma = std::min(ops.find(',', start), ops.size());
      o.ops.push_back(ops.substr(start, comma - start));
      start = comma + 1;
    }
  }
  o.channels = std::max(1, std::min(o.channels, scenario == "kv" ? o.clients : o.tasks));

  nlohmann::json out = {
      {"scenario", scenario}, {"protocol", protocol}, {"tasks", o.tasks}, {"channels", o.channels}};
  if (protocol == "tcpstore") {
    if (scenario != "register" && scenario != "barrier" && scenario != "memory") {
      std::fprintf(stderr, "tcpstore: only the register, barrier and memory scenarios\n");
      return 2;
    }
    out.erase("channels");
    out.update(scenario == "memory" ? TcpStoreMemory(address, o)
                                    : TcpStoreBarriers(address, scenario, o));
    Emit(out, out.contains("error") ? 1 : 0);
  }
  if (protocol == "etcd") {
    if (scenario != "kv") {
      std::fprintf(stderr, "etcd: only the kv scenario\n");
      return 2;
    }
    out.erase("tasks");
    auto driver = MakeEtcdKvDriver(address, o.channels, o.clients);
    out.update(KeyValueLoad(*driver, o));
    Emit(out, 0);
  }
  auto client = MakeTaskClient(protocol, address, o.channels, job);
  if (!client) {
    std::fprintf(stderr, "unknown protocol %s\n", protocol.c_str());
    return 2;
  }
  if (scenario == "memory") {
    out.update(ParkedMemory(*client, o));
  } else {
    nlohmann::json reg = RegisterAll(*client, o);
    out.update(reg);
    if (reg["register_failed"].get<int64_t>() > 0) Emit(out, 1);
    if (scenario == "register") {
      // RegisterAll is the measurement.
    } else if (scenario == "barrier") {
      out.update(BarrierRounds(*client, o));
    } else if (scenario == "heartbeat") {
      out.update(HeartbeatLoad(*client, o));
    } else if (scenario == "kv") {
      auto driver = MakeTaskKvDriver(client.get(), o.tasks);
      out.update(KeyValueLoad(*driver, o));
    } else if (scenario == "failure") {
      out.update(HeartbeatFailure(*client, o));
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
  }
  Emit(out, 0);
}
