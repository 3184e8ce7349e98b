// UpstreamBackend: the tasks registered through the proxy (registration, heartbeats answered
// here, the one error poll per task) and the other task calls.
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/proxy/upstream_backend.h"
#include "service/proxy/upstream_forward.h"
#include "service/rpc/status_translation.h"

namespace cohort {

namespace tf = tensorflow;

void UpstreamBackend::OnRegistered(const TaskName& as_called, uint64_t incarnation) {
  // A task that registered before the coordinator was first reached went by the name its
  // client gave (jaxlib's name no job: the coordinator's default job). Its later calls come
  // resolved, so it is kept under its resolved name: else it is not found among the tasks
  // registered here, and its heartbeats are held through an outage instead of answered.
  const TaskName task = ResolveTask(as_called.job, as_called.id).value_or(as_called);
  std::optional<uint64_t> generation;
  {
    absl::MutexLock lock(&mu_);
    generation = tasks_.Register(task, incarnation);
  }
  if (generation) StartTaskPoll(task, *generation);
}

void UpstreamBackend::StartTaskPoll(const TaskName& task, uint64_t generation) {
  // The proxy's own poll: whatever the task's clients do, the coordinator sees one poll
  // per task, and the clients' polls wait here, across outages.
  tf::PollForErrorRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  options.park = true;
  Send<tf::PollForErrorResponse>(
      CallContext{}, &Async::PollForError, std::move(request),
      [this, task, generation](const absl::Status& s, const tf::PollForErrorResponse&) {
        OnTaskPollDone(task, generation, s);
      },
      std::move(options));
}

void UpstreamBackend::OnTaskPollDone(const TaskName& task, uint64_t generation,
                                     const absl::Status& status) {
  std::vector<LocalTaskTable::Poll> polls;
  {
    absl::MutexLock lock(&mu_);
    polls = tasks_.PollDone(task, generation, status);
  }
  for (auto& [waiter, poll] : polls) poll(status);
}

void UpstreamBackend::Forget(const TaskName& as_called, const absl::Status& why) {
  const TaskName task = ResolveTask(as_called.job, as_called.id).value_or(as_called);
  std::vector<LocalTaskTable::Poll> polls;
  {
    absl::MutexLock lock(&mu_);
    polls = tasks_.Leave(task);
  }
  // The task's clients' polls end now with `why`, as the coordinator ends the task's own
  // (the same words): waiting for the proxy's poll to be answered is waiting for nothing
  // when that poll reached the coordinator only after the shutdown (it is parked there,
  // for a task that has left).
  for (auto& [waiter, poll] : polls) poll(why);
}

void UpstreamBackend::ForwardHeartbeat(const TaskName& task, uint64_t incarnation) {
  tf::HeartbeatRequest request;
  request.set_incarnation(incarnation);
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  options.fail_fast = true;
  Send<tf::HeartbeatResponse>(
      CallContext{0, absl::Now() + options_.heartbeat_deadline}, &Async::Heartbeat,
      std::move(request),
      [this, task, incarnation](const absl::Status& s, const tf::HeartbeatResponse&) {
        if (s.ok() || IsOutage(s) || s.code() == absl::StatusCode::kDeadlineExceeded) return;
        absl::MutexLock lock(&mu_);
        tasks_.SetHeartbeatError(task, incarnation, s);
      },
      std::move(options));
}

void UpstreamBackend::RegisterTask(const CallContext& call, const TaskName& task,
                                   uint64_t incarnation, StatusDone done) {
  tf::RegisterTaskRequest request;
  request.set_incarnation(incarnation);
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  options.park = true;  // it waits for every task of the job
  Send<tf::RegisterTaskResponse>(
      call, &Async::RegisterTask, std::move(request),
      [this, task, incarnation, done = std::move(done)](const absl::Status& s,
                                                        const tf::RegisterTaskResponse& r) {
        if (s.ok()) {
          {
            absl::MutexLock lock(&mu_);
            link_.set_service_incarnation(r.leader_incarnation());
          }
          OnRegistered(task, incarnation);
        }
        done(s);
      },
      std::move(options));
}

void UpstreamBackend::Heartbeat(const CallContext& call, const TaskName& task,
                                std::optional<uint64_t> incarnation, StatusDone done) {
  absl::Status answer;
  uint64_t registered = 0;
  bool local = false, forward = false;
  {
    absl::MutexLock lock(&mu_);
    if (link_.ended()) {
      answer = link_.failure();
      local = true;
    } else if (auto here = tasks_.AnswerHeartbeat(task, incarnation)) {
      // Answered here: the coordinator may be away for a while, and the task is alive.
      local = true;
      answer = here->status;
      registered = here->incarnation;
      forward = answer.ok() && link_.connected();
    }
  }
  if (local) {
    if (forward) ForwardHeartbeat(task, registered);
    return done(answer);
  }
  auto send = [this, call, task, done](uint64_t with) {
    tf::HeartbeatRequest request;
    request.set_incarnation(with);
    *request.mutable_source_task() = ToWireTask(task);
    Send<tf::HeartbeatResponse>(
        call, &Async::Heartbeat, std::move(request),
        [done](const absl::Status& s, const tf::HeartbeatResponse&) { done(s); });
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
  absl::MutexLock lock(&mu_);
  return tasks_.CheckIncarnation(task, incarnation);
}

void UpstreamBackend::ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) {
  tf::ShutdownTaskRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  options.park = true;  // it waits at the shutdown barrier
  // The first attempt may have shut the task down before the coordinator went away.
  options.reconcile_reissued = [](const absl::Status& s,
                                  const std::function<void(absl::Status)>& finish) {
    finish(s.code() == absl::StatusCode::kFailedPrecondition ? absl::OkStatus() : s);
  };
  Send<tf::ShutdownTaskResponse>(
      call, &Async::ShutdownTask, std::move(request),
      [this, task, done = std::move(done)](const absl::Status& s, const tf::ShutdownTaskResponse&) {
        if (s.ok()) Forget(task, absl::CancelledError(absl::StrCat(task.ToString(), " shut down")));
        done(s);
      },
      std::move(options));
}

void UpstreamBackend::ResetTask(const CallContext& call, const TaskName& task, StatusDone done) {
  tf::ResetTaskRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  options.once = true;  // an attempt again of the reset that took effect is OK
  Send<tf::ResetTaskResponse>(
      call, &Async::ResetTask, std::move(request),
      [this, task, done = std::move(done)](const absl::Status& s, const tf::ResetTaskResponse&) {
        if (s.ok()) Forget(task, absl::CancelledError(absl::StrCat(task.ToString(), " was reset")));
        done(s);
      },
      std::move(options));
}

void UpstreamBackend::ReportError(const CallContext& call, const TaskName& source,
                                  const absl::Status& error, ErrorReporter by, StatusDone done) {
  if (by == ErrorReporter::kSomeoneElse) {
    tf::ReportErrorToTaskRequest request;
    request.set_error_code(static_cast<int32_t>(error.code()));
    request.set_error_message(std::string(error.message()));
    *request.mutable_error_payload()->mutable_source_task() = ToWireTask(source);
    Send<tf::ReportErrorToTaskResponse>(
        call, &Async::ReportErrorToTask, std::move(request),
        [done](const absl::Status& s, const tf::ReportErrorToTaskResponse&) { done(s); });
    return;
  }
  tf::ReportErrorToServiceRequest request;
  request.set_error_code(static_cast<int32_t>(error.code()));
  request.set_error_message(std::string(error.message()));
  *request.mutable_error_origin() = ToWireTask(source);
  Send<tf::ReportErrorToServiceResponse>(
      call, &Async::ReportErrorToService, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::ReportErrorToServiceResponse&) {
        done(s);
      });
}

void UpstreamBackend::PollForError(const CallContext& call, const TaskName& task, StatusDone done) {
  std::vector<LocalTaskTable::Poll> replaced;
  absl::Status refused;
  bool forward = false;
  StatusDone answer;  // when not parked here
  {
    absl::MutexLock lock(&mu_);
    if (link_.ended()) {
      refused = link_.failure();
      answer = std::move(done);
    } else if (tasks_.WaitsHere(task)) {
      // Waits here for the proxy's own poll of the task. One poll per task, as in the
      // core: a newer one replaces the older.
      replaced = tasks_.AddPoll(task, call.waiter, std::move(done));
    } else {
      // Not registered here, or its poll already ended: the coordinator answers.
      forward = true;
      answer = std::move(done);
    }
  }
  if (!refused.ok()) return answer(refused);
  if (forward) {
    tf::PollForErrorRequest request;
    *request.mutable_source_task() = ToWireTask(task);
    SendOptions options;
    options.park = true;
    Send<tf::PollForErrorResponse>(
        call, &Async::PollForError, std::move(request),
        [answer = std::move(answer)](const absl::Status& s, const tf::PollForErrorResponse&) {
          answer(s);
        },
        std::move(options));
    return;
  }
  for (auto& [waiter, poll] : replaced) {
    poll(absl::CancelledError(
        absl::StrCat("a newer error poll of ", task.ToString(), " replaced this one")));
  }
}

void UpstreamBackend::PropagatedError(const CallContext&, StatusDone done) {
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    answer = link_.ended() ? link_.failure() : tasks_.propagated();
  }
  done(answer);
}

void UpstreamBackend::GetTaskStates(const CallContext& call, std::vector<TaskName> tasks,
                                    Done<std::vector<TaskStateInfo>> done) {
  tf::GetTaskStateRequest request;
  for (const TaskName& task : tasks) *request.add_source_task() = ToWireTask(task);
  Send<tf::GetTaskStateResponse>(
      call, &Async::GetTaskState, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::GetTaskStateResponse& r) {
        if (!s.ok()) return done(s);
        std::vector<TaskStateInfo> states;
        for (const auto& info : r.task_state()) states.push_back(FromWire(info));
        done(std::move(states));
      });
}

void UpstreamBackend::WatchJobState(const CallContext& call, const std::string& job,
                                    int64_t version, Done<JobStateView> done) {
  tf::WatchJobStateRequest request;
  request.set_job_name(job);
  request.set_version_number(version);
  SendOptions options;
  options.share_key = absl::StrCat("WatchJobState/", version, "/", job);
  Send<tf::WatchJobStateResponse>(
      call, &Async::WatchJobState, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::WatchJobStateResponse& r) {
        if (!s.ok()) return done(s);
        auto view = std::make_shared<JobStateSnapshot>();
        view->version = r.version_number();
        for (const auto& info : r.task_state()) view->tasks.push_back(FromWire(info));
        done(JobStateView(std::move(view)));
      },
      std::move(options));
}

void UpstreamBackend::GetAliveTasks(const CallContext& call, const TaskName& requester,
                                    std::vector<TaskName> tasks,
                                    Done<std::vector<AliveTask>> done) {
  tf::GetAliveTasksRequest request;
  *request.mutable_requesting_task() = ToWireTask(requester);
  for (const TaskName& task : tasks) *request.add_tasks() = ToWireTask(task);
  Send<tf::GetAliveTasksResponse>(
      call, &Async::GetAliveTasks, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::GetAliveTasksResponse& r) {
        if (!s.ok()) return done(s);
        std::vector<AliveTask> alive;
        for (int i = 0; i < r.alive_tasks_size(); ++i) {
          alive.push_back({TaskName{r.alive_tasks(i).job_name(), r.alive_tasks(i).task_id()},
                           i < r.incarnations_size() ? r.incarnations(i) : 0});
        }
        done(std::move(alive));
      });
}

void UpstreamBackend::WaitForAllTasks(const CallContext& call, const TaskName& task,
                                      std::string devices, Done<std::vector<std::string>> done) {
  tf::WaitForAllTasksRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  *request.mutable_device_info() = WrapDevices(devices);
  Send<tf::WaitForAllTasksResponse>(
      call, &Async::WaitForAllTasks, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::WaitForAllTasksResponse& r) {
        if (!s.ok()) return done(s);
        done(UnwrapDevices(r.device_info()));
      });
}

}  // namespace cohort
