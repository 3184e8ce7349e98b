#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/object_table.h"

namespace cohort::runtime {

// The scheduler's state, as it keeps it and as it outlives the process when the coordinator
// runs with --state-dir. Each struct's fields are durable except where marked transient (a
// restart resets those).

enum class OpState { kQueued, kAssigned, kRunning, kSucceeded, kFailed };

struct Operation {
  OperationId id = 0;
  TaskSpec task;
  OperationId creator = 0;
  WorkerId submitter = 0;
  OpState state = OpState::kQueued;
  WorkerId worker = 0;
  int retries = 0;   // started again after its worker was lost
  int rebuilds = 0;  // started again to rebuild a lost result
  bool holds_args = false;
  std::string error;
  // A put: only `put_object` is set.
  ObjectId put_object = 0;
  absl::Time queued_at;  // transient
  // Its place in the history of finished tasks (TaskScheduler, "History"); 0 while it is not
  // finished. Transient: a restart orders the history by id.
  uint64_t finished_seq = 0;
};

enum class WorkerState { kRegistered, kIdle, kBusy, kDead };

struct Worker {
  WorkerId id = 0;
  StoreId store = 0;
  std::string address;
  bool is_driver = false;
  WorkerState state = WorkerState::kRegistered;
  OperationId current = 0;  // the task it runs (or last ran, for a driver's submissions)
  size_t functions_sent = 0;
  size_t variables_sent = 0;
  absl::Time last_seen;  // transient
};

struct Store {
  StoreId id = 0;
  std::string address;
  bool alive = true;
  absl::Time last_seen;  // transient
};

struct Function {
  uint64_t num_return_vals = 0;
  absl::btree_set<WorkerId> workers;
};

// An object on its way to a store, and the ids to announce there once it lands.
struct Delivery {
  StoreId from = 0;  // 0: an error value placed by the scheduler
  int attempt = 0;
  absl::btree_set<ObjectId> aliases;
};

// What a call that must not take effect twice answered (see TaskScheduler, "Repeated calls").
struct CallOutcome {
  absl::Status status;
  bool function_registered = false;  // SubmitTask
  std::vector<ObjectId> ids;         // SubmitTask's results, PutObj's object
};

// What the call numbered `call` of client `worker` answered.
struct RememberedCall {
  WorkerId worker = 0;
  uint64_t call = 0;
  CallOutcome outcome;
};

// A set of changes to the scheduler's durable state, each setting a value: what the journal
// is told after every call that changed something, and, from empty, the whole state (a
// snapshot). Applying the same changes twice changes nothing the second time.
struct SchedulerChanges {
  std::vector<Store> stores;
  std::vector<Worker> workers;
  // A function's entry, or none when it was dropped.
  std::vector<std::pair<std::string, std::optional<Function>>> functions;
  // Every export dropped (KillWorkers), before the exports below.
  bool exports_cleared = false;
  // (index, implementation) of exported functions and reusable variables.
  std::vector<std::pair<uint64_t, std::string>> exported_functions;
  std::vector<std::pair<uint64_t, std::string>> exported_variables;
  std::vector<Operation> operations;
  std::vector<std::pair<ObjectId, ObjectRecord>> objects;
  // The stores waiting for an object that is ready nowhere yet (empty: none wait).
  std::vector<std::pair<ObjectId, absl::btree_set<std::pair<StoreId, ObjectId>>>> wanted;
  // (to, canonical) and the delivery under way, or none when it ended.
  std::vector<std::pair<std::pair<StoreId, ObjectId>, std::optional<Delivery>>> deliveries;
  std::vector<RememberedCall> calls;
  // The next port handed to a worker that registers without an address, and the cumulative
  // counters (SchedulerStats' tasks_submitted ... delivered_bytes), when they changed.
  std::optional<int> next_port;
  std::optional<std::vector<uint64_t>> counters;
  // Finished tasks and puts dropped from the history (--task-history), and the object records
  // forgotten with them or after them; applied after everything above.
  std::vector<OperationId> forgotten_operations;
  std::vector<ObjectId> forgotten_objects;
  // The next operation and object ids to hand out: a snapshot says them, since the highest ids
  // may have been forgotten and an id is never handed out twice.
  std::optional<uint64_t> next_operation;
  std::optional<uint64_t> next_object;

  bool empty() const {
    return stores.empty() && workers.empty() && functions.empty() && !exports_cleared &&
           exported_functions.empty() && exported_variables.empty() && operations.empty() &&
           objects.empty() && wanted.empty() && deliveries.empty() && calls.empty() &&
           !next_port.has_value() && !counters.has_value() && forgotten_operations.empty() &&
           forgotten_objects.empty() && !next_operation.has_value() && !next_object.has_value();
  }
};

// Told, under the scheduler's lock, about every change to its durable state before the call
// that made it is answered. An implementation that cannot record the changes must not return
// (the call would be answered and its effect then lost): it ends the process.
class SchedulerJournal {
 public:
  virtual ~SchedulerJournal() = default;
  virtual void SchedulerChanged(const SchedulerChanges& changes) = 0;
};

}  // namespace cohort::runtime
