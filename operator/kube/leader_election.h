// Leader election over a coordination.k8s.io/v1 Lease, with client-go's semantics: a lease
// is held while its holder renews it; another candidate takes it over once it has seen the
// same record unchanged for leaseDurationSeconds (measured on its own clock, so clock skew
// between machines does not matter). Writes are conditional on resourceVersion, so two
// candidates can never both win the same round.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/kube/kube_client.h"

namespace cohort::kube {

class LeaderElector {
 public:
  struct Options {
    std::string namespace_name = "default";
    std::string lease_name = "cohort-operator";
    std::string identity;  // unique per candidate, e.g. pod name + pid
    absl::Duration lease_duration = absl::Seconds(15);
    absl::Duration renew_deadline = absl::Seconds(10);
    absl::Duration retry_period = absl::Seconds(2);
    // Lease times and expiry are read from it (nullptr: the real clock); waits between rounds
    // are real.
    const Clock* clock = nullptr;
  };

  LeaderElector(Client* client, Options options);

  // Blocks until this candidate holds the lease (true) or `stop` is set (false).
  bool Acquire(const std::atomic<bool>& stop);
  // Renews every retry period; returns when a renewal did not succeed within the renew
  // deadline (leadership lost) or `stop` is set.
  void HoldUntilLost(const std::atomic<bool>& stop);
  // Gives the lease up (a short expiry and no holder), so a standby takes over at once.
  void Release();

  bool is_leader() const { return leader_.load(); }
  const std::string& identity() const { return options_.identity; }

  // One round: true when this candidate holds the lease afterwards.
  bool TryAcquireOrRenew();

 private:
  Client* client_;
  Options options_;
  RealClock real_clock_;
  const Clock* clock_;
  std::atomic<bool> leader_{false};
  bool taken_by_other_ = false;  // the last round found another holder's live lease
  // The last record seen and when (on our clock) it last changed.
  std::string observed_record_;
  absl::Time observed_at_;
};

std::string FormatMicroTime(absl::Time t);

}  // namespace cohort::kube
