#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "service/core/parked_call.h"
#include "service/core/task_name.h"
#include "service/core/task_table.h"

namespace cohort {

// Rendezvous of a fixed set of tasks, one group per set: every member hands in a payload
// and waits for the others. The service runs two: device exchange (WaitForAllTasks), whose
// finished groups keep answering late callers, and GetAliveTasks, whose groups finish once
// every live member asked. Not thread-safe: the service calls it under its lock.
class TaskGroupExchange {
 public:
  using Calls = std::vector<std::shared_ptr<ParkedCall>>;

  struct Group {
    std::vector<TaskName> members;  // sorted
    std::map<TaskName, std::string> arrived;
    Calls calls;
    bool done = false;
    absl::Status error;
    // Once done without error: every member's payload, in member order.
    std::vector<std::string> payloads;
  };

  // The group of exactly `members` (sorted), created when there is none.
  Group& Join(const std::vector<TaskName>& members);
  // The call's caller went away.
  void RemoveCall(const std::vector<TaskName>& members, WaiterId waiter);

  // Ends `group` with `error` (OK: it collected every payload) and returns its calls.
  Calls Finish(Group& group, absl::Status error);
  // Groups not done yet that `task` belongs to.
  std::vector<Group*> OpenGroupsWith(const TaskName& task);
  // Drops the finished groups `task` belongs to, so that it can exchange anew.
  void ForgetFinishedWith(const TaskName& task);

  // Takes out every group that each of its connected members has joined, and returns them
  // with those members, in member order.
  struct Ready {
    Calls calls;
    std::vector<const TaskRecord*> connected;
  };
  std::vector<Ready> TakeReady(const TaskTable& tasks);

  // A finished group as a restarted coordinator found it.
  void RestoreFinished(std::vector<TaskName> members, absl::Status error,
                       std::vector<std::string> payloads);
  // The finished group of exactly `members`, if there is one.
  const Group* FindFinished(const std::vector<TaskName>& members) const;
  template <typename F>
  void ForEachFinished(F&& f) const {
    for (const auto& [members, group] : groups_) {
      if (group->done) f(*group);
    }
  }
  // For the service's journal: the member lists of groups that finished or were dropped
  // since the last call.
  std::vector<std::vector<TaskName>> TakeChanged() { return std::exchange(changed_, {}); }

 private:
  static bool IsMember(const Group& group, const TaskName& task);

  std::map<std::vector<TaskName>, std::unique_ptr<Group>> groups_;
  std::vector<std::vector<TaskName>> changed_;
};

}  // namespace cohort
