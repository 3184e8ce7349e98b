// The CoordinationBackend's calls as requests to the coordinator, and their answers back.
#include "service/proxy/upstream_requests.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "service/proxy/upstream_messages.h"
#include "service/rpc/torch_store_messages.h"

namespace cohort::upstream {

namespace {

tf::RegisterTaskRequest UpstreamRegisterTaskRequest(const TaskName& task, uint64_t incarnation) {
  tf::RegisterTaskRequest request;
  request.set_incarnation(incarnation);
  *request.mutable_source_task() = ToWireTask(task);
  return request;
}

// A request whose caller gets only the status.
template <typename Resp>
std::function<void(const absl::Status&, const Resp&)> UpstreamStatusOnly(StatusDone done) {
  return [done = std::move(done)](const absl::Status& s, const Resp&) { done(s); };
}

}  // namespace

// ---- Tasks -------------------------------------------------------------------------------

TfRequest<tf::RegisterTaskRequest, tf::RegisterTaskResponse> RegisterTask(const TaskName& task,
                                                                          uint64_t incarnation,
                                                                          Done<uint64_t> done) {
  TfRequest<tf::RegisterTaskRequest, tf::RegisterTaskResponse> r{
      &TfAsync::RegisterTask, UpstreamRegisterTaskRequest(task, incarnation),
      [done = std::move(done)](const absl::Status& s, const tf::RegisterTaskResponse& response) {
        if (!s.ok()) return done(s);
        done(response.leader_incarnation());
      }};
  r.options.park = true;  // it waits for every task of the job
  r.options.waits_on_peers = true;
  return r;
}

TfRequest<tf::RegisterTaskRequest, tf::RegisterTaskResponse> RegisterTaskAgain(const TaskName& task,
                                                                               uint64_t incarnation,
                                                                               StatusDone done) {
  TfRequest<tf::RegisterTaskRequest, tf::RegisterTaskResponse> r{
      &TfAsync::RegisterTask, UpstreamRegisterTaskRequest(task, incarnation),
      UpstreamStatusOnly<tf::RegisterTaskResponse>(std::move(done))};
  r.options.bypass_link = true;
  return r;
}

TfRequest<tf::HeartbeatRequest, tf::HeartbeatResponse> Heartbeat(const TaskName& task,
                                                                 uint64_t incarnation,
                                                                 const TaskProgress& progress,
                                                                 StatusDone done) {
  tf::HeartbeatRequest request;
  request.set_incarnation(incarnation);
  *request.mutable_source_task() = ToWireTask(task);
  if (!progress.empty()) *request.mutable_cohort_progress() = ToWire(progress);
  TfRequest<tf::HeartbeatRequest, tf::HeartbeatResponse> r{
      &TfAsync::Heartbeat, std::move(request),
      UpstreamStatusOnly<tf::HeartbeatResponse>(std::move(done))};
  r.options.liveness = true;
  return r;
}

TfRequest<tf::ShutdownTaskRequest, tf::ShutdownTaskResponse> ShutdownTask(const TaskName& task,
                                                                          StatusDone done) {
  tf::ShutdownTaskRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  TfRequest<tf::ShutdownTaskRequest, tf::ShutdownTaskResponse> r{
      &TfAsync::ShutdownTask, std::move(request),
      UpstreamStatusOnly<tf::ShutdownTaskResponse>(std::move(done))};
  r.options.park = true;  // it waits at the shutdown barrier
  r.options.waits_on_peers = true;
  // The first attempt may have shut the task down before the coordinator went away.
  r.options.reconcile_reissued = [](const absl::Status& s,
                                    const std::function<void(absl::Status)>& finish) {
    finish(s.code() == absl::StatusCode::kFailedPrecondition ? absl::OkStatus() : s);
  };
  return r;
}

TfRequest<tf::ResetTaskRequest, tf::ResetTaskResponse> ResetTask(const TaskName& task,
                                                                 StatusDone done) {
  tf::ResetTaskRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  TfRequest<tf::ResetTaskRequest, tf::ResetTaskResponse> r{
      &TfAsync::ResetTask, std::move(request),
      UpstreamStatusOnly<tf::ResetTaskResponse>(std::move(done))};
  r.options.once = true;  // an attempt again of the reset that took effect is OK
  return r;
}

TfRequest<tf::ReportErrorToTaskRequest, tf::ReportErrorToTaskResponse> ReportErrorToTask(
    const TaskName& source, const absl::Status& error, StatusDone done) {
  tf::ReportErrorToTaskRequest request;
  request.set_error_code(static_cast<int32_t>(error.code()));
  request.set_error_message(std::string(error.message()));
  *request.mutable_error_payload()->mutable_source_task() = ToWireTask(source);
  return {&TfAsync::ReportErrorToTask, std::move(request),
          UpstreamStatusOnly<tf::ReportErrorToTaskResponse>(std::move(done))};
}

TfRequest<tf::ReportErrorToServiceRequest, tf::ReportErrorToServiceResponse> ReportErrorToService(
    const TaskName& source, const absl::Status& error, FailureReason reason, StatusDone done) {
  tf::ReportErrorToServiceRequest request;
  request.set_error_code(static_cast<int32_t>(error.code()));
  request.set_error_message(std::string(error.message()));
  *request.mutable_error_origin() = ToWireTask(source);
  request.set_cohort_failure_reason(static_cast<int32_t>(reason));
  return {&TfAsync::ReportErrorToService, std::move(request),
          UpstreamStatusOnly<tf::ReportErrorToServiceResponse>(std::move(done))};
}

TfRequest<tf::PollForErrorRequest, tf::PollForErrorResponse> PollForError(const TaskName& task,
                                                                          StatusDone done) {
  tf::PollForErrorRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  TfRequest<tf::PollForErrorRequest, tf::PollForErrorResponse> r{
      &TfAsync::PollForError, std::move(request),
      UpstreamStatusOnly<tf::PollForErrorResponse>(std::move(done))};
  r.options.park = true;
  r.options.liveness = true;
  return r;
}

TfRequest<tf::GetTaskStateRequest, tf::GetTaskStateResponse> GetTaskState(
    const std::vector<TaskName>& tasks, Done<std::vector<TaskStateInfo>> done) {
  tf::GetTaskStateRequest request;
  for (const TaskName& task : tasks) *request.add_source_task() = ToWireTask(task);
  return {&TfAsync::GetTaskState, std::move(request),
          [done = std::move(done)](const absl::Status& s, const tf::GetTaskStateResponse& r) {
            if (!s.ok()) return done(s);
            std::vector<TaskStateInfo> states;
            for (const auto& info : r.task_state()) states.push_back(FromWire(info));
            done(std::move(states));
          }};
}

TfRequest<tf::WatchJobStateRequest, tf::WatchJobStateResponse> WatchJobState(
    const std::string& job, int64_t version, Done<JobStateView> done) {
  tf::WatchJobStateRequest request;
  request.set_job_name(job);
  request.set_version_number(version);
  TfRequest<tf::WatchJobStateRequest, tf::WatchJobStateResponse> r{
      &TfAsync::WatchJobState, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::WatchJobStateResponse& response) {
        if (!s.ok()) return done(s);
        auto view = std::make_shared<JobStateSnapshot>();
        view->version = response.version_number();
        for (const auto& info : response.task_state()) view->tasks.push_back(FromWire(info));
        done(JobStateView(std::move(view)));
      }};
  r.options.share_key = absl::StrCat("WatchJobState/", version, "/", job);
  // A client watches its job's state whether or not it makes progress.
  r.options.liveness = true;
  return r;
}

TfRequest<tf::GetAliveTasksRequest, tf::GetAliveTasksResponse> GetAliveTasks(
    const TaskName& requester, const std::vector<TaskName>& tasks,
    Done<std::vector<AliveTask>> done) {
  tf::GetAliveTasksRequest request;
  *request.mutable_requesting_task() = ToWireTask(requester);
  for (const TaskName& task : tasks) *request.add_tasks() = ToWireTask(task);
  return {&TfAsync::GetAliveTasks, std::move(request),
          [done = std::move(done)](const absl::Status& s, const tf::GetAliveTasksResponse& r) {
            if (!s.ok()) return done(s);
            std::vector<AliveTask> alive;
            for (int i = 0; i < r.alive_tasks_size(); ++i) {
              alive.push_back({TaskName{r.alive_tasks(i).job_name(), r.alive_tasks(i).task_id()},
                               i < r.incarnations_size() ? r.incarnations(i) : 0});
            }
            done(std::move(alive));
          }};
}

TfRequest<tf::WaitForAllTasksRequest, tf::WaitForAllTasksResponse> WaitForAllTasks(
    const TaskName& task, const std::string& devices, Done<std::vector<std::string>> done) {
  tf::WaitForAllTasksRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  *request.mutable_device_info() = WrapDevices(devices);
  return {&TfAsync::WaitForAllTasks, std::move(request),
          [done = std::move(done)](const absl::Status& s, const tf::WaitForAllTasksResponse& r) {
            if (!s.ok()) return done(s);
            done(UnwrapDevices(r.device_info()));
          }};
}

// ---- Barriers ----------------------------------------------------------------------------

TfRequest<tf::BarrierRequest, tf::BarrierResponse> Barrier(const std::string& id, int64_t counter,
                                                           absl::Duration timeout,
                                                           const TaskName& caller,
                                                           const std::vector<TaskName>& tasks,
                                                           Done<int64_t> done) {
  tf::BarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  request.set_barrier_timeout_in_ms(timeout == absl::InfiniteDuration()
                                        ? 0
                                        : std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  *request.mutable_source_task() = ToWireTask(caller);
  for (const TaskName& task : tasks) *request.add_tasks() = ToWireTask(task);
  // A barrier sent again arrives again with the same counter: the coordinator counts the
  // caller once, or answers the instance's cached result.
  TfRequest<tf::BarrierRequest, tf::BarrierResponse> r{
      &TfAsync::Barrier, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::BarrierResponse& response) {
        if (!s.ok()) return done(s);
        done(response.counter());
      }};
  r.options.park = true;
  r.options.waits_on_peers = true;
  return r;
}

TfRequest<tf::CancelBarrierRequest, tf::CancelBarrierResponse> CancelBarrier(const std::string& id,
                                                                             int64_t counter,
                                                                             const TaskName& caller,
                                                                             StatusDone done) {
  tf::CancelBarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  *request.mutable_source_task() = ToWireTask(caller);
  TfRequest<tf::CancelBarrierRequest, tf::CancelBarrierResponse> r{
      &TfAsync::CancelBarrier, std::move(request),
      UpstreamStatusOnly<tf::CancelBarrierResponse>(std::move(done))};
  r.options.once = true;  // an attempt again of the cancel that took effect is OK
  return r;
}

// ---- Key-value store ---------------------------------------------------------------------

TfRequest<tf::InsertKeyValueRequest, tf::InsertKeyValueResponse> InsertKeyValue(
    const std::string& key, const std::string& value, bool allow_overwrite, StatusDone done) {
  tf::InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  TfRequest<tf::InsertKeyValueRequest, tf::InsertKeyValueResponse> r{
      &TfAsync::InsertKeyValue, std::move(request),
      UpstreamStatusOnly<tf::InsertKeyValueResponse>(std::move(done))};
  // The first attempt may have stored the value before the coordinator went away: the
  // coordinator answers an attempt again as it answered the first, and stores nothing twice.
  r.options.once = true;
  return r;
}

TfRequest<tf::GetKeyValueRequest, tf::GetKeyValueResponse> GetKeyValue(
    const std::string& key, std::optional<absl::Duration> timeout, Done<std::string> done) {
  tf::GetKeyValueRequest request;
  request.set_key(key);
  UpstreamSendOptions options;
  options.park = true;
  absl::Time own_deadline = absl::InfiniteFuture();
  if (timeout) {
    own_deadline = absl::Now() + *timeout;
    options.deadline = own_deadline;
  } else {
    // Local callers waiting for the same key share one upstream get.
    options.share_key = absl::StrCat("GetKeyValue/", KeyValueStore::NormalizeKey(key));
  }
  return {&TfAsync::GetKeyValue, std::move(request),
          [key, own_deadline, done = std::move(done)](const absl::Status& s,
                                                      const tf::GetKeyValueResponse& r) {
            if (s.code() == absl::StatusCode::kDeadlineExceeded && !GetServiceError(s) &&
                absl::Now() >= own_deadline) {
              return done(absl::DeadlineExceededError(absl::StrCat(
                  "timed out waiting for key \"", KeyValueStore::NormalizeKey(key), "\"")));
            }
            if (!s.ok()) return done(s);
            done(r.kv().value());
          },
          std::move(options)};
}

TfRequest<tf::TryGetKeyValueRequest, tf::TryGetKeyValueResponse> TryGetKeyValue(
    const std::string& key, Done<std::string> done) {
  tf::TryGetKeyValueRequest request;
  request.set_key(key);
  return {&TfAsync::TryGetKeyValue, std::move(request),
          [done = std::move(done)](const absl::Status& s, const tf::TryGetKeyValueResponse& r) {
            if (!s.ok()) return done(s);
            done(r.kv().value());
          }};
}

TfRequest<tf::IncrementKeyValueRequest, tf::IncrementKeyValueResponse> IncrementKeyValue(
    const std::string& key, int64_t delta, Done<int64_t> done) {
  tf::IncrementKeyValueRequest request;
  request.set_key(key);
  request.set_increment(delta);
  TfRequest<tf::IncrementKeyValueRequest, tf::IncrementKeyValueResponse> r{
      &TfAsync::IncrementKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s,
                               const tf::IncrementKeyValueResponse& response) {
        if (!s.ok()) return done(s);
        int64_t sum = 0;
        if (!absl::SimpleAtoi(response.kv().value(), &sum)) {
          return done(absl::InternalError(absl::StrCat("the coordinator answered a non-number: \"",
                                                       response.kv().value(), "\"")));
        }
        done(sum);
      }};
  r.options.once = true;  // applied once, however often it is sent
  return r;
}

TfRequest<tf::GetKeyValueDirRequest, tf::GetKeyValueDirResponse> GetKeyValueDir(
    const std::string& dir, Done<std::vector<KeyValueEntry>> done) {
  tf::GetKeyValueDirRequest request;
  request.set_directory_key(dir);
  return {&TfAsync::GetKeyValueDir, std::move(request),
          [done = std::move(done)](const absl::Status& s, const tf::GetKeyValueDirResponse& r) {
            if (!s.ok()) return done(s);
            std::vector<KeyValueEntry> entries;
            for (const auto& kv : r.kv()) entries.push_back({kv.key(), kv.value()});
            done(std::move(entries));
          }};
}

TfRequest<tf::DeleteKeyValueRequest, tf::DeleteKeyValueResponse> DeleteKeyValue(
    const std::string& key, StatusDone done) {
  tf::DeleteKeyValueRequest request;
  request.set_key(key);
  return {&TfAsync::DeleteKeyValue, std::move(request),
          UpstreamStatusOnly<tf::DeleteKeyValueResponse>(std::move(done))};
}

// ---- cohort.v1 ---------------------------------------------------------------------------

CohortRequest<v1::GetClusterSnapshotRequest, v1::ClusterSnapshot> GetClusterSnapshot(
    Done<CoordinatorSnapshot> done) {
  return {&CohortAsync::GetClusterSnapshot, v1::GetClusterSnapshotRequest(),
          [done = std::move(done)](const absl::Status& s, const v1::ClusterSnapshot& snapshot) {
            if (!s.ok()) return done(s);
            done(FromWire(snapshot, absl::Now()));
          }};
}

CohortRequest<v1::TorchStoreRequest, v1::TorchStoreResponse> TorchStore(
    const ForwardedTorchCommand& command, Done<std::string> done) {
  CohortRequest<v1::TorchStoreRequest, v1::TorchStoreResponse> r{
      &CohortAsync::TorchStore, v1::TorchStoreRequest(),
      [done = std::move(done)](const absl::Status& s, const v1::TorchStoreResponse& response) {
        if (!s.ok()) return done(s);
        done(response.reply());
      }};
  TorchCommandToProto(command, &r.request);
  // A WAIT parks in the coordinator until its keys are there: on the park stream, and parked
  // again by a restarted coordinator. A command sent again is harmless: the coordinator
  // keeps the answer of the connection's last change (torch::ForwardedCommands).
  r.options.park = command.waits;
  return r;
}

CohortRequest<v1::TorchStoreBatchRequest, v1::TorchStoreBatchResponse> TorchStoreBatch(
    const std::vector<ForwardedTorchCommand>& commands,
    Done<std::vector<absl::StatusOr<std::string>>> done) {
  // Sent again after an outage, its commands already carried out are not carried out again
  // (each client's record, torch::ForwardedCommands::ExecuteBatch).
  CohortRequest<v1::TorchStoreBatchRequest, v1::TorchStoreBatchResponse> r{
      &CohortAsync::TorchStoreBatch, v1::TorchStoreBatchRequest(),
      [done = std::move(done), entries = commands.size()](
          const absl::Status& s, const v1::TorchStoreBatchResponse& response) {
        if (!s.ok()) return done(s);
        auto results = TorchResultsFromProto(response);
        if (results.size() != entries) {
          return done(
              absl::InternalError(absl::StrCat("the coordinator answered ", results.size(),
                                               " results to ", entries, " forwarded commands")));
        }
        done(std::move(results));
      }};
  TorchBatchToProto(commands, &r.request);
  return r;
}

}  // namespace cohort::upstream
