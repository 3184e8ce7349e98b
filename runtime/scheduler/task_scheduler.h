#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "runtime/scheduler/effects.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/object_table.h"

namespace cohort::runtime {

struct SchedulerOptions {
  // How many times a task is started again after the worker running it was lost, before the
  // task fails. A task that raises is never retried: it would raise again.
  int max_task_retries = 3;
  // A worker or store that has not been heard from (a call of its own, or a successful call
  // to it) for this long is lost. Zero: only an explicit report loses one.
  absl::Duration liveness_timeout = absl::ZeroDuration();
  // The first port handed to a worker that registers without an address of its own.
  int first_assigned_port = 40000;
  // Told, under the scheduler's lock, the time from each task's (re)queueing to its
  // ExecuteTask. Must be quick and must not call the scheduler.
  std::function<void(absl::Duration)> on_dispatch;
};

struct WorkerRegistration {
  WorkerId worker = 0;
  StoreId store = 0;
  std::string worker_address;
  std::string store_address;
};

// A worker or store the transport probes for liveness.
struct LivenessTarget {
  bool is_store = false;
  uint64_t id = 0;
  std::string address;
};

struct SubmitResult {
  bool function_registered = false;
  std::vector<ObjectId> results;
};

struct FinishedTask {
  bool succeeded = true;
  std::string error_message;
};

struct TaskStatusView {
  OperationId operation = 0;
  std::string function_name;
  std::string worker_address;
  std::string error_message;
};

struct TaskInfoView {
  std::vector<TaskStatusView> failed;
  std::vector<TaskStatusView> running;
  uint64_t succeeded = 0;
};

struct OperationView {
  OperationId id = 0;
  OperationId creator = 0;
  bool is_put = false;
  ObjectId put_object = 0;
  TaskSpec task;
};

struct SchedulerInfoView {
  std::vector<OperationId> queued;  // in queue order
  std::map<std::string, std::pair<std::vector<WorkerId>, uint64_t>> functions;
  std::vector<WorkerId> idle_workers;
  // Indexed by object id (entry 0 stands for none): its alias target (itself when
  // canonical) and its count (0 once released).
  std::vector<ObjectId> target_objectid;
  std::vector<int64_t> reference_count;
  std::vector<OperationView> operations;
};

// Counters and gauges for /metrics and cohortctl.
struct SchedulerStats {
  uint64_t tasks_submitted = 0;
  uint64_t tasks_queued = 0;
  uint64_t tasks_running = 0;  // assigned to a worker (its arguments moving, or executing)
  uint64_t tasks_succeeded = 0;
  uint64_t tasks_failed = 0;
  uint64_t tasks_retried = 0;
  uint64_t tasks_rebuilt = 0;  // started again to rebuild a lost object
  uint64_t workers_alive = 0;
  uint64_t workers_lost = 0;
  uint64_t stores_lost = 0;
  uint64_t objects_lost = 0;  // lost with no way to rebuild them
  uint64_t deliveries = 0;
  uint64_t delivered_bytes = 0;  // of the deliveries that landed
  struct Store {
    StoreId id = 0;
    std::string address;
    bool alive = true;
    uint64_t objects = 0;
    uint64_t bytes = 0;
  };
  std::vector<Store> stores;
};

// The task runtime's scheduler: stores, workers and drivers; exported functions; tasks from
// submission to completion; objects, their counts, aliases and where they are. A state
// machine with no transport: every call changes state and may record effects (calls to
// workers and stores) that the transport drains with TakeEffects and carries out, reporting
// back what it learns (ObjReady, ReadyForNewTask, DeliveryFailed, WorkerLost, StoreLost).
// Thread-safe; one lock.
//
// Beyond the original: a lost worker's task runs again elsewhere (up to max_task_retries),
// and an object whose every copy was lost is rebuilt by running the task that computed it
// again (its lineage); an object put by a client cannot be rebuilt and reads as an error.
class TaskScheduler {
 public:
  TaskScheduler(const Clock& clock, SchedulerOptions options);

  absl::StatusOr<StoreId> RegisterObjStore(const std::string& address);
  absl::StatusOr<WorkerRegistration> RegisterWorker(const std::string& node_ip,
                                                    const std::string& objstore_address,
                                                    bool is_driver,
                                                    const std::string& worker_address);
  absl::Status RegisterFunction(WorkerId worker, const std::string& name, uint64_t num_return_vals);
  absl::Status ExportFunction(std::string implementation);
  absl::Status ExportReusableVariable(std::string reusable_variable);

  absl::StatusOr<SubmitResult> SubmitTask(WorkerId worker, TaskSpec task);
  absl::StatusOr<ObjectId> PutObj(WorkerId worker);
  absl::Status ObjReady(ObjectId object, StoreId store, uint64_t size);
  absl::Status RequestObj(WorkerId worker, ObjectId object);
  absl::Status AliasObjectIDs(ObjectId alias, ObjectId target);
  absl::Status IncrementRefCount(const std::vector<ObjectId>& ids);
  absl::Status DecrementRefCount(const std::vector<ObjectId>& ids);
  absl::Status AddContainedObjectIDs(ObjectId object, const std::vector<ObjectId>& contained);
  absl::Status ReadyForNewTask(WorkerId worker, std::optional<FinishedTask> previous);
  // True when nothing is queued or running: every idle worker is told to die and forgotten,
  // and the function table is cleared. False changes nothing.
  bool KillWorkers();

  // What the transport learned.
  void DeliveryFailed(StoreId to, ObjectId canonical, const std::string& reason);
  void WorkerLost(WorkerId worker, const std::string& reason);
  void StoreLost(StoreId store, const std::string& reason);
  // A worker or store was heard from (liveness).
  void WorkerSeen(WorkerId worker);
  void StoreSeen(StoreId store);
  // Loses every worker and store not heard from for liveness_timeout.
  void CheckLiveness();
  // The live stores and non-driver workers.
  std::vector<LivenessTarget> LivenessTargets() const;

  SchedulerInfoView SchedulerInfo() const;
  TaskInfoView TaskInfo() const;
  SchedulerStats Stats() const;

  std::vector<Effect> TakeEffects();
  // Waits until an effect is recorded or `deadline` passes (for the transport's thread).
  bool WaitForEffects(absl::Time deadline);

 private:
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
    absl::Time queued_at;
    std::string error;
    // A put: only `put_object` is set.
    ObjectId put_object = 0;
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
    absl::Time last_seen;
  };
  struct Store {
    StoreId id = 0;
    std::string address;
    bool alive = true;
    absl::Time last_seen;
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

  absl::Status CheckWorker(WorkerId worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckStore(StoreId store) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(Effect effect) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Schedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether every object argument is ready; fails the task if one failed.
  bool ArgumentsReady(Operation& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkerId PickWorker(const Operation& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Assign(Operation& op, Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends ExecuteTask once every argument is at the worker's store.
  void DispatchIfLocal(Operation& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(Operation& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishTask(Operation& op, bool succeeded, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailObject(ObjectId canonical, const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks for `requested` (an id reading as `canonical`) at `store`.
  void WantAt(StoreId store, ObjectId requested, ObjectId canonical)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver(StoreId to, ObjectId canonical) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every copy of `canonical` is gone: run its task again, or fail it.
  void Rebuild(ObjectId canonical, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deallocate(const std::vector<Deallocation>& freed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseWorker(Worker& worker, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseStore(Store& store, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendExports(Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  const SchedulerOptions options_;
  mutable absl::Mutex mu_;
  ObjectTable objects_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<StoreId, Store> stores_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<WorkerId, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Function> functions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> exported_functions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> exported_variables_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<OperationId, Operation> operations_ ABSL_GUARDED_BY(mu_);
  std::deque<OperationId> queue_ ABSL_GUARDED_BY(mu_);
  // Stores waiting for an object that is not ready anywhere yet: canonical -> (store, id).
  absl::flat_hash_map<ObjectId, absl::btree_set<std::pair<StoreId, ObjectId>>> wanted_
      ABSL_GUARDED_BY(mu_);
  // (to, canonical) -> delivery under way.
  absl::btree_map<std::pair<StoreId, ObjectId>, Delivery> deliveries_ ABSL_GUARDED_BY(mu_);
  std::vector<Effect> effects_ ABSL_GUARDED_BY(mu_);
  SchedulerStats counters_ ABSL_GUARDED_BY(mu_);  // the cumulative fields only
  OperationId next_operation_ ABSL_GUARDED_BY(mu_) = 1;
  StoreId next_store_ ABSL_GUARDED_BY(mu_) = 1;
  WorkerId next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  int next_port_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime
