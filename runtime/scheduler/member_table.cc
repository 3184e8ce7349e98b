// The scheduler's members: stores, workers and drivers, their registration and liveness.
#include "runtime/scheduler/member_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

namespace {

std::string HostOf(const std::string& address) {
  // "host:port", "[v6]:port".
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

MemberTable::MemberTable(const Clock& clock, const SchedulerLimits& limits, int first_assigned_port)
    : clock_(clock), limits_(limits), next_port_(first_assigned_port) {}

absl::Status MemberTable::CheckAddress(const std::string& what, const std::string& address) {
  size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", address, "' is not HOST:PORT"));
  }
  return absl::OkStatus();
}

absl::Status MemberTable::CheckWorker(WorkerId worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker));
  if (it->second.state == WorkerState::kDead) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " was lost or told to die; register again"));
  }
  return absl::OkStatus();
}

absl::Status MemberTable::CheckStore(StoreId store) const {
  auto it = stores_.find(store);
  if (it == stores_.end()) return absl::NotFoundError(absl::StrCat("no object store ", store));
  if (!it->second.alive) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object store ", store, " (", it->second.address, ") was lost; register again"));
  }
  return absl::OkStatus();
}

absl::Status MemberTable::CheckRunsTasks(WorkerId worker) const {
  if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
  if (workers_.at(worker).is_driver) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " is a driver; drivers never run tasks"));
  }
  return absl::OkStatus();
}

absl::Status MemberTable::StoreFits() const {
  const size_t alive = static_cast<size_t>(std::count_if(
      stores_.begin(), stores_.end(), [](const auto& entry) { return entry.second.alive; }));
  return Fits(alive, 1, limits_.max_stores, "object stores", "--max-object-stores");
}

absl::Status MemberTable::WorkerFits() const {
  const size_t alive =
      static_cast<size_t>(std::count_if(workers_.begin(), workers_.end(), [](const auto& entry) {
        return entry.second.state != WorkerState::kDead;
      }));
  return Fits(alive, 1, limits_.max_workers, "workers and drivers", "--max-task-workers");
}

bool MemberTable::AnyIdle() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& entry) { return entry.second.state == WorkerState::kIdle; });
}

StoreId MemberTable::AddStore(const std::string& address) {
  StoreId id = next_store_++;
  stores_[id] = Store{id, address, true, clock_.Now()};
  changed_stores_.insert(id);
  return id;
}

absl::StatusOr<StoreId> MemberTable::StoreFor(const std::string& node_ip,
                                              const std::string& objstore_address) const {
  for (const auto& [id, s] : stores_) {
    if (!s.alive) continue;
    if (!objstore_address.empty() ? s.address == objstore_address
                                  : !node_ip.empty() && HostOf(s.address) == node_ip) {
      return id;
    }
  }
  return absl::NotFoundError(
      objstore_address.empty() ? absl::StrCat("no object store registered on node '", node_ip, "'")
                               : absl::StrCat("no object store registered at ", objstore_address));
}

absl::StatusOr<std::string> MemberTable::AddressFor(const std::string& node_ip, bool is_driver,
                                                    const std::string& worker_address) {
  std::string address = worker_address;
  if (!address.empty()) {
    if (absl::Status s = CheckAddress("worker address", address); !s.ok()) return s;
  } else if (!is_driver) {
    if (node_ip.empty()) {
      return absl::InvalidArgumentError(
          "a worker registers with its own address or a node IP to be given one on");
    }
    address = absl::StrCat(node_ip.find(':') != std::string::npos ? "[" + node_ip + "]" : node_ip,
                           ":", next_port_++);
    port_changed_ = true;
  }
  return address;
}

Worker& MemberTable::AddWorker(StoreId store, const std::string& address, bool is_driver) {
  WorkerId id = next_worker_++;
  changed_workers_.insert(id);
  Worker& worker = workers_[id];
  worker.id = id;
  worker.store = store;
  worker.address = address;
  worker.is_driver = is_driver;
  worker.last_seen = clock_.Now();
  return worker;
}

void MemberTable::WorkerSeen(WorkerId worker) {
  auto it = workers_.find(worker);
  if (it != workers_.end()) it->second.last_seen = clock_.Now();
}

void MemberTable::StoreSeen(StoreId store) {
  auto it = stores_.find(store);
  if (it != stores_.end()) it->second.last_seen = clock_.Now();
}

std::vector<StoreId> MemberTable::SilentStores(absl::Time now, absl::Duration timeout) const {
  std::vector<StoreId> silent;
  for (const auto& [id, store] : stores_) {
    if (store.alive && now - store.last_seen > timeout) silent.push_back(id);
  }
  return silent;
}

std::vector<WorkerId> MemberTable::SilentWorkers(absl::Time now, absl::Duration timeout) const {
  std::vector<WorkerId> silent;
  for (const auto& [id, w] : workers_) {
    if (!w.is_driver && w.state != WorkerState::kDead && now - w.last_seen > timeout) {
      silent.push_back(id);
    }
  }
  return silent;
}

std::vector<LivenessTarget> MemberTable::LivenessTargets() const {
  std::vector<LivenessTarget> targets;
  for (const auto& [id, store] : stores_) {
    if (store.alive) targets.push_back({true, id, store.address});
  }
  for (const auto& [id, w] : workers_) {
    if (!w.is_driver && w.state != WorkerState::kDead) targets.push_back({false, id, w.address});
  }
  return targets;
}

void MemberTable::TakeChanges(SchedulerChanges* changes) {
  if (changes != nullptr) {
    for (StoreId id : changed_stores_) changes->stores.push_back(stores_.at(id));
    for (WorkerId id : changed_workers_) changes->workers.push_back(workers_.at(id));
    if (port_changed_) changes->next_port = next_port_;
  }
  changed_stores_.clear();
  changed_workers_.clear();
  port_changed_ = false;
}

void MemberTable::Apply(const SchedulerChanges& changes, absl::Time now) {
  for (Store store : changes.stores) {
    store.last_seen = now;
    next_store_ = std::max(next_store_, store.id + 1);
    stores_[store.id] = std::move(store);
  }
  for (Worker worker : changes.workers) {
    worker.last_seen = now;
    next_worker_ = std::max(next_worker_, worker.id + 1);
    workers_[worker.id] = std::move(worker);
  }
  if (changes.next_port.has_value()) next_port_ = *changes.next_port;
}

void MemberTable::Capture(SchedulerChanges* state) const {
  for (const auto& [id, store] : stores_) state->stores.push_back(store);
  for (const auto& [id, worker] : workers_) state->workers.push_back(worker);
  state->next_port = next_port_;
}

}  // namespace cohort::runtime
