#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/core/task_name.h"

namespace cohort {

// A blocking call that waits inside the service without a thread. It is finished exactly
// once: by the service (a value or an error), by its caller going away (Cancel), or by the
// service stopping (CancelAll). Whoever claims it in the registry finishes it.
using WaiterId = uint64_t;

enum class ParkKind {
  kRegister,
  kWaitForAllTasks,
  kShutdown,
  kKeyValueGet,
  kBarrier,
  kAliveTasks,
  kPollForError,
  kWatchJobState,
  kWatchKeys,
  kTorchStoreWait,
};
inline constexpr int kNumParkKinds = 10;
const char* ParkKindName(ParkKind kind);

class ParkedCall {
 public:
  ParkedCall(WaiterId id, ParkKind kind, std::optional<TaskName> owner)
      : id_(id), kind_(kind), owner_(std::move(owner)) {}
  virtual ~ParkedCall() = default;

  WaiterId id() const { return id_; }
  ParkKind kind() const { return kind_; }
  const std::optional<TaskName>& owner() const { return owner_; }

  // Set by the container that holds the call, before it is registered: removes the call
  // from that container. Run (outside the registry lock) when the call is cancelled.
  void set_unlink(std::function<void()> unlink) { unlink_ = std::move(unlink); }
  void Unlink() {
    if (unlink_) unlink_();
  }
  virtual void FinishWithError(const absl::Status& status) = 0;

 private:
  friend class ParkedCallRegistry;
  const WaiterId id_;
  const ParkKind kind_;
  const std::optional<TaskName> owner_;
  std::function<void()> unlink_;
  bool claimed_ = false;  // guarded by the registry's mutex
};

// T is absl::Status or absl::StatusOr<V>.
template <typename T>
class Parked : public ParkedCall {
 public:
  using Done = std::function<void(T)>;
  Parked(WaiterId id, ParkKind kind, std::optional<TaskName> owner, Done done)
      : ParkedCall(id, kind, std::move(owner)), done_(std::move(done)) {}
  void Finish(T result) { done_(std::move(result)); }
  void FinishWithError(const absl::Status& status) override { done_(T(status)); }

 private:
  Done done_;
};

// Removes the call `waiter` from a container of parked calls (when its caller went away).
inline void RemoveParkedCall(std::vector<std::shared_ptr<ParkedCall>>* calls, WaiterId waiter) {
  calls->erase(std::remove_if(calls->begin(), calls->end(),
                              [waiter](const auto& c) { return c->id() == waiter; }),
               calls->end());
}

struct ParkLimits {
  int max_per_task = 64;
  int64_t max_total = 1 << 20;
  // Calls of one kind that name no task (a blocking get, a key watch) waiting at once. The
  // service sets 0 to max_per_task times its tasks.
  int64_t max_without_task_per_kind = 0;
};

class ParkedCallRegistry {
 public:
  explicit ParkedCallRegistry(ParkLimits limits) : limits_(limits) {}

  WaiterId NextId() { return next_id_.fetch_add(1) + 1; }

  // Registers a call that is about to park. RESOURCE_EXHAUSTED (and nothing registered)
  // when its task or the whole service is at its limit; the stop status once stopped.
  absl::Status Add(const std::shared_ptr<ParkedCall>& call);

  // Claims a call its container has just removed, so that the caller may finish it.
  // False when it was already claimed (cancelled concurrently).
  bool Claim(ParkedCall& call);

  // Cancels a parked call: it is removed from its container and finished with `status`.
  // Unknown or already finished ids are ignored.
  void Cancel(WaiterId id, const absl::Status& status);

  // Finishes every parked call with `status` and refuses new ones from then on.
  void CancelAll(const absl::Status& status);

  int64_t Count(ParkKind kind) const { return counts_[static_cast<int>(kind)].load(); }
  int64_t Total() const;

 private:
  void ForgetLocked(ParkedCall& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ParkLimits limits_;
  std::atomic<uint64_t> next_id_{0};
  std::array<std::atomic<int64_t>, kNumParkKinds> counts_{};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<WaiterId, std::shared_ptr<ParkedCall>> calls_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TaskName, int> per_task_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kNumParkKinds> without_task_ ABSL_GUARDED_BY(mu_){};
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status stop_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
