// PodObjectStore: the pod's object store of the task runtime, hosted by the sidecar
// (--objstore-listen).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "runtime/objstore/object_store_server.h"
#include "sidecar/coordinator_proxy.h"

namespace cohort {

// It reaches the scheduler through the proxy, when there is one.
class PodObjectStore {
 public:
  // nullopt: no store.
  explicit PodObjectStore(std::optional<runtime::ObjectStoreOptions> options);

  // Serves the store, which registers with the scheduler at `scheduler`.
  absl::Status Start(const CoordinatorAccess& scheduler);
  void Stop();
  // Empty without a store.
  std::string address() const { return server_ ? server_->address() : ""; }

 private:
  const std::optional<runtime::ObjectStoreOptions> options_;
  std::unique_ptr<runtime::ObjectStoreServer> server_;
};

}  // namespace cohort
