#pragma once
// The requests that tensorflow.CoordinationService and xla.coordination.CoordinationService
// have in common, written once. The two protocols carry them in messages of different
// packages but with the same field names, so each handler is a template over the message
// types; task identities differ and are resolved by the adapters before they get here.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "service/backend/coordination_backend.h"
#include "service/core/errors.h"
#include "service/rpc/rpc_call.h"

namespace cohort::requests {

// The wire number of a task state: the same in every protocol (1 uninitialized ..4 error).
inline int WireTaskState(TaskState state) {
  switch (state) {
    case TaskState::kUninitialized:
      return 1;
    case TaskState::kDisconnected:
      return 2;
    case TaskState::kConnected:
      return 3;
    case TaskState::kError:
      return 4;
  }
  return 0;
}

// A task's state into a CoordinatedTaskStateInfo or a TaskInfo; `set_source` writes the
// error's source task into the protocol's error payload.
template <typename Out, typename SetSource>
void FillTaskState(const TaskStateInfo& info, Out* out, SetSource set_source) {
  using State = decltype(out->state());
  out->set_state(static_cast<State>(WireTaskState(info.state)));
  out->set_incarnation(info.incarnation);
  if (info.error.ok()) return;
  out->set_error_code(static_cast<int32_t>(info.error.code()));
  out->set_error_message(std::string(info.error.message()));
  ServiceErrorInfo source = GetServiceError(info.error).value_or(ServiceErrorInfo{});
  out->mutable_error_payload()->set_is_reported_error(source.is_reported_error);
  if (source.source) set_source(*source.source, out->mutable_error_payload());
}

inline CoordinationBackend::StatusDone ReplyWith(RpcCall* call) {
  return [call](const absl::Status& s) { call->Reply(s); };
}

template <typename Request>
grpc::ServerUnaryReactor* InsertKeyValue(RpcCall* call, CoordinationBackend* backend,
                                         const Request& request) {
  backend->InsertKeyValue(call->Context(), request.kv().key(), request.kv().value(),
                          request.allow_overwrite(), ReplyWith(call));
  return call;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* GetKeyValue(RpcCall* call, CoordinationBackend* backend,
                                      const Request& request, Response* response) {
  backend->GetKeyValue(call->Context(), request.key(), std::nullopt,
                       [call, &request, response](absl::StatusOr<std::string> value) {
                         if (value.ok()) {
                           response->mutable_kv()->set_key(request.key());
                           response->mutable_kv()->set_value(std::move(*value));
                         }
                         call->Reply(value.status());
                       });
  return call;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* TryGetKeyValue(RpcCall* call, CoordinationBackend* backend,
                                         const Request& request, Response* response) {
  backend->TryGetKeyValue(call->Context(), request.key(),
                          [call, &request, response](absl::StatusOr<std::string> value) {
                            if (value.ok()) {
                              response->mutable_kv()->set_key(request.key());
                              response->mutable_kv()->set_value(std::move(*value));
                            }
                            call->Reply(value.status());
                          });
  return call;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* IncrementKeyValue(RpcCall* call, CoordinationBackend* backend,
                                            const Request& request, Response* response) {
  backend->IncrementKeyValue(call->Context(), request.key(), request.increment(),
                             [call, &request, response](absl::StatusOr<int64_t> sum) {
                               if (sum.ok()) {
                                 response->mutable_kv()->set_key(request.key());
                                 response->mutable_kv()->set_value(absl::StrCat(*sum));
                               }
                               call->Reply(sum.status());
                             });
  return call;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* GetKeyValueDir(RpcCall* call, CoordinationBackend* backend,
                                         const Request& request, Response* response) {
  backend->GetKeyValueDir(
      call->Context(), request.directory_key(),
      [call, &request, response](absl::StatusOr<std::vector<KeyValueEntry>> entries) {
        if (entries.ok()) {
          response->set_directory_key(request.directory_key());
          for (auto& entry : *entries) {
            auto* kv = response->add_kv();
            kv->set_key(std::move(entry.key));
            kv->set_value(std::move(entry.value));
          }
        }
        call->Reply(entries.status());
      });
  return call;
}

template <typename Request>
grpc::ServerUnaryReactor* DeleteKeyValue(RpcCall* call, CoordinationBackend* backend,
                                         const Request& request) {
  backend->DeleteKeyValue(call->Context(), request.key(), ReplyWith(call));
  return call;
}

// The caller and the task list come resolved; the rest of the request is the same.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Barrier(RpcCall* call, CoordinationBackend* backend,
                                  const Request& request, const TaskName& caller,
                                  std::vector<TaskName>&& tasks, Response* response) {
  if (request.barrier_timeout_in_ms() < 0) {
    return call->Reply(absl::InvalidArgumentError("barrier_timeout_in_ms must not be negative"));
  }
  absl::Duration timeout = request.barrier_timeout_in_ms() == 0
                               ? absl::InfiniteDuration()
                               : absl::Milliseconds(request.barrier_timeout_in_ms());
  backend->Barrier(call->Context(), request.barrier_id(), request.counter(), timeout, caller,
                   std::move(tasks), [call, response](absl::StatusOr<int64_t> counter) {
                     if (counter.ok()) response->set_counter(*counter);
                     call->Reply(counter.status());
                   });
  return call;
}

template <typename Request>
grpc::ServerUnaryReactor* CancelBarrier(RpcCall* call, CoordinationBackend* backend,
                                        const Request& request, const TaskName& caller) {
  backend->CancelBarrier(call->Context(), request.barrier_id(), request.counter(), caller,
                         ReplyWith(call));
  return call;
}

// Answers alive tasks through `add`, called once per alive task with its incarnation.
template <typename Add>
grpc::ServerUnaryReactor* GetAliveTasks(RpcCall* call, CoordinationBackend* backend,
                                        const TaskName& requester, std::vector<TaskName>&& tasks,
                                        Add add) {
  backend->GetAliveTasks(call->Context(), requester, std::move(tasks),
                         [call, add](absl::StatusOr<std::vector<AliveTask>> alive) {
                           if (alive.ok()) {
                             for (const AliveTask& a : *alive) add(a);
                           }
                           call->Reply(alive.status());
                         });
  return call;
}

inline grpc::ServerUnaryReactor* RegisterTask(RpcCall* call, CoordinationBackend* backend,
                                              const TaskName& task, uint64_t incarnation,
                                              std::function<void(uint64_t)> set_incarnation) {
  backend->RegisterTask(
      call->Context(), task, incarnation,
      [call, backend, set_incarnation = std::move(set_incarnation)](const absl::Status& s) {
        if (s.ok()) set_incarnation(backend->service_incarnation());
        call->Reply(s);
      });
  return call;
}

// `progress`: the request's cohort_progress (empty when the protocol has none); one that is
// not valid is refused before the heartbeat counts.
inline grpc::ServerUnaryReactor* Heartbeat(RpcCall* call, CoordinationBackend* backend,
                                           const TaskName& task, uint64_t incarnation,
                                           std::function<void(uint64_t)> set_incarnation,
                                           const TaskProgress& progress = {}) {
  if (!IsValidTaskProgress(progress)) {
    auto text = [](const auto& value) {
      return value ? absl::StrCat(*value) : std::string("none");
    };
    return call->Reply(absl::InvalidArgumentError(absl::StrCat(
        "cohort_progress (step ", text(progress.step), ", busy_seconds_per_step ",
        text(progress.busy_seconds_per_step),
        ") needs a step of 0 or more and busy seconds per step that are finite and 0 or more; "
        "the heartbeat was not counted")));
  }
  backend->Heartbeat(
      call->Context(), task, incarnation, progress,
      [call, backend, set_incarnation = std::move(set_incarnation)](const absl::Status& s) {
        if (s.ok()) set_incarnation(backend->service_incarnation());
        call->Reply(s);
      });
  return call;
}

inline grpc::ServerUnaryReactor* ShutdownTask(RpcCall* call, CoordinationBackend* backend,
                                              const TaskName& task) {
  backend->ShutdownTask(call->Context(), task, ReplyWith(call));
  return call;
}

inline grpc::ServerUnaryReactor* PollForError(RpcCall* call, CoordinationBackend* backend,
                                              const TaskName& task) {
  backend->PollForError(call->Context(), task, ReplyWith(call));
  return call;
}

// `reason`: the request's cohort_failure_reason, a number (0 when the protocol has none); one
// that is no FailureReason is refused before anything changes.
inline grpc::ServerUnaryReactor* ReportError(RpcCall* call, CoordinationBackend* backend,
                                             const TaskName& source, int32_t code,
                                             const std::string& message, ErrorReporter by,
                                             int32_t reason = 0) {
  std::optional<FailureReason> known = FailureReasonFromNumber(reason);
  if (!known) {
    return call->Reply(absl::InvalidArgumentError(
        absl::StrCat("cohort_failure_reason ", reason, " is no failure reason (0 to ",
                     static_cast<int32_t>(kLastFailureReason), "); the error was not reported")));
  }
  backend->ReportError(call->Context(), source,
                       absl::Status(static_cast<absl::StatusCode>(code), message), by, *known,
                       ReplyWith(call));
  return call;
}

// WatchJobState / WatchTasks: `fill` writes one task's state into the response.
template <typename Response, typename Fill>
grpc::ServerUnaryReactor* WatchJobState(RpcCall* call, CoordinationBackend* backend,
                                        const std::string& job, int64_t version, Response* response,
                                        Fill fill) {
  backend->WatchJobState(call->Context(), job, version,
                         [call, response, fill](absl::StatusOr<JobStateView> view) {
                           if (view.ok()) {
                             response->set_version_number((*view)->version);
                             for (const TaskStateInfo& info : (*view)->tasks) {
                               fill(info, response->add_task_state());
                             }
                           }
                           call->Reply(view.status());
                         });
  return call;
}

}  // namespace cohort::requests
