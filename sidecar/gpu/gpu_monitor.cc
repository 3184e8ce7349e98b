#include "sidecar/gpu/gpu_monitor.h"

#include <iostream>
#include <limits>
#include <map>
#include <utility>

#include "sidecar/gpu/device_query.h"
#include "sidecar/gpu/gpu_sampler.h"

namespace cohort::gpu {
namespace {

// A field NVML read, as an unsigned int; empty when it was not read or is no such number.
std::optional<unsigned int> UnsignedFieldValue(const nvml::FieldValue& field) {
  if (field.result != nvml::kSuccess) return std::nullopt;
  unsigned long long value = 0;
  switch (field.value_type) {
    case nvml::kValueTypeUnsignedInt:
      return field.value.as_uint;
    case nvml::kValueTypeUnsignedShort:
      return field.value.as_ushort;
    case nvml::kValueTypeUnsignedLong:
      value = field.value.as_ulong;
      break;
    case nvml::kValueTypeUnsignedLongLong:
      value = field.value.as_ulonglong;
      break;
    case nvml::kValueTypeSignedInt:
      if (field.value.as_int < 0) return std::nullopt;
      value = static_cast<unsigned long long>(field.value.as_int);
      break;
    case nvml::kValueTypeSignedLongLong:
      if (field.value.as_longlong < 0) return std::nullopt;
      value = static_cast<unsigned long long>(field.value.as_longlong);
      break;
    default:  // a double, or a type newer than this code
      return std::nullopt;
  }
  if (value > std::numeric_limits<unsigned int>::max()) return std::nullopt;
  return static_cast<unsigned int>(value);
}

// NVML's recovery action for the GPU; empty on a driver without nvmlDeviceGetFieldValues or
// without the field, and when the GPU cannot answer.
std::optional<unsigned int> ReadRecoveryAction(const NvmlApi& api, nvml::Device device) {
  if (api.device_get_field_values == nullptr || device == nullptr) return std::nullopt;
  nvml::FieldValue field = {};
  field.field_id = nvml::kFieldIdGpuRecoveryAction;
  field.scope_id = 0;
  if (api.device_get_field_values(device, 1, &field) != nvml::kSuccess) return std::nullopt;
  return UnsignedFieldValue(field);
}

// "0, 1, 5": GPU indices for the log.
std::string GpuIndexList(const std::vector<int>& gpus) {
  std::string text;
  for (int gpu : gpus) text += (text.empty() ? "" : ", ") + std::to_string(gpu);
  return text;
}

// Which GPUs give SM activity, for the summary line: `why_not[i]` is empty when GPU i does,
// else why not. One reason for every GPU is said once.
std::string DescribeSmActivity(const std::vector<std::string>& why_not) {
  std::vector<int> with;
  std::map<std::string, std::vector<int>> without;  // reason -> GPUs
  for (size_t gpu = 0; gpu < why_not.size(); ++gpu) {
    if (why_not[gpu].empty()) {
      with.push_back(static_cast<int>(gpu));
    } else {
      without[why_not[gpu]].push_back(static_cast<int>(gpu));
    }
  }
  if (without.empty()) return "SM activity (NVML GPM) on every GPU";
  if (with.empty() && without.size() == 1) {
    return "no SM activity (NVML GPM): " + without.begin()->first;
  }
  std::string text = with.empty() ? "no SM activity (NVML GPM)"
                                  : "SM activity (NVML GPM) on GPU " + GpuIndexList(with);
  for (const auto& [reason, gpus] : without) {
    text += "; none on GPU " + GpuIndexList(gpus) + ": " + reason;
  }
  return text;
}

}  // namespace

GpuMonitor::GpuMonitor(GpuMonitorOptions options) : options_(std::move(options)) {
  inventory_.library_path = NvmlLibrary::ResolvePath(options_.library_path);
  library_ = NvmlLibrary::Open(inventory_.library_path, &inventory_.diagnostic);
  if (library_ == nullptr) {
    health_ = std::make_unique<GpuHealthTracker>(options_.health_policy, std::vector<std::string>{},
                                                 options_.on_health_event);
    Log(inventory_.diagnostic);
    return;
  }
  inventory_.nvml_loaded = true;
  inventory_.missing_functions = library_->missing_functions();

  InventoryReading reading = ReadInventory(*library_, options_.sysfs_pci_devices_dir);
  if (options_.only_uuids) {
    const size_t on_node = reading.gpus.size();
    std::vector<std::string> missing;
    KeepOnly(*options_.only_uuids, &reading, &missing);
    std::string line = "the pod's GPUs: " + std::to_string(reading.gpus.size()) + " of the " +
                       std::to_string(on_node) + " NVML shows";
    for (const std::string& uuid : missing) line += "; " + uuid + " is not among them";
    Log(line);
  }
  inventory_.driver = std::move(reading.driver);
  inventory_.gpus = std::move(reading.gpus);
  inventory_.topology = std::move(reading.topology);
  devices_ = std::move(reading.devices);
  for (const std::string& problem : reading.problems) Log(problem);

  std::vector<std::string> uuids;
  for (const GpuInfo& gpu : inventory_.gpus) uuids.push_back(gpu.uuid);
  // The tracker does not ask about a GPU it knows to be lost. One lost unnoticed answers
  // NVML_ERROR_GPU_IS_LOST here, which leaves the action empty, and the next sample finds it.
  health_ = std::make_unique<GpuHealthTracker>(
      options_.health_policy, std::move(uuids), options_.on_health_event, [this](int gpu) {
        if (static_cast<size_t>(gpu) >= devices_.size()) return std::optional<unsigned int>();
        return ReadRecoveryAction(library_->api(), devices_[gpu]);
      });
  lost_.assign(inventory_.gpus.size(), false);

  if (inventory_.gpus.empty()) {
    inventory_.diagnostic = "NVML in " + inventory_.library_path + " (driver " +
                            inventory_.driver.driver_version + ") found no GPUs; reporting 0 GPUs";
    Log(inventory_.diagnostic);
    return;
  }

  for (const GpuInfo& gpu : inventory_.gpus) {
    if (!gpu.lost) continue;
    lost_[gpu.index] = true;
    health_->OnGpuLost(gpu.index, "NVML_ERROR_GPU_IS_LOST while reading the inventory");
  }
  watcher_ = std::make_unique<GpuEventWatcher>(*library_, devices_);
  for (const std::string& problem : watcher_->problems()) Log(problem);

  // SM activity where the GPU and driver have GPM; why not is said once, in the summary.
  std::vector<std::string> no_sm_activity(devices_.size());
  sm_activity_.resize(devices_.size());
  sm_activity_failure_logged_.assign(devices_.size(), false);
  for (size_t index = 0; index < devices_.size(); ++index) {
    if (devices_[index] == nullptr || lost_[index]) {
      no_sm_activity[index] = "lost";
      continue;
    }
    auto sampler = std::make_unique<SmActivitySampler>(
        *library_, devices_[index], options_.sm_activity_min_interval, options_.now);
    if (sampler->supported()) {
      sm_activity_[index] = std::move(sampler);
    } else {
      no_sm_activity[index] = sampler->unsupported_reason();
    }
  }

  std::string summary = "NVML in " + inventory_.library_path + " (driver " +
                        inventory_.driver.driver_version + ") found " +
                        std::to_string(inventory_.gpus.size()) + " GPUs";
  if (!inventory_.missing_functions.empty()) {
    summary += "; this driver lacks";
    for (const std::string& name : inventory_.missing_functions) summary += " " + name;
  }
  summary += "; " + DescribeSmActivity(no_sm_activity);
  Log(summary);
}

GpuMonitor::~GpuMonitor() {
  StopEventThread();
  // The watcher's event set and the GPM samples must be freed before NVML shuts down.
  watcher_.reset();
  sm_activity_.clear();
}

std::vector<GpuSample> GpuMonitor::Sample() {
  std::lock_guard<std::mutex> lock(sample_mu_);
  std::vector<GpuSample> samples;
  if (library_ == nullptr) return samples;
  for (size_t index = 0; index < devices_.size(); ++index) {
    int gpu = static_cast<int>(index);
    if (devices_[index] == nullptr) {
      GpuSample unreadable;
      unreadable.index = gpu;
      unreadable.lost = lost_[index];
      samples.push_back(unreadable);
      continue;
    }
    DeviceQuery query(lost_[index]);
    SmActivitySampler* sm_activity =
        index < sm_activity_.size() ? sm_activity_[index].get() : nullptr;
    samples.push_back(ReadSample(library_->api(), gpu, devices_[index], &query, sm_activity));
    if (sm_activity != nullptr && !sm_activity->error().empty() && !query.lost() &&
        !sm_activity_failure_logged_[index]) {
      sm_activity_failure_logged_[index] = true;
      Log("GPU " + std::to_string(gpu) + " gave no SM activity (" + sm_activity->error() +
          "); said once per GPU");
    }
    if (query.lost() && !lost_[index]) {
      lost_[index] = true;
      health_->OnGpuLost(gpu, "NVML_ERROR_GPU_IS_LOST from " + query.lost_in());
    }
    if (!samples.back().lost) health_->OnEccCounts(gpu, samples.back().ecc);
  }
  return samples;
}

std::vector<GpuEvent> GpuMonitor::PollEvents(std::chrono::milliseconds timeout) {
  return PollAndApply(timeout).events;
}

EventPoll GpuMonitor::PollAndApply(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(poll_mu_);
  if (!listening_for_events()) return {};
  EventPoll poll = watcher_->Poll(timeout);
  for (const GpuEvent& event : poll.events) {
    if (options_.on_event) options_.on_event(event);
    if (event.kind == GpuEvent::Kind::kXid) {
      health_->OnXid(event.gpu_index, event.xid);
    } else {
      health_->OnDoubleBitEccEvent(event.gpu_index);
    }
  }
  if (poll.gpu_lost) Sample();  // the wait does not say which GPU; a sample finds it
  // A broken wait fails every time; say so once per distinct error.
  if (poll.error != last_poll_error_ && !poll.error.empty()) Log(poll.error);
  last_poll_error_ = poll.error;
  return poll;
}

bool GpuMonitor::listening_for_events() const {
  return watcher_ != nullptr && watcher_->listening();
}

bool GpuMonitor::StartEventThread() {
  if (!listening_for_events()) return false;
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (event_thread_.joinable()) return true;
  stop_ = false;
  event_thread_ = std::thread([this] { EventLoop(); });
  return true;
}

void GpuMonitor::StopEventThread() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(thread_mu_);
    stop_ = true;
    thread = std::move(event_thread_);
  }
  stop_cv_.notify_all();
  if (thread.joinable()) thread.join();
}

void GpuMonitor::EventLoop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(thread_mu_);
      if (stop_) return;
    }
    EventPoll poll = PollAndApply(options_.event_wait_slice);
    if (!poll.error.empty()) {
      // A failing wait returns at once; pause for a slice so the thread does not spin.
      std::unique_lock<std::mutex> lock(thread_mu_);
      stop_cv_.wait_for(lock, options_.event_wait_slice, [this] { return stop_; });
    }
  }
}

std::vector<GpuHealth> GpuMonitor::Health() const { return health_->Snapshot(); }

void GpuMonitor::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::cerr << "cohort-gpu: " << line << std::endl;
  }
}

}  // namespace cohort::gpu
