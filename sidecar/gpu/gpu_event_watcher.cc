#include "sidecar/gpu/gpu_event_watcher.h"

#include <utility>

namespace cohort::gpu {
namespace {

constexpr unsigned long long kWantedEvents =
    nvml::kEventTypeXidCriticalError | nvml::kEventTypeDoubleBitEccError;

// Bounds the events drained after one wait, so a GPU that floods the driver with XIDs cannot
// keep Poll from returning.
constexpr int kMaxEventsPerPoll = 256;

}  // namespace

GpuEventWatcher::GpuEventWatcher(const NvmlLibrary& library, std::vector<nvml::Device> devices)
    : library_(library), devices_(std::move(devices)) {
  const NvmlApi& api = library_.api();
  if (api.event_set_create == nullptr || api.event_set_free == nullptr ||
      api.device_register_events == nullptr || api.event_set_wait == nullptr) {
    problems_.push_back("this NVML library has no event API; XID events are not watched");
    return;
  }
  nvml::Return result = api.event_set_create(&set_);
  if (result != nvml::kSuccess) {
    problems_.push_back("nvmlEventSetCreate failed: " + library_.ErrorString(result) +
                        "; XID events are not watched");
    set_ = nullptr;
    return;
  }
  for (size_t index = 0; index < devices_.size(); ++index) {
    nvml::Device device = devices_[index];
    if (device == nullptr) continue;
    unsigned long long events = kWantedEvents;
    unsigned long long supported = 0;
    if (api.device_get_supported_event_types != nullptr &&
        api.device_get_supported_event_types(device, &supported) == nvml::kSuccess) {
      events &= supported;
    }
    if (events == 0) {
      problems_.push_back("GPU " + std::to_string(index) +
                          " supports neither XID nor double-bit ECC events");
      continue;
    }
    result = api.device_register_events(device, events, set_);
    if (result != nvml::kSuccess) {
      problems_.push_back("GPU " + std::to_string(index) +
                          ": nvmlDeviceRegisterEvents failed: " + library_.ErrorString(result));
      continue;
    }
    ++registered_;
  }
}

GpuEventWatcher::~GpuEventWatcher() {
  if (set_ != nullptr) library_.api().event_set_free(set_);
}

int GpuEventWatcher::IndexOf(nvml::Device device) const {
  for (size_t index = 0; index < devices_.size(); ++index) {
    if (devices_[index] == device && device != nullptr) return static_cast<int>(index);
  }
  return -1;
}

EventPoll GpuEventWatcher::Poll(std::chrono::milliseconds timeout) {
  EventPoll poll;
  if (!listening()) return poll;
  unsigned int wait_ms = timeout.count() > 0 ? static_cast<unsigned int>(timeout.count()) : 0;
  for (int received = 0; received < kMaxEventsPerPoll; ++received) {
    nvml::EventData data = {};
    nvml::Return result = library_.api().event_set_wait(set_, &data, wait_ms);
    if (result == nvml::kErrorTimeout) break;
    if (result == nvml::kErrorGpuIsLost) {
      poll.gpu_lost = true;
      break;
    }
    if (result != nvml::kSuccess) {
      poll.error = "nvmlEventSetWait failed: " + library_.ErrorString(result);
      break;
    }
    wait_ms = 0;  // drain what is already queued, without waiting again
    int index = IndexOf(data.device);
    if (index < 0) continue;
    if (data.event_type & nvml::kEventTypeXidCriticalError) {
      poll.events.push_back({index, GpuEvent::Kind::kXid, data.event_data});
    } else if (data.event_type & nvml::kEventTypeDoubleBitEccError) {
      poll.events.push_back({index, GpuEvent::Kind::kDoubleBitEcc, 0});
    }
  }
  return poll;
}

}  // namespace cohort::gpu
