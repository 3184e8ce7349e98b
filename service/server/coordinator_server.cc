#include "service/server/coordinator_server.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cohort {

int MaxMessageBytes(const ServiceConfig& config) {
  return static_cast<int>(std::min<size_t>(
      config.key_value.max_value_bytes + config.key_value.max_key_bytes + (size_t{1} << 20),
      static_cast<size_t>(std::numeric_limits<int>::max())));
}

CoordinatorServer::CoordinatorServer(CoordinationService* service, MetricsRegistry* registry,
                                     ServerOptions options)
    : service_(service),
      registry_(registry),
      options_(std::move(options)),
      rpc_metrics_(*registry),
      auth_(options_.auth_token.empty() ? nullptr
                                        : std::make_unique<CallAuth>(options_.auth_token)),
      backend_(service),
      tensorflow_(&backend_, &rpc_metrics_, auth_.get()),
      xla_(&backend_, &rpc_metrics_, auth_.get()),
      distributed_runtime_(&backend_, &rpc_metrics_, auth_.get()),
      cohort_(&backend_, &rpc_metrics_, auth_.get()) {}

CoordinatorServer::~CoordinatorServer() {
  Shutdown(absl::UnavailableError("the coordinator is shutting down"));
}

absl::Status CoordinatorServer::Start() {
  auto creds = ServerCredentials(options_.tls, options_.auth_token);
  if (!creds.ok()) return creds.status();
  // One line for a port in use, before gRPC would print its own trace of it.
  if (auto free = ProbeListenAddress(options_.listen); !free.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", options_.listen, ": ", free.message()));
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, *creds, &grpc_port_);
  // A second coordinator on the same port is refused, not handed half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&tensorflow_);
  builder.RegisterService(&xla_);
  builder.RegisterService(&distributed_runtime_);
  builder.RegisterService(&cohort_);
  for (grpc::Service* extra : options_.extra_services) builder.RegisterService(extra);
  // jaxlib shares compiled executables through the store: as large as a stored value may be.
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(-1);
  // Clients keep calls parked for hours; let their keepalive pings through.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // No bandwidth-delay probing: it grew the connection's flow-control window to ~100 MiB on
  // loopback, so a call refused at its metadata still had that much of its message buffered
  // in flight. A call whose message the server reads still gets a window of the message's
  // size (gRPC grants it for a pending read): 256 MiB values put and got as fast as before.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", options_.listen,
                                               ": the address is invalid or already in use"));
  }
  spdlog::info("coordinator serving gRPC on {} (port {}), service incarnation {:#x}",
               options_.listen, grpc_port_, service_->service_incarnation());

  service_->timers().SetWakeup([this] {
    absl::MutexLock lock(&mu_);
    wake_ = true;
  });
  timer_thread_ = std::thread([this] { RunTimers(); });

  if (!options_.http_listen.empty()) {
    http_ = std::make_unique<HttpServer>();
    http_->Handle("/metrics", [this](const HttpRequest&) {
      return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", registry_->Render()};
    });
    http_->Handle("/healthz", [](const HttpRequest&) {
      return HttpResponse{200, "text/plain", "ok\n"};
    });
    http_->Handle("/readyz", [this](const HttpRequest&) {
      absl::MutexLock lock(&mu_);
      if (stopping_) return HttpResponse{503, "text/plain", "shutting down\n"};
      return HttpResponse{200, "text/plain", "ready\n"};
    });
    if (auto s = http_->Start(options_.http_listen); !s.ok()) return s;
    spdlog::info("coordinator serving /metrics /healthz /readyz on {} (port {})",
                 options_.http_listen, http_->port());
  }
  return absl::OkStatus();
}

void CoordinatorServer::RunTimers() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.Unlock();
    absl::Time next = service_->RunTimers();
    mu_.Lock();
    if (stopping_) break;
    if (!wake_) {
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_ || stopping_; };
      mu_.AwaitWithDeadline(absl::Condition(&woken),
                            std::min(next, absl::Now() + absl::Seconds(1)));
    }
    wake_ = false;
  }
}

void CoordinatorServer::Shutdown(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // A coordinator that never served has nothing to shut down worth a line.
  if (grpc_port_ != 0) spdlog::info("coordinator shutting down: {}", std::string(why.message()));
  service_->Stop(why);
  cohort_.ClosePark(why);
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (timer_thread_.joinable()) timer_thread_.join();
  service_->timers().SetWakeup(nullptr);
  if (http_) http_->Stop();
}

}  // namespace cohort
