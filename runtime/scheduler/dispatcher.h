// The dispatch of queued tasks: each to an idle worker that runs its function (the one whose
// store already holds the most of its arguments), its missing arguments asked for at that store,
// and its ExecuteTask sent once every argument is there. Not thread-safe: the scheduler holds its
// lock around every call. It changes the scheduler's members and operations (a task assigned, a
// worker busy) and reads its functions and objects, which the same lock guards; whether a task
// ends is the scheduler's.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "runtime/scheduler/effects.h"
#include "runtime/scheduler/function_table.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/member_table.h"
#include "runtime/scheduler/object_directory.h"
#include "runtime/scheduler/object_table.h"
#include "runtime/scheduler/operation_table.h"

namespace cohort::runtime {

class Dispatcher {
 public:
  // Ends `op`, failed with `error` (an argument of it is an error).
  using FailTask = std::function<void(Operation& op, const std::string& error)>;
  // Told the time from each task's (re)queueing to its ExecuteTask (SchedulerOptions).
  using OnDispatch = std::function<void(absl::Duration)>;

  Dispatcher(const Clock& clock, const OnDispatch& on_dispatch, MemberTable& members,
             OperationTable& operations, const FunctionTable& functions, const ObjectTable& objects,
             ObjectDirectory& directory, std::vector<Effect>& effects, FailTask fail)
      : clock_(clock),
        on_dispatch_(on_dispatch),
        members_(members),
        operations_(operations),
        functions_(functions),
        objects_(objects),
        directory_(directory),
        effects_(effects),
        fail_(std::move(fail)) {}

  // Assigns queued tasks, in queue order, while there are idle workers. A task whose arguments
  // are not all ready, or that no idle worker runs, keeps its place; one whose argument is an
  // error fails.
  void Schedule();
  // Sends ExecuteTask for `op` (assigned) once every argument is at its worker's store.
  void DispatchIfLocal(Operation& op);
  // DispatchIfLocal for the task of each busy worker on `store`, where an object landed.
  void DispatchAt(StoreId store);
  // After a restart: tasks assigned are dispatched if they can be, and tasks running are sent
  // their ExecuteTask again (the old process may have decided on it but never sent it).
  void SendAgain();

 private:
  // Whether every object argument is ready; fails the task if one failed.
  bool ArgumentsReady(Operation& op);
  WorkerId PickWorker(const Operation& op) const;
  void Assign(Operation& op, Worker& worker);

  const Clock& clock_;
  const OnDispatch& on_dispatch_;
  MemberTable& members_;
  OperationTable& operations_;
  const FunctionTable& functions_;
  const ObjectTable& objects_;
  ObjectDirectory& directory_;
  std::vector<Effect>& effects_;
  const FailTask fail_;
};

}  // namespace cohort::runtime
