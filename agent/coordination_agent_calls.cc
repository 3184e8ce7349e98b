// The agent's thin calls: key-value, barriers, task states, devices, alive tasks, watches.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/coordination_agent.h"
#include "agent/coordination_agent_internal.h"
#include "agent/grpc_status.h"

namespace cohort {
namespace {

tensorflow::CoordinatedTask ToProto(const TaskId& task) {
  tensorflow::CoordinatedTask out;
  out.set_job_name(task.job);
  out.set_task_id(task.id);
  return out;
}

}  // namespace

// ---- Tasks and devices ---------------------------------------------------------------

absl::Status CoordinationAgent::WaitForAllTasks(const tensorflow::DeviceInfo& local_devices) {
  if (auto s = CheckConnected("WaitForAllTasks"); !s.ok()) return s;
  tensorflow::WaitForAllTasksRequest request;
  *request.mutable_source_task() = OwnTaskProto();
  *request.mutable_device_info() = local_devices;
  tensorflow::WaitForAllTasksResponse response;
  auto context = Context(config_.register_timeout);
  absl::Status status = FromGrpcStatus(stub_->WaitForAllTasks(context.get(), request, &response));
  if (!status.ok()) return status;
  absl::MutexLock lock(&mu_);
  cluster_devices_ = response.device_info();
  return absl::OkStatus();
}

tensorflow::DeviceInfo CoordinationAgent::GetClusterDeviceInfo() const {
  absl::MutexLock lock(&mu_);
  return cluster_devices_;
}

absl::StatusOr<std::vector<AgentTaskState>> CoordinationAgent::GetTaskState(
    const std::vector<TaskId>& tasks) {
  if (!IsInitialized()) return absl::FailedPreconditionError("GetTaskState needs Initialize");
  tensorflow::GetTaskStateRequest request;
  for (const TaskId& task : tasks) *request.add_source_task() = ToProto(task);
  tensorflow::GetTaskStateResponse response;
  auto context = Context(config_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->GetTaskState(context.get(), request, &response));
  if (!status.ok()) return status;
  std::vector<AgentTaskState> out;
  for (const auto& info : response.task_state()) {
    AgentTaskState state;
    state.task = {info.task().job_name(), info.task().task_id()};
    state.state = info.state();
    state.incarnation = info.incarnation();
    if (info.error_code() != 0) {
      state.error =
          absl::Status(static_cast<absl::StatusCode>(info.error_code()), info.error_message());
    }
    out.push_back(std::move(state));
  }
  return out;
}

// ---- Key-value -----------------------------------------------------------------------

absl::StatusOr<std::string> CoordinationAgent::GetKeyValue(const std::string& key,
                                                           absl::Duration timeout) {
  if (auto s = CheckConnected("GetKeyValue"); !s.ok()) return s;
  tensorflow::GetKeyValueRequest request;
  request.set_key(key);
  tensorflow::GetKeyValueResponse response;
  auto context = Context(timeout);
  absl::Status status = FromGrpcStatus(stub_->GetKeyValue(context.get(), request, &response));
  if (status.code() == absl::StatusCode::kDeadlineExceeded && !IsCoordinationServiceError(status)) {
    return absl::DeadlineExceededError(
        absl::StrCat("key \"", key, "\" was not set within ", absl::FormatDuration(timeout)));
  }
  if (!status.ok()) return status;
  return response.kv().value();
}

std::shared_ptr<AsyncGet> CoordinationAgent::GetKeyValueAsync(const std::string& key,
                                                              ValueCallback done) {
  auto get = std::make_shared<PendingGet>();
  get->request.set_key(key);
  get->done = std::move(done);
  if (auto s = CheckConnected("GetKeyValueAsync"); !s.ok()) {
    get->done(s);
    return get;
  }
  {
    absl::MutexLock lock(&mu_);
    pending_gets_.insert(get);
  }
  stub_->async()->GetKeyValue(&get->context, &get->request, &get->response,
                              [this, get = get.get()](const grpc::Status& grpc_status) {
                                absl::Status status = FromGrpcStatus(grpc_status);
                                ValueCallback done = std::move(get->done);
                                if (status.ok()) {
                                  done(get->response.kv().value());
                                } else {
                                  done(status);
                                }
                                absl::MutexLock lock(&mu_);
                                // The agent's reference; the caller may hold another.
                                for (auto it = pending_gets_.begin(); it != pending_gets_.end();
                                     ++it) {
                                  if (it->get() == get) {
                                    pending_gets_.erase(it);
                                    break;
                                  }
                                }
                              });
  return get;
}

absl::StatusOr<std::string> CoordinationAgent::TryGetKeyValue(const std::string& key) {
  if (auto s = CheckConnected("TryGetKeyValue"); !s.ok()) return s;
  tensorflow::TryGetKeyValueRequest request;
  request.set_key(key);
  tensorflow::TryGetKeyValueResponse response;
  auto context = Context(config_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->TryGetKeyValue(context.get(), request, &response));
  if (!status.ok()) return status;
  return response.kv().value();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> CoordinationAgent::GetKeyValueDir(
    const std::string& directory) {
  if (auto s = CheckConnected("GetKeyValueDir"); !s.ok()) return s;
  tensorflow::GetKeyValueDirRequest request;
  request.set_directory_key(directory);
  tensorflow::GetKeyValueDirResponse response;
  auto context = Context(config_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->GetKeyValueDir(context.get(), request, &response));
  if (!status.ok()) return status;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : response.kv()) out.emplace_back(kv.key(), kv.value());
  return out;
}

absl::Status CoordinationAgent::InsertKeyValue(const std::string& key, const std::string& value) {
  return Put("InsertKeyValue", key, value, /*overwrite=*/false);
}

absl::Status CoordinationAgent::UpdateKeyValue(const std::string& key, const std::string& value) {
  return Put("UpdateKeyValue", key, value, /*overwrite=*/true);
}

absl::Status CoordinationAgent::Put(const char* what, const std::string& key,
                                    const std::string& value, bool overwrite) {
  if (auto s = CheckConnected(what); !s.ok()) return s;
  tensorflow::InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(overwrite);
  tensorflow::InsertKeyValueResponse response;
  auto context = Context(config_.rpc_timeout);
  return FromGrpcStatus(stub_->InsertKeyValue(context.get(), request, &response));
}

absl::Status CoordinationAgent::DeleteKeyValue(const std::string& key) {
  if (auto s = CheckConnected("DeleteKeyValue"); !s.ok()) return s;
  tensorflow::DeleteKeyValueRequest request;
  request.set_key(key);
  request.set_is_directory(true);
  tensorflow::DeleteKeyValueResponse response;
  auto context = Context(config_.rpc_timeout);
  return FromGrpcStatus(stub_->DeleteKeyValue(context.get(), request, &response));
}

absl::StatusOr<int64_t> CoordinationAgent::IncrementKeyValue(const std::string& key,
                                                             int64_t delta) {
  if (auto s = CheckConnected("IncrementKeyValue"); !s.ok()) return s;
  tensorflow::IncrementKeyValueRequest request;
  request.set_key(key);
  request.set_increment(delta);
  tensorflow::IncrementKeyValueResponse response;
  auto context = Context(config_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->IncrementKeyValue(context.get(), request, &response));
  if (!status.ok()) return status;
  int64_t value = 0;
  if (!absl::SimpleAtoi(response.kv().value(), &value)) {
    return absl::InternalError(
        absl::StrCat("the coordinator answered a non-integer \"", response.kv().value(), "\""));
  }
  return value;
}

// ---- Barriers ------------------------------------------------------------------------

absl::Status CoordinationAgent::WaitAtBarrier(const std::string& id, absl::Duration timeout,
                                              const std::vector<TaskId>& tasks) {
  if (auto s = CheckConnected("WaitAtBarrier"); !s.ok()) return s;
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier \"", id, "\" needs a positive timeout"));
  }
  int64_t counter;
  {
    absl::MutexLock lock(&mu_);
    counter = barrier_counters_[id];
  }
  tensorflow::BarrierRequest request;
  request.set_barrier_id(id);
  request.set_barrier_timeout_in_ms(absl::ToInt64Milliseconds(timeout));
  for (const TaskId& task : tasks) *request.add_tasks() = ToProto(task);
  *request.mutable_source_task() = OwnTaskProto();
  request.set_counter(counter);
  tensorflow::BarrierResponse response;
  // The coordinator ends the barrier at its timeout; the slack lets its answer arrive.
  auto context = Context(timeout + config_.rpc_timeout);
  absl::Status status = FromGrpcStatus(stub_->Barrier(context.get(), request, &response));
  // The next use of this id is the instance after the one the coordinator answered for.
  std::optional<int64_t> answered;
  if (status.ok()) {
    answered = response.counter();
  } else if (auto c = GetBarrierCounter(status)) {
    answered = *c;
  }
  if (answered) {
    absl::MutexLock lock(&mu_);
    barrier_counters_[id] = std::max(barrier_counters_[id], *answered + 1);
  }
  return status;
}

absl::Status CoordinationAgent::CancelBarrier(const std::string& id) {
  if (auto s = CheckConnected("CancelBarrier"); !s.ok()) return s;
  tensorflow::CancelBarrierRequest request;
  request.set_barrier_id(id);
  *request.mutable_source_task() = OwnTaskProto();
  {
    absl::MutexLock lock(&mu_);
    request.set_counter(barrier_counters_[id]);
  }
  tensorflow::CancelBarrierResponse response;
  auto context = Context(config_.rpc_timeout);
  return FromGrpcStatus(stub_->CancelBarrier(context.get(), request, &response));
}

absl::StatusOr<std::vector<AliveTaskInfo>> CoordinationAgent::GetAliveTasks(
    const std::vector<TaskId>& tasks, absl::Duration timeout) {
  if (auto s = CheckConnected("GetAliveTasks"); !s.ok()) return s;
  tensorflow::GetAliveTasksRequest request;
  *request.mutable_requesting_task() = OwnTaskProto();
  for (const TaskId& task : tasks) *request.add_tasks() = ToProto(task);
  tensorflow::GetAliveTasksResponse response;
  auto context = Context(timeout);
  absl::Status status = FromGrpcStatus(stub_->GetAliveTasks(context.get(), request, &response));
  if (!status.ok()) return status;
  std::vector<AliveTaskInfo> out;
  for (int i = 0; i < response.alive_tasks_size(); ++i) {
    const auto& task = response.alive_tasks(i);
    out.push_back({{task.job_name(), task.task_id()},
                   i < response.incarnations_size() ? response.incarnations(i) : 0});
  }
  return out;
}

// ---- Watches -------------------------------------------------------------------------

absl::StatusOr<int64_t> CoordinationAgent::StartWatchKey(const std::string& key,
                                                         KeyWatcher::EventCallback on_event) {
  if (!IsInitialized()) return absl::FailedPreconditionError("StartWatchKey needs Initialize");
  auto watcher = KeyWatcher::Start(channel_, key, std::move(on_event));
  if (!watcher.ok()) return watcher.status();
  absl::MutexLock lock(&watch_mu_);
  int64_t id = next_watch_id_++;
  watchers_.emplace(id, std::move(*watcher));
  return id;
}

void CoordinationAgent::StopWatchKey(int64_t id) {
  std::unique_ptr<KeyWatcher> watcher;
  {
    absl::MutexLock lock(&watch_mu_);
    auto it = watchers_.find(id);
    if (it == watchers_.end()) return;
    watcher = std::move(it->second);
    watchers_.erase(it);
  }
  watcher->Stop();
}

}  // namespace cohort
