#include "sidecar/gpu_metrics.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Appends a sample when the value is known; an unsupported field leaves no series.
template <typename T>
void Add(CollectedFamily& family, const Labels& labels, const std::optional<T>& value,
         double scale = 1) {
  if (value) family.samples.push_back({labels, static_cast<double>(*value) * scale});
}

Labels With(Labels labels, const std::string& name, const std::string& value) {
  labels.emplace_back(name, value);
  return labels;
}

constexpr double kMiB = 1.0 / (1024 * 1024);

}  // namespace

GpuMetrics::GpuMetrics(PodIdentity pod, gpu::GpuInventory inventory, bool dcgm_names,
                       std::function<std::vector<gpu::GpuHealth>()> health)
    : pod_(std::move(pod)),
      inventory_(std::move(inventory)),
      dcgm_names_(dcgm_names),
      health_(std::move(health)) {}

void GpuMetrics::Register(MetricsRegistry& registry) {
  registry.AddCollector([this] { return Collect(); });
}

void GpuMetrics::OnSample(std::vector<gpu::GpuSample> samples) {
  absl::MutexLock lock(&mu_);
  samples_ = std::move(samples);
}

void GpuMetrics::OnEvent(const gpu::GpuEvent& event) {
  absl::MutexLock lock(&mu_);
  if (event.kind == gpu::GpuEvent::Kind::kXid) {
    ++xids_[{event.gpu_index, event.xid}];
    last_xid_[event.gpu_index] = event.xid;
  } else {
    ++double_bit_events_[event.gpu_index];
  }
}

Labels GpuMetrics::Labels(const gpu::GpuInfo& gpu) const {
  return {{"namespace", pod_.namespace_name},
          {"job", pod_.job},
          {"pod", pod_.pod},
          {"task", pod_.task},
          {"gpu", absl::StrCat(gpu.index)},
          {"uuid", gpu.uuid},
          {"model", gpu.name}};
}

Labels GpuMetrics::DcgmLabels(const gpu::GpuInfo& gpu) const {
  return {{"gpu", absl::StrCat(gpu.index)},
          {"UUID", gpu.uuid},
          {"device", absl::StrCat("nvidia", gpu.index)},
          {"modelName", gpu.name},
          {"Hostname", pod_.hostname},
          {"namespace", pod_.namespace_name},
          {"pod", pod_.pod}};
}

std::vector<CollectedFamily> GpuMetrics::Collect() const {
  auto family = [](const char* name, const char* help, const char* type = "gauge") {
    return CollectedFamily{name, help, type, {}};
  };
  CollectedFamily gpus = family("cohort_gpus", "GPUs NVML found on this node.");
  gpus.samples.push_back({{{"namespace", pod_.namespace_name},
                           {"job", pod_.job},
                           {"pod", pod_.pod},
                           {"task", pod_.task}},
                          static_cast<double>(inventory_.gpus.size())});
  CollectedFamily info = family("cohort_gpu_info", "1 per GPU, with its driver and PCI bus id.");
  CollectedFamily healthy =
      family("cohort_gpu_healthy",
             "1 while the GPU is healthy; 0 after a critical XID, a double-bit "
             "ECC error or falling off the bus.");
  CollectedFamily util = family("cohort_gpu_utilization_ratio",
                                "Fraction of the last sample period a kernel ran (0-1).");
  CollectedFamily sm_activity =
      family("cohort_gpu_sm_activity_ratio",
             "Fraction of the GPU's SMs busy over the last sample period (0-1), from NVML GPM; "
             "only GPUs that have it (Hopper and later).");
  CollectedFamily mem_util =
      family("cohort_gpu_memory_utilization_ratio",
             "Fraction of the last sample period memory was read or written.");
  CollectedFamily used = family("cohort_gpu_memory_used_bytes", "Frame buffer memory in use.");
  CollectedFamily free_bytes = family("cohort_gpu_memory_free_bytes", "Frame buffer memory free.");
  CollectedFamily total = family("cohort_gpu_memory_total_bytes", "Frame buffer memory in all.");
  CollectedFamily temp = family("cohort_gpu_temperature_celsius", "GPU core temperature.");
  CollectedFamily power = family("cohort_gpu_power_watts", "Power drawn by the board.");
  CollectedFamily limit = family("cohort_gpu_power_limit_watts", "The board's power limit.");
  CollectedFamily energy =
      family("cohort_gpu_energy_joules_total", "Energy used since the driver loaded.", "counter");
  CollectedFamily clock = family("cohort_gpu_sm_clock_hertz", "Streaming multiprocessor clock.");
  CollectedFamily ecc = family("cohort_gpu_ecc_errors_total",
                               "ECC errors by type (single_bit corrected, double_bit "
                               "uncorrected) and scope (volatile: since the driver loaded; "
                               "aggregate: the board's lifetime).",
                               "counter");
  CollectedFamily remapped = family("cohort_gpu_remapped_rows",
                                    "Memory rows remapped, by kind (correctable, uncorrectable).");
  CollectedFamily remap_pending =
      family("cohort_gpu_row_remapping_pending", "1 when a row remapping waits for a GPU reset.");
  CollectedFamily remap_failed =
      family("cohort_gpu_row_remapping_failed", "1 when a row remapping failed.");
  CollectedFamily replays =
      family("cohort_gpu_pcie_replays_total", "PCIe replays since the driver loaded.", "counter");
  CollectedFamily xid = family("cohort_gpu_xid_errors_total",
                               "XID events since the sidecar started, by XID code (including "
                               "the application XIDs health ignores).",
                               "counter");
  CollectedFamily dbe_events =
      family("cohort_gpu_double_bit_ecc_events_total",
             "Double-bit ECC events since the sidecar started.", "counter");

  // DCGM exporter's names, one family each across GPUs, in a stable order.
  std::map<std::string, CollectedFamily> dcgm;
  auto dcgm_family = [&dcgm](const char* name, const char* help) -> CollectedFamily& {
    CollectedFamily& f = dcgm[name];
    if (f.name.empty()) f = CollectedFamily{name, help, "gauge", {}};
    return f;
  };

  std::vector<gpu::GpuHealth> health = health_();
  absl::MutexLock lock(&mu_);
  for (const gpu::GpuInfo& gpu : inventory_.gpus) {
    ::cohort::Labels labels = Labels(gpu);
    info.samples.push_back({With(With(labels, "driver_version", inventory_.driver.driver_version),
                                 "pci_bus_id", gpu.pci_bus_id),
                            1});
    bool is_healthy = true;
    for (const gpu::GpuHealth& h : health) {
      if (h.gpu_index == gpu.index) is_healthy = h.healthy;
    }
    healthy.samples.push_back({labels, is_healthy ? 1.0 : 0.0});
    Add(total, labels, gpu.memory_total_bytes);
    for (const auto& [key, count] : xids_) {
      if (key.first == gpu.index) {
        xid.samples.push_back(
            {With(labels, "xid", absl::StrCat(key.second)), static_cast<double>(count)});
      }
    }
    auto dbe = double_bit_events_.find(gpu.index);
    dbe_events.samples.push_back(
        {labels, dbe == double_bit_events_.end() ? 0.0 : static_cast<double>(dbe->second)});

    const gpu::GpuSample* sample = nullptr;
    for (const gpu::GpuSample& s : samples_) {
      if (s.index == gpu.index) sample = &s;
    }
    if (!sample || sample->lost) continue;
    Add(util, labels, sample->gpu_utilization_percent, 0.01);
    Add(sm_activity, labels, sample->sm_activity);
    Add(mem_util, labels, sample->memory_utilization_percent, 0.01);
    Add(used, labels, sample->memory_used_bytes);
    Add(free_bytes, labels, sample->memory_free_bytes);
    Add(temp, labels, sample->temperature_celsius);
    Add(power, labels, sample->power_milliwatts, 0.001);
    Add(limit, labels, sample->power_limit_milliwatts, 0.001);
    Add(energy, labels, sample->energy_millijoules, 0.001);
    Add(clock, labels, sample->sm_clock_mhz, 1e6);
    auto ecc_labels = [&](const char* type, const char* scope) {
      return With(With(labels, "type", type), "scope", scope);
    };
    Add(ecc, ecc_labels("single_bit", "volatile"), sample->ecc.volatile_single_bit);
    Add(ecc, ecc_labels("double_bit", "volatile"), sample->ecc.volatile_double_bit);
    Add(ecc, ecc_labels("single_bit", "aggregate"), sample->ecc.aggregate_single_bit);
    Add(ecc, ecc_labels("double_bit", "aggregate"), sample->ecc.aggregate_double_bit);
    if (sample->remapped_rows) {
      const gpu::RemappedRows& rows = *sample->remapped_rows;
      remapped.samples.push_back(
          {With(labels, "kind", "correctable"), static_cast<double>(rows.correctable)});
      remapped.samples.push_back(
          {With(labels, "kind", "uncorrectable"), static_cast<double>(rows.uncorrectable)});
      remap_pending.samples.push_back({labels, rows.pending ? 1.0 : 0.0});
      remap_failed.samples.push_back({labels, rows.failure ? 1.0 : 0.0});
    }
    Add(replays, labels, sample->pcie_replay_count);

    if (!dcgm_names_) continue;
    ::cohort::Labels d = DcgmLabels(gpu);
    Add(dcgm_family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."), d,
        sample->gpu_utilization_percent);
    Add(dcgm_family("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."), d,
        sample->memory_utilization_percent);
    Add(dcgm_family("DCGM_FI_PROF_SM_ACTIVE",
                    "The ratio of cycles an SM has at least 1 warp assigned (in %)."),
        d, sample->sm_activity);
    Add(dcgm_family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."), d,
        sample->memory_used_bytes, kMiB);
    Add(dcgm_family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."), d,
        sample->memory_free_bytes, kMiB);
    Add(dcgm_family("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."), d,
        sample->temperature_celsius);
    Add(dcgm_family("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."), d, sample->power_milliwatts,
        0.001);
    Add(dcgm_family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    "Total energy consumption since boot (in mJ)."),
        d, sample->energy_millijoules);
    Add(dcgm_family("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."), d,
        sample->sm_clock_mhz);
    Add(dcgm_family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries."), d,
        sample->pcie_replay_count);
    Add(dcgm_family("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                    "Total number of single-bit volatile ECC "
                    "errors."),
        d, sample->ecc.volatile_single_bit);
    Add(dcgm_family("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                    "Total number of double-bit volatile ECC "
                    "errors."),
        d, sample->ecc.volatile_double_bit);
    auto last = last_xid_.find(gpu.index);
    dcgm_family("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
        .samples.push_back({d, last == last_xid_.end() ? 0.0 : static_cast<double>(last->second)});
  }

  std::vector<CollectedFamily> out = {
      gpus,       info,     healthy,       util,         sm_activity, mem_util, used,
      free_bytes, total,    temp,          power,        limit,       energy,   clock,
      ecc,        remapped, remap_pending, remap_failed, replays,     xid,      dbe_events};
  for (auto& [name, f] : dcgm) out.push_back(std::move(f));
  return out;
}

}  // namespace cohort
