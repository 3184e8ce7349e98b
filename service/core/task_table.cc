#include "service/core/task_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "service/core/errors.h"

namespace cohort {

const char* TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kUninitialized:
      return "uninitialized";
    case TaskState::kDisconnected:
      return "disconnected";
    case TaskState::kConnected:
      return "connected";
    case TaskState::kError:
      return "error";
  }
  return "unknown";
}

TaskTable::TaskTable(const JobDirectory& jobs) {
  for (const JobConfig& job : jobs.jobs()) {
    for (const TaskName& name : JobDirectory::TasksOf(job)) {
      auto task = std::make_unique<TaskRecord>();
      task->name = name;
      task->job = &job;
      tasks_.emplace(name, std::move(task));
    }
  }
}

TaskRecord* TaskTable::Find(const TaskName& name) const {
  auto it = tasks_.find(name);
  return it == tasks_.end() ? nullptr : it->second.get();
}

absl::StatusOr<TaskRecord*> TaskTable::Get(const TaskName& name) const {
  TaskRecord* task = Find(name);
  if (!task) {
    return ServiceError(absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString())));
  }
  return task;
}

absl::StatusOr<TaskRecord*> TaskTable::Connected(const TaskName& name) const {
  auto task = Get(name);
  if (!task.ok()) return task;
  if ((*task)->state == TaskState::kError) return (*task)->error;
  if ((*task)->state != TaskState::kConnected) {
    return ServiceError(absl::FailedPreconditionError(
        absl::StrCat(name.ToString(), " is not registered (state ", TaskStateName((*task)->state),
                     "); call RegisterTask first")));
  }
  return task;
}

absl::Status TaskTable::Health(const TaskName& name) const {
  TaskRecord* task = Find(name);
  if (!task) return absl::InvalidArgumentError(absl::StrCat("unknown task ", name.ToString()));
  if (task->state == TaskState::kError) return task->error;
  if (task->state == TaskState::kDisconnected && task->ever_registered) {
    return absl::FailedPreconditionError(absl::StrCat(name.ToString(), " has disconnected"));
  }
  return absl::OkStatus();
}

void TaskTable::SetState(TaskRecord& task, TaskState state) {
  if (!task.job->auxiliary) {
    workload_connected_ += (state == TaskState::kConnected) - (task.state == TaskState::kConnected);
    workload_in_error_ += (state == TaskState::kError) - (task.state == TaskState::kError);
  }
  task.state = state;
  Touch(task);
}

void TaskTable::Touch(TaskRecord& task) {
  if (task.changed) return;
  task.changed = true;
  changed_.push_back(&task);
}

std::vector<TaskRecord*> TaskTable::TakeChanged() {
  std::vector<TaskRecord*> out;
  out.swap(changed_);
  for (TaskRecord* task : out) task->changed = false;
  return out;
}

void TaskTable::SetIncarnation(TaskRecord& task, uint64_t incarnation) {
  task.incarnation = incarnation;
  ClearProgress(task);  // registered anew: what it showed before is another run's
  Touch(task);
}

void TaskTable::Restore(TaskRecord& task, TaskState state, uint64_t incarnation,
                        bool ever_registered, absl::Status error, FailureReason reason,
                        std::string reset_request, absl::Time now) {
  SetState(task, state);
  task.reset_request = std::move(reset_request);
  task.incarnation = incarnation;
  task.ever_registered = ever_registered;
  task.error = std::move(error);
  task.reason = reason;
  task.last_heartbeat_ns.store(absl::ToUnixNanos(now));
  if (state == TaskState::kDisconnected && ever_registered) task.disconnected_at = now;
}

void TaskTable::MarkConnected(TaskRecord& task, uint64_t incarnation, absl::Time now) {
  SetState(task, TaskState::kConnected);
  task.incarnation = incarnation;
  task.error = absl::OkStatus();
  task.reason = FailureReason::kUnspecified;
  task.ever_registered = true;
  task.last_heartbeat_ns.store(absl::ToUnixNanos(now));
  // A new start of the task: its earlier progress is another run's.
  ClearProgress(task);
}

void TaskTable::MarkError(TaskRecord& task, absl::Status error, FailureReason reason) {
  SetState(task, TaskState::kError);
  task.error = std::move(error);
  task.reason = reason;
}

void TaskTable::MarkDisconnected(TaskRecord& task, absl::Time now) {
  SetState(task, TaskState::kDisconnected);
  task.disconnected_at = now;
  task.error = absl::OkStatus();
  task.reason = FailureReason::kUnspecified;
  ClearProgress(task);
}

void TaskTable::RecordProgress(TaskRecord& task, const TaskProgress& progress) {
  if (progress.empty()) return;
  absl::MutexLock lock(&task.progress_mu);
  task.progress = progress;
}

void TaskTable::ClearProgress(TaskRecord& task) {
  absl::MutexLock lock(&task.progress_mu);
  task.progress = TaskProgress{};
}

TaskStateInfo TaskTable::Info(const TaskRecord& task) const {
  TaskStateInfo info;
  info.task = task.name;
  info.state = task.state;
  info.error = task.error;
  info.reason = task.reason;
  info.incarnation = task.incarnation;
  info.last_heartbeat = task.ever_registered ? absl::FromUnixNanos(task.last_heartbeat_ns.load())
                                             : absl::InfinitePast();
  absl::MutexLock lock(&task.progress_mu);
  info.progress = task.progress;
  return info;
}

JobStateView TaskTable::Snapshot(const std::string& job) const {
  auto snap = std::make_shared<JobStateSnapshot>();
  snap->version = version_;
  for (auto it = tasks_.lower_bound(TaskName{job, 0}); it != tasks_.end() && it->first.job == job;
       ++it) {
    snap->tasks.push_back(Info(*it->second));
  }
  return snap;
}

void TaskTable::AddWatch(std::string job, std::shared_ptr<JobStateWatch> call) {
  watches_.emplace_back(std::move(job), std::move(call));
}

void TaskTable::RemoveWatch(WaiterId waiter) {
  watches_.erase(std::remove_if(watches_.begin(), watches_.end(),
                                [waiter](const auto& w) { return w.second->id() == waiter; }),
                 watches_.end());
}

std::vector<std::pair<std::string, std::shared_ptr<JobStateWatch>>> TaskTable::Changed() {
  ++version_;
  std::vector<std::pair<std::string, std::shared_ptr<JobStateWatch>>> watches;
  watches.swap(watches_);
  return watches;
}

}  // namespace cohort
