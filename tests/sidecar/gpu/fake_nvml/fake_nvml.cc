// A stand-in for NVIDIA's libnvidia-ml.so.1, built by the test suite so that the GPU module is
// tested through its real loading path (dlopen, dlsym, the C ABI) on machines without GPUs.
// It serves the node described by $FAKE_NVML_CONFIG (see fake_node.h) and exports the controls
// in fake_nvml_control.h. Built with FAKE_NVML_OLD_DRIVER it leaves out the newer entry points,
// as an old driver would (GPM too), so the module's fallbacks get exercised. Event sets and the
// controls are in fake_nvml_events.cc, GPM in fake_nvml_gpm.cc.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "sidecar/gpu/nvml_abi.h"
#include "tests/sidecar/gpu/fake_nvml/fake_node.h"
#include "tests/sidecar/gpu/fake_nvml/fake_state.h"

namespace fake_nvml {
namespace {

int IndexOf(FakeState& state, const FakeGpu* gpu) {
  return static_cast<int>(gpu - state.node.gpus.data());
}

template <typename T, typename Fill>
nvml::Return IfConfigured(const std::optional<T>& value, Fill fill) {
  if (!value) return nvml::kErrorNotSupported;
  fill(*value);
  return nvml::kSuccess;
}

nvml::Return CopyString(const std::string& text, char* buffer, unsigned int length) {
  if (buffer == nullptr) return nvml::kErrorInvalidArgument;
  if (text.size() + 1 > length) return nvml::kErrorInsufficientSize;
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return nvml::kSuccess;
}

void FillPciInfo(const std::string& bus_id, unsigned int device_id, unsigned int subsystem_id,
                 nvml::PciInfo* pci) {
  *pci = {};
  unsigned int function = 0;
  std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &pci->domain, &pci->bus, &pci->device, &function);
  std::snprintf(pci->bus_id, sizeof(pci->bus_id), "%s", bus_id.c_str());
  std::snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "%04x:%02x:%02x.%x",
                pci->domain & 0xffff, pci->bus, pci->device, function);
  pci->pci_device_id = device_id;
  pci->pci_subsystem_id = subsystem_id;
}

nvml::Return Init() {
  StartControlFifo();
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) {
    const char* path = std::getenv("FAKE_NVML_CONFIG");
    std::string error;
    FakeNode node;
    // Without a node to serve, behave like a machine whose kernel driver is not loaded.
    if (path == nullptr || !LoadFakeNode(path, &node, &error)) return nvml::kErrorDriverNotLoaded;
    if (node.init_error != 0) return static_cast<nvml::Return>(node.init_error);
    state.node = std::move(node);
  }
  ++state.init_count;
  return nvml::kSuccess;
}

nvml::Return GetCount(unsigned int* count) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  *count = static_cast<unsigned int>(state.node.gpus.size());
  return nvml::kSuccess;
}

nvml::Return GetHandleByIndex(unsigned int index, nvml::Device* device) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  if (device == nullptr || index >= state.node.gpus.size()) return nvml::kErrorInvalidArgument;
  if (state.node.gpus[index].lost) return nvml::kErrorGpuIsLost;
  *device = HandleOf(state.node.gpus[index]);
  return nvml::kSuccess;
}

nvml::Return GetCudaDriverVersion(int* version) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  return IfConfigured(state.node.cuda_driver_version, [&](int v) { *version = v; });
}

nvml::Return GetPciInfo(nvml::Device device, nvml::PciInfo* pci) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    FillPciInfo(gpu.pci_bus_id, gpu.pci_device_id, gpu.pci_subsystem_id, pci);
    return nvml::kSuccess;
  });
}

}  // namespace
}  // namespace fake_nvml

using namespace fake_nvml;  // NOLINT: the exported C functions below are this file's API

// --- Initialisation and system queries -------------------------------------------------------

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlInit_v2() { return Init(); }
#endif
FAKE_NVML_EXPORT nvml::Return nvmlInit() { return Init(); }

FAKE_NVML_EXPORT nvml::Return nvmlShutdown() {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  if (--state.init_count == 0) {
    for (EventSetState* events : state.event_sets) events->registered.clear();
    for (GpmSampleState* sample : state.gpm_samples) sample->filled = false;
    state.node = FakeNode{};
  }
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT const char* nvmlErrorString(nvml::Return result) {
  switch (result) {
    case nvml::kSuccess:
      return "Success";
    case nvml::kErrorUninitialized:
      return "Uninitialized";
    case nvml::kErrorInvalidArgument:
      return "Invalid Argument";
    case nvml::kErrorNotSupported:
      return "Not Supported";
    case nvml::kErrorInsufficientSize:
      return "Insufficient Size";
    case nvml::kErrorDriverNotLoaded:
      return "Driver Not Loaded";
    case nvml::kErrorTimeout:
      return "Timeout";
    case nvml::kErrorGpuIsLost:
      return "GPU is lost";
    case nvml::kErrorArgumentVersionMismatch:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

FAKE_NVML_EXPORT nvml::Return nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  return CopyString(state.node.driver_version, version, length);
}

FAKE_NVML_EXPORT nvml::Return nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  return CopyString(state.node.nvml_version, version, length);
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return GetCudaDriverVersion(version);
}
#endif
FAKE_NVML_EXPORT nvml::Return nvmlSystemGetCudaDriverVersion(int* version) {
  return GetCudaDriverVersion(version);
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCount_v2(unsigned int* count) { return GetCount(count); }
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvml::Device* device) {
  return GetHandleByIndex(index, device);
}
#endif
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCount(unsigned int* count) { return GetCount(count); }
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetHandleByIndex(unsigned int index, nvml::Device* device) {
  return GetHandleByIndex(index, device);
}

// --- Inventory ---------------------------------------------------------------------------------

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetUUID(nvml::Device device, char* uuid,
                                                unsigned int length) {
  return WithGpu(device, [&](FakeGpu& gpu) { return CopyString(gpu.uuid, uuid, length); });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetName(nvml::Device device, char* name,
                                                unsigned int length) {
  return WithGpu(device, [&](FakeGpu& gpu) { return CopyString(gpu.name, name, length); });
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPciInfo_v3(nvml::Device device, nvml::PciInfo* pci) {
  return GetPciInfo(device, pci);
}
#endif
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPciInfo_v2(nvml::Device device, nvml::PciInfo* pci) {
  return GetPciInfo(device, pci);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMemoryInfo(nvml::Device device, nvml::Memory* memory) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.memory, [&](const FakeMemory& m) {
      // The first version counts the driver's reservation as used.
      *memory = {m.total, m.total - m.used - m.reserved, m.used + m.reserved};
    });
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMemoryInfo_v2(nvml::Device device,
                                                         nvml::MemoryV2* memory) {
  if (memory == nullptr || memory->version != nvml::kMemoryV2Version) {
    return nvml::kErrorArgumentVersionMismatch;
  }
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.memory, [&](const FakeMemory& m) {
      *memory = {nvml::kMemoryV2Version, m.total, m.reserved, m.total - m.used - m.reserved,
                 m.used};
    });
  });
}
#endif

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCudaComputeCapability(nvml::Device device, int* major,
                                                                 int* minor) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.compute_capability, [&](const std::pair<int, int>& cc) {
      *major = cc.first;
      *minor = cc.second;
    });
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMemoryAffinity(nvml::Device device,
                                                          unsigned int node_set_size,
                                                          unsigned long* node_set,
                                                          nvml::AffinityScope scope) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    if (node_set == nullptr || node_set_size == 0 || scope != nvml::kAffinityScopeNode) {
      return nvml::kErrorInvalidArgument;
    }
    if (!gpu.numa_node) return nvml::kErrorNotSupported;
    constexpr unsigned int kBits = 8 * sizeof(unsigned long);
    if (*gpu.numa_node / kBits >= node_set_size) return nvml::kErrorInsufficientSize;
    std::fill(node_set, node_set + node_set_size, 0UL);
    node_set[*gpu.numa_node / kBits] = 1UL << (*gpu.numa_node % kBits);
    return nvml::kSuccess;
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetNumaNodeId(nvml::Device device, unsigned int* node) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.gpu_numa_id, [&](unsigned int id) { *node = id; });
  });
}
#endif

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMigMode(nvml::Device device, unsigned int* current,
                                                   unsigned int* pending) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.mig_mode, [&](const std::pair<unsigned int, unsigned int>& mode) {
      *current = mode.first;
      *pending = mode.second;
    });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetEccMode(nvml::Device device, nvml::EnableState* current,
                                                   nvml::EnableState* pending) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.ecc_enabled, [&](bool enabled) {
      *current = *pending = enabled ? nvml::kFeatureEnabled : nvml::kFeatureDisabled;
    });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTopologyCommonAncestor(nvml::Device first,
                                                                  nvml::Device second,
                                                                  nvml::TopologyLevel* level) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  FakeGpu* a = FindGpu(state, first);
  FakeGpu* b = FindGpu(state, second);
  if (a == nullptr || b == nullptr || level == nullptr) return nvml::kErrorInvalidArgument;
  if (a->lost || b->lost) return nvml::kErrorGpuIsLost;
  if (state.node.topology.empty()) return nvml::kErrorNotSupported;
  *level = static_cast<nvml::TopologyLevel>(
      state.node.topology.at(IndexOf(state, a)).at(IndexOf(state, b)));
  return nvml::kSuccess;
}

namespace fake_nvml {
namespace {

// The configured link `link` of `gpu`: NOT_SUPPORTED without NVLink, INVALID_ARGUMENT past the
// last link, null (success) for a link that exists but is not active.
nvml::Return FindLink(const FakeGpu& gpu, unsigned int link, const FakeNvLink** found) {
  if (gpu.nvlink_count == 0) return nvml::kErrorNotSupported;
  if (link >= gpu.nvlink_count) return nvml::kErrorInvalidArgument;
  *found = nullptr;
  for (const FakeNvLink& candidate : gpu.nvlinks) {
    if (candidate.link == link) *found = &candidate;
  }
  return nvml::kSuccess;
}

}  // namespace
}  // namespace fake_nvml

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetNvLinkState(nvml::Device device, unsigned int link,
                                                       nvml::EnableState* active) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    const FakeNvLink* found = nullptr;
    nvml::Return result = FindLink(gpu, link, &found);
    if (result == nvml::kSuccess) *active = found ? nvml::kFeatureEnabled : nvml::kFeatureDisabled;
    return result;
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetNvLinkRemotePciInfo_v2(nvml::Device device,
                                                                  unsigned int link,
                                                                  nvml::PciInfo* pci) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    const FakeNvLink* found = nullptr;
    nvml::Return result = FindLink(gpu, link, &found);
    if (result != nvml::kSuccess) return result;
    if (found == nullptr) return nvml::kErrorNotSupported;
    FillPciInfo(found->remote_bus_id, 0, 0, pci);
    return nvml::kSuccess;
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetNvLinkRemoteDeviceType(nvml::Device device,
                                                                  unsigned int link,
                                                                  nvml::NvLinkDeviceType* type) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    const FakeNvLink* found = nullptr;
    nvml::Return result = FindLink(gpu, link, &found);
    if (result != nvml::kSuccess) return result;
    *type = found ? static_cast<nvml::NvLinkDeviceType>(found->remote_type)
                  : nvml::kNvLinkDeviceUnknown;
    return nvml::kSuccess;
  });
}
#endif

// --- Telemetry ---------------------------------------------------------------------------------

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetUtilizationRates(nvml::Device device,
                                                            nvml::Utilization* utilization) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.utilization, [&](const std::pair<unsigned int, unsigned int>& rates) {
      *utilization = {rates.first, rates.second};
    });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTemperature(nvml::Device device,
                                                       nvml::TemperatureSensor sensor,
                                                       unsigned int* celsius) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    if (sensor != nvml::kTemperatureGpu) return nvml::kErrorInvalidArgument;
    return IfConfigured(gpu.temperature, [&](unsigned int t) { *celsius = t; });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPowerUsage(nvml::Device device, unsigned int* mw) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.power_mw, [&](unsigned int p) { *mw = p; });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetEnforcedPowerLimit(nvml::Device device,
                                                              unsigned int* mw) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.power_limit_mw, [&](unsigned int p) { *mw = p; });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTotalEnergyConsumption(nvml::Device device,
                                                                  unsigned long long* mj) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.energy_mj, [&](unsigned long long e) { *mj = e; });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetClockInfo(nvml::Device device, nvml::ClockType type,
                                                     unsigned int* mhz) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    if (type != nvml::kClockSm) return nvml::kErrorNotSupported;  // the fake models SM only
    return IfConfigured(gpu.sm_clock_mhz, [&](unsigned int c) { *mhz = c; });
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTotalEccErrors(nvml::Device device,
                                                          nvml::MemoryErrorType error_type,
                                                          nvml::EccCounterType counter_type,
                                                          unsigned long long* count) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.ecc, [&](const FakeEcc& ecc) {
      bool corrected = error_type == nvml::kMemoryErrorCorrected;
      if (counter_type == nvml::kEccVolatile) {
        *count = corrected ? ecc.volatile_single : ecc.volatile_double;
      } else {
        *count = corrected ? ecc.aggregate_single : ecc.aggregate_double;
      }
    });
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetRemappedRows(nvml::Device device,
                                                        unsigned int* correctable,
                                                        unsigned int* uncorrectable,
                                                        unsigned int* pending,
                                                        unsigned int* failure) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.remapped_rows, [&](const FakeRemappedRows& rows) {
      *correctable = rows.correctable;
      *uncorrectable = rows.uncorrectable;
      *pending = rows.pending ? 1 : 0;
      *failure = rows.failure ? 1 : 0;
    });
  });
}
#endif

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPcieReplayCounter(nvml::Device device,
                                                             unsigned int* value) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    return IfConfigured(gpu.pcie_replay, [&](unsigned int r) { *value = r; });
  });
}

#ifndef FAKE_NVML_OLD_DRIVER
// Of all the fields, the fake knows only the recovery action; it answers NOT_SUPPORTED in the
// element of any other, as NVML does for a field the driver lacks.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetFieldValues(nvml::Device device, int count,
                                                       nvml::FieldValue* values) {
  if (count < 0 || (count > 0 && values == nullptr)) return nvml::kErrorInvalidArgument;
  return WithGpu(device, [&](FakeGpu& gpu) {
    const long long now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    for (int i = 0; i < count; ++i) {
      nvml::FieldValue& field = values[i];
      field.timestamp_us = now_us;
      field.latency_us = 0;
      field.result = nvml::kErrorNotSupported;
      if (field.field_id == nvml::kFieldIdGpuRecoveryAction && gpu.recovery_action) {
        field.value_type = nvml::kValueTypeUnsignedInt;
        field.value.as_uint = *gpu.recovery_action;
        field.result = nvml::kSuccess;
      }
    }
    return nvml::kSuccess;
  });
}
#endif
