#pragma once
// CoordinationBackend: everything the protocol adapters ask of a coordination service. Two
// implementations: LocalBackend (the coordinator's own core, in-process) and UpstreamBackend
// (a sidecar's proxy, which forwards to the coordinator over gRPC). The adapters translate
// wire messages into these calls and know nothing of which one they talk to.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "service/core/barrier_table.h"
#include "service/core/key_value_store.h"
#include "service/core/key_watch.h"
#include "service/core/parked_call.h"
#include "service/core/requests.h"
#include "service/core/task_name.h"
#include "service/core/task_table.h"

namespace cohort {

// What one call brings along: the handle under which it may wait (Cancel ends it) and the
// caller's deadline (InfiniteFuture: none). A backend that forwards passes the deadline on.
struct CallContext {
  WaiterId waiter = 0;
  absl::Time deadline = absl::InfiniteFuture();
  // A call a sidecar's proxy may send again (kRequestMetadataKey): carried out once.
  std::optional<RequestId> request = std::nullopt;
};

// The whole cluster at one moment (cohort.v1 GetClusterSnapshot).
struct CoordinatorSnapshot {
  struct Task {
    TaskStateInfo info;
    bool auxiliary = false;
  };
  absl::Time taken_at;
  uint64_t service_incarnation = 0;
  std::string default_job;
  bool cluster_registered = false;
  absl::Status job_error;  // the error propagated to every task, if any
  std::vector<Task> tasks;
  std::vector<BarrierSnapshot> barriers;
  KeyValueStore::Stats key_values;
};

// One command of PyTorch's TCPStore protocol forwarded to the coordinator (cohort.v1
// TorchStore; torch::ForwardedCommands says what each field means).
struct ForwardedTorchCommand {
  std::string client;
  uint64_t sequence = 0;
  std::string command;
  bool end_client = false;
  // A WAIT or BARRIER, which may take long: a backend that forwards parks it.
  bool waits = false;
};

// Every call may answer on the calling thread (before it returns) or later on another
// thread; every call answers exactly once. Calls that wait (registration, barriers,
// blocking gets, error polls, watches, exchanges) end early when Cancel names their waiter.
class CoordinationBackend {
 public:
  using StatusDone = std::function<void(absl::Status)>;
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  virtual ~CoordinationBackend() = default;

  // The coordinator's incarnation as last known (0 before it is known).
  virtual uint64_t service_incarnation() const = 0;
  virtual WaiterId NewWaiterId() = 0;
  // The caller of a call went away (deadline, cancellation): finish it with `status`.
  virtual void Cancel(WaiterId waiter, const absl::Status& status) = 0;
  // A task of a configured job; an empty job name means the default job.
  virtual absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const = 0;

  // Tasks.
  virtual void RegisterTask(const CallContext& call, const TaskName& task, uint64_t incarnation,
                            StatusDone done) = 0;
  // No incarnation: the one the task registered with (protocols whose heartbeat names none).
  // `progress`: what the heartbeat carried (cohort's agents send it; empty: none, and the last
  // one stays), already checked by the adapter (IsValidTaskProgress).
  virtual void Heartbeat(const CallContext& call, const TaskName& task,
                         std::optional<uint64_t> incarnation, const TaskProgress& progress,
                         StatusDone done) = 0;
  // OK when `task` is registered with this incarnation (or never was); what a stale request
  // is told otherwise. Answers at once.
  virtual absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const = 0;
  virtual void ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) = 0;
  virtual void ResetTask(const CallContext& call, const TaskName& task, StatusDone done) = 0;
  // `reason`: why, as the reporter said (kUnspecified: it did not; the coordinator decides).
  virtual void ReportError(const CallContext& call, const TaskName& source,
                           const absl::Status& error, ErrorReporter by, FailureReason reason,
                           StatusDone done) = 0;
  virtual void PollForError(const CallContext& call, const TaskName& task, StatusDone done) = 0;
  // The error propagated to every task (OK while there is none).
  virtual void PropagatedError(const CallContext& call, StatusDone done) = 0;
  virtual void GetTaskStates(const CallContext& call, std::vector<TaskName> tasks,
                             Done<std::vector<TaskStateInfo>> done) = 0;
  // Answers at once when `version` differs from the current one, else at the next change.
  virtual void WatchJobState(const CallContext& call, const std::string& job, int64_t version,
                             Done<JobStateView> done) = 0;
  virtual void GetAliveTasks(const CallContext& call, const TaskName& requester,
                             std::vector<TaskName> tasks, Done<std::vector<AliveTask>> done) = 0;
  // Opaque device descriptions of every task of the caller's group, in task order.
  virtual void WaitForAllTasks(const CallContext& call, const TaskName& task, std::string devices,
                               Done<std::vector<std::string>> done) = 0;

  // Barriers. An empty task list means every workload task.
  virtual void Barrier(const CallContext& call, const std::string& id, int64_t counter,
                       absl::Duration timeout, const TaskName& caller, std::vector<TaskName> tasks,
                       Done<int64_t> done) = 0;
  virtual void CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                             const TaskName& caller, StatusDone done) = 0;

  // Key-value store.
  virtual void InsertKeyValue(const CallContext& call, std::string key, std::string value,
                              bool allow_overwrite, StatusDone done) = 0;
  // Waits until the key is set; with a timeout, DEADLINE_EXCEEDED once it passes.
  virtual void GetKeyValue(const CallContext& call, std::string key,
                           std::optional<absl::Duration> timeout, Done<std::string> done) = 0;
  virtual void TryGetKeyValue(const CallContext& call, std::string key, Done<std::string> done) = 0;
  virtual void IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                                 Done<int64_t> done) = 0;
  virtual void GetKeyValueDir(const CallContext& call, std::string dir,
                              Done<std::vector<KeyValueEntry>> done) = 0;
  virtual void DeleteKeyValue(const CallContext& call, std::string key, StatusDone done) = 0;
  // Starts a watch (see KeyValueStore::Watch); `started` gets it once it is established.
  // `notify` runs whenever events or the end are queued on it.
  virtual void WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                         std::function<void()> notify, Done<std::shared_ptr<KeyWatch>> started) = 0;

  virtual void GetCoordinatorSnapshot(const CallContext& call, Done<CoordinatorSnapshot> done) = 0;

  // One TCPStore command: the reply bytes torch's server would send.
  virtual void TorchStoreCommand(const CallContext& call, const ForwardedTorchCommand& command,
                                 Done<std::string> done) = 0;
  // Commands of several forwarded clients that answer at once, carried out in order
  // (torch::ForwardedCommands::ExecuteBatch): each one's answer.
  virtual void TorchStoreBatch(const CallContext& call,
                               const std::vector<ForwardedTorchCommand>& commands,
                               Done<std::vector<absl::StatusOr<std::string>>> done) = 0;
};

}  // namespace cohort
