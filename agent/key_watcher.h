#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/key_change.h"
#include "grpcpp/grpcpp.h"

namespace cohort {

// Follows cohort.v1.Coordinator.WatchKeys for one key (and everything under "key/") on a
// thread of its own. A stream that drops (the coordinator unreachable for a moment, or this
// client too slow) is opened again from the revision after the last one delivered, so the
// callback sees every change exactly once, in order. When that is no longer possible
// (the coordinator restarted, or the revision left its history) the callback gets the
// error and the watch ends.
class KeyWatcher {
 public:
  // An OK value is a change; an error ends the watch (the callback is not called again).
  using EventCallback = std::function<void(absl::StatusOr<KeyChange>)>;

  struct Options {
    // 0: changes after the moment Start returns.
    int64_t start_revision = 0;
    // How long to keep reopening a stream that cannot reach the coordinator.
    absl::Duration retry_for = absl::Minutes(5);
  };

  // Returns once the coordinator has accepted the watch.
  static absl::StatusOr<std::unique_ptr<KeyWatcher>> Start(
      const std::shared_ptr<grpc::Channel>& channel, std::string key, EventCallback callback,
      Options options);
  static absl::StatusOr<std::unique_ptr<KeyWatcher>> Start(
      const std::shared_ptr<grpc::Channel>& channel, std::string key, EventCallback callback) {
    return Start(channel, std::move(key), std::move(callback), Options{});
  }
  ~KeyWatcher();

  // After this returns the callback is not called again, unless Stop runs inside it.
  void Stop();
  // The store revision the watch started after.
  int64_t created_revision() const;

 private:
  struct State;
  explicit KeyWatcher(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace cohort
