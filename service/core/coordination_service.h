#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "service/core/barrier_table.h"
#include "service/core/durable_state.h"
#include "service/core/heartbeat_monitor.h"
#include "service/core/job_directory.h"
#include "service/core/key_value_once.h"
#include "service/core/key_value_store.h"
#include "service/core/parked_call.h"
#include "service/core/requests.h"
#include "service/core/service_config.h"
#include "service/core/task_effects.h"
#include "service/core/task_exchanges.h"
#include "service/core/task_life.h"
#include "service/core/task_name.h"
#include "service/core/task_table.h"
#include "service/core/timer_queue.h"

namespace cohort {

// A reported error's message beyond this many bytes is cut (and says so).
inline constexpr size_t kMaxReportedErrorBytes = 16384;

// What the service did, for metrics. Every method may be called from any thread.
class ServiceObserver : public BarrierObserver {
 public:
  virtual void OnErrorPropagated(const TaskName& source, const absl::Status& error) = 0;
};

// A random non-zero service incarnation.
uint64_t RandomIncarnation();

// The coordination state machine: tasks and incarnations, heartbeats, errors, key-value
// store, barriers, watches, device exchange and shutdown. It knows no transport: every
// protocol adapter translates into these calls. Blocking calls take a WaiterId (from
// NewWaiterId) and a callback, and park without a thread; Cancel(id) ends one early.
//
// This class is the one door to the state: every change goes through one of its methods.
// It holds the lock over the tasks' life (TaskLife: the task table, the rendezvous built on
// it and the rules that tie them together), tells the journal what changed before the lock
// is released, and finishes parked calls once it is. The key-value store and the barrier
// table keep their own locks.
class CoordinationService {
 public:
  using StatusDone = std::function<void(absl::Status)>;
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  // With a `journal`, every change of the durable state (durable_state.h) is told to it
  // before it is acknowledged. With `restored`, the service starts from that state (what
  // a coordinator that ran before left) instead of an empty one.
  static absl::StatusOr<std::unique_ptr<CoordinationService>> Create(
      ServiceConfig config, const Clock* clock, ServiceObserver* observer = nullptr,
      StateJournal* journal = nullptr, const DurableState* restored = nullptr);
  ~CoordinationService();

  uint64_t service_incarnation() const { return service_incarnation_; }
  // What answers a client after a change goes through (the journal; none without one):
  // null, or a gate that holds the answer until the change is on disk.
  DurabilityGate* durability_gate() const { return journal_; }
  absl::Time Now() const { return clock_->Now(); }
  const ServiceConfig& config() const { return config_; }
  TimerQueue& timers() { return timers_; }

  WaiterId NewWaiterId() { return parked_.NextId(); }
  // The caller of a parked call went away (deadline, cancellation): finish it with `status`.
  void Cancel(WaiterId waiter, const absl::Status& status) { parked_.Cancel(waiter, status); }

  // A task of a configured job; an empty job name means the default job.
  absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const {
    return jobs_.ResolveTask(job, id);
  }
  const std::string& default_job() const { return jobs_.default_job(); }

  // Tasks.
  void RegisterTask(const TaskName& task, uint64_t incarnation, WaiterId waiter, StatusDone done);
  // `progress` (checked by the caller, IsValidTaskProgress) replaces the task's last when the
  // heartbeat counts and carries one; TaskStateInfo::progress shows it. In memory only.
  absl::Status Heartbeat(const TaskName& task, uint64_t incarnation,
                         const TaskProgress& progress = {});
  // OK when `task` is connected with this incarnation; what a stale request is told otherwise.
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const;
  void ShutdownTask(const TaskName& task, WaiterId waiter, StatusDone done);
  // With `request` (a proxy's request id, FormatRequestId): an attempt again of the reset
  // that last reset the task is OK and changes nothing.
  absl::Status ResetTask(const TaskName& task, const std::string& request = "");
  // `by`: the task itself, which must be registered (as upstream), or someone else (an
  // operator's tool, another task's ReportErrorToTask), who may report any known task.
  // `reason`: why, as the reporter says (a sidecar does); kUnspecified: the task's state gets
  // ReportedErrorReason's.
  absl::Status ReportError(const TaskName& source, const absl::Status& error,
                           ErrorReporter by = ErrorReporter::kSomeoneElse,
                           FailureReason reason = FailureReason::kUnspecified);
  void PollForError(const TaskName& task, WaiterId waiter, StatusDone done);
  absl::StatusOr<std::vector<TaskStateInfo>> GetTaskStates(
      const std::vector<TaskName>& tasks) const;
  // Answers at once when `version` differs from the current one, else when a task of the
  // service changes state.
  void WatchJobState(const std::string& job, int64_t version, WaiterId waiter,
                     Done<JobStateView> done);
  // Blocks until every alive task of `tasks` has asked; answers the alive ones.
  void GetAliveTasks(const TaskName& requester, std::vector<TaskName> tasks, WaiterId waiter,
                     Done<std::vector<AliveTask>> done);
  // Exchanges an opaque device description: blocks until every task of the caller's group
  // (the workload tasks, or the caller's auxiliary job) sent one; answers them in task order.
  void WaitForAllTasks(const TaskName& task, std::string devices, WaiterId waiter,
                       Done<std::vector<std::string>> done);

  // Barriers. An empty task list means every workload task.
  void Barrier(const std::string& id, int64_t counter, absl::Duration timeout,
               const TaskName& caller, std::vector<TaskName> tasks, WaiterId waiter,
               Done<int64_t> done);
  // With `request`: an attempt again of the cancel that ended the instance is OK.
  absl::Status CancelBarrier(const std::string& id, int64_t counter, const TaskName& caller,
                             const std::string& request = "");

  // Key-value store (see KeyValueStore for each call's rules).
  absl::Status InsertKeyValue(absl::string_view key, std::string value, bool allow_overwrite);
  // Parks until the key is set, `deadline` passes or the call is cancelled.
  void GetKeyValue(absl::string_view key, WaiterId waiter, std::optional<TaskName> owner,
                   std::optional<absl::Time> deadline, KeyValueStore::GetDone done,
                   ParkKind kind = ParkKind::kKeyValueGet);
  absl::StatusOr<std::string> TryGetKeyValue(absl::string_view key) const;
  absl::StatusOr<int64_t> IncrementKeyValue(absl::string_view key, int64_t delta);
  // The same calls, carried out once per `request` (a sidecar's proxy sends them again after
  // an outage): an attempt of a request already carried out gets the answer of its first
  // attempt and changes nothing. What was answered is kept with the change, as one record of
  // the state log, in the key RequestRecordKey(request.session) (requests.h).
  absl::Status InsertKeyValueOnce(const RequestId& request, absl::string_view key,
                                  std::string value, bool allow_overwrite);
  absl::StatusOr<int64_t> IncrementKeyValueOnce(const RequestId& request, absl::string_view key,
                                                int64_t delta);
  std::vector<KeyValueEntry> GetKeyValueDir(absl::string_view dir) const;
  absl::Status DeleteKeyValue(absl::string_view key);
  // PyTorch's store calls (the TCPStore protocol, service/torch).
  std::vector<std::string> KeyValueKeys(absl::string_view dir) const;
  size_t CountKeyValues(absl::string_view dir) const;
  absl::StatusOr<std::optional<std::string>> CompareAndSetKeyValue(absl::string_view key,
                                                                   absl::string_view expected,
                                                                   std::string desired);
  absl::Status AppendKeyValue(absl::string_view key, absl::string_view data);
  absl::StatusOr<bool> EraseKeyValue(absl::string_view key);
  absl::Status QueuePushKeyValue(absl::string_view dir, std::string value);
  absl::StatusOr<KeyValueStore::Popped> QueuePopKeyValue(absl::string_view dir);
  // Several changes made as one (KeyValueStore::Atomically).
  void KeyValueAtomically(const std::function<void(KeyValueStore::Batch&)>& body);
  size_t QueueLengthKeyValue(absl::string_view dir) const;
  void PassQueueWake(absl::string_view dir);
  void WaitKeyValueQueue(absl::string_view dir, WaiterId waiter, std::optional<TaskName> owner,
                         std::optional<absl::Time> deadline, KeyValueStore::ReachedDone done,
                         ParkKind kind = ParkKind::kKeyValueGet);
  void WaitKeyValueOrQueue(absl::string_view key, absl::string_view dir, WaiterId waiter,
                           std::optional<TaskName> owner, std::optional<absl::Time> deadline,
                           KeyValueStore::ReachedDone done, ParkKind kind = ParkKind::kKeyValueGet);
  void WaitKeyValueAtLeast(absl::string_view key, int64_t threshold, WaiterId waiter,
                           std::optional<TaskName> owner, std::optional<absl::Time> deadline,
                           KeyValueStore::ReachedDone done, ParkKind kind = ParkKind::kKeyValueGet);
  absl::StatusOr<std::shared_ptr<KeyWatch>> WatchKeys(absl::string_view key, int64_t start_revision,
                                                      WaiterId waiter,
                                                      std::function<void()> notify);
  KeyValueStore::Stats KeyValueStats() const;

  std::vector<BarrierSnapshot> OpenBarriers() const { return barriers_.OpenBarriers(); }
  // Finished barriers still kept to answer repeated calls (BarrierLimits).
  size_t FinishedBarriersKept() const { return barriers_.NumFinished(); }
  int64_t ParkedCalls(ParkKind kind) const { return parked_.Count(kind); }
  std::vector<TaskStateInfo> AllTasks() const;
  bool IsAuxiliary(const std::string& job) const { return jobs_.IsAuxiliary(job); }
  // True once every workload task has registered.
  bool ClusterRegistered() const;
  // The error that was propagated to every task (OK while there is none).
  absl::Status PropagatedError() const;

  // The whole durable state, each part read under its own lock: for a snapshot taken while
  // the service runs. Changes made meanwhile reach the journal as well, so replaying the
  // journal's records from before the capture began over it gives the current state.
  DurableState CaptureState() const;

  // Runs due timers and the heartbeat check. Returns when it next wants to run.
  absl::Time RunTimers();
  // Ends every parked call with `status` and refuses new work.
  void Stop(const absl::Status& status);

 private:
  using StatusCall = Parked<absl::Status>;
  using AliveCall = TaskExchanges::AliveCall;
  using DevicesCall = TaskExchanges::DevicesCall;
  // Work that follows a state change and runs once mu_ is released: finishing parked
  // calls, failing barriers, telling the observer. Parked calls never finish under mu_,
  // because their callbacks may call back into the service.
  using Effects = TaskEffects;

  CoordinationService(ServiceConfig config, const Clock* clock, ServiceObserver* observer,
                      uint64_t service_incarnation, StateJournal* journal);

  // The exclusive lock on the service's state. Releasing it first tells the journal what
  // changed, so that nothing done under it is acknowledged before it is recorded.
  class ABSL_SCOPED_LOCKABLE WriteLock {
   public:
    explicit WriteLock(CoordinationService* service) ABSL_EXCLUSIVE_LOCK_FUNCTION(service->mu_)
        : service_(service) {
      service_->mu_.Lock();
    }
    ~WriteLock() ABSL_UNLOCK_FUNCTION();
    WriteLock(const WriteLock&) = delete;
    WriteLock& operator=(const WriteLock&) = delete;

   private:
    CoordinationService* const service_;
  };

  absl::Status RestoreLocked(const DurableState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JournalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(Effects& fx);

  // The register and shutdown barriers' timeouts, from the timer queue.
  void OnRegisterTimeout();
  void OnShutdownTimeout();
  void CheckHeartbeats();

  const ServiceConfig config_;
  const Clock* const clock_;
  ServiceObserver* const observer_;
  const uint64_t service_incarnation_;
  const JobDirectory jobs_;
  StateJournal* const journal_;

  ParkedCallRegistry parked_;
  TimerQueue timers_;
  KeyValueStore key_values_;      // has its own lock
  KeyValueOnce key_values_once_;  // over key_values_
  BarrierTable barriers_;         // has its own lock
  HeartbeatMonitor heartbeats_;

  // Guards the tasks and every rendezvous built on them. Heartbeats take it shared and
  // touch only their own task's atomic timestamp.
  mutable absl::Mutex mu_;
  TaskLife life_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Off once the service stops: what stopping does (failing barriers) is not a change a
  // restarted coordinator should find.
  bool journaling_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort
