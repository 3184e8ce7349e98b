#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sidecar/gpu/gpu_event_watcher.h"
#include "sidecar/gpu/gpu_health.h"
#include "sidecar/gpu/gpu_inventory.h"
#include "sidecar/gpu/gpu_sampler.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu/nvml_library.h"

namespace cohort::gpu {

struct GpuMonitorOptions {
  // The NVML library: a file path, or a name the dynamic loader searches for. Empty means
  // $COHORT_NVML_LIBRARY, else libnvidia-ml.so.1.
  std::string library_path;
  // The pod's GPUs by UUID, when NVML shows more than the pod's (the whole node): the monitor
  // keeps only these, numbered 0.. as the workload's container numbers them. Absent: every GPU
  // NVML shows is the pod's.
  std::optional<std::vector<std::string>> only_uuids;
  HealthPolicy health_policy;
  // Told about every new health problem, on the thread that found it (the caller of Sample or
  // PollEvents, or the event thread). It may call Health() and inventory(), but not Sample or
  // PollEvents, which are still running.
  HealthListener on_health_event;
  // Told about every XID and ECC event, ignored XIDs included (metrics count them all), on
  // the thread that polled it, before health is updated.
  std::function<void(const GpuEvent&)> on_event;
  // Receives diagnostics, one line each. Null: standard error.
  std::function<void(const std::string&)> log;
  std::string sysfs_pci_devices_dir = kSysfsPciDevicesDir;
  // How long the event thread waits inside NVML at a time. NVML's wait cannot be interrupted,
  // so this is also how long StopEventThread may take.
  std::chrono::milliseconds event_wait_slice{500};
  // NVML refreshes its GPM counters every 100 ms: a Sample sooner than this after a GPU's last
  // GPM sample repeats the SM activity it had then instead of reading GPM again.
  std::chrono::milliseconds sm_activity_min_interval{100};
  // The time that interval is measured in. Null: std::chrono::steady_clock (tests set theirs).
  std::function<std::chrono::steady_clock::time_point()> now;
};

// The sidecar's view of the node's GPUs: loads NVML, reads the inventory once, samples
// telemetry on request (with SM activity between one Sample and the next on GPUs that have
// NVML's GPM), listens for XID and ECC events, and keeps each GPU's health. Each new problem
// carries NVML's recovery action for the GPU, read when it is found, where the driver reports
// one (nvmlDeviceGetFieldValues, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).
//
// A node without the NVIDIA driver, or without GPUs, is normal: the monitor then has zero
// GPUs, logs one line saying why, and every method works and returns nothing.
//
// Thread safety: all methods may be called from any thread. Sample() calls are serialised
// among themselves, as are PollEvents() calls (the event thread makes them too).
class GpuMonitor {
 public:
  explicit GpuMonitor(GpuMonitorOptions options);
  // Stops the event thread, then shuts NVML down.
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Read once at construction; never changes.
  const GpuInventory& inventory() const { return inventory_; }

  // One sample per GPU, in inventory order. Also feeds health: ECC counters and lost GPUs.
  // SM activity covers the time since the previous call (none in the first).
  std::vector<GpuSample> Sample();

  // Waits up to `timeout` for XID and double-bit ECC events and applies them to health.
  // Returns the events seen. Returns at once when no GPU could be registered for events.
  std::vector<GpuEvent> PollEvents(std::chrono::milliseconds timeout);

  // True when events can arrive (some GPU registered for them).
  bool listening_for_events() const;

  // Calls PollEvents in a loop on a background thread until StopEventThread. False (and no
  // thread) when not listening for events.
  bool StartEventThread();
  void StopEventThread();

  std::vector<GpuHealth> Health() const;

 private:
  void Log(const std::string& line) const;
  // PollEvents, returning the whole poll for the event thread.
  EventPoll PollAndApply(std::chrono::milliseconds timeout);
  void EventLoop();

  const GpuMonitorOptions options_;
  GpuInventory inventory_;
  // Declared before everything that uses NVML, so it is destroyed after them.
  std::unique_ptr<NvmlLibrary> library_;
  std::vector<nvml::Device> devices_;
  std::unique_ptr<GpuHealthTracker> health_;
  std::unique_ptr<GpuEventWatcher> watcher_;

  std::mutex sample_mu_;
  std::vector<bool> lost_;  // guarded by sample_mu_; a lost GPU is not asked again
  // Per GPU, guarded by sample_mu_: its SM activity sampler (null without GPM), and whether a
  // failure of it was logged (once per GPU).
  std::vector<std::unique_ptr<SmActivitySampler>> sm_activity_;
  std::vector<bool> sm_activity_failure_logged_;

  std::mutex poll_mu_;           // serialises PollEvents
  std::string last_poll_error_;  // guarded by poll_mu_

  std::mutex thread_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by thread_mu_
  std::thread event_thread_;
};

}  // namespace cohort::gpu
