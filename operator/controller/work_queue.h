// The controller's work queue: keys ("namespace/name") to reconcile, each at most once in the
// queue and never processed by two workers at once (a key added while it is processed is
// processed again afterwards). Failed keys come back after a per-key exponential backoff;
// AddAfter schedules a key for later (deadlines, TTLs, settling failures).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace cohort::controller {

class WorkQueue {
 public:
  // `clock` says when delayed keys are due (nullptr: the real clock). With a clock of its own a
  // test moves time, then calls Poke() so that waiting workers look again.
  explicit WorkQueue(absl::Duration base_backoff = absl::Milliseconds(100),
                     absl::Duration max_backoff = absl::Seconds(60), const Clock* clock = nullptr);

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  // Adds after this key's next backoff (doubling with every failure in a row).
  void AddRateLimited(const std::string& key);
  // The key succeeded: its backoff starts over.
  void Forget(const std::string& key);

  // Blocks for the next key; nullopt once ShutDown() was called.
  std::optional<std::string> Get();
  // Processing of `key` finished (call after every Get).
  void Done(const std::string& key);
  void ShutDown();
  // Wakes waiting workers to promote the delayed keys now due (after a test clock moved).
  void Poke();
  // Delayed keys and when they are due, earliest first.
  std::vector<std::pair<absl::Time, std::string>> Delayed() const;

  size_t Depth() const;  // keys waiting now (not the delayed ones)
  int Idle() const;      // workers blocked in Get, waiting for a key
  int Failures(const std::string& key) const;

 private:
  void PromoteDueLocked(absl::Time now);

  const absl::Duration base_backoff_, max_backoff_;
  RealClock real_clock_;
  const Clock* clock_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_;      // in queue_
  std::set<std::string> processing_;  // handed out by Get, not Done yet
  std::set<std::string> dirty_;       // added while processing: queue again on Done
  std::multimap<absl::Time, std::string> delayed_;
  std::map<std::string, int> failures_;
  bool shut_down_ = false;
  int idle_ = 0;
};

}  // namespace cohort::controller
