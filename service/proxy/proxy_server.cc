#include "service/proxy/proxy_server.h"

#include <atomic>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_auth.h"
#include "service/torch/torch_store_proxy_session.h"
#include "spdlog/spdlog.h"

namespace cohort {

absl::Status ValidateListenAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address, "\" is not HOST:PORT (for example 127.0.0.1:8476)"));
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address, "\": write an IPv6 host in brackets, as [::1]:8476"));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address, "\" has no port number (0-65535) after the colon"));
  }
  return absl::OkStatus();
}

ProxyServer::ProxyServer(ProxyOptions options)
    : options_(std::move(options)),
      backend_(options_.upstream),
      tensorflow_(&backend_, nullptr),
      xla_(&backend_, nullptr),
      distributed_runtime_(&backend_, nullptr),
      cohort_(&backend_, nullptr),
      scheduler_(MakeUpstreamChannel(options_.upstream)) {}

ProxyServer::~ProxyServer() { Shutdown(absl::UnavailableError("the sidecar proxy is stopping")); }

absl::Status ProxyServer::Start() {
  if (auto s = ValidateListenAddress(options_.listen); !s.ok()) return s;
  if (!options_.torch_store_listen.empty()) {
    if (auto s = ValidateListenAddress(options_.torch_store_listen); !s.ok()) return s;
    // The protocol carries no credentials, and the proxy adds the job's token upstream.
    if (!IsLoopbackListenAddress(options_.torch_store_listen)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the TCPStore proxy serves loopback only (", options_.torch_store_listen,
          " is not): torch's protocol carries no credentials, and the proxy would lend anyone "
          "who reaches it the job's token"));
    }
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&tensorflow_);
  builder.RegisterService(&xla_);
  builder.RegisterService(&distributed_runtime_);
  builder.RegisterService(&cohort_);
  builder.RegisterCallbackGenericService(&scheduler_);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  // The workload keeps calls parked for hours; let its keepalive pings through.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve the proxy on ", options_.listen,
                                               ": the address is invalid or already in use"));
  }
  if (!options_.torch_store_listen.empty()) {
    // Each connection a client of its own at the coordinator: this process's random prefix
    // and a count, so that no two connections, of this sidecar or another, share a name.
    std::random_device random;
    const std::string prefix = absl::StrFormat("%08x%08x", static_cast<uint32_t>(random()),
                                               static_cast<uint32_t>(random()));
    auto connections = std::make_shared<std::atomic<uint64_t>>(0);
    auto stream = std::make_shared<torch::CommandStream>(
        torch::CommandStream::Via(&backend_), std::make_shared<torch::WriteOrder>(),
        torch::CommandStream::kDefaultMaxHeldBytes, torch::CommandStream::kDefaultMaxHeldCommands,
        options_.torch_store_metrics);
    torch::TorchStoreServerOptions torch_options;
    torch_options.listen = options_.torch_store_listen;
    torch_options.metrics = options_.torch_store_metrics;
    torch_store_ = std::make_unique<torch::TorchStoreServer>(
        [this, prefix, connections, stream, limits = torch_options.limits,
         metrics = options_.torch_store_metrics](torch::TorchStoreHandler::Send send,
                                                 torch::TorchStoreHandler::End end) {
          return std::make_shared<torch::TorchStoreProxySession>(
              &backend_, stream, absl::StrCat(prefix, "-", ++*connections), limits, std::move(send),
              std::move(end), torch::TorchStoreProxySession::kDefaultMaxHeldBytes,
              torch::TorchStoreProxySession::kDefaultMaxHeldCommands, metrics);
        },
        torch_options);
    if (absl::Status s = torch_store_->Start(); !s.ok()) {
      torch_store_.reset();
      server_->Shutdown();
      server_.reset();
      return absl::Status(s.code(), absl::StrCat("--torch-store-proxy-listen: ", s.message()));
    }
    spdlog::info(
        "proxy serving PyTorch's TCPStore protocol on {} (port {}), forwarded to the coordinator",
        options_.torch_store_listen, torch_store_->port());
  }
  backend_.Start();
  spdlog::info(
      "proxy serving the coordinator protocols and the task runtime's scheduler on {} (port "
      "{}), forwarding to {} "
      "(outage tolerance {})",
      options_.listen, port_, options_.upstream.address,
      absl::FormatDuration(options_.upstream.outage_tolerance));
  return absl::OkStatus();
}

void ProxyServer::Shutdown(const absl::Status& why) {
  if (stopped_) return;
  stopped_ = true;
  if (torch_store_) torch_store_->Stop();
  backend_.Stop(why);
  cohort_.ClosePark(why);
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace cohort
