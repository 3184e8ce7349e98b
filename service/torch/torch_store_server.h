#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "service/core/coordination_service.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_store_metrics.h"
#include "service/torch/torch_store_session.h"

namespace cohort::torch {

struct TorchStoreServerOptions {
  // HOST:PORT ("[::1]:0", "127.0.0.1:29500", "localhost:0"); port 0 picks a free one.
  std::string listen;
  CodecLimits limits;
  // Connections served at once; past it a new one is closed at once (and said so in the log).
  size_t max_connections = 65536;
  // Threads that read, write and carry out commands. One, as torch's own server: commands of
  // different connections are then carried out in the order their bytes arrived, so a write
  // torch's client sends without waiting for an answer (SET, QUEUE_PUSH) on one connection is
  // seen by a command sent after it on another.
  int threads = 1;
  // Connections counted here, and (the coordinator's own sessions) their commands; null: none.
  TorchStoreMetrics* metrics = nullptr;
};

// Serves PyTorch's TCPStore protocol over TCP (Boost.Asio), each connection a
// TorchStoreSession on the coordinator's state, or another handler. The protocol carries no
// credentials: who may reach the address is the caller's to decide (the coordinator serves it on
// loopback only when it has a token, unless told otherwise).
class TorchStoreServer {
 public:
  // What serves one connection.
  using MakeHandler = std::function<std::shared_ptr<TorchStoreHandler>(TorchStoreHandler::Send,
                                                                       TorchStoreHandler::End)>;

  // Each connection a TorchStoreSession on `service`.
  TorchStoreServer(CoordinationService* service, const TorchStoreServerOptions& options);
  // Each connection what `make` makes (a sidecar's TorchStoreProxySession).
  TorchStoreServer(MakeHandler make, TorchStoreServerOptions options);
  ~TorchStoreServer();
  TorchStoreServer(const TorchStoreServer&) = delete;
  TorchStoreServer& operator=(const TorchStoreServer&) = delete;

  // Binds and starts serving: INVALID_ARGUMENT for an address that is not HOST:PORT or does not
  // resolve, UNAVAILABLE when it cannot be bound.
  absl::Status Start();
  // The bound port (after Start).
  int port() const;
  // Closes every connection (their waits cancelled) and waits for the threads.
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::torch
