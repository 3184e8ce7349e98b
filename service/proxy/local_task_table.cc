// LocalTaskTable: the tasks registered through the proxy, their heartbeats and error polls.
#include "service/proxy/local_task_table.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/core/errors.h"

namespace cohort {

std::optional<uint64_t> LocalTaskTable::Register(const TaskName& task, uint64_t incarnation) {
  auto& record = tasks_[task];
  if (!record) record = std::make_unique<Task>();
  if (record->incarnation != incarnation || record->left) {
    record->incarnation = incarnation;
    record->left = false;
    record->heartbeat_error = absl::OkStatus();
    record->progress = TaskProgress{};
    record->poll_result.reset();
    // A poll of the earlier incarnation may still be out (a recoverable task came back):
    // its answer is dropped by generation, and the new incarnation gets a poll of its own.
    record->poll_running = false;
    record->generation = ++next_generation_;
  }
  if (record->poll_running || record->poll_result) return std::nullopt;
  record->poll_running = true;
  return record->generation;
}

std::vector<LocalTaskTable::Poll> LocalTaskTable::PollDone(const TaskName& task,
                                                           uint64_t generation,
                                                           const absl::Status& status) {
  std::vector<Poll> polls;
  auto it = tasks_.find(task);
  if (it == tasks_.end() || it->second->generation != generation) return polls;
  Task& record = *it->second;
  record.poll_running = false;
  record.poll_result = status;
  polls.swap(record.polls);
  for (const auto& [waiter, poll] : polls) polls_.erase(waiter);
  auto source = GetServiceError(status);
  if (!status.ok() && propagated_.ok() && source && source->source) propagated_ = status;
  if (record.left) tasks_.erase(it);
  return polls;
}

std::vector<LocalTaskTable::Poll> LocalTaskTable::Leave(const TaskName& task) {
  std::vector<Poll> polls;
  auto it = tasks_.find(task);
  if (it == tasks_.end()) return polls;
  it->second->left = true;
  polls.swap(it->second->polls);
  for (const auto& [waiter, poll] : polls) polls_.erase(waiter);
  if (!it->second->poll_running) tasks_.erase(it);
  return polls;
}

std::vector<LocalTaskTable::StatusDone> LocalTaskTable::Clear() {
  std::vector<StatusDone> polls;
  for (auto& [name, task] : tasks_) {
    for (auto& [waiter, poll] : task->polls) {
      polls_.erase(waiter);
      polls.push_back(std::move(poll));
    }
  }
  tasks_.clear();
  return polls;
}

std::vector<std::pair<TaskName, uint64_t>> LocalTaskTable::Registered() const {
  std::vector<std::pair<TaskName, uint64_t>> registered;
  for (const auto& [name, task] : tasks_) {
    if (!task->left) registered.emplace_back(name, task->incarnation);
  }
  return registered;
}

TaskProgress LocalTaskTable::Progress(const TaskName& task) const {
  auto it = tasks_.find(task);
  return it == tasks_.end() || it->second->left ? TaskProgress{} : it->second->progress;
}

std::optional<LocalTaskTable::HeartbeatAnswer> LocalTaskTable::AnswerHeartbeat(
    const TaskName& task, std::optional<uint64_t> incarnation) const {
  auto it = tasks_.find(task);
  if (it == tasks_.end() || it->second->left ||
      (incarnation && *incarnation != it->second->incarnation)) {
    return std::nullopt;
  }
  return HeartbeatAnswer{it->second->incarnation, it->second->heartbeat_error};
}

std::optional<LocalTaskTable::LocalHeartbeat> LocalTaskTable::HeartbeatHere(
    const UpstreamLink& link, const TaskName& task, std::optional<uint64_t> incarnation,
    const TaskProgress& progress) {
  if (link.ended()) return LocalHeartbeat{link.failure()};
  std::optional<HeartbeatAnswer> here = AnswerHeartbeat(task, incarnation);
  if (!here) return std::nullopt;
  // Kept even while the coordinator is away: the heartbeats forwarded once it is back carry
  // the latest.
  TaskProgress& last = tasks_.at(task)->progress;
  if (!progress.empty()) last = progress;
  // Answered here: the coordinator may be away for a while, and the task is alive.
  return LocalHeartbeat{here->status, here->status.ok() && link.connected(), here->incarnation,
                        last};
}

void LocalTaskTable::SetHeartbeatError(const TaskName& task, const absl::Status& error) {
  if (auto it = tasks_.find(task); it != tasks_.end()) it->second->heartbeat_error = error;
}

void LocalTaskTable::SetHeartbeatError(const TaskName& task, uint64_t incarnation,
                                       const absl::Status& error) {
  auto it = tasks_.find(task);
  if (it != tasks_.end() && it->second->incarnation == incarnation) {
    it->second->heartbeat_error = error;
  }
}

absl::Status LocalTaskTable::CheckIncarnation(const TaskName& task, uint64_t incarnation) const {
  auto it = tasks_.find(task);
  if (it == tasks_.end() || it->second->left || it->second->incarnation == incarnation) {
    return absl::OkStatus();
  }
  return ServiceError(absl::AbortedError(
      absl::StrCat("request from ", task.ToString(), " carries incarnation ", incarnation,
                   " but the task is registered with incarnation ", it->second->incarnation)));
}

bool LocalTaskTable::WaitsHere(const TaskName& task) const {
  auto it = tasks_.find(task);
  return it != tasks_.end() && !it->second->left && !it->second->poll_result;
}

std::vector<LocalTaskTable::Poll> LocalTaskTable::AddPoll(const TaskName& task, WaiterId waiter,
                                                          StatusDone done) {
  Task& record = *tasks_.at(task);
  std::vector<Poll> replaced;
  replaced.swap(record.polls);
  for (const auto& [older, poll] : replaced) polls_.erase(older);
  record.polls.emplace_back(waiter, std::move(done));
  polls_[waiter] = task;
  return replaced;
}

LocalTaskTable::PollPlacement LocalTaskTable::PlacePoll(const UpstreamLink& link,
                                                        const TaskName& task, WaiterId waiter,
                                                        StatusDone done) {
  PollPlacement placed;
  if (link.ended()) {
    placed.refused = link.failure();
    placed.done = std::move(done);
  } else if (WaitsHere(task)) {
    // Waits here for the proxy's own poll of the task. One poll per task, as in the core: a
    // newer one replaces the older.
    placed.replaced = AddPoll(task, waiter, std::move(done));
  } else {
    // Not registered here, or its poll already ended: the coordinator answers.
    placed.forward = true;
    placed.done = std::move(done);
  }
  return placed;
}

std::optional<LocalTaskTable::StatusDone> LocalTaskTable::TakePoll(WaiterId waiter) {
  auto p = polls_.find(waiter);
  if (p == polls_.end()) return std::nullopt;
  StatusDone taken;
  if (auto t = tasks_.find(p->second); t != tasks_.end()) {
    auto& polls = t->second->polls;
    for (auto q = polls.begin(); q != polls.end(); ++q) {
      if (q->first != waiter) continue;
      taken = std::move(q->second);
      polls.erase(q);
      break;
    }
  }
  polls_.erase(p);
  return taken;
}

}  // namespace cohort
