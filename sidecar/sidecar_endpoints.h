// SidecarEndpoints: the sidecar's HTTP server: /metrics and the probes for Prometheus and the
// kubelet, /v1/cluster and /v1/alive for the pod's own processes.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "sidecar/sidecar_registration.h"
#include "sidecar/workload_watch.h"

namespace cohort {

class SidecarEndpoints {
 public:
  struct Options {
    std::string listen = "0.0.0.0:9477";
  };

  // Answers from the registry, the registration (readiness, the cluster) and the workload
  // watch (its pings).
  SidecarEndpoints(Options options, MetricsRegistry* registry,
                   const SidecarRegistration* registration, WorkloadWatch* workload);

  // Fails only when the port cannot be bound.
  absl::Status Start();
  void Stop() { http_.Stop(); }
  int port() const { return http_.port(); }

 private:
  HttpResponse Cluster(const HttpRequest& request) const;
  HttpResponse Alive(const HttpRequest& request);

  const Options options_;
  MetricsRegistry* const registry_;
  const SidecarRegistration* const registration_;
  WorkloadWatch* const workload_;
  HttpServer http_;
};

}  // namespace cohort
