#include "service/backend/local_backend.h"

#include <utility>

namespace cohort {

void LocalBackend::RegisterTask(const CallContext& call, const TaskName& task, uint64_t incarnation,
                                StatusDone done) {
  service_->RegisterTask(task, incarnation, call.waiter, Gated(std::move(done)));
}

void LocalBackend::Heartbeat(const CallContext&, const TaskName& task,
                             std::optional<uint64_t> incarnation, const TaskProgress& progress,
                             StatusDone done) {
  if (!incarnation) {
    auto state = service_->GetTaskStates({task});
    if (!state.ok()) return done(state.status());
    incarnation = (*state)[0].incarnation;
  }
  done(service_->Heartbeat(task, *incarnation, progress));
}

void LocalBackend::ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) {
  service_->ShutdownTask(task, call.waiter, Gated(std::move(done)));
}

void LocalBackend::ResetTask(const CallContext& call, const TaskName& task, StatusDone done) {
  Gated(std::move(done))(
      service_->ResetTask(task, call.request ? FormatRequestId(*call.request) : ""));
}

void LocalBackend::ReportError(const CallContext&, const TaskName& source,
                               const absl::Status& error, ErrorReporter by, FailureReason reason,
                               StatusDone done) {
  Gated(std::move(done))(service_->ReportError(source, error, by, reason));
}

void LocalBackend::PollForError(const CallContext& call, const TaskName& task, StatusDone done) {
  service_->PollForError(task, call.waiter, Gated(std::move(done)));
}

void LocalBackend::PropagatedError(const CallContext&, StatusDone done) {
  Gated(std::move(done))(service_->PropagatedError());
}

void LocalBackend::GetTaskStates(const CallContext&, std::vector<TaskName> tasks,
                                 Done<std::vector<TaskStateInfo>> done) {
  Gated(std::move(done))(service_->GetTaskStates(tasks));
}

void LocalBackend::WatchJobState(const CallContext& call, const std::string& job, int64_t version,
                                 Done<JobStateView> done) {
  service_->WatchJobState(job, version, call.waiter, Gated(std::move(done)));
}

void LocalBackend::GetAliveTasks(const CallContext& call, const TaskName& requester,
                                 std::vector<TaskName> tasks, Done<std::vector<AliveTask>> done) {
  service_->GetAliveTasks(requester, std::move(tasks), call.waiter, Gated(std::move(done)));
}

void LocalBackend::WaitForAllTasks(const CallContext& call, const TaskName& task,
                                   std::string devices, Done<std::vector<std::string>> done) {
  service_->WaitForAllTasks(task, std::move(devices), call.waiter, Gated(std::move(done)));
}

void LocalBackend::Barrier(const CallContext& call, const std::string& id, int64_t counter,
                           absl::Duration timeout, const TaskName& caller,
                           std::vector<TaskName> tasks, Done<int64_t> done) {
  service_->Barrier(id, counter, timeout, caller, std::move(tasks), call.waiter,
                    Gated(std::move(done)));
}

void LocalBackend::CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                                 const TaskName& caller, StatusDone done) {
  Gated(std::move(done))(service_->CancelBarrier(
      id, counter, caller, call.request ? FormatRequestId(*call.request) : ""));
}

void LocalBackend::InsertKeyValue(const CallContext& call, std::string key, std::string value,
                                  bool allow_overwrite, StatusDone done) {
  if (call.request) {
    return Gated(std::move(done))(
        service_->InsertKeyValueOnce(*call.request, key, std::move(value), allow_overwrite));
  }
  Gated(std::move(done))(service_->InsertKeyValue(key, std::move(value), allow_overwrite));
}

void LocalBackend::GetKeyValue(const CallContext& call, std::string key,
                               std::optional<absl::Duration> timeout, Done<std::string> done) {
  std::optional<absl::Time> deadline;
  if (timeout) deadline = service_->Now() + *timeout;
  service_->GetKeyValue(key, call.waiter, std::nullopt, deadline, Gated(std::move(done)));
}

void LocalBackend::TryGetKeyValue(const CallContext&, std::string key, Done<std::string> done) {
  Gated(std::move(done))(service_->TryGetKeyValue(key));
}

void LocalBackend::IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                                     Done<int64_t> done) {
  if (call.request) {
    return Gated(std::move(done))(service_->IncrementKeyValueOnce(*call.request, key, delta));
  }
  Gated(std::move(done))(service_->IncrementKeyValue(key, delta));
}

void LocalBackend::GetKeyValueDir(const CallContext&, std::string dir,
                                  Done<std::vector<KeyValueEntry>> done) {
  Gated(std::move(done))(service_->GetKeyValueDir(dir));
}

void LocalBackend::DeleteKeyValue(const CallContext&, std::string key, StatusDone done) {
  Gated(std::move(done))(service_->DeleteKeyValue(key));
}

void LocalBackend::WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                             std::function<void()> notify,
                             Done<std::shared_ptr<KeyWatch>> started) {
  started(service_->WatchKeys(key, start_revision, call.waiter, std::move(notify)));
}

void LocalBackend::GetCoordinatorSnapshot(const CallContext&, Done<CoordinatorSnapshot> done) {
  CoordinatorSnapshot view;
  view.taken_at = service_->Now();
  view.service_incarnation = service_->service_incarnation();
  view.default_job = service_->default_job();
  view.cluster_registered = service_->ClusterRegistered();
  view.job_error = service_->PropagatedError();
  for (TaskStateInfo& info : service_->AllTasks()) {
    bool auxiliary = service_->IsAuxiliary(info.task.job);
    view.tasks.push_back({std::move(info), auxiliary});
  }
  view.barriers = service_->OpenBarriers();
  view.key_values = service_->KeyValueStats();
  Gated(std::move(done))(std::move(view));
}

}  // namespace cohort
