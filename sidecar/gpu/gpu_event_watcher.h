#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sidecar/gpu/nvml_abi.h"
#include "sidecar/gpu/nvml_library.h"

namespace cohort::gpu {

// Something the driver announced about a GPU.
struct GpuEvent {
  enum class Kind { kXid, kDoubleBitEcc };
  int gpu_index = 0;
  Kind kind = Kind::kXid;
  uint64_t xid = 0;  // for kXid
};

struct EventPoll {
  std::vector<GpuEvent> events;
  // The wait answered NVML_ERROR_GPU_IS_LOST: some GPU of the set is gone, NVML does not say
  // which, so the caller should probe them all.
  bool gpu_lost = false;
  // Set when the wait failed for another reason; the caller should not retry at once.
  std::string error;
};

// Listens for critical XID and double-bit ECC events on a node's GPUs through one NVML event
// set (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait).
//
// Thread safety: Poll must not run on two threads at once, nor during destruction. The
// library must outlive the watcher.
class GpuEventWatcher {
 public:
  // Registers devices[i] (reported as GPU i; null handles are skipped) for the events it
  // supports.
  GpuEventWatcher(const NvmlLibrary& library, std::vector<nvml::Device> devices);
  ~GpuEventWatcher();
  GpuEventWatcher(const GpuEventWatcher&) = delete;
  GpuEventWatcher& operator=(const GpuEventWatcher&) = delete;

  // True when at least one GPU is registered, so Poll can report anything.
  bool listening() const { return registered_ > 0; }
  // Why GPUs (or the whole node) could not be registered, one sentence each.
  const std::vector<std::string>& problems() const { return problems_; }

  // Waits up to `timeout` for the first event, then collects those already queued without
  // waiting. Returns at once when not listening.
  EventPoll Poll(std::chrono::milliseconds timeout);

 private:
  int IndexOf(nvml::Device device) const;

  const NvmlLibrary& library_;
  std::vector<nvml::Device> devices_;
  nvml::EventSet set_ = nullptr;
  int registered_ = 0;
  std::vector<std::string> problems_;
};

}  // namespace cohort::gpu
