#include "service/core/task_group_exchange.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace cohort {

TaskGroupExchange::Group& TaskGroupExchange::Join(const std::vector<TaskName>& members) {
  auto& group = groups_[members];
  if (!group) {
    group = std::make_unique<Group>();
    group->members = members;
  }
  return *group;
}

void TaskGroupExchange::RemoveCall(const std::vector<TaskName>& members, WaiterId waiter) {
  auto it = groups_.find(members);
  if (it != groups_.end()) RemoveParkedCall(&it->second->calls, waiter);
}

TaskGroupExchange::Calls TaskGroupExchange::Finish(Group& group, absl::Status error) {
  group.done = true;
  group.error = std::move(error);
  changed_.push_back(group.members);
  if (group.error.ok()) {
    for (const TaskName& name : group.members) group.payloads.push_back(group.arrived[name]);
  }
  Calls calls;
  calls.swap(group.calls);
  return calls;
}

bool TaskGroupExchange::IsMember(const Group& group, const TaskName& task) {
  return std::binary_search(group.members.begin(), group.members.end(), task);
}

std::vector<TaskGroupExchange::Group*> TaskGroupExchange::OpenGroupsWith(const TaskName& task) {
  std::vector<Group*> open;
  for (auto& [members, group] : groups_) {
    if (!group->done && IsMember(*group, task)) open.push_back(group.get());
  }
  return open;
}

void TaskGroupExchange::ForgetFinishedWith(const TaskName& task) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second->done && IsMember(*it->second, task)) {
      changed_.push_back(it->first);
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

void TaskGroupExchange::RestoreFinished(std::vector<TaskName> members, absl::Status error,
                                        std::vector<std::string> payloads) {
  auto group = std::make_unique<Group>();
  group->members = members;
  group->done = true;
  group->error = std::move(error);
  group->payloads = std::move(payloads);
  groups_[std::move(members)] = std::move(group);
}

const TaskGroupExchange::Group* TaskGroupExchange::FindFinished(
    const std::vector<TaskName>& members) const {
  auto it = groups_.find(members);
  return it != groups_.end() && it->second->done ? it->second.get() : nullptr;
}

std::vector<TaskGroupExchange::Ready> TaskGroupExchange::TakeReady(const TaskTable& tasks) {
  std::vector<Ready> ready;
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& group = *it->second;
    Ready r;
    bool complete = true;
    for (const TaskName& name : group.members) {
      const TaskRecord* task = tasks.Find(name);
      if (task->state != TaskState::kConnected) continue;
      if (!group.arrived.count(name)) {
        complete = false;
        break;
      }
      r.connected.push_back(task);
    }
    if (!complete) {
      ++it;
      continue;
    }
    r.calls.swap(group.calls);
    ready.push_back(std::move(r));
    it = groups_.erase(it);
  }
  return ready;
}

}  // namespace cohort
