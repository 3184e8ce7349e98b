#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sidecar/gpu/nvml_abi.h"

namespace cohort::gpu {

// The NVML entry points, resolved at run time. A null pointer means the loaded library lacks
// that function (an older driver); every caller checks before calling. Where NVML has several
// versions of a function, the pointer holds the newest one the library exports that has the
// same arguments.
struct NvmlApi {
  // Always present once NvmlLibrary::Open succeeds.
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::DeviceGetCountFn device_get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn device_get_handle_by_index = nullptr;

  // Optional.
  nvml::ErrorStringFn error_string = nullptr;
  nvml::SystemGetStringFn system_get_driver_version = nullptr;
  nvml::SystemGetStringFn system_get_nvml_version = nullptr;
  nvml::SystemGetCudaDriverVersionFn system_get_cuda_driver_version = nullptr;
  nvml::DeviceGetStringFn device_get_uuid = nullptr;
  nvml::DeviceGetStringFn device_get_name = nullptr;
  nvml::DeviceGetPciInfoFn device_get_pci_info = nullptr;
  nvml::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn device_get_memory_info_v2 = nullptr;
  nvml::DeviceGetCudaComputeCapabilityFn device_get_cuda_compute_capability = nullptr;
  nvml::DeviceGetMemoryAffinityFn device_get_memory_affinity = nullptr;
  nvml::DeviceGetUintFn device_get_numa_node_id = nullptr;
  nvml::DeviceGetModePairFn device_get_mig_mode = nullptr;
  nvml::DeviceGetEnableStatePairFn device_get_ecc_mode = nullptr;
  nvml::DeviceGetTopologyCommonAncestorFn device_get_topology_common_ancestor = nullptr;
  nvml::DeviceGetNvLinkStateFn device_get_nvlink_state = nullptr;
  nvml::DeviceGetNvLinkRemotePciInfoFn device_get_nvlink_remote_pci_info = nullptr;
  nvml::DeviceGetNvLinkRemoteDeviceTypeFn device_get_nvlink_remote_device_type = nullptr;
  nvml::DeviceGetUtilizationRatesFn device_get_utilization_rates = nullptr;
  nvml::DeviceGetTemperatureFn device_get_temperature = nullptr;
  nvml::DeviceGetUintFn device_get_power_usage = nullptr;
  nvml::DeviceGetUintFn device_get_enforced_power_limit = nullptr;
  nvml::DeviceGetUlonglongFn device_get_total_energy_consumption = nullptr;
  nvml::DeviceGetClockInfoFn device_get_clock_info = nullptr;
  nvml::DeviceGetTotalEccErrorsFn device_get_total_ecc_errors = nullptr;
  nvml::DeviceGetRemappedRowsFn device_get_remapped_rows = nullptr;
  nvml::DeviceGetUintFn device_get_pcie_replay_counter = nullptr;
  nvml::DeviceGetFieldValuesFn device_get_field_values = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;
  nvml::DeviceGetUlonglongFn device_get_supported_event_types = nullptr;
  nvml::DeviceRegisterEventsFn device_register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  // GPU performance monitoring, for SM activity (drivers from R520 on).
  nvml::GpmQueryDeviceSupportFn gpm_query_device_support = nullptr;
  nvml::GpmSampleAllocFn gpm_sample_alloc = nullptr;
  nvml::GpmSampleFreeFn gpm_sample_free = nullptr;
  nvml::GpmSampleGetFn gpm_sample_get = nullptr;
  nvml::GpmMetricsGetFn gpm_metrics_get = nullptr;
};

// The loaded and initialised NVML library: dlopen, dlsym of every entry point in NvmlApi, then
// nvmlInit. Destruction calls nvmlShutdown and dlclose, so it must outlive every device handle,
// event set and GPM sample obtained through it.
//
// Thread safety: immutable after Open; NVML itself is thread-safe, so api() may be used from
// any thread.
class NvmlLibrary {
 public:
  // The library name the dynamic loader searches for when no path is configured.
  static constexpr const char* kDefaultName = "libnvidia-ml.so.1";
  // Environment variable that overrides kDefaultName.
  static constexpr const char* kPathEnvironmentVariable = "COHORT_NVML_LIBRARY";

  // `configured` if not empty, else $COHORT_NVML_LIBRARY if set and not empty, else
  // kDefaultName.
  static std::string ResolvePath(const std::string& configured);

  // Loads the library at `path` (a file path, or a bare name the dynamic loader searches for)
  // and initialises NVML. On failure returns null and sets `*diagnostic` to one sentence that
  // says why (no driver installed, driver not loaded, not an NVML library, ...).
  static std::unique_ptr<NvmlLibrary> Open(const std::string& path, std::string* diagnostic);

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }
  const std::string& path() const { return path_; }
  // Optional entry points this library does not export, by their newest NVML name.
  const std::vector<std::string>& missing_functions() const { return missing_functions_; }
  // NVML's text for `result`, or "NVML error <n>" when the library has no nvmlErrorString.
  std::string ErrorString(nvml::Return result) const;

 private:
  NvmlLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  // Fills api_; returns false (and says why) when a required entry point is missing.
  bool ResolveFunctions(std::string* diagnostic);

  void* handle_;
  std::string path_;
  NvmlApi api_;
  std::vector<std::string> missing_functions_;
};

}  // namespace cohort::gpu
