// The agent's session lifecycle: initialize, register, heartbeats, error poll, reset, shutdown.
#include "agent/coordination_agent.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/coordination_agent_internal.h"
#include "agent/grpc_status.h"
#include "common/grpc_auth.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

uint64_t RandomIncarnation() {
  std::random_device device;
  std::mt19937_64 engine((uint64_t{device()} << 32) ^ device());
  uint64_t value = 0;
  while (value == 0) value = engine();
  return value;
}

std::string TaskString(const std::string& job, int32_t id) {
  return absl::StrCat("/job:", job, "/task:", id);
}

}  // namespace

const char* AgentStateName(AgentState state) {
  switch (state) {
    case AgentState::kUninitialized:
      return "UNINITIALIZED";
    case AgentState::kDisconnected:
      return "DISCONNECTED";
    case AgentState::kConnected:
      return "CONNECTED";
    case AgentState::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

// The parked PollForError call of one connection (its callback captures it by plain pointer:
// see coordination_agent_internal.h).
struct CoordinationAgent::ErrorPoll {
  grpc::ClientContext context;
  tensorflow::PollForErrorRequest request;
  tensorflow::PollForErrorResponse response;
  bool done = false;  // guarded by the agent's mu_
};

CoordinationAgent::~CoordinationAgent() {
  // No shutdown barrier here: waiting for every other task in a destructor would hang
  // whoever forgot to call Shutdown. The coordinator sees this task as gone.
  if (state() == AgentState::kConnected) {
    spdlog::warn("agent of {} destroyed while connected, without Shutdown",
                 TaskString(config_.job_name, config_.task_id));
  }
  Abandon();
}

absl::Status CoordinationAgent::Initialize(AgentConfig config, ErrorCallback on_error) {
  if (config.coordinator_address.empty()) {
    return absl::InvalidArgumentError("the coordinator address is empty");
  }
  if (config.job_name.empty()) return absl::InvalidArgumentError("the job name is empty");
  if (config.task_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("task id ", config.task_id, " is negative"));
  }
  if (config.heartbeat_interval <= absl::ZeroDuration() ||
      config.unreachable_timeout < config.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("the heartbeat interval (", absl::FormatDuration(config.heartbeat_interval),
                     ") must be positive and no longer than the heartbeat timeout (",
                     absl::FormatDuration(config.unreachable_timeout), ")"));
  }
  absl::MutexLock lock(&mu_);
  if (state_ != AgentState::kUninitialized) {
    return absl::FailedPreconditionError("the agent is already initialized");
  }
  config_ = std::move(config);
  on_error_ = std::move(on_error);
  grpc::ChannelArguments args;
  // Values can be large: jaxlib-style programs share compiled executables through the store.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A coordinator reached by a name whose address changes (its pod made again): look the
  // name up again within a second, not gRPC's default of 30 s after the last lookup.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1'000);
  if (!config_.tls_server_name.empty()) args.SetSslTargetNameOverride(config_.tls_server_name);
  auto credentials = config_.credentials ? config_.credentials : grpc::InsecureChannelCredentials();
  channel_ =
      CreateChannelWithToken(config_.coordinator_address, credentials, args, config_.auth_token);
  stub_ = tensorflow::CoordinationService::NewStub(channel_);
  incarnation_ = config_.incarnation != 0 ? config_.incarnation : RandomIncarnation();
  state_ = AgentState::kDisconnected;
  return absl::OkStatus();
}

bool CoordinationAgent::IsInitialized() const {
  absl::MutexLock lock(&mu_);
  return state_ != AgentState::kUninitialized;
}

AgentState CoordinationAgent::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

uint64_t CoordinationAgent::incarnation() const {
  absl::MutexLock lock(&mu_);
  return incarnation_;
}

uint64_t CoordinationAgent::leader_incarnation() const {
  absl::MutexLock lock(&mu_);
  return leader_incarnation_;
}

TaskId CoordinationAgent::own_task() const { return {config_.job_name, config_.task_id}; }

absl::Status CoordinationAgent::last_error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::Status CoordinationAgent::CheckState(AgentState want, const char* what) const {
  absl::MutexLock lock(&mu_);
  if (state_ == want) return absl::OkStatus();
  std::string message = absl::StrCat(what, " needs the agent ", AgentStateName(want),
                                     ", but it is ", AgentStateName(state_));
  if (state_ == AgentState::kError) absl::StrAppend(&message, ": ", DescribeStatus(error_));
  return absl::FailedPreconditionError(message);
}

std::shared_ptr<grpc::ClientContext> CoordinationAgent::Context(absl::Duration timeout) const {
  auto* context = new grpc::ClientContext;
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  {
    absl::MutexLock lock(&mu_);
    in_flight_.insert(context);
  }
  return std::shared_ptr<grpc::ClientContext>(context, [this](grpc::ClientContext* done) {
    {
      absl::MutexLock lock(&mu_);
      in_flight_.erase(done);
    }
    delete done;
  });
}

void CoordinationAgent::CancelPendingCalls() {
  absl::MutexLock lock(&mu_);
  ++cancellations_;
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
  for (const auto& get : pending_gets_) get->Cancel();
}

tensorflow::CoordinatedTask CoordinationAgent::OwnTaskProto() const {
  tensorflow::CoordinatedTask task;
  task.set_job_name(config_.job_name);
  task.set_task_id(config_.task_id);
  task.set_recoverable(config_.recoverable);
  return task;
}

void CoordinationAgent::SetError(const absl::Status& error, bool log) {
  ErrorCallback callback;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == AgentState::kError || state_ == AgentState::kUninitialized) return;
    state_ = AgentState::kError;
    error_ = error;
    callback = on_error_;
  }
  if (log) {
    spdlog::error("task {} entered ERROR: {}", TaskString(config_.job_name, config_.task_id),
                  DescribeStatus(error));
  }
  if (callback) callback(error);
}

// ---- Connection ----------------------------------------------------------------------

absl::Status CoordinationAgent::Connect() {
  if (auto s = CheckState(AgentState::kDisconnected, "Connect"); !s.ok()) return s;
  tensorflow::RegisterTaskRequest request;
  *request.mutable_source_task() = OwnTaskProto();
  request.set_incarnation(incarnation());
  absl::Time give_up = absl::Now() + config_.register_timeout;
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Status status;
  int attempt = 0;
  int64_t cancellations;
  {
    absl::MutexLock lock(&mu_);
    cancellations = cancellations_;
  }
  auto cancelled = [this, cancellations] {
    absl::MutexLock lock(&mu_);
    return cancellations_ != cancellations;
  };
  while (true) {
    ++attempt;
    auto context = Context(give_up - absl::Now());
    tensorflow::RegisterTaskResponse response;
    status = FromGrpcStatus(stub_->RegisterTask(context.get(), request, &response));
    if (status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        leader_incarnation_ = response.leader_incarnation();
        state_ = AgentState::kConnected;
        error_ = absl::OkStatus();
      }
      spdlog::info("task {} connected to {} (incarnation {:#x}, coordinator {:#x})",
                   TaskString(config_.job_name, config_.task_id), config_.coordinator_address,
                   request.incarnation(), response.leader_incarnation());
      StartBackground();
      return absl::OkStatus();
    }
    // The coordinator answered: retrying would get the same answer.
    if (IsCoordinationServiceError(status) || cancelled()) break;
    if (absl::Now() + backoff >= give_up) break;
    spdlog::info("registering {} with {} failed (attempt {}): {}; retrying in {}",
                 TaskString(config_.job_name, config_.task_id), config_.coordinator_address,
                 attempt, DescribeStatus(status), absl::FormatDuration(backoff));
    if (config_.on_connect_retry) config_.on_connect_retry(attempt, status);
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
  absl::Status error(status.code(),
                     absl::StrCat("registering ", TaskString(config_.job_name, config_.task_id),
                                  " with ", config_.coordinator_address, " failed",
                                  attempt > 1 ? absl::StrCat(" after ", attempt, " attempts") : "",
                                  ": ", status.message()));
  status.ForEachPayload(
      [&error](absl::string_view key, const absl::Cord& value) { error.SetPayload(key, value); });
  SetError(error, /*log=*/false);
  return error;
}

void CoordinationAgent::StartBackground() {
  {
    absl::MutexLock lock(&mu_);
    background_running_ = true;
  }
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  if (config_.poll_for_errors) StartErrorPoll();
}

void CoordinationAgent::StopBackground() {
  std::shared_ptr<ErrorPoll> poll;
  bool told_coordinator;
  {
    absl::MutexLock lock(&mu_);
    background_running_ = false;
    poll = poll_;
    told_coordinator = leaving_;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (poll) {
    // After ShutdownTask or ResetTask the coordinator has ended the poll already; cancel it
    // from here only when it has not (a destroyed agent, an unreachable coordinator).
    auto done = +[](ErrorPoll* p) { return p->done; };
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(done, poll.get()),
                              told_coordinator ? absl::Seconds(1) : absl::ZeroDuration())) {
      poll->context.TryCancel();
      mu_.Await(absl::Condition(done, poll.get()));
    }
  }
  // Async gets end with CANCELLED; wait until their callbacks have run.
  absl::MutexLock lock(&mu_);
  for (const auto& get : pending_gets_) get->Cancel();
  mu_.Await(absl::Condition(
      +[](std::set<std::shared_ptr<PendingGet>>* gets) { return gets->empty(); }, &pending_gets_));
}

void CoordinationAgent::SetProgress(const TaskProgress& progress) {
  if (!IsValidTaskProgress(progress)) {
    spdlog::warn(
        "coordination agent: progress (step {}, busy seconds per step {}) is not "
        "valid (a step below 0, busy seconds below 0 or not finite); not sent",
        progress.step ? absl::StrCat(*progress.step) : "none",
        progress.busy_seconds_per_step ? absl::StrCat(*progress.busy_seconds_per_step) : "none");
    return;
  }
  absl::MutexLock lock(&mu_);
  progress_ = progress;
}

void CoordinationAgent::HeartbeatLoop() {
  tensorflow::HeartbeatRequest request;
  *request.mutable_source_task() = OwnTaskProto();
  request.set_incarnation(incarnation());
  uint64_t leader = leader_incarnation();
  absl::Time last_ok = absl::Now();
  auto stopped = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !background_running_; };
  while (true) {
    TaskProgress progress;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped), config_.heartbeat_interval)) return;
      progress = progress_;
    }
    request.clear_cohort_progress();
    if (progress.step) request.mutable_cohort_progress()->set_step(*progress.step);
    if (progress.busy_seconds_per_step) {
      request.mutable_cohort_progress()->set_busy_seconds_per_step(*progress.busy_seconds_per_step);
    }
    auto context = Context(std::min(config_.heartbeat_interval, config_.rpc_timeout));
    tensorflow::HeartbeatResponse response;
    absl::Time sent = absl::Now();
    absl::Status status = FromGrpcStatus(stub_->Heartbeat(context.get(), request, &response));
    if (config_.on_heartbeat) config_.on_heartbeat(absl::Now() - sent, status);
    if (status.ok() && response.leader_incarnation() != leader) {
      SetError(absl::AbortedError(absl::StrCat(
          "the coordinator at ", config_.coordinator_address, " restarted (incarnation ",
          absl::Hex(leader), " is now ", absl::Hex(response.leader_incarnation()),
          ") and no longer knows this task: reset and connect again")));
      continue;
    }
    if (status.ok()) {
      last_ok = absl::Now();
      // An error poll that ended while the coordinator was unreachable is parked again.
      if (config_.poll_for_errors) StartErrorPoll();
      continue;
    }
    if (IsCoordinationServiceError(status)) {
      SetError(status);
      continue;
    }
    if (absl::Now() - last_ok > config_.unreachable_timeout) {
      SetError(absl::UnavailableError(absl::StrCat(
          "no heartbeat reached the coordinator at ", config_.coordinator_address, " for ",
          absl::FormatDuration(absl::Now() - last_ok), ": ", status.message())));
    }
  }
}

void CoordinationAgent::StartErrorPoll() {
  std::shared_ptr<ErrorPoll> poll;
  {
    absl::MutexLock lock(&mu_);
    // Not while leaving: the coordinator has ended (or is ending) this task's poll, and a new
    // one, sent after the task left, would wait for nothing.
    if (!background_running_ || leaving_ || state_ != AgentState::kConnected) return;
    if (poll_ && !poll_->done) return;
    poll = std::make_shared<ErrorPoll>();
    poll_ = poll;
  }
  *poll->request.mutable_source_task() = OwnTaskProto();
  stub_->async()->PollForError(&poll->context, &poll->request, &poll->response,
                               [this, poll = poll.get()](const grpc::Status& status) {
                                 OnPollDone(FromGrpcStatus(status));
                                 absl::MutexLock lock(&mu_);
                                 poll->done = true;
                               });
}

void CoordinationAgent::OnPollDone(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (!background_running_ || leaving_) return;  // we ended it
  }
  // Only the coordinator's own answers are errors of the job; a poll that could not reach
  // it is parked again by the heartbeat loop, which also decides when to give up.
  if (IsCoordinationServiceError(status)) {
    SetError(status.ok() ? absl::InternalError("the error poll ended without an error") : status);
  } else {
    spdlog::debug("error poll ended without an answer from the coordinator: {}",
                  DescribeStatus(status));
  }
}

// ---- Error, reset and shutdown -------------------------------------------------------

absl::Status CoordinationAgent::ReportError(const absl::Status& error, FailureReason reason) {
  if (error.ok()) return absl::InvalidArgumentError("ReportError needs an error, not OK");
  if (!FailureReasonFromNumber(static_cast<int32_t>(reason))) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReportError: ", static_cast<int32_t>(reason), " is no failure reason"));
  }
  if (auto s = CheckConnected("ReportError"); !s.ok()) return s;
  tensorflow::ReportErrorToServiceRequest request;
  request.set_error_code(static_cast<int32_t>(error.code()));
  request.set_error_message(std::string(error.message()));
  *request.mutable_error_origin() = OwnTaskProto();
  request.set_cohort_failure_reason(static_cast<int32_t>(reason));
  tensorflow::ReportErrorToServiceResponse response;
  auto context = Context(config_.rpc_timeout);
  absl::Status status =
      FromGrpcStatus(stub_->ReportErrorToService(context.get(), request, &response));
  SetError(error);
  return status;
}

absl::Status CoordinationAgent::Reset() {
  if (auto s = CheckState(AgentState::kError, "Reset"); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    leaving_ = true;
  }
  tensorflow::ResetTaskRequest request;
  *request.mutable_source_task() = OwnTaskProto();
  tensorflow::ResetTaskResponse response;
  auto context = Context(config_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->ResetTask(context.get(), request, &response));
  // A coordinator that restarted or is gone has nothing to reset; the task starts over.
  if (!status.ok()) spdlog::info("ResetTask: {} (resetting locally)", DescribeStatus(status));
  StopBackground();
  absl::MutexLock lock(&mu_);
  leaving_ = false;
  state_ = AgentState::kDisconnected;
  error_ = absl::OkStatus();
  leader_incarnation_ = 0;
  barrier_counters_.clear();
  if (config_.incarnation == 0) incarnation_ = RandomIncarnation();
  return absl::OkStatus();
}

void CoordinationAgent::Abandon() {
  StopBackground();
  {
    absl::MutexLock lock(&watch_mu_);
    watchers_.clear();
  }
  absl::MutexLock lock(&mu_);
  if (state_ == AgentState::kConnected || state_ == AgentState::kError) {
    state_ = AgentState::kDisconnected;
  }
  leaving_ = false;
}

absl::Status CoordinationAgent::Shutdown() {
  AgentState state;
  {
    absl::MutexLock lock(&mu_);
    state = state_;
  }
  if (state == AgentState::kUninitialized || state == AgentState::kDisconnected) {
    return absl::FailedPreconditionError(
        absl::StrCat("Shutdown needs a connected agent, but it is ", AgentStateName(state)));
  }
  absl::Status status;
  if (state == AgentState::kConnected) {
    {
      absl::MutexLock lock(&mu_);
      leaving_ = true;
    }
    tensorflow::ShutdownTaskRequest request;
    *request.mutable_source_task() = OwnTaskProto();
    tensorflow::ShutdownTaskResponse response;
    auto context = Context(config_.shutdown_timeout);
    status = FromGrpcStatus(stub_->ShutdownTask(context.get(), request, &response));
    if (!status.ok()) spdlog::warn("shutdown barrier: {}", DescribeStatus(status));
  } else {
    spdlog::info("shutting down in ERROR: skipping the shutdown barrier");
  }
  Abandon();
  return status;
}

}  // namespace cohort
