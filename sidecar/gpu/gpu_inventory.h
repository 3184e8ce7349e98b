#pragma once

#include <string>
#include <vector>

#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu/nvml_abi.h"
#include "sidecar/gpu/nvml_library.h"

namespace cohort::gpu {

// Where Linux lists PCI devices; the NUMA node of a GPU is read there when NVML cannot say.
inline constexpr const char* kSysfsPciDevicesDir = "/sys/bus/pci/devices";

// The GPUs of the node and how they connect, as NVML reports them. `library` must be open.
struct InventoryReading {
  DriverInfo driver;
  std::vector<GpuInfo> gpus;
  // devices[i] is the NVML handle of gpus[i]; null when NVML gave no handle.
  std::vector<nvml::Device> devices;
  std::vector<GpuPairTopology> topology;
  // One sentence per GPU NVML would not hand out, for the log.
  std::vector<std::string> problems;
};

// Reads what does not change while the node runs: driver versions, each GPU's identity and
// properties and NVLinks, and the topology between GPUs (see gpu_topology.h).
InventoryReading ReadInventory(const NvmlLibrary& library,
                               const std::string& sysfs_pci_devices_dir);

// Keeps only the GPUs whose UUID is in `uuids` (the pod's, when NVML shows the whole node),
// numbered 0.. in NVML's order as a container given just those GPUs would number them; their
// NVLinks and the topology between them follow. The UUIDs no GPU has go to `missing`.
void KeepOnly(const std::vector<std::string>& uuids, InventoryReading* reading,
              std::vector<std::string>* missing);

// Turns a NUL-terminated (or full) NVML string buffer into a string.
std::string FromNvmlBuffer(const char* buffer, size_t size);

}  // namespace cohort::gpu
