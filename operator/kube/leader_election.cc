#include "operator/kube/leader_election.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cohort::kube {
namespace {

void SleepFor(absl::Duration d, const std::atomic<bool>& stop) {
  const absl::Time until = absl::Now() + d;
  while (!stop && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

LeaderElector::LeaderElector(Client* client, Options options)
    : client_(client),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : &real_clock_) {}

bool LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = clock_->Now();
  taken_by_other_ = false;
  const int duration_s = static_cast<int>(absl::ToInt64Seconds(options_.lease_duration));
  auto current = client_->Get(kLeases, options_.namespace_name, options_.lease_name);
  if (absl::IsNotFound(current.status())) {
    json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", options_.lease_name}, {"namespace", options_.namespace_name}}},
        {"spec",
         {{"holderIdentity", options_.identity},
          {"leaseDurationSeconds", duration_s},
          {"acquireTime", FormatMicroTime(now)},
          {"renewTime", FormatMicroTime(now)},
          {"leaseTransitions", 0}}}};
    auto created = client_->Create(kLeases, options_.namespace_name, lease);
    leader_ = created.ok();
    if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
      spdlog::warn("leader election: cannot create lease {}/{}: {}", options_.namespace_name,
                   options_.lease_name, created.status().ToString());
    }
    return leader_;
  }
  if (!current.ok()) {
    spdlog::warn("leader election: cannot read lease {}/{}: {}", options_.namespace_name,
                 options_.lease_name, current.status().ToString());
    return leader_ = false;
  }
  json lease = *current;
  json spec = lease.value("spec", json::object());
  const std::string holder = spec.value("holderIdentity", "");
  const std::string record = spec.dump();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
  }
  // The API server's schema makes it an int32; read it without a conversion that could fail.
  const json& held_for =
      spec.contains("leaseDurationSeconds") ? spec["leaseDurationSeconds"] : json();
  const int held_for_s = held_for.is_number_integer() && held_for.get<int64_t>() > 0 &&
                                 held_for.get<int64_t>() <= 86400 * 365
                             ? static_cast<int>(held_for.get<int64_t>())
                             : duration_s;
  const bool expired = now >= observed_at_ + absl::Seconds(held_for_s);
  if (!holder.empty() && holder != options_.identity && !expired) {
    taken_by_other_ = true;
    return leader_ = false;
  }

  if (holder != options_.identity) {
    spec["acquireTime"] = FormatMicroTime(now);
    const json& transitions = spec["leaseTransitions"];
    const int64_t before = transitions.is_number_integer() ? transitions.get<int64_t>() : 0;
    spec["leaseTransitions"] = before >= 0 && before < (int64_t{1} << 31) - 1 ? before + 1 : 1;
  }
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = duration_s;
  spec["renewTime"] = FormatMicroTime(now);
  lease["spec"] = spec;
  auto updated = client_->Replace(kLeases, options_.namespace_name, options_.lease_name, lease);
  if (!updated.ok()) {
    if (!absl::IsAborted(updated.status())) {
      spdlog::warn("leader election: cannot update lease: {}", updated.status().ToString());
    }
    return leader_ = false;
  }
  observed_record_ = (*updated)["spec"].dump();
  observed_at_ = now;
  if (!leader_) {
    spdlog::info("leader election: {} holds lease {}/{}{}", options_.identity,
                 options_.namespace_name, options_.lease_name,
                 holder.empty() || holder == options_.identity
                     ? ""
                     : absl::StrCat(" (taken over from ", holder, ")"));
  }
  return leader_ = true;
}

bool LeaderElector::Acquire(const std::atomic<bool>& stop) {
  bool said = false;
  while (!stop) {
    if (TryAcquireOrRenew()) return true;
    if (!said) {
      spdlog::info("leader election: waiting for lease {}/{} (standby)", options_.namespace_name,
                   options_.lease_name);
      said = true;
    }
    SleepFor(options_.retry_period, stop);
  }
  return false;
}

void LeaderElector::HoldUntilLost(const std::atomic<bool>& stop) {
  absl::Time last_renewal = clock_->Now();
  while (!stop) {
    SleepFor(options_.retry_period, stop);
    if (stop) break;
    if (TryAcquireOrRenew()) {
      last_renewal = clock_->Now();
      continue;
    }
    // Another holder means the lease is gone now; failures to write are retried until the
    // renew deadline.
    if (taken_by_other_ || clock_->Now() - last_renewal > options_.renew_deadline) {
      spdlog::error("leader election: lost lease {}/{}{}", options_.namespace_name,
                    options_.lease_name, taken_by_other_ ? " to another candidate" : "");
      leader_ = false;
      return;
    }
  }
}

void LeaderElector::Release() {
  if (!leader_) return;
  auto current = client_->Get(kLeases, options_.namespace_name, options_.lease_name);
  if (!current.ok()) return;
  json lease = *current;
  if (lease.value("/spec/holderIdentity"_json_pointer, "") != options_.identity) return;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  auto s = client_->Replace(kLeases, options_.namespace_name, options_.lease_name, lease);
  if (s.ok())
    spdlog::info("leader election: released lease {}/{}", options_.namespace_name,
                 options_.lease_name);
  leader_ = false;
}

}  // namespace cohort::kube
