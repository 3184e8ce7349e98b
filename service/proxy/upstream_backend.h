#pragma once
// UpstreamBackend: the CoordinationBackend of a sidecar's proxy. It translates every call
// into a request to the coordinator (upstream_requests.h: the tensorflow protocol, which
// carries task job, id and incarnation, error payloads, barrier counters and deadlines, plus
// cohort.v1 for the snapshot, the job directory and key watches) and sends it over one
// UpstreamConnection (upstream_connection.h), which rides out the coordinator's outages and
// keeps the tasks registered through it alive meanwhile.
//
// Threading: it holds no state and no lock of its own; every call may come from any thread,
// and the connection's lock is the only one.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "service/backend/coordination_backend.h"
#include "service/proxy/upstream_connection.h"
#include "service/proxy/upstream_link.h"
#include "service/proxy/upstream_options.h"

namespace cohort {

class UpstreamBackend final : public CoordinationBackend {
 public:
  using Link = UpstreamLink::State;
  static const char* LinkName(Link link) { return UpstreamLink::StateName(link); }

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
  // A task registered here: answered here, its progress kept for the heartbeats the
  // connection forwards. Any other: forwarded as it came, progress and all.
  void Heartbeat(const CallContext& call, const TaskName& task, std::optional<uint64_t> incarnation,
                 const TaskProgress& progress, StatusDone done) override;
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const override;
  void ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) override;
  void ResetTask(const CallContext& call, const TaskName& task, StatusDone done) override;
  void ReportError(const CallContext& call, const TaskName& source, const absl::Status& error,
                   ErrorReporter by, FailureReason reason, StatusDone done) override;
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
  // UpstreamConnection::finished_calls: the pod's calls that came back OK, other than
  // heartbeats and error polls.
  uint64_t finished_calls() const;
  // UpstreamConnection::waiting_calls: the pod's barriers open now (waits on its peers).
  int64_t waiting_calls() const;
  // For tests: the link goes down as after a call that failed for want of the coordinator,
  // while the connection (and the park stream) stay up.
  void SimulateLinkLossForTest();

 private:
  UpstreamConnection connection_;
};

}  // namespace cohort
