// GpuWatch: the pod's GPUs, watched: which of the node's they are, a fault on one told at
// once, and samples for the cohort_gpu_* metrics.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "sidecar/gpu/gpu_monitor.h"
#include "sidecar/gpu_metrics.h"
#include "sidecar/progress_tracker.h"

namespace cohort {

// How busy a sample says the pod's GPUs are, as progress is judged: the highest SM activity
// among the GPUs that have it (NVML's GPM: Hopper and later), else the highest utilisation.
// A pod's GPUs are of one model, so all have SM activity or none does, but a sample may lack
// it for a while: the first one (SM activity is measured from the sample before), one whose
// GPM read failed. `*sm_activity_seen` carries over from one sample to the next: once the
// GPUs have shown SM activity, a sample without it gives none, not utilisation, which a hung
// collective keeps high. None too when no GPU reports either (lost GPUs, no NVML).
std::optional<GpuActivityReading> BusiestGpuActivity(const std::vector<gpu::GpuSample>& samples,
                                                     bool* sm_activity_seen);

class GpuWatch {
 public:
  struct Options {
    gpu::GpuMonitorOptions monitor;
    absl::Duration sample_interval = absl::Seconds(5);
    bool dcgm_metrics = false;
    // GPUs the pod's workload asks for (its nvidia.com/gpu limits; -1: unknown, e.g. DRA):
    // fewer seen is said in the log and in cohort_sidecar_gpus_missing.
    int expected_gpus = -1;
    // Where the pod's GPUs come from when NVML shows the node's: the kubelet's PodResources
    // socket (asked for the devices of `pod_gpu_resources` given to the pod's other
    // containers), or a fixed list of UUIDs. Neither: every GPU NVML shows is the pod's.
    std::string pod_resources_socket;
    std::vector<std::string> pod_gpu_resources = {"nvidia.com/gpu"};
    std::vector<std::string> gpu_uuids;
  };

  // `on_problem` runs on one of the watch's threads when a GPU turns unhealthy.
  GpuWatch(Options options, PodIdentity pod, MetricsRegistry* registry,
           gpu::HealthListener on_problem);
  ~GpuWatch();
  GpuWatch(const GpuWatch&) = delete;
  GpuWatch& operator=(const GpuWatch&) = delete;

  // Finds the pod's GPUs and says in the log what it sees, and what it misses.
  void Open();
  // cohort_gpu_* (and DCGM's names), cohort_sidecar_gpus_expected and _missing. After Open.
  void RegisterMetrics();
  // Watches for faults and samples, on threads of its own. After Open.
  void Start();
  void Stop();
  // After Open.
  const gpu::GpuInventory& inventory() const { return monitor_->inventory(); }
  // BusiestGpuActivity of the last sample; none before the first.
  std::optional<GpuActivityReading> BusiestActivity() const;

 private:
  // Decides GpuMonitorOptions::only_uuids; says how in `how`.
  void ChoosePodGpus(gpu::GpuMonitorOptions* options, std::string* how) const;
  void SampleLoop();
  bool SleepUnlessStopped(absl::Duration d);

  const Options options_;
  const PodIdentity pod_;
  MetricsRegistry* const registry_;
  const gpu::HealthListener on_problem_;
  std::unique_ptr<gpu::GpuMonitor> monitor_;
  std::unique_ptr<GpuMetrics> metrics_;
  int missing_ = 0;  // of the GPUs the workload asks for
  std::thread sample_thread_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<GpuActivityReading> busiest_ ABSL_GUARDED_BY(mu_);
  bool sm_activity_seen_ = false;  // the sample thread's, for BusiestGpuActivity
};

}  // namespace cohort
