#include "sidecar/gpu/gpu_json.h"

#include <cstdio>
#include <string>

namespace cohort::gpu {

const char* PcieAffinityName(PcieAffinity affinity) {
  switch (affinity) {
    case PcieAffinity::kSameBoard:
      return "BOARD";
    case PcieAffinity::kSingleSwitch:
      return "PIX";
    case PcieAffinity::kMultipleSwitches:
      return "PXB";
    case PcieAffinity::kHostBridge:
      return "PHB";
    case PcieAffinity::kNumaNode:
      return "NODE";
    case PcieAffinity::kSystem:
      return "SYS";
  }
  return "unknown";
}

const char* NvLinkPeerName(NvLinkPeer peer) {
  switch (peer) {
    case NvLinkPeer::kGpu:
      return "gpu";
    case NvLinkPeer::kSwitch:
      return "switch";
    case NvLinkPeer::kOther:
      return "other";
    case NvLinkPeer::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* HealthProblemName(HealthProblem problem) {
  switch (problem) {
    case HealthProblem::kCriticalXid:
      return "critical_xid";
    case HealthProblem::kDoubleBitEcc:
      return "double_bit_ecc";
    case HealthProblem::kGpuLost:
      return "gpu_lost";
  }
  return "unknown";
}

std::string CudaVersionText(int encoded) {
  return std::to_string(encoded / 1000) + "." + std::to_string((encoded % 1000) / 10);
}

void WriteInventoryMembers(JsonWriter& json, const GpuInventory& inventory) {
  json.Key("nvml");
  json.BeginObject();
  json.Member("library", inventory.library_path);
  json.Member("loaded", inventory.nvml_loaded);
  json.Member("diagnostic", inventory.diagnostic);
  json.Member("driver_version", inventory.driver.driver_version);
  json.Member("nvml_version", inventory.driver.nvml_version);
  json.Key("cuda_driver_version");
  if (inventory.driver.cuda_driver_version) {
    json.String(CudaVersionText(*inventory.driver.cuda_driver_version));
  } else {
    json.Null();
  }
  json.Key("missing_functions");
  json.BeginArray();
  for (const std::string& name : inventory.missing_functions) json.String(name);
  json.EndArray();
  json.EndObject();

  json.Key("gpus");
  json.BeginArray();
  for (const GpuInfo& gpu : inventory.gpus) WriteGpuInfo(json, gpu);
  json.EndArray();

  json.Key("topology");
  json.BeginArray();
  for (const GpuPairTopology& pair : inventory.topology) WritePairTopology(json, pair);
  json.EndArray();
}

void WriteGpuInfo(JsonWriter& json, const GpuInfo& gpu) {
  json.BeginObject();
  json.IntMember("index", gpu.index);
  json.Member("uuid", gpu.uuid);
  json.Member("name", gpu.name);
  json.Member("pci_bus_id", gpu.pci_bus_id);
  json.Key("pci_device_id");
  if (gpu.pci_device_id) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08X", *gpu.pci_device_id);
    json.String(hex);
  } else {
    json.Null();
  }
  json.Member("memory_total_bytes", gpu.memory_total_bytes);
  json.Key("compute_capability");
  if (gpu.compute_capability) {
    json.String(std::to_string(gpu.compute_capability->major) + "." +
                std::to_string(gpu.compute_capability->minor));
  } else {
    json.Null();
  }
  json.Member("numa_node", gpu.numa_node);
  json.Member("gpu_numa_id", gpu.gpu_numa_id);
  json.Key("mig_mode");
  if (gpu.mig_mode) {
    json.BeginObject();
    json.Member("current", gpu.mig_mode->enabled ? "enabled" : "disabled");
    json.Member("pending", gpu.mig_mode->pending_enabled ? "enabled" : "disabled");
    json.EndObject();
  } else {
    json.Null();
  }
  json.Member("ecc_enabled", gpu.ecc_enabled);
  json.Key("nvlinks");
  json.BeginArray();
  for (const NvLink& link : gpu.nvlinks) {
    json.BeginObject();
    json.IntMember("link", link.link);
    json.Member("remote_pci_bus_id", link.remote_pci_bus_id);
    json.Member("peer", NvLinkPeerName(link.peer));
    json.Member("remote_gpu_index", link.remote_gpu_index);
    json.EndObject();
  }
  json.EndArray();
  json.Member("lost", gpu.lost);
  json.EndObject();
}

void WritePairTopology(JsonWriter& json, const GpuPairTopology& pair) {
  json.BeginObject();
  json.Key("gpus");
  json.BeginArray();
  json.Int(pair.first);
  json.Int(pair.second);
  json.EndArray();
  json.Key("pcie");
  if (pair.pcie) {
    json.String(PcieAffinityName(*pair.pcie));
  } else {
    json.Null();
  }
  json.IntMember("direct_nvlinks", pair.direct_nvlinks);
  json.Member("nvswitch", pair.nvswitch);
  json.EndObject();
}

void WriteSample(JsonWriter& json, const GpuSample& sample) {
  json.BeginObject();
  json.IntMember("index", sample.index);
  json.Member("lost", sample.lost);
  json.Member("gpu_utilization_percent", sample.gpu_utilization_percent);
  json.Member("memory_utilization_percent", sample.memory_utilization_percent);
  json.Member("sm_activity", sample.sm_activity);
  json.Member("memory_used_bytes", sample.memory_used_bytes);
  json.Member("memory_free_bytes", sample.memory_free_bytes);
  json.Member("memory_reserved_bytes", sample.memory_reserved_bytes);
  json.Member("temperature_celsius", sample.temperature_celsius);
  json.Member("power_milliwatts", sample.power_milliwatts);
  json.Member("power_limit_milliwatts", sample.power_limit_milliwatts);
  json.Member("energy_millijoules", sample.energy_millijoules);
  json.Member("sm_clock_mhz", sample.sm_clock_mhz);
  json.Key("ecc");
  json.BeginObject();
  json.Member("volatile_single_bit", sample.ecc.volatile_single_bit);
  json.Member("volatile_double_bit", sample.ecc.volatile_double_bit);
  json.Member("aggregate_single_bit", sample.ecc.aggregate_single_bit);
  json.Member("aggregate_double_bit", sample.ecc.aggregate_double_bit);
  json.EndObject();
  json.Key("remapped_rows");
  if (sample.remapped_rows) {
    json.BeginObject();
    json.IntMember("correctable", sample.remapped_rows->correctable);
    json.IntMember("uncorrectable", sample.remapped_rows->uncorrectable);
    json.Member("pending", sample.remapped_rows->pending);
    json.Member("failure", sample.remapped_rows->failure);
    json.EndObject();
  } else {
    json.Null();
  }
  json.Member("pcie_replay_count", sample.pcie_replay_count);
  json.EndObject();
}

void WriteHealth(JsonWriter& json, const GpuHealth& health) {
  json.BeginObject();
  json.IntMember("index", health.gpu_index);
  json.Member("uuid", health.gpu_uuid);
  json.Member("healthy", health.healthy);
  json.Key("reasons");
  json.BeginArray();
  for (const std::string& reason : health.reasons) json.String(reason);
  json.EndArray();
  json.EndObject();
}

void WriteEvent(JsonWriter& json, const GpuEvent& event) {
  json.BeginObject();
  json.IntMember("index", event.gpu_index);
  json.Member("kind", event.kind == GpuEvent::Kind::kXid ? "xid" : "double_bit_ecc");
  json.IntMember("xid", event.xid);
  json.EndObject();
}

}  // namespace cohort::gpu
