// GpuWatch: the pod's GPUs chosen, opened through NVML, sampled and watched for faults.
#include "sidecar/gpu_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sidecar/pod_gpus.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

// The sidecar's own container in the pod the operator makes (its devices are not the pod's
// workload's).
constexpr char kSidecarContainerName[] = "cohort-sidecar";

}  // namespace

std::optional<GpuActivityReading> BusiestGpuActivity(const std::vector<gpu::GpuSample>& samples,
                                                     bool* sm_activity_seen) {
  std::optional<double> sm_activity;
  std::optional<double> utilization;
  for (const gpu::GpuSample& s : samples) {
    if (s.lost) continue;
    if (s.sm_activity) sm_activity = std::max(sm_activity.value_or(0.0), *s.sm_activity);
    if (s.gpu_utilization_percent) {
      utilization = std::max(utilization.value_or(0.0), *s.gpu_utilization_percent / 100.0);
    }
  }
  using Measure = GpuActivityReading::Measure;
  if (sm_activity) {
    *sm_activity_seen = true;
    return GpuActivityReading{Measure::kSmActivity, *sm_activity};
  }
  if (utilization && !*sm_activity_seen) {
    return GpuActivityReading{Measure::kUtilization, *utilization};
  }
  return std::nullopt;
}

GpuWatch::GpuWatch(Options options, PodIdentity pod, MetricsRegistry* registry,
                   gpu::HealthListener on_problem)
    : options_(std::move(options)),
      pod_(std::move(pod)),
      registry_(registry),
      on_problem_(std::move(on_problem)) {}

GpuWatch::~GpuWatch() { Stop(); }

void GpuWatch::Open() {
  gpu::GpuMonitorOptions monitor = options_.monitor;
  monitor.on_health_event = on_problem_;
  monitor.on_event = [this](const gpu::GpuEvent& event) {
    if (metrics_) metrics_->OnEvent(event);
  };
  monitor.log = [](const std::string& line) { spdlog::info("gpu: {}", line); };
  std::string how_found;
  ChoosePodGpus(&monitor, &how_found);
  monitor_ = std::make_unique<gpu::GpuMonitor>(monitor);
  const int visible = static_cast<int>(monitor_->inventory().gpus.size());
  spdlog::info("{} GPUs for this pod{}", visible,
               monitor_->inventory().gpus.empty()
                   ? ""
                   : absl::StrCat(", driver ", monitor_->inventory().driver.driver_version));
  missing_ = options_.expected_gpus > visible ? options_.expected_gpus - visible : 0;
  if (const std::string problem = GpuVisibilityProblem(options_.expected_gpus, visible,
                                                       monitor_->inventory().diagnostic, how_found);
      !problem.empty()) {
    spdlog::error("{}", problem);
  }
  metrics_ = std::make_unique<GpuMetrics>(pod_, monitor_->inventory(), options_.dcgm_metrics,
                                          [this] { return monitor_->Health(); });
}

void GpuWatch::ChoosePodGpus(gpu::GpuMonitorOptions* options, std::string* how) const {
  if (!options_.gpu_uuids.empty()) {
    options->only_uuids = options_.gpu_uuids;
    *how = absl::StrCat(options_.gpu_uuids.size(), " named by --gpu-uuids");
    return;
  }
  if (options_.pod_resources_socket.empty()) return;
  auto ids = PodDeviceIds(options_.pod_resources_socket, pod_.namespace_name, pod_.pod,
                          kSidecarContainerName, options_.pod_gpu_resources);
  if (!ids.ok()) {
    // Watching the node's GPUs would blame this pod for its neighbours' faults: none then.
    options->only_uuids = std::vector<std::string>{};
    *how = std::string(ids.status().message());
    spdlog::error("cannot tell which GPUs are the pod's: {}; watching none", *how);
    return;
  }
  options->only_uuids = *ids;
  *how = absl::StrCat("the kubelet gave the pod ", ids->size());
  spdlog::info("the kubelet gave the pod's containers {} GPUs: {}", ids->size(),
               absl::StrJoin(*ids, ", "));
}

void GpuWatch::RegisterMetrics() {
  metrics_->Register(*registry_);
  if (options_.expected_gpus >= 0) {
    registry_
        ->AddGauge("cohort_sidecar_gpus_expected",
                   "GPUs the pod's workload asks for (its nvidia.com/gpu limits).", {})
        .WithLabels({})
        .Set(options_.expected_gpus);
  }
  registry_
      ->AddGauge("cohort_sidecar_gpus_missing",
                 "GPUs the pod's workload asks for that the sidecar cannot see: its GPU health "
                 "checks and metrics miss them (docs/sidecar.md, \"Seeing the pod's GPUs\").",
                 {})
      .WithLabels({})
      .Set(missing_);
}

void GpuWatch::Start() {
  monitor_->StartEventThread();
  sample_thread_ = std::thread([this] { SampleLoop(); });
}

void GpuWatch::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (monitor_) monitor_->StopEventThread();
  if (sample_thread_.joinable()) sample_thread_.join();
}

bool GpuWatch::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopped_), d);
  return stopped_;
}

void GpuWatch::SampleLoop() {
  do {
    std::vector<gpu::GpuSample> samples = monitor_->Sample();
    std::optional<GpuActivityReading> busiest = BusiestGpuActivity(samples, &sm_activity_seen_);
    {
      absl::MutexLock lock(&mu_);
      busiest_ = busiest;
    }
    metrics_->OnSample(std::move(samples));
  } while (!SleepUnlessStopped(options_.sample_interval));
}

std::optional<GpuActivityReading> GpuWatch::BusiestActivity() const {
  absl::MutexLock lock(&mu_);
  return busiest_;
}

}  // namespace cohort
