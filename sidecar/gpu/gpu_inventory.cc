#include "sidecar/gpu/gpu_inventory.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>

#include "sidecar/gpu/device_query.h"
#include "sidecar/gpu/gpu_topology.h"
#include "sidecar/gpu/pci_address.h"

namespace cohort::gpu {
namespace {

DriverInfo ReadDriverInfo(const NvmlApi& api) {
  DriverInfo driver;
  char buffer[nvml::kDriverVersionBufferSize] = {};
  if (api.system_get_driver_version != nullptr &&
      api.system_get_driver_version(buffer, sizeof(buffer)) == nvml::kSuccess) {
    driver.driver_version = FromNvmlBuffer(buffer, sizeof(buffer));
  }
  char nvml_buffer[nvml::kNvmlVersionBufferSize] = {};
  if (api.system_get_nvml_version != nullptr &&
      api.system_get_nvml_version(nvml_buffer, sizeof(nvml_buffer)) == nvml::kSuccess) {
    driver.nvml_version = FromNvmlBuffer(nvml_buffer, sizeof(nvml_buffer));
  }
  int cuda = 0;
  if (api.system_get_cuda_driver_version != nullptr &&
      api.system_get_cuda_driver_version(&cuda) == nvml::kSuccess) {
    driver.cuda_driver_version = cuda;
  }
  return driver;
}

// The lowest NUMA node in the GPU's memory affinity mask.
std::optional<int> NearestNumaNode(const NvmlApi& api, nvml::Device device, DeviceQuery* query) {
  constexpr unsigned int kLongs = 4;  // 256 NUMA nodes
  constexpr int kBitsPerLong = 8 * sizeof(unsigned long);
  unsigned long node_set[kLongs] = {};
  if (!query->Ok("nvmlDeviceGetMemoryAffinity", api.device_get_memory_affinity, device, kLongs,
                 node_set, nvml::kAffinityScopeNode)) {
    return std::nullopt;
  }
  for (unsigned int word = 0; word < kLongs; ++word) {
    for (int bit = 0; bit < kBitsPerLong; ++bit) {
      if (node_set[word] & (1UL << bit)) return static_cast<int>(word * kBitsPerLong + bit);
    }
  }
  return std::nullopt;
}

// Where NVML cannot say (older drivers), Linux can.
std::optional<int> NumaNodeFromSysfs(const std::string& sysfs_pci_devices_dir,
                                     const std::string& bus_id) {
  std::optional<PciAddress> address = ParsePciAddress(bus_id);
  if (!address) return std::nullopt;
  std::ifstream file(sysfs_pci_devices_dir + "/" + SysfsPciName(*address) + "/numa_node");
  int node = -1;
  if (!(file >> node) || node < 0) return std::nullopt;  // -1: the machine has no NUMA
  return node;
}

GpuInfo ReadGpuInfo(const NvmlApi& api, int index, nvml::Device device,
                    const std::string& sysfs_pci_devices_dir) {
  GpuInfo gpu;
  gpu.index = index;
  DeviceQuery query;

  char uuid[nvml::kUuidBufferSize] = {};
  if (query.Ok("nvmlDeviceGetUUID", api.device_get_uuid, device, uuid, sizeof(uuid))) {
    gpu.uuid = FromNvmlBuffer(uuid, sizeof(uuid));
  }
  char name[nvml::kNameBufferSize] = {};
  if (query.Ok("nvmlDeviceGetName", api.device_get_name, device, name, sizeof(name))) {
    gpu.name = FromNvmlBuffer(name, sizeof(name));
  }
  nvml::PciInfo pci = {};
  if (query.Ok("nvmlDeviceGetPciInfo", api.device_get_pci_info, device, &pci)) {
    gpu.pci_bus_id = FromNvmlBuffer(pci.bus_id, sizeof(pci.bus_id));
    gpu.pci_device_id = pci.pci_device_id;
  }

  // The total is the same in both versions; v2 is preferred only for the sampler's "used".
  nvml::MemoryV2 memory_v2 = {};
  memory_v2.version = nvml::kMemoryV2Version;
  nvml::Memory memory = {};
  if (query.Ok("nvmlDeviceGetMemoryInfo_v2", api.device_get_memory_info_v2, device, &memory_v2)) {
    gpu.memory_total_bytes = memory_v2.total;
  } else if (query.Ok("nvmlDeviceGetMemoryInfo", api.device_get_memory_info, device, &memory)) {
    gpu.memory_total_bytes = memory.total;
  }

  int major = 0;
  int minor = 0;
  if (query.Ok("nvmlDeviceGetCudaComputeCapability", api.device_get_cuda_compute_capability, device,
               &major, &minor)) {
    gpu.compute_capability = ComputeCapability{major, minor};
  }

  gpu.numa_node = NearestNumaNode(api, device, &query);
  if (!gpu.numa_node && !query.lost()) {
    gpu.numa_node = NumaNodeFromSysfs(sysfs_pci_devices_dir, gpu.pci_bus_id);
  }
  unsigned int gpu_numa_id = 0;
  if (query.Ok("nvmlDeviceGetNumaNodeId", api.device_get_numa_node_id, device, &gpu_numa_id) &&
      gpu_numa_id <= static_cast<unsigned int>(INT_MAX)) {
    gpu.gpu_numa_id = static_cast<int>(gpu_numa_id);
  }

  unsigned int mig_current = 0;
  unsigned int mig_pending = 0;
  if (query.Ok("nvmlDeviceGetMigMode", api.device_get_mig_mode, device, &mig_current,
               &mig_pending)) {
    gpu.mig_mode = MigMode{mig_current == nvml::kMigEnabled, mig_pending == nvml::kMigEnabled};
  }

  nvml::EnableState ecc_current = nvml::kFeatureDisabled;
  nvml::EnableState ecc_pending = nvml::kFeatureDisabled;
  if (query.Ok("nvmlDeviceGetEccMode", api.device_get_ecc_mode, device, &ecc_current,
               &ecc_pending)) {
    gpu.ecc_enabled = ecc_current == nvml::kFeatureEnabled;
  }

  gpu.nvlinks = ReadActiveNvLinks(api, device, &query);
  gpu.lost = query.lost();
  return gpu;
}

}  // namespace

std::string FromNvmlBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

InventoryReading ReadInventory(const NvmlLibrary& library,
                               const std::string& sysfs_pci_devices_dir) {
  const NvmlApi& api = library.api();
  InventoryReading reading;
  reading.driver = ReadDriverInfo(api);

  unsigned int count = 0;
  nvml::Return result = api.device_get_count(&count);
  if (result != nvml::kSuccess) {
    reading.problems.push_back("nvmlDeviceGetCount failed: " + library.ErrorString(result));
    return reading;
  }
  for (unsigned int index = 0; index < count; ++index) {
    nvml::Device device = nullptr;
    result = api.device_get_handle_by_index(index, &device);
    if (result != nvml::kSuccess) {
      // Keep the GPU in the list, so indices stay NVML's and a lost GPU is still reported.
      GpuInfo gpu;
      gpu.index = static_cast<int>(index);
      gpu.lost = result == nvml::kErrorGpuIsLost;
      reading.gpus.push_back(gpu);
      reading.devices.push_back(nullptr);
      reading.problems.push_back(
          "GPU " + std::to_string(index) +
          ": nvmlDeviceGetHandleByIndex failed: " + library.ErrorString(result));
      continue;
    }
    reading.gpus.push_back(
        ReadGpuInfo(api, static_cast<int>(index), device, sysfs_pci_devices_dir));
    reading.devices.push_back(device);
  }
  reading.topology = ReadTopology(api, reading.devices, &reading.gpus);
  return reading;
}

void KeepOnly(const std::vector<std::string>& uuids, InventoryReading* reading,
              std::vector<std::string>* missing) {
  std::vector<int> renumbered(reading->gpus.size(), -1);
  std::vector<GpuInfo> gpus;
  std::vector<nvml::Device> devices;
  for (size_t i = 0; i < reading->gpus.size(); ++i) {
    const GpuInfo& gpu = reading->gpus[i];
    if (std::find(uuids.begin(), uuids.end(), gpu.uuid) == uuids.end()) continue;
    renumbered[i] = static_cast<int>(gpus.size());
    gpus.push_back(gpu);
    gpus.back().index = renumbered[i];
    devices.push_back(i < reading->devices.size() ? reading->devices[i] : nullptr);
  }
  for (GpuInfo& gpu : gpus) {
    for (NvLink& link : gpu.nvlinks) {
      if (!link.remote_gpu_index) continue;
      const int remote = *link.remote_gpu_index;
      link.remote_gpu_index =
          remote >= 0 && remote < static_cast<int>(renumbered.size()) && renumbered[remote] >= 0
              ? std::optional<int>(renumbered[remote])
              : std::nullopt;
    }
  }
  std::vector<GpuPairTopology> topology;
  for (GpuPairTopology pair : reading->topology) {
    if (pair.first < 0 || pair.second < 0 || pair.first >= static_cast<int>(renumbered.size()) ||
        pair.second >= static_cast<int>(renumbered.size()) || renumbered[pair.first] < 0 ||
        renumbered[pair.second] < 0) {
      continue;
    }
    pair.first = renumbered[pair.first];
    pair.second = renumbered[pair.second];
    topology.push_back(pair);
  }
  for (const std::string& uuid : uuids) {
    if (std::none_of(gpus.begin(), gpus.end(),
                     [&uuid](const GpuInfo& g) { return g.uuid == uuid; })) {
      missing->push_back(uuid);
    }
  }
  reading->gpus = std::move(gpus);
  reading->devices = std::move(devices);
  reading->topology = std::move(topology);
}

}  // namespace cohort::gpu
