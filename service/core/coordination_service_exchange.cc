// CoordinationService: the task-group exchanges, GetAliveTasks and device exchange
// (WaitForAllTasks).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"

namespace cohort {

using DevicesResult = absl::StatusOr<std::vector<std::string>>;
using AliveResult = absl::StatusOr<std::vector<AliveTask>>;

// ---- GetAliveTasks -------------------------------------------------------------------

void CoordinationService::GetAliveTasks(const TaskName& requester, std::vector<TaskName> tasks,
                                        WaiterId waiter, Done<std::vector<AliveTask>> done) {
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  auto call =
      std::make_shared<AliveCall>(waiter, ParkKind::kAliveTasks, requester, std::move(done));
  Effects fx;
  absl::Status answer;
  bool parked = false;
  {
    WriteLock lock(this);
    for (const TaskName& t : tasks) {
      if (!tasks_.Find(t)) {
        answer = tasks_.Get(t).status();
        break;
      }
    }
    if (answer.ok() && !std::binary_search(tasks.begin(), tasks.end(), requester)) {
      answer = ServiceError(absl::InvalidArgumentError(
          absl::StrCat(requester.ToString(), " asked for alive tasks of a list it is not in")));
    }
    if (answer.ok()) answer = tasks_.Connected(requester).status();
    if (answer.ok()) {
      TaskGroupExchange::Group& group = alive_groups_.Join(tasks);
      call->set_unlink([this, tasks, waiter] {
        WriteLock lock(this);
        alive_groups_.RemoveCall(tasks, waiter);
      });
      answer = parked_.Add(call);
      if (answer.ok()) {
        group.arrived[requester];  // only an admitted call counts as an arrival
        group.calls.push_back(call);
        parked = true;
        CheckAliveGroupsLocked(fx);
      }
    }
  }
  Apply(fx);
  if (!parked) call->Finish(answer);
}

void CoordinationService::CheckAliveGroupsLocked(Effects& fx) {
  for (auto& ready : alive_groups_.TakeReady(tasks_)) {
    std::vector<AliveTask> alive;
    for (const TaskRecord* task : ready.connected) alive.push_back({task->name, task->incarnation});
    fx.FinishAll<AliveResult>(parked_, std::move(ready.calls), AliveResult(std::move(alive)));
  }
}

// ---- Device exchange -----------------------------------------------------------------

void CoordinationService::WaitForAllTasks(const TaskName& name, std::string devices,
                                          WaiterId waiter, Done<std::vector<std::string>> done) {
  auto call =
      std::make_shared<DevicesCall>(waiter, ParkKind::kWaitForAllTasks, name, std::move(done));
  Effects fx;
  DevicesResult answer = absl::UnknownError("unset");
  bool parked = false;
  {
    WriteLock lock(this);
    auto task = tasks_.Connected(name);
    if (!task.ok()) {
      answer = task.status();
    } else {
      // Workload tasks exchange with every workload task; an auxiliary job among itself.
      const JobConfig& job = *(*task)->job;
      std::vector<TaskName> members =
          job.auxiliary ? JobDirectory::TasksOf(job) : *jobs_.workload();
      TaskGroupExchange::Group& group = device_groups_.Join(members);
      if (group.done) {
        answer = group.error.ok() ? DevicesResult(group.payloads) : DevicesResult(group.error);
      } else {
        call->set_unlink([this, members, waiter] {
          WriteLock lock(this);
          device_groups_.RemoveCall(members, waiter);
        });
        absl::Status s = parked_.Add(call);
        if (s.ok()) {
          group.arrived[name] = std::move(devices);  // only an admitted call counts
          group.calls.push_back(call);
          parked = true;
          if (group.arrived.size() == group.members.size()) {
            auto calls = device_groups_.Finish(group, absl::OkStatus());
            fx.FinishAll<DevicesResult>(parked_, std::move(calls), DevicesResult(group.payloads));
          }
        } else {
          answer = s;
        }
      }
    }
  }
  Apply(fx);
  if (!parked) call->Finish(std::move(answer));
}

void CoordinationService::FailDeviceGroupsWithLocked(const TaskName& task,
                                                     const absl::Status& error, Effects& fx) {
  for (TaskGroupExchange::Group* group : device_groups_.OpenGroupsWith(task)) {
    absl::Status failure = ServiceError(absl::InternalError(absl::StrCat(
        "device exchange failed: ", task.ToString(), " is unavailable: ", error.message())));
    fx.FinishAll<DevicesResult>(parked_, device_groups_.Finish(*group, failure),
                                DevicesResult(failure));
  }
}

}  // namespace cohort
