#pragma once

// JSON forms of the GPU types, as cohort-gpu-info prints them. Field names carry their unit
// (memory_total_bytes, power_milliwatts) so readers need no schema.

#include <vector>

#include "sidecar/gpu/gpu_event_watcher.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu/json_writer.h"

namespace cohort::gpu {

// Short names, as nvidia-smi topo prints them: "PIX", "PXB", "PHB", "NODE", "SYS", and
// "BOARD" for GPUs on one board.
const char* PcieAffinityName(PcieAffinity affinity);
const char* NvLinkPeerName(NvLinkPeer peer);
const char* HealthProblemName(HealthProblem problem);
// "12.4" from NVML's 12040.
std::string CudaVersionText(int encoded);

// Members "nvml", "gpus" and "topology" of the object being written.
void WriteInventoryMembers(JsonWriter& json, const GpuInventory& inventory);
void WriteGpuInfo(JsonWriter& json, const GpuInfo& gpu);
void WritePairTopology(JsonWriter& json, const GpuPairTopology& pair);
void WriteSample(JsonWriter& json, const GpuSample& sample);
void WriteHealth(JsonWriter& json, const GpuHealth& health);
void WriteEvent(JsonWriter& json, const GpuEvent& event);

}  // namespace cohort::gpu
