// The fake NVML's GPU performance monitoring (nvmlGpm*): sample buffers filled from a GPU's
// counters, and the SM utilisation between two of them, which is the "sm_activity" of the
// fake's config (or of fakeNvmlSetSmActivity) when the later sample was taken. A GPU without
// "sm_activity" has no GPM; the old-driver build has no GPM functions at all. Also the
// controls of fake_nvml_control.h about GPM.

#include <mutex>

#include "sidecar/gpu/nvml_abi.h"
#include "tests/sidecar/gpu/fake_nvml/fake_nvml_control.h"
#include "tests/sidecar/gpu/fake_nvml/fake_state.h"

using namespace fake_nvml;  // NOLINT: the exported C functions below are this file's API

// --- GPM ---------------------------------------------------------------------------------------

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlGpmQueryDeviceSupport(nvml::Device device,
                                                        nvml::GpmSupport* support) {
  if (support == nullptr) return nvml::kErrorInvalidArgument;
  if (support->version != nvml::kGpmSupportVersion) return nvml::kErrorArgumentVersionMismatch;
  return WithGpu(device, [&](FakeGpu& gpu) {
    support->is_supported_device = gpu.sm_activity ? 1 : 0;
    return nvml::kSuccess;
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlGpmSampleAlloc(nvml::GpmSample* sample) {
  if (sample == nullptr) return nvml::kErrorInvalidArgument;
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  auto* buffer = new GpmSampleState;
  state.gpm_samples.insert(buffer);
  *sample = reinterpret_cast<nvml::GpmSample>(buffer);
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlGpmSampleFree(nvml::GpmSample sample) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  auto* buffer = reinterpret_cast<GpmSampleState*>(sample);
  if (state.gpm_samples.erase(buffer) == 0) return nvml::kErrorInvalidArgument;
  delete buffer;
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlGpmSampleGet(nvml::Device device, nvml::GpmSample sample) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  FakeGpu* gpu = FindGpu(state, device);
  auto* buffer = reinterpret_cast<GpmSampleState*>(sample);
  if (gpu == nullptr || state.gpm_samples.count(buffer) == 0) return nvml::kErrorInvalidArgument;
  if (gpu->lost) return nvml::kErrorGpuIsLost;
  if (!gpu->sm_activity) return nvml::kErrorNotSupported;
  gpu->gpm_ticks += 1;
  gpu->gpm_busy += *gpu->sm_activity;
  *buffer = {true, static_cast<size_t>(gpu - state.node.gpus.data()), gpu->gpm_ticks,
             gpu->gpm_busy};
  return nvml::kSuccess;
}

// Computes SM utilisation between the two samples, which must be of one GPU, sample1 the
// earlier; any other metric answers NOT_SUPPORTED in its element.
FAKE_NVML_EXPORT nvml::Return nvmlGpmMetricsGet(nvml::GpmMetricsGet* request) {
  if (request == nullptr) return nvml::kErrorInvalidArgument;
  if (request->version != nvml::kGpmMetricsGetVersion) {
    return nvml::kErrorArgumentVersionMismatch;
  }
  if (request->metric_count > nvml::kGpmMetricCapacity) return nvml::kErrorInvalidArgument;
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  auto* first = reinterpret_cast<GpmSampleState*>(request->sample1);
  auto* second = reinterpret_cast<GpmSampleState*>(request->sample2);
  if (state.gpm_samples.count(first) == 0 || state.gpm_samples.count(second) == 0 ||
      !first->filled || !second->filled || first->gpu != second->gpu ||
      second->ticks <= first->ticks) {
    return nvml::kErrorInvalidArgument;
  }
  for (unsigned int i = 0; i < request->metric_count; ++i) {
    nvml::GpmMetric& metric = request->metrics[i];
    metric.info = {nullptr, nullptr, nullptr};
    if (metric.metric_id != nvml::kGpmMetricSmUtil) {
      metric.result = nvml::kErrorNotSupported;
      continue;
    }
    metric.result = nvml::kSuccess;
    metric.value =
        100.0 * (second->busy - first->busy) / static_cast<double>(second->ticks - first->ticks);
  }
  return nvml::kSuccess;
}
#endif

// --- Controls (fake_nvml_control.h) -------------------------------------------------------------

FAKE_NVML_EXPORT int fakeNvmlSetSmActivity(unsigned int index, double activity) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0 || index >= state.node.gpus.size()) return -1;
  FakeGpu& gpu = state.node.gpus[index];
  if (activity < 0) {
    gpu.sm_activity.reset();
  } else {
    gpu.sm_activity = activity;
  }
  return 0;
}

FAKE_NVML_EXPORT int fakeNvmlGpmSampleCount() {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  return static_cast<int>(state.gpm_samples.size());
}
