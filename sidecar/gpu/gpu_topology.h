#pragma once

#include <vector>

#include "sidecar/gpu/device_query.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu/nvml_abi.h"
#include "sidecar/gpu/nvml_library.h"

namespace cohort::gpu {

// The active NVLinks of one GPU. remote_gpu_index is left for ReadTopology, which knows every
// GPU's bus id.
std::vector<NvLink> ReadActiveNvLinks(const NvmlApi& api, nvml::Device device, DeviceQuery* query);

// Points each NVLink whose far end is another GPU of `gpus` at that GPU, then describes every
// pair of GPUs: their common PCIe ancestor and their NVLink connection. devices[i] is gpus[i]'s
// handle (null ones are skipped).
std::vector<GpuPairTopology> ReadTopology(const NvmlApi& api,
                                          const std::vector<nvml::Device>& devices,
                                          std::vector<GpuInfo>* gpus);

}  // namespace cohort::gpu
