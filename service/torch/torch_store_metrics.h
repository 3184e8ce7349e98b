#pragma once

#include <array>
#include <string>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "service/torch/tcpstore_codec.h"

namespace cohort::torch {

// What a TCPStore server counts for a PyTorch job's dashboard row: commands by kind,
// connections open and how they ended, and (a sidecar's proxy) commands read and not yet
// sent upstream. `prefix` names the program: cohort_coordinator (its --torch-store-listen) or
// cohort_sidecar (its --torch-store-proxy-listen). Thread-safe.
class TorchStoreMetrics {
 public:
  // `held`: also the gauge of commands held (a proxy's).
  TorchStoreMetrics(MetricsRegistry& registry, const std::string& prefix, bool held);

  void Command(Query query);
  void Opened();
  // `why`: OK when the client went (or the server stopped), else what ended it.
  void Closed(const absl::Status& why);
  void Held(double delta);

 private:
  std::array<Counter*, kLastQuery + 1> commands_{};
  Gauge* connections_;
  Counter* closed_;
  Counter* failed_;
  Gauge* held_ = nullptr;
};

}  // namespace cohort::torch
