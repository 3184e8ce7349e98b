#pragma once
// The calls of a CoordinationBackend as requests to the coordinator, for the sidecar proxy:
// for each, the request in the tensorflow protocol (cohort.v1 for the snapshot and PyTorch's
// store), the method that sends it, how it is sent (UpstreamSendOptions), and how its answer
// becomes the caller's. Also how a request goes on the park stream, and MakeUpstreamCall,
// which turns a request into an UpstreamCall for UpstreamConnection to send. Translation only:
// nothing here keeps state or takes a lock; `done` is called by whoever sends the request.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/coordination_backend.h"
#include "service/proxy/upstream_call_table.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort {

using TfAsync = tensorflow::CoordinationService::StubInterface::async_interface;
using CohortAsync = v1::Coordinator::StubInterface::async_interface;

// One request to the coordinator, sent with `method` of a `Stub`; `done` gets the
// coordinator's status translated back to the core's, and the response.
template <typename Stub, typename Req, typename Resp>
struct UpstreamRequest {
  using Method = void (Stub::*)(grpc::ClientContext*, const Req*, Resp*,
                                std::function<void(grpc::Status)>);
  using Answer = std::function<void(const absl::Status&, const Resp&)>;
  UpstreamRequest(Method method, Req request, Answer done, UpstreamSendOptions options = {})
      : method(method),
        request(std::move(request)),
        done(std::move(done)),
        options(std::move(options)) {}

  Method method;
  Req request;
  Answer done;
  UpstreamSendOptions options;
};
template <typename Req, typename Resp>
using TfRequest = UpstreamRequest<TfAsync, Req, Resp>;
template <typename Req, typename Resp>
using CohortRequest = UpstreamRequest<CohortAsync, Req, Resp>;

namespace upstream {

namespace tf = tensorflow;
using StatusDone = CoordinationBackend::StatusDone;
template <typename T>
using Done = CoordinationBackend::Done<T>;

// ---- Tasks -------------------------------------------------------------------------------
// A task registers: it waits for every task of the job (parked). `done` gets the service
// incarnation that answered.
TfRequest<tf::RegisterTaskRequest, tf::RegisterTaskResponse> RegisterTask(const TaskName& task,
                                                                          uint64_t incarnation,
                                                                          Done<uint64_t> done);
// A task registered here registers again after an outage, before anything else is sent.
TfRequest<tf::RegisterTaskRequest, tf::RegisterTaskResponse> RegisterTaskAgain(const TaskName& task,
                                                                               uint64_t incarnation,
                                                                               StatusDone done);
// With the task's progress in cohort_progress (left out when empty).
TfRequest<tf::HeartbeatRequest, tf::HeartbeatResponse> Heartbeat(const TaskName& task,
                                                                 uint64_t incarnation,
                                                                 const TaskProgress& progress,
                                                                 StatusDone done);
// Waits at the shutdown barrier (parked); a shutdown sent again that finds the task shut down
// (by the first attempt) is OK.
TfRequest<tf::ShutdownTaskRequest, tf::ShutdownTaskResponse> ShutdownTask(const TaskName& task,
                                                                          StatusDone done);
TfRequest<tf::ResetTaskRequest, tf::ResetTaskResponse> ResetTask(const TaskName& task,
                                                                 StatusDone done);
// An error of `source` reported by someone else, to the task.
TfRequest<tf::ReportErrorToTaskRequest, tf::ReportErrorToTaskResponse> ReportErrorToTask(
    const TaskName& source, const absl::Status& error, StatusDone done);
// An error of `source` reported by itself, to the service, with the reason its reporter gave
// (cohort_failure_reason; kUnspecified leaves the field out).
TfRequest<tf::ReportErrorToServiceRequest, tf::ReportErrorToServiceResponse> ReportErrorToService(
    const TaskName& source, const absl::Status& error, FailureReason reason, StatusDone done);
// Parked.
TfRequest<tf::PollForErrorRequest, tf::PollForErrorResponse> PollForError(const TaskName& task,
                                                                          StatusDone done);
TfRequest<tf::GetTaskStateRequest, tf::GetTaskStateResponse> GetTaskState(
    const std::vector<TaskName>& tasks, Done<std::vector<TaskStateInfo>> done);
// Local callers watching the same job from the same version share one upstream call.
TfRequest<tf::WatchJobStateRequest, tf::WatchJobStateResponse> WatchJobState(
    const std::string& job, int64_t version, Done<JobStateView> done);
TfRequest<tf::GetAliveTasksRequest, tf::GetAliveTasksResponse> GetAliveTasks(
    const TaskName& requester, const std::vector<TaskName>& tasks,
    Done<std::vector<AliveTask>> done);
TfRequest<tf::WaitForAllTasksRequest, tf::WaitForAllTasksResponse> WaitForAllTasks(
    const TaskName& task, const std::string& devices, Done<std::vector<std::string>> done);

// ---- Barriers ----------------------------------------------------------------------------
// Parked.
TfRequest<tf::BarrierRequest, tf::BarrierResponse> Barrier(const std::string& id, int64_t counter,
                                                           absl::Duration timeout,
                                                           const TaskName& caller,
                                                           const std::vector<TaskName>& tasks,
                                                           Done<int64_t> done);
TfRequest<tf::CancelBarrierRequest, tf::CancelBarrierResponse> CancelBarrier(const std::string& id,
                                                                             int64_t counter,
                                                                             const TaskName& caller,
                                                                             StatusDone done);

// ---- Key-value store ---------------------------------------------------------------------
TfRequest<tf::InsertKeyValueRequest, tf::InsertKeyValueResponse> InsertKeyValue(
    const std::string& key, const std::string& value, bool allow_overwrite, StatusDone done);
// Parked. A timed get has a deadline of its own; local callers waiting for the same key with
// no timeout share one upstream get.
TfRequest<tf::GetKeyValueRequest, tf::GetKeyValueResponse> GetKeyValue(
    const std::string& key, std::optional<absl::Duration> timeout, Done<std::string> done);
TfRequest<tf::TryGetKeyValueRequest, tf::TryGetKeyValueResponse> TryGetKeyValue(
    const std::string& key, Done<std::string> done);
TfRequest<tf::IncrementKeyValueRequest, tf::IncrementKeyValueResponse> IncrementKeyValue(
    const std::string& key, int64_t delta, Done<int64_t> done);
TfRequest<tf::GetKeyValueDirRequest, tf::GetKeyValueDirResponse> GetKeyValueDir(
    const std::string& dir, Done<std::vector<KeyValueEntry>> done);
TfRequest<tf::DeleteKeyValueRequest, tf::DeleteKeyValueResponse> DeleteKeyValue(
    const std::string& key, StatusDone done);

// ---- cohort.v1 ---------------------------------------------------------------------------
CohortRequest<v1::GetClusterSnapshotRequest, v1::ClusterSnapshot> GetClusterSnapshot(
    Done<CoordinatorSnapshot> done);
// A command that waits goes on the park stream.
CohortRequest<v1::TorchStoreRequest, v1::TorchStoreResponse> TorchStore(
    const ForwardedTorchCommand& command, Done<std::string> done);
CohortRequest<v1::TorchStoreBatchRequest, v1::TorchStoreBatchResponse> TorchStoreBatch(
    const std::vector<ForwardedTorchCommand>& commands,
    Done<std::vector<absl::StatusOr<std::string>>> done);

}  // namespace upstream

// ---- The park stream ---------------------------------------------------------------------
// The calls that can go on the park stream, and how their messages go into and out of it.
inline void ToPark(const tensorflow::PollForErrorRequest& request, absl::Time,
                   v1::ParkRequest* out) {
  *out->mutable_poll_for_error() = request;
}
inline void ToPark(const tensorflow::BarrierRequest& request, absl::Time, v1::ParkRequest* out) {
  *out->mutable_barrier() = request;
}
inline void ToPark(const tensorflow::GetKeyValueRequest& request, absl::Time deadline,
                   v1::ParkRequest* out) {
  // A timed get's own deadline travels as what is left of it at this attempt.
  auto* get = out->mutable_get_key_value();
  get->set_key(request.key());
  if (deadline != absl::InfiniteFuture()) {
    get->set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
  }
}
inline void ToPark(const tensorflow::RegisterTaskRequest& request, absl::Time,
                   v1::ParkRequest* out) {
  *out->mutable_register_task() = request;
}
inline void ToPark(const tensorflow::ShutdownTaskRequest& request, absl::Time,
                   v1::ParkRequest* out) {
  *out->mutable_shutdown_task() = request;
}
inline void ToPark(const v1::TorchStoreRequest& request, absl::Time, v1::ParkRequest* out) {
  *out->mutable_torch_store() = request;
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::RegisterTaskResponse* out) {
  *out = in.register_task();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::ShutdownTaskResponse* out) {
  *out = in.shutdown_task();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::PollForErrorResponse* out) {
  *out = in.poll_for_error();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::BarrierResponse* out) {
  *out = in.barrier();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::GetKeyValueResponse* out) {
  *out = in.get_key_value();
}
inline void FromPark(const v1::ParkResponse& in, v1::TorchStoreResponse* out) {
  *out = in.torch_store();
}
template <typename Req>
constexpr bool kParkable = std::is_same_v<Req, tensorflow::PollForErrorRequest> ||
                           std::is_same_v<Req, tensorflow::BarrierRequest> ||
                           std::is_same_v<Req, tensorflow::GetKeyValueRequest> ||
                           std::is_same_v<Req, tensorflow::RegisterTaskRequest> ||
                           std::is_same_v<Req, tensorflow::ShutdownTaskRequest> ||
                           std::is_same_v<Req, v1::TorchStoreRequest>;

// `request` as a call to send with `async`, for a caller whose own deadline is
// `caller_deadline`; and the subscriber that hands its answer to the request's `done`.
template <typename Stub, typename Req, typename Resp>
std::pair<std::shared_ptr<UpstreamCall>, UpstreamSubscriber> MakeUpstreamCall(
    Stub* async, UpstreamRequest<Stub, Req, Resp> request, absl::Time caller_deadline) {
  auto messages = std::make_shared<std::pair<Req, Resp>>();
  messages->first = std::move(request.request);
  auto call = std::make_shared<UpstreamCall>();
  call->start = [async, method = request.method, messages](grpc::ClientContext* ctx,
                                                           std::function<void(grpc::Status)> d) {
    messages->second.Clear();
    (async->*method)(ctx, &messages->first, &messages->second, std::move(d));
  };
  call->response = &messages->second;
  call->messages = messages;
  UpstreamSendOptions& options = request.options;
  if constexpr (kParkable<Req>) {
    if (options.park) {
      call->park = [messages, deadline = options.deadline](v1::ParkRequest* out) {
        ToPark(messages->first, deadline, out);
      };
      call->take_park_result = [messages](const v1::ParkResponse& in) {
        FromPark(in, &messages->second);
      };
    }
  }
  // A shared call serves callers with different deadlines; each leaves on its own.
  call->deadline =
      options.share_key.empty() ? std::min(caller_deadline, options.deadline) : options.deadline;
  call->options = std::move(options);
  UpstreamSubscriber subscriber = [done = std::move(request.done)](
                                      const absl::Status& s, const google::protobuf::Message& m) {
    done(s, static_cast<const Resp&>(m));
  };
  return {std::move(call), std::move(subscriber)};
}

}  // namespace cohort
