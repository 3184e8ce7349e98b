#pragma once
// UpstreamBackend: the CoordinationBackend of a sidecar's proxy. It forwards every call to
// the coordinator over one gRPC channel in the tensorflow protocol (which carries task
// job, id and incarnation, error payloads, barrier counters and deadlines), plus cohort.v1
// for the snapshot, the job directory and key watches; and it rides out a coordinator
// outage of up to `outage_tolerance`:
//
//  - a call whose attempt fails because the coordinator cannot be reached is held and sent
//    again once it is back (parked calls are lost by a restarted coordinator, so they are
//    parked again); new calls wait likewise, within their own deadlines;
//  - heartbeats of the tasks registered here are answered here, and forwarded while the
//    coordinator is reachable;
//  - once it is back, every task registered here registers again with its incarnation
//    (a durable coordinator answers OK) before the held calls go out;
//  - past the tolerance, or when the coordinator came back as another service incarnation
//    (it lost the job), every held and parked call fails UNAVAILABLE, as without the proxy.
//
// Per-pod aggregation: the coordinator sees one error poll per registered task (the proxy's
// own, whatever its clients do), and identical blocking gets and job-state watches of
// several local callers share one upstream call. Error polls, blocking gets and barriers go
// on one cohort.v1 Park stream per connection, not as a gRPC call each.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/coordination_backend.h"
#include "service/proxy/local_task_table.h"
#include "service/proxy/upstream_key_watch.h"
#include "service/proxy/upstream_link.h"
#include "service/proxy/upstream_messages.h"
#include "service/proxy/upstream_park.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort {

struct UpstreamOptions {
  std::string address;                                    // the coordinator, HOST:PORT
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: insecure
  std::string tls_server_name;  // the name in the coordinator's certificate (empty: its host)
  // The job's token, sent with every call upstream (empty: none). The proxy's own clients
  // (the pod's processes) send none: it attaches it for them.
  std::string auth_token;
  // How long the coordinator may be unreachable before callers get UNAVAILABLE.
  absl::Duration outage_tolerance = absl::Seconds(60);
  // How often an unreachable coordinator is tried.
  absl::Duration probe_interval = absl::Milliseconds(200);
  // Deadline of each heartbeat call forwarded on the tasks' behalf.
  absl::Duration heartbeat_deadline = absl::Seconds(10);
};

// A channel to the coordinator as UpstreamOptions say: credentials, the job's token on every
// call, and settings that find a restarted coordinator again within a second.
std::shared_ptr<grpc::Channel> MakeUpstreamChannel(const UpstreamOptions& options);

// How UpstreamBackend sends one call.
struct UpstreamSendOptions {
  // Identical calls (same key) of several callers share one upstream call.
  std::string share_key;
  // An upstream deadline of the call's own (a timed get), besides the caller's.
  absl::Time deadline = absl::InfiniteFuture();
  // Fails at once, rather than being held, when the coordinator cannot be reached.
  bool fail_fast = false;
  // Sent even while the link is down (re-registration is how the link comes back up).
  bool bypass_link = false;
  // Goes on the park stream (a call that may wait long: error polls, blocking gets,
  // barriers) rather than as a gRPC call of its own.
  bool park = false;
  // Looks again at an answer to an attempt that was sent more than once.
  std::function<void(const absl::Status&, const std::function<void(absl::Status)>&)>
      reconcile_reissued;
  // Carries a request id (kRequestMetadataKey), the same on every attempt, so that the
  // coordinator carries the call out once however often it is sent.
  bool once = false;
};

class UpstreamBackend final : public CoordinationBackend {
 public:
  using Link = UpstreamLink::State;
  static const char* LinkName(Link link);

  explicit UpstreamBackend(UpstreamOptions options);
  ~UpstreamBackend() override;

  // Starts connecting (in the background).
  void Start();
  // Ends every call with `why` and stops; idempotent.
  void Stop(const absl::Status& why);
  Link link() const;
  // Waits until the link is `want` or `timeout` passes; true when it is.
  bool AwaitLink(Link want, absl::Duration timeout) const;

  uint64_t service_incarnation() const override;
  WaiterId NewWaiterId() override;
  void Cancel(WaiterId waiter, const absl::Status& status) override;
  absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const override;

  void RegisterTask(const CallContext& call, const TaskName& task, uint64_t incarnation,
                    StatusDone done) override;
  void Heartbeat(const CallContext& call, const TaskName& task, std::optional<uint64_t> incarnation,
                 StatusDone done) override;
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const override;
  void ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) override;
  void ResetTask(const CallContext& call, const TaskName& task, StatusDone done) override;
  void ReportError(const CallContext& call, const TaskName& source, const absl::Status& error,
                   ErrorReporter by, StatusDone done) override;
  void PollForError(const CallContext& call, const TaskName& task, StatusDone done) override;
  void PropagatedError(const CallContext& call, StatusDone done) override;
  void GetTaskStates(const CallContext& call, std::vector<TaskName> tasks,
                     Done<std::vector<TaskStateInfo>> done) override;
  void WatchJobState(const CallContext& call, const std::string& job, int64_t version,
                     Done<JobStateView> done) override;
  void GetAliveTasks(const CallContext& call, const TaskName& requester,
                     std::vector<TaskName> tasks, Done<std::vector<AliveTask>> done) override;
  void WaitForAllTasks(const CallContext& call, const TaskName& task, std::string devices,
                       Done<std::vector<std::string>> done) override;

  void Barrier(const CallContext& call, const std::string& id, int64_t counter,
               absl::Duration timeout, const TaskName& caller, std::vector<TaskName> tasks,
               Done<int64_t> done) override;
  void CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                     const TaskName& caller, StatusDone done) override;

  void InsertKeyValue(const CallContext& call, std::string key, std::string value,
                      bool allow_overwrite, StatusDone done) override;
  void GetKeyValue(const CallContext& call, std::string key, std::optional<absl::Duration> timeout,
                   Done<std::string> done) override;
  void TryGetKeyValue(const CallContext& call, std::string key, Done<std::string> done) override;
  void IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                         Done<int64_t> done) override;
  void GetKeyValueDir(const CallContext& call, std::string dir,
                      Done<std::vector<KeyValueEntry>> done) override;
  void DeleteKeyValue(const CallContext& call, std::string key, StatusDone done) override;
  void WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                 std::function<void()> notify, Done<std::shared_ptr<KeyWatch>> started) override;

  void GetCoordinatorSnapshot(const CallContext& call, Done<CoordinatorSnapshot> done) override;

  void TorchStoreCommand(const CallContext& call, const ForwardedTorchCommand& command,
                         Done<std::string> done) override;
  void TorchStoreBatch(const CallContext& call, const std::vector<ForwardedTorchCommand>& commands,
                       Done<std::vector<absl::StatusOr<std::string>>> done) override;

  // For tests and metrics: upstream attempts that failed for want of the coordinator and
  // were sent again, and calls held right now.
  int64_t reissued_calls() const;
  int64_t held_calls() const;
  // Times the coordinator was lost after having been reached.
  int64_t outages() const;
  // Calls open on the park stream right now.
  int64_t parked_calls() const;
  // For tests: the link goes down as after a call that failed for want of the coordinator,
  // while the connection (and the park stream) stay up.
  void SimulateLinkLossForTest();

 private:
  using Async = tensorflow::CoordinationService::StubInterface::async_interface;
  struct Forward;
  using Subscriber = std::function<void(const absl::Status&, const google::protobuf::Message&)>;

  using SendOptions = UpstreamSendOptions;

  // Sends `request` upstream with `method` and answers `done` with the outcome: the
  // coordinator's status translated back to the core's, and the response.
  template <typename Resp, typename Req>
  void Send(const CallContext& call,
            void (Async::*method)(grpc::ClientContext*, const Req*, Resp*,
                                  std::function<void(grpc::Status)>),
            Req request, std::function<void(const absl::Status&, const Resp&)> done,
            SendOptions options = {});

  void Submit(const std::shared_ptr<Forward>& op, WaiterId waiter, Subscriber subscriber);
  void Issue(const std::shared_ptr<Forward>& op);
  void OnAttemptDone(const std::shared_ptr<Forward>& op, const grpc::Status& status);
  void Finish(const std::shared_ptr<Forward>& op, const absl::Status& status);

  // The link.
  void LinkLoop();
  bool Probe(v1::ClusterSnapshot* snapshot);
  // Registers the tasks again and sends the held calls; false when the coordinator was
  // lost again meanwhile.
  bool Reestablish(const v1::ClusterSnapshot& snapshot);
  // A watch whose stream broke for want of the coordinator: resumed once it is back.
  void HoldWatch(const std::shared_ptr<UpstreamKeyWatch>& watch);
  // Ends every held call and every local task's polls with `status`; forgets the tasks.
  void FailAll(const absl::Status& status);
  void ExpireHeld();

  // Local tasks.
  void OnRegistered(const TaskName& task, uint64_t incarnation);
  void StartTaskPoll(const TaskName& task, uint64_t generation);
  void OnTaskPollDone(const TaskName& task, uint64_t generation, const absl::Status& status);
  void ForwardHeartbeat(const TaskName& task, uint64_t incarnation);
  void Forget(const TaskName& task, const absl::Status& why);

  const UpstreamOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tensorflow::CoordinationService::Stub> stub_;
  std::unique_ptr<v1::Coordinator::Stub> cohort_stub_;

  mutable absl::Mutex mu_;
  // Under the same lock as the calls and tasks it decides about: whether a call goes out,
  // is held or fails is read and acted on in one step.
  UpstreamLink link_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const KnownJobs> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls waiting for the coordinator to come back.
  std::vector<std::shared_ptr<Forward>> held_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<UpstreamKeyWatch>> held_watches_ ABSL_GUARDED_BY(mu_);
  // Who to tell when a caller goes away.
  absl::flat_hash_map<WaiterId, std::shared_ptr<Forward>> forwards_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WaiterId, std::shared_ptr<UpstreamKeyWatch>> watches_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Forward>> shared_ ABSL_GUARDED_BY(mu_);
  LocalTaskTable tasks_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::shared_ptr<Forward>> live_ ABSL_GUARDED_BY(mu_);  // attempts out
  grpc::ClientContext* probe_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t reissued_ ABSL_GUARDED_BY(mu_) = 0;
  // Request ids: this proxy's session (random), the next number, and the numbers of the
  // calls not yet answered (the lowest is every request's low mark).
  const std::string session_;
  uint64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<uint64_t> open_requests_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread link_thread_;
};

}  // namespace cohort
