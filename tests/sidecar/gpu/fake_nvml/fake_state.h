#pragma once

// State shared by the fake NVML's entry points (fake_nvml.cc, fake_nvml_events.cc,
// fake_nvml_gpm.cc).

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "sidecar/gpu/nvml_abi.h"
#include "tests/sidecar/gpu/fake_nvml/fake_node.h"

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

namespace fake_nvml {

namespace nvml = cohort::gpu::nvml;

// A GPM sample buffer (nvmlGpmSample_t): the counters of the GPU it was last filled from.
struct GpmSampleState {
  bool filled = false;
  size_t gpu = 0;  // index into the node's GPUs
  uint64_t ticks = 0;
  double busy = 0;
};

struct EventSetState {
  std::deque<nvml::EventData> queue;
  std::map<const FakeGpu*, unsigned long long> registered;  // GPU -> event types
  bool lost_notice = false;                                 // answer the next wait with GPU_IS_LOST
};

// Everything the fake knows. One mutex guards it all, as NVML may be called from any thread.
struct FakeState {
  ~FakeState();

  std::mutex mu;
  std::condition_variable events_cv;  // signalled when an event set gains something to report
  int init_count = 0;
  FakeNode node;
  std::set<EventSetState*> event_sets;
  std::set<GpmSampleState*> gpm_samples;  // allocated and not freed
};

FakeState& State();

// Applies the lines written to $FAKE_NVML_CONTROL_FIFO, if set (fake_control_fifo.cc).
void StartControlFifo();

inline nvml::Device HandleOf(FakeGpu& gpu) { return reinterpret_cast<nvml::Device>(&gpu); }

// The GPU behind `device`; null for a handle this fake did not hand out (or before a re-init).
FakeGpu* FindGpu(FakeState& state, nvml::Device device);

// Runs `body(gpu)` for a valid handle of an initialised, not lost GPU, under the lock.
template <typename Body>
nvml::Return WithGpu(nvml::Device device, Body body) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  FakeGpu* gpu = FindGpu(state, device);
  if (gpu == nullptr) return nvml::kErrorInvalidArgument;
  if (gpu->lost) return nvml::kErrorGpuIsLost;
  return body(*gpu);
}

}  // namespace fake_nvml
