#include "service/rpc/park_stream.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "service/rpc/torch_store_messages.h"

namespace cohort {

namespace tf = tensorflow;

// One Park stream. Reads are taken one at a time and each opens (or cancels) a backend
// call; answers are queued and written one at a time, in the order they end. The backend's
// callbacks point at this object, so it stays until every call it opened has answered:
// when the stream ends, the calls still open are cancelled, and OnDone waits for their
// answers.
class ParkStream final : public grpc::ServerBidiReactor<v1::ParkRequest, v1::ParkResponse> {
 public:
  ParkStream(ParkStreams* owner, CoordinationBackend* backend, RpcMetrics* metrics)
      : owner_(owner), backend_(backend), metrics_(metrics) {
    StartRead(&request_);
  }

  // Ends the stream with `why` once its open calls have answered (they are cancelled).
  void Close(const absl::Status& why) {
    {
      absl::MutexLock lock(&mu_);
      if (!closing_) end_ = ToGrpcStatus(why, Protocol::kCohort);
    }
    Close();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client closed its side or went away: nothing more will be asked.
      Close();
      return;
    }
    Dispatch(request_);
    absl::MutexLock lock(&mu_);
    if (!finished_) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) closing_ = true;  // the client is gone; its read fails next
    if (closing_) {
      queue_.clear();
      MaybeFinishLocked();
      return;
    }
    WriteNextLocked();
  }

  void OnCancel() override { Close(); }

  void OnDone() override {
    {
      absl::MutexLock lock(&mu_);
      auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_.empty(); };
      mu_.Await(absl::Condition(&answered));
    }
    owner_->Forget(this);
    delete this;
  }

 private:
  struct Open {
    WaiterId waiter;
    const char* method;
    absl::Time start;
  };
  using Fill = std::function<void(v1::ParkResponse*)>;

  void Dispatch(const v1::ParkRequest& request) {
    const uint64_t id = request.id();
    if (request.call_case() == v1::ParkRequest::kCancel) {
      std::optional<WaiterId> waiter;
      {
        absl::MutexLock lock(&mu_);
        if (auto it = open_.find(id); it != open_.end()) waiter = it->second.waiter;
      }
      if (waiter) {
        backend_->Cancel(*waiter, absl::CancelledError("the client cancelled the parked call"));
      }
      return;
    }
    const char* method = MethodName(request.call_case());
    const WaiterId waiter = backend_->NewWaiterId();
    bool duplicate = false;
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      duplicate = open_.contains(id);
      if (!duplicate) open_[id] = Open{waiter, method, absl::Now()};
    }
    if (duplicate) {
      // An answer under that id would be taken for the open call's: the client is broken,
      // and the stream ends.
      if (metrics_) {
        metrics_->Record(Protocol::kCohort, method, absl::StatusCode::kInvalidArgument, {});
      }
      Close(absl::InvalidArgumentError(
          absl::StrCat("park call ", id, " is already open on this stream (ids must be unique)")));
      return;
    }
    Start(request, CallContext{waiter, absl::InfiniteFuture()});
    // The stream may have closed while the call started: it was not among the calls the
    // close cancelled, unless it was already open then.
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      cancel = closing_ && open_.contains(id);
    }
    if (cancel) backend_->Cancel(waiter, absl::CancelledError("the park stream ended"));
  }

  static const char* MethodName(v1::ParkRequest::CallCase call) {
    switch (call) {
      case v1::ParkRequest::kPollForError:
        return "Park/PollForError";
      case v1::ParkRequest::kGetKeyValue:
        return "Park/GetKeyValue";
      case v1::ParkRequest::kBarrier:
        return "Park/Barrier";
      case v1::ParkRequest::kRegisterTask:
        return "Park/RegisterTask";
      case v1::ParkRequest::kShutdownTask:
        return "Park/ShutdownTask";
      case v1::ParkRequest::kTorchStore:
        return "Park/TorchStore";
      default:
        return "Park/Unknown";
    }
  }

  absl::StatusOr<TaskName> Resolve(bool present, const tf::CoordinatedTask& task,
                                   const char* field) const {
    if (!present) {
      return absl::InvalidArgumentError(absl::StrCat("the request names no task (", field, ")"));
    }
    return backend_->ResolveTask(task.job_name(), task.task_id());
  }

  // Starts the backend call of `request`, which answers through Answer(id, ...).
  void Start(const v1::ParkRequest& request, const CallContext& call) {
    const uint64_t id = request.id();
    switch (request.call_case()) {
      case v1::ParkRequest::kPollForError: {
        const auto& poll = request.poll_for_error();
        auto task = Resolve(poll.has_source_task(), poll.source_task(), "source_task");
        if (!task.ok()) return Answer(id, task.status(), {});
        backend_->PollForError(call, *task, [this, id](const absl::Status& s) {
          Answer(id, s, [](v1::ParkResponse* r) { r->mutable_poll_for_error(); });
        });
        return;
      }
      case v1::ParkRequest::kGetKeyValue: {
        const auto& get = request.get_key_value();
        if (get.timeout_ms() < 0) {
          return Answer(id, absl::InvalidArgumentError("timeout_ms must not be negative"), {});
        }
        std::optional<absl::Duration> timeout;
        if (get.timeout_ms() > 0) timeout = absl::Milliseconds(get.timeout_ms());
        backend_->GetKeyValue(call, get.key(), timeout,
                              [this, id, key = get.key()](absl::StatusOr<std::string> v) {
                                if (!v.ok()) return Answer(id, v.status(), {});
                                Answer(id, absl::OkStatus(), [&key, &v](v1::ParkResponse* r) {
                                  auto* kv = r->mutable_get_key_value()->mutable_kv();
                                  kv->set_key(key);
                                  kv->set_value(std::move(*v));
                                });
                              });
        return;
      }
      case v1::ParkRequest::kBarrier: {
        const auto& barrier = request.barrier();
        if (barrier.barrier_timeout_in_ms() < 0) {
          return Answer(
              id, absl::InvalidArgumentError("barrier_timeout_in_ms must not be negative"), {});
        }
        auto caller = Resolve(barrier.has_source_task(), barrier.source_task(), "source_task");
        if (!caller.ok()) return Answer(id, caller.status(), {});
        std::vector<TaskName> tasks;
        for (const auto& t : barrier.tasks()) {
          auto task = backend_->ResolveTask(t.job_name(), t.task_id());
          if (!task.ok()) return Answer(id, task.status(), {});
          tasks.push_back(*task);
        }
        absl::Duration timeout = barrier.barrier_timeout_in_ms() == 0
                                     ? absl::InfiniteDuration()
                                     : absl::Milliseconds(barrier.barrier_timeout_in_ms());
        backend_->Barrier(call, barrier.barrier_id(), barrier.counter(), timeout, *caller,
                          std::move(tasks), [this, id](absl::StatusOr<int64_t> counter) {
                            if (!counter.ok()) return Answer(id, counter.status(), {});
                            Answer(id, absl::OkStatus(), [&counter](v1::ParkResponse* r) {
                              r->mutable_barrier()->set_counter(*counter);
                            });
                          });
        return;
      }
      case v1::ParkRequest::kRegisterTask: {
        const auto& reg = request.register_task();
        auto task = Resolve(reg.has_source_task(), reg.source_task(), "source_task");
        if (!task.ok()) return Answer(id, task.status(), {});
        backend_->RegisterTask(call, *task, reg.incarnation(), [this, id](const absl::Status& s) {
          const uint64_t incarnation = backend_->service_incarnation();
          Answer(id, s, [incarnation](v1::ParkResponse* r) {
            r->mutable_register_task()->set_leader_incarnation(incarnation);
          });
        });
        return;
      }
      case v1::ParkRequest::kShutdownTask: {
        const auto& shutdown = request.shutdown_task();
        auto task = Resolve(shutdown.has_source_task(), shutdown.source_task(), "source_task");
        if (!task.ok()) return Answer(id, task.status(), {});
        backend_->ShutdownTask(call, *task, [this, id](const absl::Status& s) {
          Answer(id, s, [](v1::ParkResponse* r) { r->mutable_shutdown_task(); });
        });
        return;
      }
      case v1::ParkRequest::kTorchStore:
        backend_->TorchStoreCommand(call, TorchCommandFromProto(request.torch_store()),
                                    [this, id](absl::StatusOr<std::string> reply) {
                                      if (!reply.ok()) return Answer(id, reply.status(), {});
                                      Answer(id, absl::OkStatus(), [&reply](v1::ParkResponse* r) {
                                        r->mutable_torch_store()->set_reply(std::move(*reply));
                                      });
                                    });
        return;
      default:
        return Answer(id, absl::InvalidArgumentError("the park request names no call"), {});
    }
  }

  // A call ended: its answer is queued for the wire (dropped once the stream is closing).
  void Answer(uint64_t id, const absl::Status& status, const Fill& fill) {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return;
    Open call = it->second;
    open_.erase(it);
    ReplyLocked(id, call.method, call.start, status, fill);
    MaybeFinishLocked();
  }

  void ReplyLocked(uint64_t id, const char* method, absl::Time start, const absl::Status& status,
                   const Fill& fill) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (metrics_) metrics_->Record(Protocol::kCohort, method, status.code(), absl::Now() - start);
    if (closing_) return;
    v1::ParkResponse& response = queue_.emplace_back();
    response.set_id(id);
    grpc::Status wire = ToGrpcStatus(status, Protocol::kTensorflow);
    response.set_code(static_cast<int32_t>(wire.error_code()));
    response.set_message(wire.error_message());
    response.set_details(wire.error_details());
    if (status.ok() && fill) fill(&response);
    WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || queue_.empty() || finished_) return;
    writing_response_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&writing_response_);
  }

  // Ends every open call; the stream finishes once they have answered.
  void Close() {
    std::vector<WaiterId> waiters;
    {
      absl::MutexLock lock(&mu_);
      if (!closing_) {
        closing_ = true;
        queue_.clear();
      }
      for (const auto& [id, call] : open_) waiters.push_back(call.waiter);
      MaybeFinishLocked();
    }
    for (WaiterId waiter : waiters) {
      backend_->Cancel(waiter, absl::CancelledError("the park stream ended"));
    }
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!closing_ || finished_ || writing_ || !open_.empty()) return;
    finished_ = true;
    Finish(end_);
  }

  ParkStreams* const owner_;
  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  v1::ParkRequest request_;  // the read in progress (reads are sequential)

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Open> open_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::ParkResponse> queue_ ABSL_GUARDED_BY(mu_);
  v1::ParkResponse writing_response_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_ ABSL_GUARDED_BY(mu_);  // what Finish sends
};

ParkStreams::~ParkStreams() {
  // The server was shut down first: every stream is done.
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_.empty(); };
  mu_.Await(absl::Condition(&empty));
}

grpc::ServerBidiReactor<v1::ParkRequest, v1::ParkResponse>* ParkStreams::NewStream() {
  auto* stream = new ParkStream(this, backend_, metrics_);
  absl::Status closed;
  {
    absl::MutexLock lock(&mu_);
    streams_.insert(stream);
    closed = closed_;
  }
  if (!closed.ok()) stream->Close(closed);
  return stream;
}

void ParkStreams::CloseAll(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (closed_.ok()) closed_ = why.ok() ? absl::UnavailableError("the server is closing") : why;
  for (ParkStream* stream : streams_) stream->Close(closed_);
}

void ParkStreams::Forget(ParkStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

}  // namespace cohort
