// PodObjectStore: the task runtime's object store, started and stopped with the sidecar.
#include "sidecar/pod_object_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort {

PodObjectStore::PodObjectStore(std::optional<runtime::ObjectStoreOptions> options)
    : options_(std::move(options)) {}

absl::Status PodObjectStore::Start(const CoordinatorAccess& scheduler) {
  if (!options_) return absl::OkStatus();
  runtime::ObjectStoreOptions store = *options_;
  store.scheduler = scheduler.address;
  // Through the proxy the sidecar's credentials go upstream. Every call to this store must
  // carry the job's token, checked before its message is read: the scheduler's and the
  // other stores' do, and so do the pod's workers and driver, whose containers the operator
  // gives the token (COHORT_AUTH_TOKEN_FILE).
  store.auth_token = scheduler.auth_token;
  server_ = std::make_unique<runtime::ObjectStoreServer>(store);
  if (auto s = server_->Start(); !s.ok()) {
    server_.reset();
    return absl::Status(s.code(), absl::StrCat("the object store (--objstore-listen ", store.listen,
                                               "): ", s.message()));
  }
  return absl::OkStatus();
}

void PodObjectStore::Stop() {
  if (!server_) return;
  server_->Shutdown();
  server_->Wait();
}

}  // namespace cohort
