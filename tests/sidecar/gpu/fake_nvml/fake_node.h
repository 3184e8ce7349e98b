#pragma once

// The node the fake NVML pretends to be, read from the JSON file named by $FAKE_NVML_CONFIG
// each time NVML is initialised from scratch. Shape (every GPU field but "uuid" is optional;
// a missing one makes the NVML function that reports it answer NVML_ERROR_NOT_SUPPORTED, except
// "recovery_action", which defaults to 0):
//
// {
//   "driver_version": "550.54.15", "nvml_version": "12.550.54.15",
//   "cuda_driver_version": 12040,
//   "init_error": 9,                       // nvmlInit fails with this nvmlReturn_t
//   "gpus": [{
//     "uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:18:00.0",
//     "pci_device_id": 591597790, "pci_subsystem_id": 382865630,
//     "memory": {"total": 85520809984, "used": 1048576, "reserved": 503316480},
//     "compute_capability": [9, 0], "numa_node": 0, "gpu_numa_id": 2,
//     "mig_mode": {"current": 0, "pending": 1}, "ecc_enabled": true,
//     "utilization": {"gpu": 37, "memory": 12}, "temperature": 41,
//     "sm_activity": 0.8,                  // share of SMs busy (0..1) that GPM reports; absent:
//                                          // a GPU without GPM (before Hopper)
//     "power_mw": 120000, "power_limit_mw": 700000, "energy_mj": 123456789,
//     "sm_clock_mhz": 1980, "pcie_replay": 4,
//     "ecc": {"volatile_single": 1, "volatile_double": 0,
//             "aggregate_single": 7, "aggregate_double": 0},
//     "remapped_rows": {"correctable": 1, "uncorrectable": 0, "pending": false,
//                       "failure": false},
//     "nvlink_count": 18,                  // links the GPU has; 0 or absent: no NVLink
//     "nvlinks": [{"link": 0, "remote_bus_id": "00000000:19:00.0", "remote_type": "gpu"}],
//     "events": ["xid", "double_bit_ecc"],  // event types it supports (default: both)
//     "recovery_action": 1                  // nvmlDeviceGpuRecoveryAction_t; null: a driver
//                                           // without NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
//   }],
//   "topology": [["X", "PIX"], ["PIX", "X"]]  // nvidia-smi topo names per pair
// }

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fake_nvml {

struct FakeNvLink {
  unsigned int link = 0;
  std::string remote_bus_id;
  int remote_type = 0xFF;  // NVML's nvmlIntNvLinkDeviceType_t value
};

struct FakeEcc {
  uint64_t volatile_single = 0;
  uint64_t volatile_double = 0;
  uint64_t aggregate_single = 0;
  uint64_t aggregate_double = 0;
};

struct FakeRemappedRows {
  unsigned int correctable = 0;
  unsigned int uncorrectable = 0;
  bool pending = false;
  bool failure = false;
};

struct FakeMemory {
  uint64_t total = 0;
  uint64_t used = 0;
  uint64_t reserved = 0;
};

struct FakeGpu {
  std::string uuid;
  std::string name;
  std::string pci_bus_id;
  unsigned int pci_device_id = 0;
  unsigned int pci_subsystem_id = 0;
  std::optional<FakeMemory> memory;
  std::optional<std::pair<int, int>> compute_capability;
  std::optional<unsigned int> numa_node;
  std::optional<unsigned int> gpu_numa_id;
  std::optional<std::pair<unsigned int, unsigned int>> mig_mode;  // current, pending
  std::optional<bool> ecc_enabled;
  std::optional<std::pair<unsigned int, unsigned int>> utilization;  // gpu, memory
  // What GPM's SM utilisation reports, 0..1; empty: the GPU has no GPM. Tests change it with
  // fakeNvmlSetSmActivity.
  std::optional<double> sm_activity;
  // GPM's counters: each nvmlGpmSampleGet adds one tick, and sm_activity to the busy sum, so
  // that the metric between two samples is the activity set when the later one was taken.
  uint64_t gpm_ticks = 0;
  double gpm_busy = 0;
  std::optional<unsigned int> temperature;
  std::optional<unsigned int> power_mw;
  std::optional<unsigned int> power_limit_mw;
  std::optional<unsigned long long> energy_mj;
  std::optional<unsigned int> sm_clock_mhz;
  std::optional<unsigned int> pcie_replay;
  std::optional<FakeEcc> ecc;
  std::optional<FakeRemappedRows> remapped_rows;
  unsigned int nvlink_count = 0;
  std::vector<FakeNvLink> nvlinks;
  unsigned long long supported_events = 0;
  // What the field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION answers; empty: not supported. Tests
  // change it with fakeNvmlSetRecoveryAction.
  std::optional<unsigned int> recovery_action = 0;
  bool lost = false;  // set at run time by fakeNvmlSetGpuLost
};

struct FakeNode {
  std::string driver_version;
  std::string nvml_version;
  std::optional<int> cuda_driver_version;
  int init_error = 0;
  std::vector<FakeGpu> gpus;
  // topology[a][b]: nvmlGpuTopologyLevel_t value; empty when the config has none.
  std::vector<std::vector<int>> topology;
};

// Reads the node from `path`. False (with `*error`) when the file is missing or malformed.
bool LoadFakeNode(const std::string& path, FakeNode* node, std::string* error);

}  // namespace fake_nvml
