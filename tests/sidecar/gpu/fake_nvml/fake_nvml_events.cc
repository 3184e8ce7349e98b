// The fake NVML's event sets (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait)
// and the controls of fake_nvml_control.h that make events happen.

#include <chrono>
#include <functional>
#include <mutex>

#include "sidecar/gpu/nvml_abi.h"
#include "tests/sidecar/gpu/fake_nvml/fake_nvml_control.h"
#include "tests/sidecar/gpu/fake_nvml/fake_state.h"

namespace fake_nvml {
namespace {

// Waits for the set's next event. `full` false: write only the fields nvmlEventSetWait (v1)
// had.
nvml::Return WaitForEvent(nvml::EventSet set, nvml::EventData* data, unsigned int timeout_ms,
                          bool full) {
  FakeState& state = State();
  std::unique_lock<std::mutex> lock(state.mu);
  auto* events = reinterpret_cast<EventSetState*>(set);
  if (state.event_sets.count(events) == 0 || data == nullptr) return nvml::kErrorInvalidArgument;
  state.events_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return state.event_sets.count(events) == 0 || !events->queue.empty() || events->lost_notice;
  });
  if (state.event_sets.count(events) == 0) return nvml::kErrorInvalidArgument;
  if (!events->queue.empty()) {
    nvml::EventData next = events->queue.front();
    events->queue.pop_front();
    data->device = next.device;
    data->event_type = next.event_type;
    data->event_data = next.event_data;
    if (full) {
      data->gpu_instance_id = next.gpu_instance_id;
      data->compute_instance_id = next.compute_instance_id;
    }
    return nvml::kSuccess;
  }
  if (events->lost_notice) {
    events->lost_notice = false;
    return nvml::kErrorGpuIsLost;
  }
  return nvml::kErrorTimeout;
}

// Queues an event of `type` for every set registered for it on GPU `index`.
int QueueEvent(unsigned int index, unsigned long long type, unsigned long long event_data,
               const std::function<void(FakeGpu&)>& change) {
  FakeState& state = State();
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (state.init_count == 0 || index >= state.node.gpus.size()) return -1;
    FakeGpu& gpu = state.node.gpus[index];
    if (change) change(gpu);
    for (EventSetState* events : state.event_sets) {
      auto registered = events->registered.find(&gpu);
      if (registered == events->registered.end() || (registered->second & type) == 0) continue;
      events->queue.push_back({HandleOf(gpu), type, event_data, 0xFFFFFFFFu, 0xFFFFFFFFu});
    }
  }
  state.events_cv.notify_all();
  return 0;
}

}  // namespace
}  // namespace fake_nvml

using namespace fake_nvml;  // NOLINT: the exported C functions below are this file's API

// --- Events ------------------------------------------------------------------------------------

FAKE_NVML_EXPORT nvml::Return nvmlEventSetCreate(nvml::EventSet* set) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  auto* events = new EventSetState;
  state.event_sets.insert(events);
  *set = reinterpret_cast<nvml::EventSet>(events);
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlEventSetFree(nvml::EventSet set) {
  FakeState& state = State();
  {
    std::lock_guard<std::mutex> lock(state.mu);
    auto* events = reinterpret_cast<EventSetState*>(set);
    if (state.event_sets.erase(events) == 0) return nvml::kErrorInvalidArgument;
    delete events;
  }
  state.events_cv.notify_all();
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetSupportedEventTypes(nvml::Device device,
                                                               unsigned long long* types) {
  return WithGpu(device, [&](FakeGpu& gpu) {
    *types = gpu.supported_events;
    return nvml::kSuccess;
  });
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceRegisterEvents(nvml::Device device,
                                                       unsigned long long types,
                                                       nvml::EventSet set) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0) return nvml::kErrorUninitialized;
  FakeGpu* gpu = FindGpu(state, device);
  auto* events = reinterpret_cast<EventSetState*>(set);
  if (gpu == nullptr || state.event_sets.count(events) == 0) return nvml::kErrorInvalidArgument;
  if (gpu->lost) return nvml::kErrorGpuIsLost;
  if ((types & ~gpu->supported_events) != 0) return nvml::kErrorNotSupported;
  events->registered[gpu] |= types;
  return nvml::kSuccess;
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlEventSetWait_v2(nvml::EventSet set, nvml::EventData* data,
                                                  unsigned int timeout_ms) {
  return WaitForEvent(set, data, timeout_ms, /*full=*/true);
}
#endif
FAKE_NVML_EXPORT nvml::Return nvmlEventSetWait(nvml::EventSet set, nvml::EventData* data,
                                               unsigned int timeout_ms) {
  return WaitForEvent(set, data, timeout_ms, /*full=*/false);
}

// --- Controls (fake_nvml_control.h) -------------------------------------------------------------

FAKE_NVML_EXPORT int fakeNvmlInjectXid(unsigned int index, unsigned long long xid) {
  return QueueEvent(index, nvml::kEventTypeXidCriticalError, xid, nullptr);
}

FAKE_NVML_EXPORT int fakeNvmlInjectDoubleBitEcc(unsigned int index, unsigned long long count) {
  return QueueEvent(index, nvml::kEventTypeDoubleBitEccError, 0, [count](FakeGpu& gpu) {
    if (!gpu.ecc) gpu.ecc = FakeEcc{};
    gpu.ecc->volatile_double += count;
    gpu.ecc->aggregate_double += count;
  });
}

FAKE_NVML_EXPORT int fakeNvmlSetGpuLost(unsigned int index) {
  FakeState& state = State();
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (state.init_count == 0 || index >= state.node.gpus.size()) return -1;
    FakeGpu& gpu = state.node.gpus[index];
    gpu.lost = true;
    for (EventSetState* events : state.event_sets) {
      if (events->registered.count(&gpu) > 0) events->lost_notice = true;
    }
  }
  state.events_cv.notify_all();
  return 0;
}

FAKE_NVML_EXPORT int fakeNvmlSetRecoveryAction(unsigned int index, unsigned int action) {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.init_count == 0 || index >= state.node.gpus.size()) return -1;
  state.node.gpus[index].recovery_action = action;
  return 0;
}

FAKE_NVML_EXPORT int fakeNvmlInitCount() {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  return state.init_count;
}

FAKE_NVML_EXPORT int fakeNvmlEventSetCount() {
  FakeState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  return static_cast<int>(state.event_sets.size());
}
