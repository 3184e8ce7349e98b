// UpstreamBackend: each CoordinationBackend call translated by upstream_requests.h and sent
// over the connection, or handed to the connection when it is about the tasks registered
// through it, its waiters or its key watches.
#include "service/proxy/upstream_backend.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort {

UpstreamBackend::UpstreamBackend(UpstreamOptions options) : connection_(std::move(options)) {}

UpstreamBackend::~UpstreamBackend() {
  // Every call ends before the backend goes: the callbacks of its calls (translated here)
  // run meanwhile. The connection's own destructor then releases the channel.
  connection_.Stop(absl::UnavailableError("the sidecar proxy is shutting down"));
}

void UpstreamBackend::Start() { connection_.Start(); }

void UpstreamBackend::Stop(const absl::Status& why) { connection_.Stop(why); }

UpstreamBackend::Link UpstreamBackend::link() const { return connection_.link(); }

bool UpstreamBackend::AwaitLink(Link want, absl::Duration timeout) const {
  return connection_.AwaitLink(want, timeout);
}

int64_t UpstreamBackend::reissued_calls() const { return connection_.reissued_calls(); }

int64_t UpstreamBackend::held_calls() const { return connection_.held_calls(); }

int64_t UpstreamBackend::outages() const { return connection_.outages(); }

int64_t UpstreamBackend::parked_calls() const { return connection_.parked_calls(); }

uint64_t UpstreamBackend::finished_calls() const { return connection_.finished_calls(); }

int64_t UpstreamBackend::waiting_calls() const { return connection_.waiting_calls(); }

void UpstreamBackend::SimulateLinkLossForTest() { connection_.SimulateLinkLossForTest(); }

uint64_t UpstreamBackend::service_incarnation() const { return connection_.service_incarnation(); }

WaiterId UpstreamBackend::NewWaiterId() { return connection_.NewWaiterId(); }

void UpstreamBackend::Cancel(WaiterId waiter, const absl::Status& status) {
  connection_.Cancel(waiter, status);
}

absl::StatusOr<TaskName> UpstreamBackend::ResolveTask(const std::string& job, int32_t id) const {
  return connection_.ResolveTask(job, id);
}

// ---- The tasks registered here: kept alive by the connection ----------------------------

void UpstreamBackend::RegisterTask(const CallContext& call, const TaskName& task,
                                   uint64_t incarnation, StatusDone done) {
  connection_.Send(
      call, upstream::RegisterTask(
                task, incarnation,
                [this, task, incarnation, done = std::move(done)](absl::StatusOr<uint64_t> leader) {
                  if (leader.ok()) {
                    connection_.OnRegistered(task, incarnation, *leader);
                  }
                  done(leader.status());
                }));
}

void UpstreamBackend::Heartbeat(const CallContext& call, const TaskName& task,
                                std::optional<uint64_t> incarnation, const TaskProgress& progress,
                                StatusDone done) {
  if (std::optional<absl::Status> here = connection_.HeartbeatHere(task, incarnation, progress)) {
    return done(*here);
  }
  auto send = [this, call, task, progress, done](uint64_t with) {
    connection_.Send(call, upstream::Heartbeat(task, with, progress, done));
  };
  if (incarnation) return send(*incarnation);
  // A heartbeat that names no incarnation, of a task not registered here: the one the
  // coordinator knows.
  GetTaskStates(call, {task}, [send, done](absl::StatusOr<std::vector<TaskStateInfo>> states) {
    if (!states.ok()) return done(states.status());
    if (states->empty()) return done(absl::InternalError("no state for the task"));
    send((*states)[0].incarnation);
  });
}

absl::Status UpstreamBackend::CheckIncarnation(const TaskName& task, uint64_t incarnation) const {
  return connection_.CheckIncarnation(task, incarnation);
}

void UpstreamBackend::ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) {
  connection_.Send(
      call,
      upstream::ShutdownTask(task, [this, task, done = std::move(done)](const absl::Status& s) {
        if (s.ok()) {
          connection_.Forget(task,
                             absl::CancelledError(absl::StrCat(task.ToString(), " shut down")));
        }
        done(s);
      }));
}

void UpstreamBackend::ResetTask(const CallContext& call, const TaskName& task, StatusDone done) {
  connection_.Send(
      call, upstream::ResetTask(task, [this, task, done = std::move(done)](const absl::Status& s) {
        if (s.ok()) {
          connection_.Forget(task,
                             absl::CancelledError(absl::StrCat(task.ToString(), " was reset")));
        }
        done(s);
      }));
}

void UpstreamBackend::PollForError(const CallContext& call, const TaskName& task, StatusDone done) {
  connection_.PollForError(call, task, std::move(done));
}

void UpstreamBackend::PropagatedError(const CallContext&, StatusDone done) {
  done(connection_.PropagatedError());
}

void UpstreamBackend::WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                                std::function<void()> notify,
                                Done<std::shared_ptr<KeyWatch>> started) {
  connection_.WatchKeys(call, std::move(key), start_revision, std::move(notify),
                        std::move(started));
}

// ---- The other calls: translated by upstream_requests.h and sent ------------------------

void UpstreamBackend::ReportError(const CallContext& call, const TaskName& source,
                                  const absl::Status& error, ErrorReporter by, FailureReason reason,
                                  StatusDone done) {
  // ReportErrorToTask has no reason field; the adapters that call it on someone else's
  // behalf have none to give (kUnspecified).
  if (by == ErrorReporter::kSomeoneElse) {
    return connection_.Send(call, upstream::ReportErrorToTask(source, error, std::move(done)));
  }
  connection_.Send(call, upstream::ReportErrorToService(source, error, reason, std::move(done)));
}

void UpstreamBackend::GetTaskStates(const CallContext& call, std::vector<TaskName> tasks,
                                    Done<std::vector<TaskStateInfo>> done) {
  connection_.Send(call, upstream::GetTaskState(tasks, std::move(done)));
}

void UpstreamBackend::WatchJobState(const CallContext& call, const std::string& job,
                                    int64_t version, Done<JobStateView> done) {
  connection_.Send(call, upstream::WatchJobState(job, version, std::move(done)));
}

void UpstreamBackend::GetAliveTasks(const CallContext& call, const TaskName& requester,
                                    std::vector<TaskName> tasks,
                                    Done<std::vector<AliveTask>> done) {
  connection_.Send(call, upstream::GetAliveTasks(requester, tasks, std::move(done)));
}

void UpstreamBackend::WaitForAllTasks(const CallContext& call, const TaskName& task,
                                      std::string devices, Done<std::vector<std::string>> done) {
  connection_.Send(call, upstream::WaitForAllTasks(task, devices, std::move(done)));
}

void UpstreamBackend::Barrier(const CallContext& call, const std::string& id, int64_t counter,
                              absl::Duration timeout, const TaskName& caller,
                              std::vector<TaskName> tasks, Done<int64_t> done) {
  connection_.Send(call, upstream::Barrier(id, counter, timeout, caller, tasks, std::move(done)));
}

void UpstreamBackend::CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                                    const TaskName& caller, StatusDone done) {
  connection_.Send(call, upstream::CancelBarrier(id, counter, caller, std::move(done)));
}

void UpstreamBackend::InsertKeyValue(const CallContext& call, std::string key, std::string value,
                                     bool allow_overwrite, StatusDone done) {
  connection_.Send(call, upstream::InsertKeyValue(key, value, allow_overwrite, std::move(done)));
}

void UpstreamBackend::GetKeyValue(const CallContext& call, std::string key,
                                  std::optional<absl::Duration> timeout, Done<std::string> done) {
  connection_.Send(call, upstream::GetKeyValue(key, timeout, std::move(done)));
}

void UpstreamBackend::TryGetKeyValue(const CallContext& call, std::string key,
                                     Done<std::string> done) {
  connection_.Send(call, upstream::TryGetKeyValue(key, std::move(done)));
}

void UpstreamBackend::IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                                        Done<int64_t> done) {
  connection_.Send(call, upstream::IncrementKeyValue(key, delta, std::move(done)));
}

void UpstreamBackend::GetKeyValueDir(const CallContext& call, std::string dir,
                                     Done<std::vector<KeyValueEntry>> done) {
  connection_.Send(call, upstream::GetKeyValueDir(dir, std::move(done)));
}

void UpstreamBackend::DeleteKeyValue(const CallContext& call, std::string key, StatusDone done) {
  connection_.Send(call, upstream::DeleteKeyValue(key, std::move(done)));
}

void UpstreamBackend::GetCoordinatorSnapshot(const CallContext& call,
                                             Done<CoordinatorSnapshot> done) {
  connection_.Send(call, upstream::GetClusterSnapshot(std::move(done)));
}

void UpstreamBackend::TorchStoreCommand(const CallContext& call,
                                        const ForwardedTorchCommand& command,
                                        Done<std::string> done) {
  connection_.Send(call, upstream::TorchStore(command, std::move(done)));
}

void UpstreamBackend::TorchStoreBatch(const CallContext& call,
                                      const std::vector<ForwardedTorchCommand>& commands,
                                      Done<std::vector<absl::StatusOr<std::string>>> done) {
  connection_.Send(call, upstream::TorchStoreBatch(commands, std::move(done)));
}

}  // namespace cohort
