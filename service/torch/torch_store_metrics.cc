#include "service/torch/torch_store_metrics.h"

#include <cstddef>

namespace cohort::torch {

TorchStoreMetrics::TorchStoreMetrics(MetricsRegistry& registry, const std::string& prefix,
                                     bool held) {
  auto& commands =
      registry.AddCounter(prefix + "_torch_store_commands_total",
                          "PyTorch TCPStore commands read from the clients, by kind", {"command"});
  for (size_t q = 0; q < commands_.size(); ++q) {
    commands_[q] = &commands.WithLabels({std::string(QueryName(static_cast<Query>(q)))});
  }
  connections_ = &registry
                      .AddGauge(prefix + "_torch_store_connections",
                                "PyTorch TCPStore client connections open", {})
                      .WithLabels({});
  auto& ended = registry.AddCounter(
      prefix + "_torch_store_connections_closed_total",
      "PyTorch TCPStore connections ended: result=closed when the client went (or the server "
      "stopped), result=error when the server ended it (bad bytes, a refused command)",
      {"result"});
  closed_ = &ended.WithLabels({"closed"});
  failed_ = &ended.WithLabels({"error"});
  if (held) {
    held_ = &registry
                 .AddGauge(prefix + "_torch_store_held_commands",
                           "PyTorch TCPStore commands read and not yet sent to the coordinator", {})
                 .WithLabels({});
  }
}

void TorchStoreMetrics::Command(Query query) {
  const auto q = static_cast<size_t>(query);
  if (q < commands_.size()) commands_[q]->Increment();
}

void TorchStoreMetrics::Opened() { connections_->Increment(); }

void TorchStoreMetrics::Closed(const absl::Status& why) {
  connections_->Decrement();
  (why.ok() ? closed_ : failed_)->Increment();
}

void TorchStoreMetrics::Held(double delta) {
  if (held_ != nullptr) held_->Increment(delta);
}

}  // namespace cohort::torch
