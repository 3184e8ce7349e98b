#pragma once

#include "sidecar/gpu/device_query.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu/nvml_abi.h"
#include "sidecar/gpu/nvml_library.h"

namespace cohort::gpu {

// Reads one sample of a GPU's telemetry: utilisation, memory, temperature, power and energy,
// SM clock, ECC counters, remapped rows, PCIe replays. A field the GPU or driver does not
// support stays empty. When any call finds the GPU lost, `query` says so and the sample is
// empty except for `lost`.
//
// Stateless; NVML is thread-safe, so any thread may call it.
GpuSample ReadSample(const NvmlApi& api, int index, nvml::Device device, DeviceQuery* query);

}  // namespace cohort::gpu
