#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "service/core/durable_state.h"
#include "service/core/job_directory.h"
#include "service/core/parked_call.h"
#include "service/core/task_effects.h"
#include "service/core/task_group_exchange.h"
#include "service/core/task_name.h"
#include "service/core/task_table.h"

namespace cohort {

// The two rendezvous of a group of tasks built on the task table: GetAliveTasks, whose group
// answers once every connected member asked, and device exchange (WaitForAllTasks), whose
// finished group keeps answering late callers and is part of the durable state. What admits
// a call, what finishes or fails a group, and what the journal hears of it. Not thread-safe:
// its owner calls it under the lock that guards the task table.
class TaskExchanges {
 public:
  using AliveResult = absl::StatusOr<std::vector<AliveTask>>;
  using DevicesResult = absl::StatusOr<std::vector<std::string>>;
  using AliveCall = Parked<AliveResult>;
  using DevicesCall = Parked<DevicesResult>;
  // Runs `fn` under the owner's lock: how a parked call whose caller went away leaves its
  // group.
  using UnderLock = std::function<void(const std::function<void()>&)>;

  TaskExchanges(const JobDirectory& jobs, ParkedCallRegistry* parked, UnderLock under_lock);

  // GetAliveTasks of `requester` over `members` (sorted, without repeats): parks `call` and
  // returns OK, or returns why it cannot.
  absl::Status AskAlive(const TaskTable& tasks, const TaskName& requester,
                        const std::vector<TaskName>& members,
                        const std::shared_ptr<AliveCall>& call, TaskEffects& fx);
  // Answers every GetAliveTasks group whose connected members have all asked. Runs after each
  // change of a task's state.
  void CheckAlive(const TaskTable& tasks, TaskEffects& fx);

  // WaitForAllTasks of `task` with its `devices`: nullopt once `call` is parked, else its
  // answer. Workload tasks exchange with every workload task; an auxiliary job among itself.
  std::optional<DevicesResult> ExchangeDevices(const TaskTable& tasks, const TaskName& task,
                                               std::string devices,
                                               const std::shared_ptr<DevicesCall>& call,
                                               TaskEffects& fx);
  // `task` is unavailable (`error`): the open device exchanges it belongs to fail.
  void FailDevicesWith(const TaskName& task, const absl::Status& error, TaskEffects& fx);
  // `task` came back: it exchanges devices anew.
  void ForgetDevicesOf(const TaskName& task) { device_groups_.ForgetFinishedWith(task); }

  // Tells `journal` which device exchanges finished or were dropped since the last call;
  // with a null `journal` the changes are only taken. GetAliveTasks is not durable: every
  // caller asks again after a restart.
  void Journal(StateJournal* journal);
  // The finished device exchanges a restarted coordinator found; no change to record.
  void Restore(const std::vector<DurableDeviceGroup>& groups);
  void Capture(std::vector<DurableDeviceGroup>* groups) const;

 private:
  const JobDirectory& jobs_;
  ParkedCallRegistry* const parked_;
  const UnderLock under_lock_;

  // Device exchange: one group of the workload tasks, and one per auxiliary job.
  TaskGroupExchange device_groups_;
  // GetAliveTasks: one group per list of tasks asked about.
  TaskGroupExchange alive_groups_;
};

}  // namespace cohort
