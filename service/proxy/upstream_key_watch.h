#pragma once
// UpstreamKeyWatch: a local caller's WatchKeys relayed from the coordinator's stream. The
// events go into a KeyWatch of the proxy's own, which the cohort.v1 adapter drains like
// one of the core's. A stream broken for want of the coordinator resumes from the
// revision after the last one seen, so the caller sees no gap and no duplicate.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "service/core/key_value_store.h"
#include "service/core/key_watch.h"

namespace cohort {

class UpstreamKeyWatch : public std::enable_shared_from_this<UpstreamKeyWatch> {
 public:
  using Async = v1::Coordinator::StubInterface::async_interface;
  using Started = std::function<void(absl::StatusOr<std::shared_ptr<KeyWatch>>)>;
  // Called when the stream broke for want of the coordinator: Begin again once it is back.
  using Hold = std::function<void(const std::shared_ptr<UpstreamKeyWatch>&)>;

  UpstreamKeyWatch(WaiterId waiter, std::string key, int64_t start_revision,
                   std::function<void()> notify, Started started, Hold hold,
                   std::function<void()> on_end, KeyValueLimits limits = {});

  // Starts the stream, or resumes it where it broke.
  void Begin(Async* async);
  // Ends the watch with `status` (the caller left, the proxy stops, the outage lasted too
  // long): `started` gets it when the watch was not established yet, the watch otherwise.
  void End(const absl::Status& status);

 private:
  class Stream;
  void OnResponse(const v1::WatchKeysResponse& response);
  void OnStreamDone(const grpc::Status& wire);

  const WaiterId waiter_;
  const std::string key_;
  const std::function<void()> notify_;
  const Hold hold_;
  const std::function<void()> on_end_;
  const KeyValueLimits limits_;

  absl::Mutex mu_;
  Started started_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<KeyWatch> watch_ ABSL_GUARDED_BY(mu_);
  // The first revision the next stream asks for (0: from now on).
  int64_t next_revision_ ABSL_GUARDED_BY(mu_);
  // Shared with the stream, so that End may cancel it while the stream finishes.
  std::shared_ptr<grpc::ClientContext> stream_context_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort
