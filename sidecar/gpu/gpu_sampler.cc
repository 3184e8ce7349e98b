#include "sidecar/gpu/gpu_sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

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

bool HasGpmFunctions(const NvmlApi& api) {
  return api.gpm_query_device_support != nullptr && api.gpm_sample_alloc != nullptr &&
         api.gpm_sample_free != nullptr && api.gpm_sample_get != nullptr &&
         api.gpm_metrics_get != nullptr;
}

}  // namespace

SmActivitySampler::SmActivitySampler(const NvmlLibrary& library, nvml::Device device,
                                     std::chrono::milliseconds min_interval,
                                     std::function<std::chrono::steady_clock::time_point()> now)
    : library_(library), device_(device), min_interval_(min_interval), now_(std::move(now)) {
  const NvmlApi& api = library_.api();
  if (!HasGpmFunctions(api)) {
    unsupported_reason_ = "the driver has no GPM functions (drivers from R520 on have them)";
    return;
  }
  nvml::GpmSupport support = {};
  support.version = nvml::kGpmSupportVersion;
  nvml::Return result = api.gpm_query_device_support(device_, &support);
  if (result != nvml::kSuccess) {
    unsupported_reason_ = "nvmlGpmQueryDeviceSupport: " + library_.ErrorString(result);
    return;
  }
  if (support.is_supported_device == 0) {
    unsupported_reason_ = "GPM is not supported (Hopper and later GPUs have it)";
    return;
  }
  for (nvml::GpmSample* sample : {&last_, &next_}) {
    result = api.gpm_sample_alloc(sample);
    if (result != nvml::kSuccess) {
      *sample = nullptr;
      unsupported_reason_ = "nvmlGpmSampleAlloc: " + library_.ErrorString(result);
      return;
    }
  }
  request_ = std::make_unique<nvml::GpmMetricsGet>();  // value-initialised: all zero
  supported_ = true;
}

SmActivitySampler::~SmActivitySampler() {
  const NvmlApi& api = library_.api();
  for (nvml::GpmSample sample : {last_, next_}) {
    if (sample != nullptr && api.gpm_sample_free != nullptr) api.gpm_sample_free(sample);
  }
}

std::optional<double> SmActivitySampler::Read(DeviceQuery* query) {
  if (!supported_) return std::nullopt;
  const auto now = now_ ? now_() : std::chrono::steady_clock::now();
  if (have_last_ && now - last_at_ < min_interval_) return result_;
  nvml::Return result =
      query->Call("nvmlGpmSampleGet", library_.api().gpm_sample_get, device_, next_);
  if (result != nvml::kSuccess) {
    error_ = "nvmlGpmSampleGet: " + library_.ErrorString(result);
    result_.reset();
    return result_;
  }
  if (have_last_) {
    result_ = Measure(query);
  } else {
    error_.clear();
    result_.reset();
  }
  // The sample just taken is where the next reading measures from.
  std::swap(last_, next_);
  have_last_ = true;
  last_at_ = now;
  return result_;
}

std::optional<double> SmActivitySampler::Measure(DeviceQuery* query) {
  nvml::GpmMetricsGet& request = *request_;
  request.version = nvml::kGpmMetricsGetVersion;
  request.metric_count = 1;
  request.sample1 = last_;
  request.sample2 = next_;
  request.metrics[0] = nvml::GpmMetric{};
  request.metrics[0].metric_id = nvml::kGpmMetricSmUtil;
  nvml::Return result = query->Call("nvmlGpmMetricsGet", library_.api().gpm_metrics_get, &request);
  if (result != nvml::kSuccess) {
    error_ = "nvmlGpmMetricsGet: " + library_.ErrorString(result);
    return std::nullopt;
  }
  const nvml::GpmMetric& metric = request.metrics[0];
  if (metric.result != nvml::kSuccess) {
    error_ = "nvmlGpmMetricsGet, NVML_GPM_METRIC_SM_UTIL: " + library_.ErrorString(metric.result);
    return std::nullopt;
  }
  if (!std::isfinite(metric.value)) {
    error_ = "nvmlGpmMetricsGet, NVML_GPM_METRIC_SM_UTIL: not a number";
    return std::nullopt;
  }
  error_.clear();
  return std::clamp(metric.value / 100.0, 0.0, 1.0);  // NVML gives a percentage
}

GpuSample ReadSample(const NvmlApi& api, int index, nvml::Device device, DeviceQuery* query,
                     SmActivitySampler* sm_activity) {
  GpuSample sample;
  sample.index = index;

  nvml::Utilization utilization = {};
  if (query->Ok("nvmlDeviceGetUtilizationRates", api.device_get_utilization_rates, device,
                &utilization)) {
    sample.gpu_utilization_percent = utilization.gpu;
    sample.memory_utilization_percent = utilization.memory;
  }
  if (sm_activity != nullptr) sample.sm_activity = sm_activity->Read(query);

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
