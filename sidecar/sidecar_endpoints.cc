// SidecarEndpoints: what each path answers, and to whom.
#include "sidecar/sidecar_endpoints.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cohort {

SidecarEndpoints::SidecarEndpoints(Options options, MetricsRegistry* registry,
                                   const SidecarRegistration* registration, WorkloadWatch* workload)
    : options_(std::move(options)),
      registry_(registry),
      registration_(registration),
      workload_(workload) {}

absl::Status SidecarEndpoints::Start() {
  http_.Handle("/metrics", [this](const HttpRequest&) {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", registry_->Render()};
  });
  http_.Handle("/healthz", [](const HttpRequest&) {
    return HttpResponse{200, "text/plain", "ok\n"};
  });
  http_.Handle("/readyz", [this](const HttpRequest&) {
    if (registration_->ready()) return HttpResponse{200, "text/plain", "ready\n"};
    return HttpResponse{503, "text/plain",
                        "not ready: waiting for the coordinator and every "
                        "sidecar of the job\n"};
  });
  http_.Handle("/v1/cluster", [this](const HttpRequest& request) { return Cluster(request); });
  http_.Handle("/v1/alive", [this](const HttpRequest& request) { return Alive(request); });
  if (auto s = http_.Start(options_.listen); !s.ok()) {
    if (absl::StrContains(s.message(), "Address already in use")) {
      // Two sidecars by hand on one machine both take the default port.
      return absl::Status(s.code(), absl::StrCat(s.message(),
                                                 " (another sidecar on this host? give each "
                                                 "its own --http-listen, e.g. 127.0.0.1:9478)"));
    }
    return s;
  }
  return absl::OkStatus();
}

HttpResponse SidecarEndpoints::Cluster(const HttpRequest& request) const {
  // The hand-off (rank, peers, addresses, GPUs) is the pod's own business: the port is open to
  // the metrics namespace and, where NetworkPolicy is not enforced, to every pod.
  if (!request.from_loopback) {
    return HttpResponse{403, "text/plain",
                        "GET /v1/cluster is served to the pod's own processes only: call it "
                        "on 127.0.0.1\n"};
  }
  std::optional<ClusterView> view = registration_->cluster();
  if (!view) {
    return HttpResponse{503, "application/json",
                        "{\"error\": \"the cluster is not complete yet\"}\n"};
  }
  return HttpResponse{200, "application/json", ClusterJson(*view)};
}

HttpResponse SidecarEndpoints::Alive(const HttpRequest& request) {
  if (request.method != "POST" && request.method != "PUT") {
    return HttpResponse{405, "text/plain", "POST /v1/alive\n"};
  }
  // Only the pod's own processes may say the workload lives: anyone else who reaches
  // the port could keep a dead workload "alive".
  if (!request.from_loopback) {
    return HttpResponse{403, "text/plain",
                        "POST /v1/alive is served to the pod's own processes only: call it "
                        "on 127.0.0.1\n"};
  }
  workload_->Ping();
  return HttpResponse{204, "text/plain", ""};
}

}  // namespace cohort
