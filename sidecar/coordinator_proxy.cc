// CoordinatorProxy: the ProxyServer in the pod, the way to the coordinator, and its metrics.
#include "sidecar/coordinator_proxy.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort {

CoordinatorProxy::CoordinatorProxy(Options options, CoordinatorAccess coordinator,
                                   MetricsRegistry* registry)
    : options_(std::move(options)), coordinator_(std::move(coordinator)), registry_(registry) {}

absl::Status CoordinatorProxy::Start() {
  if (options_.listen.empty()) return absl::OkStatus();
  ProxyOptions proxy;
  proxy.listen = options_.listen;
  proxy.torch_store_listen = options_.torch_store_listen;
  if (!proxy.torch_store_listen.empty()) {
    torch_store_metrics_ =
        std::make_unique<torch::TorchStoreMetrics>(*registry_, "cohort_sidecar", /*held=*/true);
    proxy.torch_store_metrics = torch_store_metrics_.get();
  }
  proxy.upstream.address = coordinator_.address;
  proxy.upstream.outage_tolerance = options_.outage_tolerance;
  proxy.upstream.auth_token = coordinator_.auth_token;
  proxy.upstream.credentials = coordinator_.credentials;
  proxy.upstream.tls_server_name = coordinator_.tls_server_name;
  server_ = std::make_unique<ProxyServer>(proxy);
  if (auto s = server_->Start(); !s.ok()) {
    server_.reset();
    return absl::Status(s.code(), absl::StrCat("--proxy-listen: ", s.message()));
  }
  return absl::OkStatus();
}

void CoordinatorProxy::Stop() {
  if (server_) server_->Shutdown(absl::UnavailableError("the sidecar is stopping"));
}

CoordinatorAccess CoordinatorProxy::PodAccess() const {
  if (!server_) return coordinator_;
  // A wildcard listen address is reached on loopback from inside the pod.
  std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  CoordinatorAccess access;
  access.address = absl::StrCat(host, ":", server_->port());
  access.auth_token = coordinator_.auth_token;
  return access;
}

bool CoordinatorProxy::CoordinatorUnreachable() const {
  return server_ && server_->backend().link() != UpstreamBackend::Link::kConnected;
}

void CoordinatorProxy::RegisterMetrics() {
  registry_->AddCollector([this] { return CollectMetrics(); });
}

std::vector<CollectedFamily> CoordinatorProxy::CollectMetrics() const {
  std::vector<CollectedFamily> families;
  if (!server_) return families;
  UpstreamBackend& backend = server_->backend();
  CollectedFamily link{"cohort_sidecar_proxy_link_state",
                       "1 for the proxy's link to the coordinator: not yet connected, "
                       "connected, down (calls held), failed (past the outage tolerance).",
                       "gauge",
                       {}};
  UpstreamBackend::Link current_link = backend.link();
  for (UpstreamBackend::Link l :
       {UpstreamBackend::Link::kNotYetConnected, UpstreamBackend::Link::kConnected,
        UpstreamBackend::Link::kDown, UpstreamBackend::Link::kFailed,
        UpstreamBackend::Link::kStopped}) {
    link.samples.push_back(
        {{{"state", UpstreamBackend::LinkName(l)}}, l == current_link ? 1.0 : 0.0});
  }
  families.push_back(std::move(link));
  families.push_back({"cohort_sidecar_proxy_held_calls",
                      "Calls the proxy holds until the coordinator is back.",
                      "gauge",
                      {{{}, static_cast<double>(backend.held_calls())}}});
  families.push_back({"cohort_sidecar_proxy_parked_calls",
                      "Calls open on the proxy's park stream to the coordinator (the pod's "
                      "waiting registrations, error polls, blocking gets, barriers, shutdowns).",
                      "gauge",
                      {{{}, static_cast<double>(backend.parked_calls())}}});
  families.push_back({"cohort_sidecar_proxy_reissued_calls_total",
                      "Calls the proxy sent to the coordinator again after an outage.",
                      "counter",
                      {{{}, static_cast<double>(backend.reissued_calls())}}});
  families.push_back({"cohort_sidecar_proxy_finished_calls_total",
                      "The pod's calls to the coordinator that came back OK, other than "
                      "heartbeats and error polls (a sign of the workload's progress).",
                      "counter",
                      {{{}, static_cast<double>(backend.finished_calls())}}});
  families.push_back({"cohort_sidecar_proxy_outages_total",
                      "Times the proxy lost the coordinator after having reached it.",
                      "counter",
                      {{{}, static_cast<double>(backend.outages())}}});
  return families;
}

}  // namespace cohort
