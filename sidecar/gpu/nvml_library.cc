#include "sidecar/gpu/nvml_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace cohort::gpu {
namespace {

// Points `*out` at the first of `names` the library exports. Names go newest first: a newer
// driver exports all versions, an older one only the old names.
template <typename Fn>
bool Resolve(void* handle, std::initializer_list<const char*> names, Fn* out) {
  for (const char* name : names) {
    if (void* symbol = dlsym(handle, name)) {
      *out = reinterpret_cast<Fn>(symbol);
      return true;
    }
  }
  return false;
}

std::string LastDlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dynamic loader error";
}

}  // namespace

std::string NvmlLibrary::ResolvePath(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* from_environment = std::getenv(kPathEnvironmentVariable);
  if (from_environment != nullptr && *from_environment != '\0') return from_environment;
  return kDefaultName;
}

std::unique_ptr<NvmlLibrary> NvmlLibrary::Open(const std::string& path, std::string* diagnostic) {
  dlerror();  // clear any stale error so the message below is about this dlopen
  // RTLD_LOCAL keeps NVML's symbols out of the global namespace, so two libraries exporting
  // the same names (a real and a fake NVML in one test process) cannot interpose each other.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *diagnostic = "NVML library " + path + " could not be loaded (" + LastDlError() +
                  "): no NVIDIA driver on this node, reporting 0 GPUs";
    return nullptr;
  }
  std::unique_ptr<NvmlLibrary> library(new NvmlLibrary(handle, path));
  if (!library->ResolveFunctions(diagnostic)) {
    library->api_.shutdown = nullptr;  // never initialised, so the destructor must not shut down
    return nullptr;
  }
  nvml::Return result = library->api_.init();
  if (result != nvml::kSuccess) {
    std::string why = library->ErrorString(result);
    if (result == nvml::kErrorDriverNotLoaded) why += " (the NVIDIA kernel module is not loaded)";
    *diagnostic = "NVML in " + path + " failed to initialise: " + why + "; reporting 0 GPUs";
    library->api_.shutdown = nullptr;
    return nullptr;
  }
  return library;
}

NvmlLibrary::~NvmlLibrary() {
  if (api_.shutdown != nullptr) api_.shutdown();
  dlclose(handle_);
}

bool NvmlLibrary::ResolveFunctions(std::string* diagnostic) {
  bool required_found =
      Resolve(handle_, {"nvmlInit_v2", "nvmlInit"}, &api_.init) &&
      Resolve(handle_, {"nvmlShutdown"}, &api_.shutdown) &&
      Resolve(handle_, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, &api_.device_get_count) &&
      Resolve(handle_, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"},
              &api_.device_get_handle_by_index);
  if (!required_found) {
    *diagnostic = path_ +
                  " is not a usable NVML library (it lacks nvmlInit, nvmlShutdown, "
                  "nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex); reporting 0 GPUs";
    return false;
  }

  auto optional = [this](std::initializer_list<const char*> names, auto* out) {
    if (!Resolve(handle_, names, out)) missing_functions_.push_back(*names.begin());
  };
  optional({"nvmlErrorString"}, &api_.error_string);
  optional({"nvmlSystemGetDriverVersion"}, &api_.system_get_driver_version);
  optional({"nvmlSystemGetNVMLVersion"}, &api_.system_get_nvml_version);
  optional({"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"},
           &api_.system_get_cuda_driver_version);
  optional({"nvmlDeviceGetUUID"}, &api_.device_get_uuid);
  optional({"nvmlDeviceGetName"}, &api_.device_get_name);
  // The unversioned nvmlDeviceGetPciInfo fills an older, smaller struct, so it is no fallback.
  optional({"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}, &api_.device_get_pci_info);
  optional({"nvmlDeviceGetMemoryInfo_v2"}, &api_.device_get_memory_info_v2);
  optional({"nvmlDeviceGetMemoryInfo"}, &api_.device_get_memory_info);
  optional({"nvmlDeviceGetCudaComputeCapability"}, &api_.device_get_cuda_compute_capability);
  optional({"nvmlDeviceGetMemoryAffinity"}, &api_.device_get_memory_affinity);
  optional({"nvmlDeviceGetNumaNodeId"}, &api_.device_get_numa_node_id);
  optional({"nvmlDeviceGetMigMode"}, &api_.device_get_mig_mode);
  optional({"nvmlDeviceGetEccMode"}, &api_.device_get_ecc_mode);
  optional({"nvmlDeviceGetTopologyCommonAncestor"}, &api_.device_get_topology_common_ancestor);
  optional({"nvmlDeviceGetNvLinkState"}, &api_.device_get_nvlink_state);
  // Likewise the unversioned nvmlDeviceGetNvLinkRemotePciInfo uses the older struct.
  optional({"nvmlDeviceGetNvLinkRemotePciInfo_v2"}, &api_.device_get_nvlink_remote_pci_info);
  optional({"nvmlDeviceGetNvLinkRemoteDeviceType"}, &api_.device_get_nvlink_remote_device_type);
  optional({"nvmlDeviceGetUtilizationRates"}, &api_.device_get_utilization_rates);
  optional({"nvmlDeviceGetTemperature"}, &api_.device_get_temperature);
  optional({"nvmlDeviceGetPowerUsage"}, &api_.device_get_power_usage);
  optional({"nvmlDeviceGetEnforcedPowerLimit"}, &api_.device_get_enforced_power_limit);
  optional({"nvmlDeviceGetTotalEnergyConsumption"}, &api_.device_get_total_energy_consumption);
  optional({"nvmlDeviceGetClockInfo"}, &api_.device_get_clock_info);
  optional({"nvmlDeviceGetTotalEccErrors"}, &api_.device_get_total_ecc_errors);
  optional({"nvmlDeviceGetRemappedRows"}, &api_.device_get_remapped_rows);
  optional({"nvmlDeviceGetPcieReplayCounter"}, &api_.device_get_pcie_replay_counter);
  optional({"nvmlDeviceGetFieldValues"}, &api_.device_get_field_values);
  optional({"nvmlEventSetCreate"}, &api_.event_set_create);
  optional({"nvmlEventSetFree"}, &api_.event_set_free);
  optional({"nvmlDeviceGetSupportedEventTypes"}, &api_.device_get_supported_event_types);
  optional({"nvmlDeviceRegisterEvents"}, &api_.device_register_events);
  // nvmlEventSetWait (v1) takes the same struct; it leaves the MIG instance ids unset.
  optional({"nvmlEventSetWait_v2", "nvmlEventSetWait"}, &api_.event_set_wait);
  optional({"nvmlGpmQueryDeviceSupport"}, &api_.gpm_query_device_support);
  optional({"nvmlGpmSampleAlloc"}, &api_.gpm_sample_alloc);
  optional({"nvmlGpmSampleFree"}, &api_.gpm_sample_free);
  optional({"nvmlGpmSampleGet"}, &api_.gpm_sample_get);
  optional({"nvmlGpmMetricsGet"}, &api_.gpm_metrics_get);
  return true;
}

std::string NvmlLibrary::ErrorString(nvml::Return result) const {
  if (api_.error_string != nullptr) {
    if (const char* text = api_.error_string(result)) return text;
  }
  return "NVML error " + std::to_string(static_cast<int>(result));
}

}  // namespace cohort::gpu
