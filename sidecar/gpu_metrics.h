#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "sidecar/gpu/gpu_event_watcher.h"
#include "sidecar/gpu/gpu_types.h"

namespace cohort {

// Who a GPU works for: the labels that attribute each GPU series to its pod and job.
struct PodIdentity {
  std::string namespace_name;
  std::string job;
  std::string pod;
  std::string task;
  std::string hostname;
};

// The node's GPUs as Prometheus series: cohort_gpu_* with pod and job labels, and, when
// asked, the names DCGM exporter uses (DCGM_FI_DEV_*, with its gpu/UUID/modelName labels),
// so dashboards built for it work unchanged. Values come from the latest sample; XIDs are
// counted as they arrive. Thread-safe.
class GpuMetrics {
 public:
  // `health` is read at every scrape, so a GPU's fall shows before the next sample.
  GpuMetrics(PodIdentity pod, gpu::GpuInventory inventory, bool dcgm_names,
             std::function<std::vector<gpu::GpuHealth>()> health);

  void Register(MetricsRegistry& registry);
  void OnSample(std::vector<gpu::GpuSample> samples);
  void OnEvent(const gpu::GpuEvent& event);

 private:
  std::vector<CollectedFamily> Collect() const;
  std::vector<std::pair<std::string, std::string>> Labels(const gpu::GpuInfo& gpu) const;
  std::vector<std::pair<std::string, std::string>> DcgmLabels(const gpu::GpuInfo& gpu) const;

  const PodIdentity pod_;
  const gpu::GpuInventory inventory_;
  const bool dcgm_names_;
  const std::function<std::vector<gpu::GpuHealth>()> health_;

  mutable absl::Mutex mu_;
  std::vector<gpu::GpuSample> samples_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, uint64_t>, uint64_t> xids_ ABSL_GUARDED_BY(mu_);  // (gpu, xid) -> n
  std::map<int, uint64_t> last_xid_ ABSL_GUARDED_BY(mu_);
  std::map<int, uint64_t> double_bit_events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
