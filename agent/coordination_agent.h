#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/key_watcher.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "grpcpp/grpcpp.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort {

struct AgentConfig {
  std::string coordinator_address;  // HOST:PORT
  std::string job_name;
  int32_t task_id = 0;
  // 0 picks a random one at Initialize and at every Reset.
  uint64_t incarnation = 0;
  bool recoverable = false;
  // Heartbeats go out every interval; after `unreachable_timeout` without a successful one
  // the agent takes the coordinator as unreachable and enters ERROR (the sidecar's
  // --heartbeat-timeout). Not the coordinator's --heartbeat-timeout, which is how long it waits
  // for a task's heartbeat: keep that one at least twice the interval.
  absl::Duration heartbeat_interval = absl::Seconds(5);
  absl::Duration unreachable_timeout = absl::Seconds(30);
  // How long Connect keeps trying (the register barrier included).
  absl::Duration register_timeout = absl::Minutes(5);
  // Deadline of calls that answer at once (insert, try-get, delete, ...).
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Client-side limit on the shutdown barrier; the coordinator's own timeout also applies.
  absl::Duration shutdown_timeout = absl::Minutes(5);
  // Keep a PollForError call parked, so errors of other tasks arrive at once.
  bool poll_for_errors = true;
  // Empty: insecure (see ClientCredentials in common/grpc_tls.h for TLS).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS, the name the coordinator's certificate must carry (empty: the address's host).
  std::string tls_server_name;
  // The job's token, sent with every call (a coordinator run with --auth-token-file);
  // empty: none.
  std::string auth_token;
  // Told of every heartbeat's round trip and outcome, on the heartbeat thread (metrics).
  std::function<void(absl::Duration, const absl::Status&)> on_heartbeat;
  // Told of every registration attempt that failed and will be retried (its number, from 1,
  // and the error), on the thread calling Connect (logs, metrics).
  std::function<void(int attempt, const absl::Status&)> on_connect_retry;
};

enum class AgentState { kUninitialized, kDisconnected, kConnected, kError };
const char* AgentStateName(AgentState state);

struct TaskId {
  std::string job;
  int32_t id = 0;
  friend bool operator==(const TaskId& a, const TaskId& b) {
    return a.job == b.job && a.id == b.id;
  }
  friend bool operator<(const TaskId& a, const TaskId& b) {
    return a.job != b.job ? a.job < b.job : a.id < b.id;
  }
};

struct AgentTaskState {
  TaskId task;
  tensorflow::CoordinatedTaskState state = tensorflow::TASKSTATE_UNSPECIFIED;
  uint64_t incarnation = 0;
  absl::Status error;
};

struct AliveTaskInfo {
  TaskId task;
  uint64_t incarnation = 0;
};

// A pending GetKeyValueAsync. Cancel ends it with CANCELLED unless it already finished;
// its callback runs exactly once either way.
class AsyncGet {
 public:
  virtual ~AsyncGet() = default;
  virtual void Cancel() = 0;
};

// The client side of tensorflow.CoordinationService for one task of one job: registration
// with retries, heartbeats, error polling, key-value, barriers, device exchange and
// shutdown, plus cohort's key watches. States: UNINITIALIZED -> Initialize -> DISCONNECTED
// -> Connect -> CONNECTED -> (an error) -> ERROR -> Reset -> DISCONNECTED. The error
// callback runs once per error, on an agent thread; nothing here aborts the process.
// Every method is thread-safe.
class CoordinationAgent {
 public:
  using ErrorCallback = std::function<void(const absl::Status&)>;
  using ValueCallback = std::function<void(absl::StatusOr<std::string>)>;

  CoordinationAgent() = default;
  ~CoordinationAgent();
  CoordinationAgent(const CoordinationAgent&) = delete;
  CoordinationAgent& operator=(const CoordinationAgent&) = delete;

  absl::Status Initialize(AgentConfig config, ErrorCallback on_error = nullptr);
  bool IsInitialized() const;
  AgentState state() const;
  uint64_t incarnation() const;
  // The coordinator's incarnation seen at registration (0 before).
  uint64_t leader_incarnation() const;
  TaskId own_task() const;
  // The error that moved the agent to ERROR (OK otherwise).
  absl::Status last_error() const;

  // Registers, retrying with backoff while the coordinator cannot be reached (an error
  // from the coordinator itself is final), then starts heartbeats and error polling.
  absl::Status Connect();
  // Exchanges `local_devices` with every task of this job's group; the cluster's devices
  // are then in GetClusterDeviceInfo, in task order.
  absl::Status WaitForAllTasks(const tensorflow::DeviceInfo& local_devices);
  tensorflow::DeviceInfo GetClusterDeviceInfo() const;
  absl::StatusOr<std::vector<AgentTaskState>> GetTaskState(const std::vector<TaskId>& tasks);
  // Tells the coordinator, which propagates it to every task; this agent enters ERROR.
  // `reason` says why, for the coordinator's snapshot and the operator's failure rules
  // (kUnspecified lets the coordinator decide); one that is no FailureReason is
  // INVALID_ARGUMENT, and nothing is sent.
  absl::Status ReportError(const absl::Status& error,
                           FailureReason reason = FailureReason::kReportedError);
  // The task's progress (a sidecar's measure of its workload), carried by every heartbeat
  // from now on (HeartbeatRequest.cohort_progress) until the next call; an empty one stops
  // sending any. One that is not valid (IsValidTaskProgress) is dropped, and logged: the
  // coordinator would refuse the heartbeats that carried it. Any thread, any state.
  void SetProgress(const TaskProgress& progress);
  // Back from ERROR to DISCONNECTED (a new incarnation when none was configured).
  absl::Status Reset();
  // Ends every call to the coordinator in flight (Connect and its retries, blocking gets,
  // barriers, device exchange, ...) with CANCELLED, for a process that is going away.
  void CancelPendingCalls();
  // Waits at the shutdown barrier (when connected), then disconnects.
  absl::Status Shutdown();
  // Disconnects without telling the coordinator, which sees the task as gone once its
  // heartbeats stop: for a process going away while the coordinator cannot be reached, or in
  // ERROR. The heartbeats, the error poll and the watches end before it returns, so that no
  // callback given to Initialize runs afterwards. Any state; nothing to do when disconnected.
  void Abandon();

  // Key-value.
  absl::StatusOr<std::string> GetKeyValue(const std::string& key,
                                          absl::Duration timeout = absl::InfiniteDuration());
  std::shared_ptr<AsyncGet> GetKeyValueAsync(const std::string& key, ValueCallback done);
  absl::StatusOr<std::string> TryGetKeyValue(const std::string& key);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetKeyValueDir(
      const std::string& directory);
  absl::Status InsertKeyValue(const std::string& key, const std::string& value);
  absl::Status UpdateKeyValue(const std::string& key, const std::string& value);
  absl::Status DeleteKeyValue(const std::string& key);
  absl::StatusOr<int64_t> IncrementKeyValue(const std::string& key, int64_t delta);

  // Barriers. An empty task list means every task of the workload. Counters are kept per
  // barrier id, so that the same id can be used again.
  absl::Status WaitAtBarrier(const std::string& id, absl::Duration timeout,
                             const std::vector<TaskId>& tasks = {});
  absl::Status CancelBarrier(const std::string& id);
  // Blocks until every alive task of `tasks` has asked; answers the alive ones.
  absl::StatusOr<std::vector<AliveTaskInfo>> GetAliveTasks(
      const std::vector<TaskId>& tasks, absl::Duration timeout = absl::InfiniteDuration());

  // Every insert, update and delete of `key` and of keys under "key/", in order, from now
  // on; a dropped stream is resumed without losing events. Returns an id for StopWatchKey.
  absl::StatusOr<int64_t> StartWatchKey(const std::string& key, KeyWatcher::EventCallback on_event);
  // The callback is not called after this returns (unless called from that callback).
  void StopWatchKey(int64_t id);

 private:
  class PendingGet;

  absl::Status CheckState(AgentState want, const char* what) const;
  absl::Status CheckConnected(const char* what) const {
    return CheckState(AgentState::kConnected, what);
  }
  // A context registered as in flight until it is destroyed, so CancelPendingCalls finds it.
  std::shared_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;
  tensorflow::CoordinatedTask OwnTaskProto() const;
  absl::Status Put(const char* what, const std::string& key, const std::string& value,
                   bool overwrite);
  // Moves to ERROR with `error` and runs the callback, unless already there.
  // `log`: say so in the log (not for a failed Connect, whose caller has the error).
  void SetError(const absl::Status& error, bool log = true);
  void StartBackground();
  void StopBackground();
  void HeartbeatLoop();
  void StartErrorPoll();
  void OnPollDone(const absl::Status& status);

  AgentConfig config_;
  ErrorCallback on_error_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tensorflow::CoordinationService::Stub> stub_;

  mutable absl::Mutex mu_;
  AgentState state_ ABSL_GUARDED_BY(mu_) = AgentState::kUninitialized;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t leader_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  tensorflow::DeviceInfo cluster_devices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> barrier_counters_ ABSL_GUARDED_BY(mu_);
  std::set<std::shared_ptr<PendingGet>> pending_gets_ ABSL_GUARDED_BY(mu_);
  mutable std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  int64_t cancellations_ ABSL_GUARDED_BY(mu_) = 0;

  // Background work of one connection: heartbeats and the parked error poll.
  bool background_running_ ABSL_GUARDED_BY(mu_) = false;
  // Set while Shutdown or Reset tells the coordinator: it then ends the error poll itself
  // ("shut down", "reset"), which is no error.
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  std::thread heartbeat_thread_;
  struct ErrorPoll;
  std::shared_ptr<ErrorPoll> poll_ ABSL_GUARDED_BY(mu_);
  TaskProgress progress_ ABSL_GUARDED_BY(mu_);  // sent with each heartbeat (SetProgress)

  absl::Mutex watch_mu_;
  int64_t next_watch_id_ ABSL_GUARDED_BY(watch_mu_) = 1;
  std::map<int64_t, std::unique_ptr<KeyWatcher>> watchers_ ABSL_GUARDED_BY(watch_mu_);
};

}  // namespace cohort
