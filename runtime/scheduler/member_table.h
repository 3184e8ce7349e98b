// The task scheduler's members: the object stores, and the workers and drivers registered on
// them; their ids, addresses, and when each was last heard from. Not thread-safe: the scheduler
// holds its lock around every call. What a member does (a worker's task, a store's objects) is
// the scheduler's; it says when it changed a member's durable fields (Changed), for the journal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/scheduler_limits.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

// A worker or store the transport probes for liveness.
struct LivenessTarget {
  bool is_store = false;
  uint64_t id = 0;
  std::string address;
};

class MemberTable {
 public:
  MemberTable(const Clock& clock, const SchedulerLimits& limits, int first_assigned_port);

  // INVALID_ARGUMENT unless `address` is HOST:PORT; `what` names it in the error.
  static absl::Status CheckAddress(const std::string& what, const std::string& address);
  // NOT_FOUND for an id never registered; FAILED_PRECONDITION for a member lost (or a worker
  // told to die).
  absl::Status CheckWorker(WorkerId worker) const;
  absl::Status CheckStore(StoreId store) const;
  // As CheckWorker, and FAILED_PRECONDITION for a driver: drivers never run tasks.
  absl::Status CheckRunsTasks(WorkerId worker) const;

  // By id; as with a map's [], an unknown id adds an empty entry.
  Worker& worker(WorkerId id) { return workers_[id]; }
  Store& store(StoreId id) { return stores_[id]; }
  absl::btree_map<WorkerId, Worker>& workers() { return workers_; }
  const absl::btree_map<WorkerId, Worker>& workers() const { return workers_; }
  absl::btree_map<StoreId, Store>& stores() { return stores_; }
  const absl::btree_map<StoreId, Store>& stores() const { return stores_; }
  void Changed(const Worker& worker) { changed_workers_.insert(worker.id); }
  void Changed(const Store& store) { changed_stores_.insert(store.id); }

  // RESOURCE_EXHAUSTED unless one more store, or worker or driver, fits beside those alive.
  absl::Status StoreFits() const;
  absl::Status WorkerFits() const;
  bool AnyIdle() const;

  StoreId AddStore(const std::string& address);
  // The live store a worker registers on: the one at `objstore_address` if given, else the
  // first on `node_ip`. NOT_FOUND when there is none.
  absl::StatusOr<StoreId> StoreFor(const std::string& node_ip,
                                   const std::string& objstore_address) const;
  // The address a worker is known by: its own, or else a new port on `node_ip`; none for a
  // driver that gave none.
  absl::StatusOr<std::string> AddressFor(const std::string& node_ip, bool is_driver,
                                         const std::string& worker_address);
  Worker& AddWorker(StoreId store, const std::string& address, bool is_driver);

  // Liveness. Silent: alive, and not heard from for `timeout` before `now`. Drivers serve
  // nothing the scheduler could ask, so they are never silent: only a report loses one.
  void WorkerSeen(WorkerId worker);
  void StoreSeen(StoreId store);
  std::vector<StoreId> SilentStores(absl::Time now, absl::Duration timeout) const;
  std::vector<WorkerId> SilentWorkers(absl::Time now, absl::Duration timeout) const;
  // The live stores and non-driver workers.
  std::vector<LivenessTarget> LivenessTargets() const;

  // Durability (SchedulerChanges). TakeChanges adds to `changes` (null: there is no journal)
  // what changed since it was last called, and forgets that. Apply takes `now` as when every
  // member read back was last heard from.
  void TakeChanges(SchedulerChanges* changes);
  void Apply(const SchedulerChanges& changes, absl::Time now);
  void Capture(SchedulerChanges* state) const;

 private:
  const Clock& clock_;
  const SchedulerLimits limits_;
  absl::btree_map<StoreId, Store> stores_;
  absl::btree_map<WorkerId, Worker> workers_;
  StoreId next_store_ = 1;
  WorkerId next_worker_ = 1;
  // The next port handed to a worker that registers without an address of its own.
  int next_port_;
  // Since TakeChanges.
  absl::btree_set<StoreId> changed_stores_;
  absl::btree_set<WorkerId> changed_workers_;
  bool port_changed_ = false;
};

}  // namespace cohort::runtime
