#include "service/core/task_exchanges.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/core/errors.h"

namespace cohort {

TaskExchanges::TaskExchanges(const JobDirectory& jobs, ParkedCallRegistry* parked,
                             UnderLock under_lock)
    : jobs_(jobs), parked_(parked), under_lock_(std::move(under_lock)) {}

// ---- GetAliveTasks -------------------------------------------------------------------

absl::Status TaskExchanges::AskAlive(const TaskTable& tasks, const TaskName& requester,
                                     const std::vector<TaskName>& members,
                                     const std::shared_ptr<AliveCall>& call, TaskEffects& fx) {
  absl::Status answer;
  for (const TaskName& t : members) {
    if (!tasks.Find(t)) {
      answer = tasks.Get(t).status();
      break;
    }
  }
  if (answer.ok() && !std::binary_search(members.begin(), members.end(), requester)) {
    answer = ServiceError(absl::InvalidArgumentError(
        absl::StrCat(requester.ToString(), " asked for alive tasks of a list it is not in")));
  }
  if (answer.ok()) answer = tasks.Connected(requester).status();
  if (answer.ok()) {
    TaskGroupExchange::Group& group = alive_groups_.Join(members);
    const WaiterId waiter = call->id();
    call->set_unlink([this, members, waiter] {
      under_lock_([this, &members, waiter] { alive_groups_.RemoveCall(members, waiter); });
    });
    answer = parked_->Add(call);
    if (answer.ok()) {
      group.arrived[requester];  // only an admitted call counts as an arrival
      group.calls.push_back(call);
      CheckAlive(tasks, fx);
    }
  }
  return answer;
}

void TaskExchanges::CheckAlive(const TaskTable& tasks, TaskEffects& fx) {
  for (auto& ready : alive_groups_.TakeReady(tasks)) {
    std::vector<AliveTask> alive;
    for (const TaskRecord* task : ready.connected) alive.push_back({task->name, task->incarnation});
    fx.FinishAll<AliveResult>(*parked_, std::move(ready.calls), AliveResult(std::move(alive)));
  }
}

// ---- Device exchange -----------------------------------------------------------------

std::optional<TaskExchanges::DevicesResult> TaskExchanges::ExchangeDevices(
    const TaskTable& tasks, const TaskName& task, std::string devices,
    const std::shared_ptr<DevicesCall>& call, TaskEffects& fx) {
  auto record = tasks.Connected(task);
  if (!record.ok()) return DevicesResult(record.status());
  const JobConfig& job = *(*record)->job;
  std::vector<TaskName> members = job.auxiliary ? JobDirectory::TasksOf(job) : *jobs_.workload();
  TaskGroupExchange::Group& group = device_groups_.Join(members);
  if (group.done) {
    return group.error.ok() ? DevicesResult(group.payloads) : DevicesResult(group.error);
  }
  const WaiterId waiter = call->id();
  call->set_unlink([this, members, waiter] {
    under_lock_([this, &members, waiter] { device_groups_.RemoveCall(members, waiter); });
  });
  absl::Status s = parked_->Add(call);
  if (!s.ok()) return DevicesResult(s);
  group.arrived[task] = std::move(devices);  // only an admitted call counts
  group.calls.push_back(call);
  if (group.arrived.size() == group.members.size()) {
    auto calls = device_groups_.Finish(group, absl::OkStatus());
    fx.FinishAll<DevicesResult>(*parked_, std::move(calls), DevicesResult(group.payloads));
  }
  return std::nullopt;
}

void TaskExchanges::FailDevicesWith(const TaskName& task, const absl::Status& error,
                                    TaskEffects& fx) {
  for (TaskGroupExchange::Group* group : device_groups_.OpenGroupsWith(task)) {
    absl::Status failure = ServiceError(absl::InternalError(absl::StrCat(
        "device exchange failed: ", task.ToString(), " is unavailable: ", error.message())));
    fx.FinishAll<DevicesResult>(*parked_, device_groups_.Finish(*group, failure),
                                DevicesResult(failure));
  }
}

// ---- Durability ----------------------------------------------------------------------

void TaskExchanges::Journal(StateJournal* journal) {
  auto groups = device_groups_.TakeChanged();
  alive_groups_.TakeChanged();  // not durable: every caller asks again after a restart
  if (!journal) return;
  for (const auto& members : groups) {
    const TaskGroupExchange::Group* group = device_groups_.FindFinished(members);
    if (!group) {
      journal->DeviceGroupChanged(members, nullptr);
      continue;
    }
    DurableDeviceGroup record{members, group->error, group->payloads};
    journal->DeviceGroupChanged(members, &record);
  }
}

void TaskExchanges::Restore(const std::vector<DurableDeviceGroup>& groups) {
  for (const DurableDeviceGroup& group : groups) {
    device_groups_.RestoreFinished(group.members, group.error, group.payloads);
  }
  device_groups_.TakeChanged();  // what was restored is no change to record
}

void TaskExchanges::Capture(std::vector<DurableDeviceGroup>* groups) const {
  device_groups_.ForEachFinished([groups](const TaskGroupExchange::Group& group) {
    groups->push_back({group.members, group.error, group.payloads});
  });
}

}  // namespace cohort
