#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "runtime/scheduler/call_log.h"
#include "runtime/scheduler/dispatcher.h"
#include "runtime/scheduler/effects.h"
#include "runtime/scheduler/function_table.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/member_table.h"
#include "runtime/scheduler/object_directory.h"
#include "runtime/scheduler/object_table.h"
#include "runtime/scheduler/operation_table.h"
#include "runtime/scheduler/rebuilder.h"
#include "runtime/scheduler/scheduler_limits.h"
#include "runtime/scheduler/scheduler_state.h"
#include "runtime/scheduler/scheduler_views.h"
#include "runtime/scheduler/task_history.h"

namespace cohort::runtime {

struct SchedulerOptions {
  SchedulerLimits limits;
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

struct SubmitResult {
  bool function_registered = false;
  std::vector<ObjectId> results;
};

struct FinishedTask {
  bool succeeded = true;
  std::string error_message;
  // The operation whose end this is (0: not said). A report for another operation than the
  // worker's current one is a repeat of one already taken, and changes nothing.
  OperationId operation = 0;
};

// The task runtime's scheduler: stores, workers and drivers; exported functions; tasks from
// submission to completion; objects, their counts, aliases and where they are. A state
// machine with no transport: every call changes state and may record effects (calls to
// workers and stores) that the transport drains with TakeEffects and carries out, reporting
// back what it learns (ObjReady, ReadyForNewTask, DeliveryFailed, WorkerLost, StoreLost).
// Thread-safe; one lock, held around every call to its tables: who is registered is kept in a
// MemberTable, the functions and exports in a FunctionTable, the objects in an ObjectTable, the
// tasks and puts and the queue in an OperationTable (the finished ones' order in a TaskHistory),
// repeated calls' outcomes in a CallLog. An ObjectDirectory moves objects between stores (its
// TransferTable keeps the waits and deliveries), a Dispatcher gives queued tasks to idle
// workers, and a Rebuilder runs tasks again for the objects a lost store took with it. What happens
// to tasks and objects, which ties these together, is decided here.
//
// Beyond the original: a lost worker's task runs again elsewhere (up to max_task_retries),
// and an object whose every copy was lost is rebuilt by running the task that computed it
// again (its lineage); an object put by a client cannot be rebuilt and reads as an error.
//
// Durability: with a journal, every change reaches it (as SchedulerChanges, one set per call)
// before the call is answered, and a new scheduler restored from what the journal kept carries
// on where the old one stopped: the same workers, stores, tasks and objects.
//
// History: a finished task (or put) is kept, for the lineage of its results, until
// limits.task_history newer ones have finished. Then it is forgotten, and with it the records
// of its results that were let go (a result let go later is forgotten then). A lost object whose
// task was forgotten, or whose task's argument was, is not rebuilt: reading it fails, saying
// why. Forgotten ids read as let go and are never handed out again.
//
// Repeated calls: a client whose call was cut off by the coordinator's end sends it again to
// the next coordinator. Calls that must not take effect twice (SubmitTask, PutObj,
// IncrementRefCount, DecrementRefCount, AddContainedObjectIDs) carry a CallId; the scheduler
// keeps the outcomes of each worker's last kRememberedCalls numbered calls, durably, and
// answers a repeat with the first outcome.
class TaskScheduler {
 public:
  static constexpr size_t kRememberedCalls = 256;

  TaskScheduler(const Clock& clock, SchedulerOptions options);

  absl::StatusOr<StoreId> RegisterObjStore(const std::string& address);
  absl::StatusOr<WorkerRegistration> RegisterWorker(const std::string& node_ip,
                                                    const std::string& objstore_address,
                                                    bool is_driver,
                                                    const std::string& worker_address);
  absl::Status RegisterFunction(WorkerId worker, const std::string& name, uint64_t num_return_vals);
  absl::Status ExportFunction(std::string implementation);
  absl::Status ExportReusableVariable(std::string reusable_variable);

  absl::StatusOr<SubmitResult> SubmitTask(WorkerId worker, TaskSpec task, CallId call = {});
  absl::StatusOr<ObjectId> PutObj(WorkerId worker, CallId call = {});
  absl::Status ObjReady(ObjectId object, StoreId store, uint64_t size);
  absl::Status RequestObj(WorkerId worker, ObjectId object);
  absl::Status AliasObjectIDs(ObjectId alias, ObjectId target);
  absl::Status IncrementRefCount(const std::vector<ObjectId>& ids, CallId call = {});
  absl::Status DecrementRefCount(const std::vector<ObjectId>& ids, CallId call = {});
  absl::Status AddContainedObjectIDs(ObjectId object, const std::vector<ObjectId>& contained,
                                     CallId call = {});
  // `leaving`: the worker goes away after this report (drained): no new task, forgotten.
  absl::Status ReadyForNewTask(WorkerId worker, std::optional<FinishedTask> previous,
                               bool leaving = false);
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

  // Durability (the coordinator's --state-dir). Before anything is served: Restore with each
  // saved set of changes in order, then FinishRestore, then SetJournal.
  void Restore(const SchedulerChanges& changes);
  // Makes what was read back whole: the queue, and the calls to workers and stores that may
  // have been lost with the old process (ExecuteTask of running tasks, deliveries under way,
  // aliases, exports), sent again. Receivers take a repeated call as a no-op. Refuses
  // (DATA_LOSS, naming what) state that no scheduler could have saved: an id that names
  // nothing, an alias cycle, a running task without its worker.
  absl::Status FinishRestore();
  void SetJournal(SchedulerJournal* journal);
  // The whole durable state (a snapshot). Changes made meanwhile reach the journal too.
  SchedulerChanges CaptureState() const;

  std::vector<Effect> TakeEffects();
  // Waits until an effect is recorded or `deadline` passes (for the transport's thread).
  bool WaitForEffects(absl::Time deadline);

 private:
  // Holds the lock; releasing it first tells the journal what changed.
  class ABSL_SCOPED_LOCKABLE Mutation {
   public:
    explicit Mutation(TaskScheduler* scheduler) ABSL_EXCLUSIVE_LOCK_FUNCTION(scheduler->mu_)
        : scheduler_(scheduler) {
      scheduler_->mu_.Lock();
    }
    ~Mutation() ABSL_UNLOCK_FUNCTION();
    Mutation(const Mutation&) = delete;
    Mutation& operator=(const Mutation&) = delete;

   private:
    TaskScheduler* const scheduler_;
  };

  // The changes since the last journal entry: told to the journal, then forgotten.
  void JournalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed(const Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    members_.Changed(worker);
  }
  void Changed(const Operation& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { operations_.Changed(op); }

  void Emit(Effect effect) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishTask(Operation& op, bool succeeded, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseWorker(Worker& worker, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker that said it leaves: forgotten, its task (if it got one) queued again.
  void Leave(Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseStore(Store& store, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendExports(Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At the end of each call (no Operation& is held then): forgets the oldest finished tasks
  // past limits.task_history, and the records let go whose task is forgotten.
  void TrimHistory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `id`'s record if it was let go and nothing under way names it.
  void ForgetIfIdle(ObjectId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED past --max-ids-per-call (`what`: what the ids are).
  absl::Status IdsFit(size_t ids, const char* what) const;
  // Exports `item` (a function or reusable variable, `what` in errors) within
  // --max-export-bytes, and sends it to every worker that runs tasks.
  absl::Status Export(FunctionTable::ExportKind kind, std::string item, const char* what)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Clock& clock_;
  const SchedulerOptions options_;
  mutable absl::Mutex mu_;
  ObjectTable objects_ ABSL_GUARDED_BY(mu_);
  MemberTable members_ ABSL_GUARDED_BY(mu_);
  FunctionTable functions_ ABSL_GUARDED_BY(mu_);
  OperationTable operations_ ABSL_GUARDED_BY(mu_);
  TaskHistory history_ ABSL_GUARDED_BY(mu_);
  CallLog calls_ ABSL_GUARDED_BY(mu_);
  std::vector<Effect> effects_ ABSL_GUARDED_BY(mu_);
  SchedulerStats counters_ ABSL_GUARDED_BY(mu_);  // the cumulative fields only
  // They work on the tables above (and record effects, count deliveries) under the same lock.
  ObjectDirectory directory_ ABSL_GUARDED_BY(mu_);
  Dispatcher dispatcher_ ABSL_GUARDED_BY(mu_);
  Rebuilder rebuilder_ ABSL_GUARDED_BY(mu_);
  SchedulerJournal* journal_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The cumulative counters as last told to the journal.
  std::vector<uint64_t> journaled_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime
