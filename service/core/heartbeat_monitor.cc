#include "service/core/heartbeat_monitor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cohort {

bool HeartbeatMonitor::InGrace(const TaskRecord& task, absl::Time now) const {
  return task.state == TaskState::kDisconnected && now < task.disconnected_at + timeout_;
}

std::vector<TaskName> HeartbeatMonitor::FindStale(const TaskTable& tasks, absl::Time now) const {
  std::vector<TaskName> stale;
  for (const auto& [name, task] : tasks.all()) {
    if (!StaleError(*task, now).ok()) stale.push_back(name);
  }
  return stale;
}

absl::Status HeartbeatMonitor::StaleError(const TaskRecord& task, absl::Time now) const {
  if (task.state != TaskState::kConnected) return absl::OkStatus();
  absl::Duration since = now - absl::FromUnixNanos(task.last_heartbeat_ns.load());
  if (since <= timeout_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      task.name.ToString(), " (incarnation ", task.incarnation, ") sent no heartbeat for ",
      absl::FormatDuration(since), ", over the heartbeat timeout of ",
      absl::FormatDuration(timeout_), "; the task has probably crashed or hung"));
}

bool HeartbeatMonitor::CheckDue(absl::Time now) {
  if (now < next_check_) return false;
  // Check often enough that a stale task is found within a tenth of the timeout.
  next_check_ = now + std::clamp(timeout_ / 10, absl::Milliseconds(10), absl::Seconds(1));
  return true;
}

}  // namespace cohort
