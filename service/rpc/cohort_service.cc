#include "service/rpc/cohort_service.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "service/rpc/park_stream.h"
#include "service/rpc/torch_store_messages.h"

namespace cohort {
namespace {

// A response carries at most this much of keys and values (one revision may exceed it).
constexpr size_t kWatchBatchBytes = size_t{4} << 20;

v1::KeyEvent::Type ToProto(KeyChange::Type type) {
  switch (type) {
    case KeyChange::Type::kInserted:
      return v1::KeyEvent::INSERTED;
    case KeyChange::Type::kUpdated:
      return v1::KeyEvent::UPDATED;
    case KeyChange::Type::kDeleted:
      return v1::KeyEvent::DELETED;
  }
  return v1::KeyEvent::TYPE_UNSPECIFIED;
}

v1::TaskState ToProto(TaskState state) {
  switch (state) {
    case TaskState::kUninitialized:
      return v1::UNINITIALIZED;
    case TaskState::kDisconnected:
      return v1::DISCONNECTED;
    case TaskState::kConnected:
      return v1::CONNECTED;
    case TaskState::kError:
      return v1::ERROR;
  }
  return v1::TASK_STATE_UNSPECIFIED;
}

// One WatchKeys stream. The store queues events on the watch and notifies; Pump moves
// them to the wire one response at a time. The watch is a parked call, so the client
// leaving or the service stopping ends it through the parked-call registry.
class WatchKeysReactor final : public grpc::ServerWriteReactor<v1::WatchKeysResponse> {
 public:
  WatchKeysReactor(CoordinationBackend* backend, RpcMetrics* metrics,
                   grpc::CallbackServerContext* ctx, const v1::WatchKeysRequest& request)
      : backend_(backend), metrics_(metrics), waiter_(backend->NewWaiterId()), start_(absl::Now()) {
    backend_->WatchKeys(
        CallContext{waiter_, DeadlineOf(*ctx)}, request.key(), request.start_revision(),
        [this] { Pump(); },
        [this](absl::StatusOr<std::shared_ptr<KeyWatch>> watch) { Started(std::move(watch)); });
  }

  void Started(absl::StatusOr<std::shared_ptr<KeyWatch>> watch) {
    absl::MutexLock lock(&mu_);
    started_ = true;
    if (!watch.ok()) {
      EndLocked(watch.status());
      return;
    }
    if (finished_) {
      // The client left before the watch was established (OnDone has not run yet: it
      // waits for Finish, which EndLocked called).
      (*watch)->Detach();
      return;
    }
    watch_ = *watch;
    response_.set_created(true);
    response_.set_created_revision(watch_->created_revision());
    writing_ = true;
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The client is gone; OnCancel ends the watch.
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    backend_->Cancel(waiter_, absl::CancelledError("the watcher went away"));
    absl::MutexLock lock(&mu_);
    EndLocked(absl::CancelledError("the watcher went away"));
  }

  void OnDone() override {
    std::shared_ptr<KeyWatch> watch;
    {
      absl::MutexLock lock(&mu_);
      // A backend that establishes the watch later answers once the waiter is cancelled
      // (OnCancel did that); this object must outlive that answer.
      mu_.Await(absl::Condition(&started_));
      watch = watch_;
    }
    if (watch) {
      // A stream that ended for its own reasons (fell behind) leaves nothing parked, and
      // after Detach no notification can reach this object.
      backend_->Cancel(waiter_, absl::CancelledError("the watch ended"));
      watch->Detach();
    }
    delete this;
  }

 private:
  void Pump() {
    absl::MutexLock lock(&mu_);
    PumpLocked();
  }

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || !watch_) return;
    KeyWatch::Batch batch = watch_->Take(kWatchBatchBytes);
    if (!batch.events.empty()) {
      response_.Clear();
      for (const KeyChangePtr& event : batch.events) {
        v1::KeyEvent* out = response_.add_events();
        out->set_type(ToProto(event->type));
        out->set_key(event->key);
        out->set_value(event->value);
        out->set_revision(event->revision);
      }
      writing_ = true;
      StartWrite(&response_);
      return;
    }
    if (batch.end) EndLocked(*batch.end);
  }

  void EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    if (metrics_)
      metrics_->Record(Protocol::kCohort, "WatchKeys", status.code(), absl::Now() - start_);
    Finish(ToGrpcStatus(status, Protocol::kCohort));
  }

  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  const WaiterId waiter_;
  const absl::Time start_;

  absl::Mutex mu_;
  std::shared_ptr<KeyWatch> watch_ ABSL_GUARDED_BY(mu_);
  v1::WatchKeysResponse response_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// A stream refused before it began (the call lacks the credential).
template <typename Reactor>
class RefusedStream final : public Reactor {
 public:
  explicit RefusedStream(const absl::Status& why) {
    this->Finish(ToGrpcStatus(why, Protocol::kCohort));
  }
  void OnDone() override { delete this; }
};

void FillSnapshot(const CoordinatorSnapshot& view, v1::ClusterSnapshot* response) {
  const absl::Time now = view.taken_at;
  response->set_service_incarnation(view.service_incarnation);
  response->set_default_job(view.default_job);
  response->set_cluster_registered(view.cluster_registered);
  if (!view.job_error.ok()) {
    // As it came: a proxy passes the coordinator's text on (Unknown, already "CODE: ...").
    response->set_job_error(view.job_error.code() == absl::StatusCode::kUnknown
                                ? std::string(view.job_error.message())
                                : absl::StrCat(absl::StatusCodeToString(view.job_error.code()),
                                               ": ", view.job_error.message()));
  }
  for (const CoordinatorSnapshot::Task& t : view.tasks) {
    const TaskStateInfo& info = t.info;
    v1::TaskSnapshot* task = response->add_tasks();
    task->set_job(info.task.job);
    task->set_task_id(info.task.id);
    task->set_state(ToProto(info.state));
    task->set_incarnation(info.incarnation);
    task->set_seconds_since_heartbeat(info.last_heartbeat == absl::InfinitePast()
                                          ? -1
                                          : absl::ToDoubleSeconds(now - info.last_heartbeat));
    if (!info.error.ok()) {
      task->set_error_code(static_cast<int32_t>(info.error.code()));
      task->set_error_message(std::string(info.error.message()));
      // The numbers are the same (common/failure_reason.h).
      task->set_reason(static_cast<v1::FailureReason>(info.reason));
    }
    task->set_auxiliary(t.auxiliary);
    if (info.progress.step) task->set_step(*info.progress.step);
    if (info.progress.busy_seconds_per_step) {
      task->set_busy_seconds_per_step(*info.progress.busy_seconds_per_step);
    }
  }
  for (const BarrierSnapshot& barrier : view.barriers) {
    v1::BarrierSnapshot* out = response->add_barriers();
    out->set_id(barrier.id);
    out->set_counter(barrier.counter);
    out->set_open_seconds(absl::ToDoubleSeconds(now - barrier.started));
    out->set_seconds_to_deadline(absl::ToDoubleSeconds(barrier.deadline - now));
    for (const TaskName& task : barrier.arrived) out->add_arrived(task.ToString());
    for (const TaskName& task : barrier.missing) out->add_missing(task.ToString());
  }
  response->set_key_count(static_cast<int64_t>(view.key_values.keys));
  response->set_key_bytes(static_cast<int64_t>(view.key_values.bytes));
  response->set_key_revision(view.key_values.revision);
}

}  // namespace

grpc::ServerWriteReactor<v1::WatchKeysResponse>* CohortCoordinatorService::WatchKeys(
    grpc::CallbackServerContext* ctx, const v1::WatchKeysRequest* request) {
  if (auth_) {
    if (absl::Status refused = auth_->Check(*ctx); !refused.ok()) {
      if (metrics_) metrics_->Record(Protocol::kCohort, "WatchKeys", refused.code(), {});
      return new RefusedStream<grpc::ServerWriteReactor<v1::WatchKeysResponse>>(refused);
    }
  }
  return new WatchKeysReactor(backend_, metrics_, ctx, *request);
}

grpc::ServerUnaryReactor* CohortCoordinatorService::GetClusterSnapshot(
    grpc::CallbackServerContext* ctx, const v1::GetClusterSnapshotRequest*,
    v1::ClusterSnapshot* response) {
  auto* call = new RpcCall(backend_, metrics_, Protocol::kCohort, "GetClusterSnapshot", ctx, auth_);
  if (call->Refused()) return call;
  backend_->GetCoordinatorSnapshot(call->Context(),
                                   [call, response](absl::StatusOr<CoordinatorSnapshot> view) {
                                     if (view.ok()) FillSnapshot(*view, response);
                                     call->Reply(view.status());
                                   });
  return call;
}

grpc::ServerBidiReactor<v1::ParkRequest, v1::ParkResponse>* CohortCoordinatorService::Park(
    grpc::CallbackServerContext* ctx) {
  if (auth_) {
    if (absl::Status refused = auth_->Check(*ctx); !refused.ok()) {
      if (metrics_) metrics_->Record(Protocol::kCohort, "Park", refused.code(), {});
      return new RefusedStream<grpc::ServerBidiReactor<v1::ParkRequest, v1::ParkResponse>>(refused);
    }
  }
  return park_streams_.NewStream();
}

grpc::ServerUnaryReactor* CohortCoordinatorService::TorchStore(grpc::CallbackServerContext* ctx,
                                                               const v1::TorchStoreRequest* request,
                                                               v1::TorchStoreResponse* response) {
  auto* call = new RpcCall(backend_, metrics_, Protocol::kCohort, "TorchStore", ctx, auth_);
  if (call->Refused()) return call;
  backend_->TorchStoreCommand(call->Context(), TorchCommandFromProto(*request),
                              [call, response](absl::StatusOr<std::string> reply) {
                                if (reply.ok()) response->set_reply(std::move(*reply));
                                call->Reply(reply.status());
                              });
  return call;
}

grpc::ServerUnaryReactor* CohortCoordinatorService::TorchStoreBatch(
    grpc::CallbackServerContext* ctx, const v1::TorchStoreBatchRequest* request,
    v1::TorchStoreBatchResponse* response) {
  auto* call = new RpcCall(backend_, metrics_, Protocol::kCohort, "TorchStoreBatch", ctx, auth_);
  if (call->Refused()) return call;
  // Each command counts as a TorchStore call too (its code, the request's time here), so that
  // forwarded commands are counted and timed alike however they travel.
  backend_->TorchStoreBatch(
      call->Context(), TorchBatchFromProto(*request),
      [call, response, metrics = metrics_,
       start = absl::Now()](absl::StatusOr<std::vector<absl::StatusOr<std::string>>> results) {
        if (results.ok()) {
          if (metrics != nullptr) {
            const absl::Duration latency = absl::Now() - start;
            for (const auto& r : *results) {
              metrics->Record(Protocol::kCohort, "TorchStore", r.status().code(), latency);
            }
          }
          TorchResultsToProto(*results, response);
        }
        call->Reply(results.status());
      });
  return call;
}

}  // namespace cohort
