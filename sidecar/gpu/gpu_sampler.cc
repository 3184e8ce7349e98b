#include "sidecar/gpu/gpu_sampler.h"

namespace cohort::gpu {
namespace {

std::optional<uint64_t> ReadEccCount(const NvmlApi& api, nvml::Device device,
                                     nvml::MemoryErrorType type, nvml::EccCounterType counter,
                                     DeviceQuery* query) {
  unsigned long long count = 0;
  if (!query->Ok("nvmlDeviceGetTotalEccErrors", api.device_get_total_ecc_errors, device, type,
                 counter, &count)) {
    return std::nullopt;
  }
  return count;
}

}  // namespace

GpuSample ReadSample(const NvmlApi& api, int index, nvml::Device device, DeviceQuery* query) {
  GpuSample sample;
  sample.index = index;

  nvml::Utilization utilization = {};
  if (query->Ok("nvmlDeviceGetUtilizationRates", api.device_get_utilization_rates, device,
                &utilization)) {
    sample.gpu_utilization_percent = utilization.gpu;
    sample.memory_utilization_percent = utilization.memory;
  }

  // v2 reports "used" without the driver's reservation, as nvidia-smi shows it.
  nvml::MemoryV2 memory_v2 = {};
  memory_v2.version = nvml::kMemoryV2Version;
  nvml::Memory memory = {};
  if (query->Ok("nvmlDeviceGetMemoryInfo_v2", api.device_get_memory_info_v2, device, &memory_v2)) {
    sample.memory_used_bytes = memory_v2.used;
    sample.memory_free_bytes = memory_v2.free;
    sample.memory_reserved_bytes = memory_v2.reserved;
  } else if (query->Ok("nvmlDeviceGetMemoryInfo", api.device_get_memory_info, device, &memory)) {
    sample.memory_used_bytes = memory.used;
    sample.memory_free_bytes = memory.free;
  }

  unsigned int value = 0;
  if (query->Ok("nvmlDeviceGetTemperature", api.device_get_temperature, device,
                nvml::kTemperatureGpu, &value)) {
    sample.temperature_celsius = value;
  }
  if (query->Ok("nvmlDeviceGetPowerUsage", api.device_get_power_usage, device, &value)) {
    sample.power_milliwatts = value;
  }
  if (query->Ok("nvmlDeviceGetEnforcedPowerLimit", api.device_get_enforced_power_limit, device,
                &value)) {
    sample.power_limit_milliwatts = value;
  }
  unsigned long long energy = 0;
  if (query->Ok("nvmlDeviceGetTotalEnergyConsumption", api.device_get_total_energy_consumption,
                device, &energy)) {
    sample.energy_millijoules = energy;
  }
  if (query->Ok("nvmlDeviceGetClockInfo", api.device_get_clock_info, device, nvml::kClockSm,
                &value)) {
    sample.sm_clock_mhz = value;
  }

  sample.ecc.volatile_single_bit =
      ReadEccCount(api, device, nvml::kMemoryErrorCorrected, nvml::kEccVolatile, query);
  sample.ecc.volatile_double_bit =
      ReadEccCount(api, device, nvml::kMemoryErrorUncorrected, nvml::kEccVolatile, query);
  sample.ecc.aggregate_single_bit =
      ReadEccCount(api, device, nvml::kMemoryErrorCorrected, nvml::kEccAggregate, query);
  sample.ecc.aggregate_double_bit =
      ReadEccCount(api, device, nvml::kMemoryErrorUncorrected, nvml::kEccAggregate, query);

  unsigned int correctable = 0;
  unsigned int uncorrectable = 0;
  unsigned int pending = 0;
  unsigned int failure = 0;
  if (query->Ok("nvmlDeviceGetRemappedRows", api.device_get_remapped_rows, device, &correctable,
                &uncorrectable, &pending, &failure)) {
    sample.remapped_rows = RemappedRows{correctable, uncorrectable, pending != 0, failure != 0};
  }
  if (query->Ok("nvmlDeviceGetPcieReplayCounter", api.device_get_pcie_replay_counter, device,
                &value)) {
    sample.pcie_replay_count = value;
  }

  if (query->lost()) {
    // Whatever was read before the GPU vanished is stale; report only that it is gone.
    sample = GpuSample{};
    sample.index = index;
    sample.lost = true;
  }
  return sample;
}

}  // namespace cohort::gpu
