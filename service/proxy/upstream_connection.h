#pragma once
// UpstreamConnection: the sidecar proxy's one connection to the coordinator, which rides out
// the coordinator's outages of up to `outage_tolerance`:
//
//  - a call whose attempt fails because the coordinator cannot be reached is held and sent
//    again once it is back (parked calls are lost by a restarted coordinator, so they are
//    parked again); new calls wait likewise, within their own deadlines;
//  - heartbeats of the tasks registered through it are answered here, and forwarded while the
//    coordinator is reachable;
//  - once it is back, every task registered through it registers again with its incarnation
//    (a durable coordinator answers OK) before the held calls go out;
//  - past the tolerance, or when the coordinator came back as another service incarnation
//    (it lost the job), every held and parked call fails UNAVAILABLE, as without the proxy.
//
// Per-pod aggregation: the coordinator sees one error poll per registered task (the proxy's
// own, whatever its clients do), and identical calls of several local callers (blocking gets,
// job-state watches) share one upstream call. Error polls, blocking gets and barriers go on
// one cohort.v1 Park stream per connection, not as a gRPC call each.
//
// Threading: one lock (mu_) guards the link, the call table and the task table together, so
// that whether a call goes out, is held or fails is read and acted on in one step. Nothing
// is called back (subscribers, polls, watches, gRPC starts and cancels of calls with a
// callback) while it is held. A thread of its own probes the coordinator while the link is
// not up. Every public method may be called from any thread; Stop and the destructor not
// from a callback of the connection's own, as they wait for every call to end.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/task_progress.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/coordination_backend.h"
#include "service/proxy/local_task_table.h"
#include "service/proxy/upstream_call_table.h"
#include "service/proxy/upstream_key_watch.h"
#include "service/proxy/upstream_link.h"
#include "service/proxy/upstream_messages.h"
#include "service/proxy/upstream_options.h"
#include "service/proxy/upstream_park.h"
#include "service/proxy/upstream_requests.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort {

class UpstreamConnection {
 public:
  using Link = UpstreamLink::State;
  using StatusDone = CoordinationBackend::StatusDone;

  explicit UpstreamConnection(UpstreamOptions options);
  // Stops (as Stop, with "the sidecar proxy is shutting down") and releases the channel.
  ~UpstreamConnection();
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;

  // Starts connecting (in the background).
  void Start();
  // Ends every call with `why` and stops; idempotent.
  void Stop(const absl::Status& why);
  Link link() const;
  // Waits until the link is `want` or `timeout` passes; true when it is.
  bool AwaitLink(Link want, absl::Duration timeout) const;

  // Upstream attempts that failed for want of the coordinator and were sent again, and
  // calls held right now.
  int64_t reissued_calls() const;
  int64_t held_calls() const;
  // Times the coordinator was lost after having been reached.
  int64_t outages() const;
  // Calls open on the park stream right now.
  int64_t parked_calls() const;
  // Calls that reached the coordinator and came back OK, other than heartbeats and error
  // polls: a barrier passed, a key set or read, a TCPStore command. The sidecar's sign that
  // its workload makes progress.
  uint64_t finished_calls() const { return finished_calls_.load(std::memory_order_relaxed); }
  // UpstreamCallTable::WaitingCalls: the pod's barriers open now (waits on its peers).
  int64_t waiting_calls() const;
  // For tests: the link goes down as after a call that failed for want of the coordinator,
  // while the connection (and the park stream) stay up.
  void SimulateLinkLossForTest();

  // The service incarnation that answered last.
  uint64_t service_incarnation() const;
  WaiterId NewWaiterId();
  // `waiter` leaves its call, error poll or key watch, which it gets ended with `status`.
  void Cancel(WaiterId waiter, const absl::Status& status);
  // `job`'s task `id` by the coordinator's job directory (as given before it was reached).
  absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const;

  // Sends `request` upstream, on behalf of `call`'s caller: it goes out, is held while the
  // coordinator is away, joins an identical call open already, or is refused.
  template <typename Stub, typename Req, typename Resp>
  void Send(const CallContext& call, UpstreamRequest<Stub, Req, Resp> request);

  // The tasks registered through this connection: kept alive here across outages.
  // `task` registered as `incarnation`, service incarnation `service_incarnation` answering:
  // its heartbeats are answered here from now on, and its error polled once, by the proxy.
  void OnRegistered(const TaskName& task, uint64_t incarnation, uint64_t service_incarnation);
  // A heartbeat of `task` (of `incarnation`, when it names one), answered here when the task
  // is registered here as that (and forwarded too while the coordinator is reachable, with
  // the last progress the task's heartbeats carried, this one's when it has one); none when
  // the coordinator is to answer it.
  std::optional<absl::Status> HeartbeatHere(const TaskName& task,
                                            std::optional<uint64_t> incarnation,
                                            const TaskProgress& progress = {});
  // `task` shut down or was reset: it is not registered again, and its clients' error polls
  // end with `why`.
  void Forget(const TaskName& task, const absl::Status& why);
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const;
  // A client's error poll of `task`: it waits for the proxy's own poll of a task registered
  // here, and is forwarded otherwise.
  void PollForError(const CallContext& call, const TaskName& task, StatusDone done);
  // The answer to PropagatedError: the link's failure once it has ended, else the error
  // propagated to the tasks registered here.
  absl::Status PropagatedError() const;

  // A key watch: started at once while the link is up, else held until it is.
  void WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                 std::function<void()> notify,
                 CoordinationBackend::Done<std::shared_ptr<KeyWatch>> started);

 private:
  using Call = UpstreamCallTable::Call;

  // A call to the coordinator: joins the open call it shares, goes out, is held or is refused.
  void Submit(const Call& op, WaiterId waiter, UpstreamSubscriber subscriber);
  void Issue(const Call& op);
  void OnAttemptDone(const Call& op, const grpc::Status& status);
  void Finish(const Call& op, const absl::Status& status);

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
  void StartTaskPoll(const TaskName& task, uint64_t generation);
  void OnTaskPollDone(const TaskName& task, uint64_t generation, const absl::Status& status);
  void ForwardHeartbeat(const TaskName& task, uint64_t incarnation, const TaskProgress& progress);

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
  // The calls forwarded: held, shared, subscribed to and out, and their request ids.
  UpstreamCallTable calls_ ABSL_GUARDED_BY(mu_);
  LocalTaskTable tasks_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* probe_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // This proxy's session (random), in every request id.
  const std::string session_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> finished_calls_{0};
  std::thread link_thread_;
};

template <typename Stub, typename Req, typename Resp>
void UpstreamConnection::Send(const CallContext& call, UpstreamRequest<Stub, Req, Resp> request) {
  Stub* async = nullptr;
  if constexpr (std::is_same_v<Stub, TfAsync>) {
    async = stub_->async();
  } else {
    async = cohort_stub_->async();
  }
  auto [op, subscriber] = MakeUpstreamCall(async, std::move(request), call.deadline);
  if (op->options.once) {
    absl::MutexLock lock(&mu_);
    op->request = calls_.OpenRequest();
  }
  Submit(op, call.waiter, std::move(subscriber));
}

}  // namespace cohort
