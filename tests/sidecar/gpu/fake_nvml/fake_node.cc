#include "tests/sidecar/gpu/fake_nvml/fake_node.h"

#include <fstream>
#include <map>

#include "nlohmann/json.hpp"

namespace fake_nvml {
namespace {

using nlohmann::json;

template <typename T>
std::optional<T> Optional(const json& object, const char* key) {
  if (!object.contains(key) || object[key].is_null()) return std::nullopt;
  return object[key].get<T>();
}

int TopologyLevel(const std::string& name) {
  static const std::map<std::string, int> kLevels = {
      {"X", 0}, {"BOARD", 0}, {"PIX", 10}, {"PXB", 20}, {"PHB", 30}, {"NODE", 40}, {"SYS", 50}};
  auto it = kLevels.find(name);
  if (it == kLevels.end()) throw std::runtime_error("unknown topology level " + name);
  return it->second;
}

int NvLinkDeviceType(const std::string& name) {
  if (name == "gpu") return 0x00;
  if (name == "ibmnpu") return 0x01;
  if (name == "switch") return 0x02;
  return 0xFF;
}

FakeGpu ParseGpu(const json& config) {
  FakeGpu gpu;
  gpu.uuid = config.at("uuid").get<std::string>();
  gpu.name = config.value("name", "");
  gpu.pci_bus_id = config.value("pci_bus_id", "");
  gpu.pci_device_id = config.value("pci_device_id", 0u);
  gpu.pci_subsystem_id = config.value("pci_subsystem_id", 0u);
  if (config.contains("memory")) {
    const json& memory = config["memory"];
    gpu.memory = FakeMemory{memory.at("total").get<uint64_t>(), memory.value("used", uint64_t{0}),
                            memory.value("reserved", uint64_t{0})};
  }
  if (config.contains("compute_capability")) {
    gpu.compute_capability = std::make_pair(config["compute_capability"].at(0).get<int>(),
                                            config["compute_capability"].at(1).get<int>());
  }
  gpu.numa_node = Optional<unsigned int>(config, "numa_node");
  gpu.gpu_numa_id = Optional<unsigned int>(config, "gpu_numa_id");
  if (config.contains("mig_mode")) {
    gpu.mig_mode = std::make_pair(config["mig_mode"].at("current").get<unsigned int>(),
                                  config["mig_mode"].at("pending").get<unsigned int>());
  }
  gpu.ecc_enabled = Optional<bool>(config, "ecc_enabled");
  if (config.contains("utilization")) {
    gpu.utilization = std::make_pair(config["utilization"].at("gpu").get<unsigned int>(),
                                     config["utilization"].at("memory").get<unsigned int>());
  }
  gpu.sm_activity = Optional<double>(config, "sm_activity");
  gpu.temperature = Optional<unsigned int>(config, "temperature");
  gpu.power_mw = Optional<unsigned int>(config, "power_mw");
  gpu.power_limit_mw = Optional<unsigned int>(config, "power_limit_mw");
  gpu.energy_mj = Optional<unsigned long long>(config, "energy_mj");
  gpu.sm_clock_mhz = Optional<unsigned int>(config, "sm_clock_mhz");
  gpu.pcie_replay = Optional<unsigned int>(config, "pcie_replay");
  if (config.contains("ecc")) {
    const json& ecc = config["ecc"];
    gpu.ecc = FakeEcc{
        ecc.value("volatile_single", uint64_t{0}), ecc.value("volatile_double", uint64_t{0}),
        ecc.value("aggregate_single", uint64_t{0}), ecc.value("aggregate_double", uint64_t{0})};
  }
  if (config.contains("remapped_rows")) {
    const json& rows = config["remapped_rows"];
    gpu.remapped_rows =
        FakeRemappedRows{rows.value("correctable", 0u), rows.value("uncorrectable", 0u),
                         rows.value("pending", false), rows.value("failure", false)};
  }
  gpu.nvlink_count = config.value("nvlink_count", 0u);
  for (const json& link : config.value("nvlinks", json::array())) {
    gpu.nvlinks.push_back({link.at("link").get<unsigned int>(), link.value("remote_bus_id", ""),
                           NvLinkDeviceType(link.value("remote_type", "unknown"))});
  }
  gpu.supported_events = 0;
  for (const json& event : config.value("events", json::array({"xid", "double_bit_ecc"}))) {
    if (event == "xid") gpu.supported_events |= 0x8;
    if (event == "double_bit_ecc") gpu.supported_events |= 0x2;
  }
  // Absent means the default, none; null means a driver that does not know the field.
  if (config.contains("recovery_action")) {
    gpu.recovery_action = Optional<unsigned int>(config, "recovery_action");
  }
  return gpu;
}

}  // namespace

bool LoadFakeNode(const std::string& path, FakeNode* node, std::string* error) {
  std::ifstream file(path);
  if (!file) {
    *error = "cannot open " + path;
    return false;
  }
  try {
    json config = json::parse(file);
    FakeNode parsed;
    parsed.driver_version = config.value("driver_version", "");
    parsed.nvml_version = config.value("nvml_version", "");
    parsed.cuda_driver_version = Optional<int>(config, "cuda_driver_version");
    parsed.init_error = config.value("init_error", 0);
    for (const json& gpu : config.value("gpus", json::array())) {
      parsed.gpus.push_back(ParseGpu(gpu));
    }
    for (const json& row : config.value("topology", json::array())) {
      std::vector<int> levels;
      for (const json& level : row) levels.push_back(TopologyLevel(level.get<std::string>()));
      parsed.topology.push_back(levels);
    }
    *node = std::move(parsed);
    return true;
  } catch (const std::exception& e) {
    *error = path + ": " + e.what();
    return false;
  }
}

}  // namespace fake_nvml
