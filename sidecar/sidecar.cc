// Sidecar: its parts, started in order and stopped.
#include "sidecar/sidecar.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace cohort {

Sidecar::Sidecar(SidecarOptions options, MetricsRegistry* registry)
    : options_(std::move(options)),
      proxy_(options_.proxy, options_.coordinator, registry),
      objstore_(options_.objstore),
      reporter_(options_.task, &agent_, registry),
      gpus_(options_.gpus, options_.task.pod, registry,
            [this](const gpu::HealthEvent& event) { reporter_.OnGpuProblem(event); }),
      workload_(options_.workload,
                [this](const std::string& what) { reporter_.OnWorkloadExit(what); }),
      registration_(options_.registration, options_.task, &agent_, &proxy_, registry,
                    [this] { reporter_.SendPending(); }),
      endpoints_(options_.http, registry, &registration_, &workload_) {}

Sidecar::~Sidecar() { Stop(); }

absl::Status Sidecar::Start() {
  if (auto s = proxy_.Start(); !s.ok()) return s;
  if (auto s = objstore_.Start(proxy_.PodAccess()); !s.ok()) return s;
  gpus_.Open();
  gpus_.RegisterMetrics();
  registration_.RegisterMetrics();
  reporter_.RegisterMetrics();
  proxy_.RegisterMetrics();
  if (auto s = endpoints_.Start(); !s.ok()) return s;
  spdlog::info("sidecar of {} serving /metrics /healthz /readyz /v1/cluster on {} (port {})",
               options_.task.Describe(), options_.http.listen, endpoints_.port());

  gpus_.Start();
  if (options_.task_runtime) {
    // Task workers come and go; the scheduler runs their tasks again elsewhere.
    spdlog::info(
        "task runtime pod: object store {} registered; no agent, the workload's exit "
        "is reported to nobody",
        objstore_address());
    registration_.ReadyWithoutRegistering();
    return absl::OkStatus();
  }
  workload_.Start();
  registration_.Start(gpus_.inventory());
  return absl::OkStatus();
}

void Sidecar::Stop() {
  if (stopped_.exchange(true)) return;
  // Not ready from here on, and nothing registers while the rest stops.
  registration_.BeginStop();
  // The watches report through the agent: they stop before it.
  workload_.Stop();
  gpus_.Stop();
  registration_.Stop();
  endpoints_.Stop();
  objstore_.Stop();
  proxy_.Stop();
  spdlog::info("sidecar of {} stopped", options_.task.Describe());
}

}  // namespace cohort
