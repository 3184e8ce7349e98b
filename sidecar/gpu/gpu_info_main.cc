// cohort-gpu-info: prints what cohort's sidecar sees of this node's GPUs, as JSON. It needs
// only the C++ standard library and libdl, so it can be copied to a GPU machine and run alone.
// The command line is parsed by hand for the same reason.

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sidecar/gpu/gpu_json.h"
#include "sidecar/gpu/gpu_monitor.h"
#include "sidecar/gpu/json_writer.h"

namespace cohort::gpu {
// The build passes cohort's version; built by hand (docs/sidecar.md) it has none.
#ifndef COHORT_VERSION
#define COHORT_VERSION "(built outside cohort's build)"
#endif

namespace {

constexpr const char* kUsage = R"(Usage: cohort-gpu-info [options]

Prints this node's GPUs as NVML reports them, as JSON on standard output: the driver,
each GPU (UUID, name, PCI bus id, memory, compute capability, NUMA node, MIG mode,
NVLinks) and the topology between GPUs. Diagnostics go to standard error. A node
without the NVIDIA driver or without GPUs prints zero GPUs and exits 0.

Options:
  --library PATH       NVML library to load (default: $COHORT_NVML_LIBRARY, else
                       libnvidia-ml.so.1 from the dynamic loader's search path)
  --sample             also print one sample of telemetry (utilisation, memory,
                       temperature, power, energy, SM clock, ECC counters, remapped
                       rows, PCIe replays) and each GPU's health
  --watch SECONDS      listen for XID and double-bit ECC events this long, then
                       sample again and print events and health (implies --sample);
                       that sample has SM activity over the watch, on GPUs with GPM
  --ignore-xids LIST   comma-separated XIDs that leave a GPU healthy
                       (default: 13,31,43,45,68,109; "" ignores none)
  --version            print the version and exit
  --help               print this and exit
)";

struct Flags {
  std::string library_path;
  bool sample = false;
  double watch_seconds = 0;
  std::optional<std::set<uint64_t>> ignored_xids;
};

bool ParseXidList(const std::string& text, std::set<uint64_t>* xids) {
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    unsigned long long xid = std::strtoull(item.c_str(), &end, 10);
    if (*end != '\0') return false;
    xids->insert(xid);
  }
  return true;
}

// Returns 0 to go on, -1 after printing --help or --version, else the exit status after an
// error.
int ParseFlags(int argc, char** argv, Flags* flags) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= args.size()) return false;
      *out = args[++i];
      return true;
    };
    std::string text;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return -1;
    } else if (arg == "--version") {
      std::cout << "cohort-gpu-info " << COHORT_VERSION << "\n";
      return -1;
    } else if (arg == "--sample") {
      flags->sample = true;
    } else if (arg == "--library" && value(&flags->library_path)) {
    } else if (arg == "--watch" && value(&text)) {
      char* end = nullptr;
      flags->watch_seconds = std::strtod(text.c_str(), &end);
      if (*end != '\0' || flags->watch_seconds < 0) {
        std::cerr << "cohort-gpu-info: --watch needs a number of seconds, got '" << text << "'\n";
        return 2;
      }
      flags->sample = true;
    } else if (arg == "--ignore-xids" && value(&text)) {
      std::set<uint64_t> xids;
      if (!ParseXidList(text, &xids)) {
        std::cerr << "cohort-gpu-info: --ignore-xids needs numbers separated by commas, got '"
                  << text << "'\n";
        return 2;
      }
      flags->ignored_xids = xids;
    } else {
      std::cerr << "cohort-gpu-info: unknown or incomplete option '" << arg << "'; see --help\n";
      return 2;
    }
  }
  return 0;
}

int Run(const Flags& flags) {
  std::mutex events_mu;
  std::vector<HealthEvent> health_events;

  GpuMonitorOptions options;
  options.library_path = flags.library_path;
  if (flags.ignored_xids) options.health_policy.ignored_xids = *flags.ignored_xids;
  options.on_health_event = [&](const HealthEvent& event) {
    std::lock_guard<std::mutex> lock(events_mu);
    health_events.push_back(event);
  };
  GpuMonitor monitor(options);

  JsonWriter json;
  json.BeginObject();
  WriteInventoryMembers(json, monitor.inventory());
  if (flags.sample) {
    std::vector<GpuSample> samples = monitor.Sample();
    std::vector<GpuEvent> events;
    // Whether the event set took: a driver or GPU without XID events leaves nothing to wait on.
    const bool listening = monitor.listening_for_events();
    if (flags.watch_seconds > 0) {
      auto deadline = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(flags.watch_seconds));
      while (monitor.listening_for_events()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        for (const GpuEvent& event : monitor.PollEvents(left)) events.push_back(event);
      }
      samples = monitor.Sample();  // a second sample catches ECC counters that rose
    }
    json.Key("samples");
    json.BeginArray();
    for (const GpuSample& sample : samples) WriteSample(json, sample);
    json.EndArray();
    if (flags.watch_seconds > 0) {
      json.Key("events");
      json.BeginArray();
      for (const GpuEvent& event : events) WriteEvent(json, event);
      json.EndArray();
      json.Member("listening_for_events", listening);
    }
    json.Key("health");
    json.BeginArray();
    for (const GpuHealth& health : monitor.Health()) WriteHealth(json, health);
    json.EndArray();
    json.Key("health_events");
    json.BeginArray();
    std::lock_guard<std::mutex> lock(events_mu);
    for (const HealthEvent& event : health_events) {
      json.BeginObject();
      json.IntMember("index", event.gpu_index);
      json.Member("uuid", event.gpu_uuid);
      json.Member("problem", HealthProblemName(event.problem));
      json.Member("reason", event.reason);
      json.EndObject();
    }
    json.EndArray();
  }
  json.EndObject();
  std::cout << json.text();
  return 0;
}

}  // namespace
}  // namespace cohort::gpu

int main(int argc, char** argv) {
  cohort::gpu::Flags flags;
  int status = cohort::gpu::ParseFlags(argc, argv, &flags);
  if (status == -1) return 0;  // --help
  if (status != 0) return status;
  return cohort::gpu::Run(flags);
}
