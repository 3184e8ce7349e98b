// Objects whose every copy was lost (a store lost): each is rebuilt by running again the task
// that computed it (its lineage), and the lost arguments of that task first; or, when that
// cannot be, failed saying why (a put, a task forgotten from the history or run again too often,
// an argument forgotten). Not thread-safe: the scheduler holds its lock around every call. It
// changes the scheduler's objects, operations (a task queued again) and history, and counts
// in its counters, which the same lock guards.
#pragma once

#include <string>

#include "common/clock.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/object_directory.h"
#include "runtime/scheduler/object_table.h"
#include "runtime/scheduler/operation_table.h"
#include "runtime/scheduler/scheduler_limits.h"
#include "runtime/scheduler/scheduler_views.h"
#include "runtime/scheduler/task_history.h"

namespace cohort::runtime {

class Rebuilder {
 public:
  // `max_rebuilds`: how many times a task is run again to rebuild its results.
  Rebuilder(const Clock& clock, const SchedulerLimits& limits, int max_rebuilds,
            ObjectTable& objects, OperationTable& operations, TaskHistory& history,
            ObjectDirectory& directory, SchedulerStats& counters)
      : clock_(clock),
        limits_(limits),
        max_rebuilds_(max_rebuilds),
        objects_(objects),
        operations_(operations),
        history_(history),
        directory_(directory),
        counters_(counters) {}

  // Store `store` was lost (`why`): its copies are forgotten, and each object left with none
  // (live, not failed) is rebuilt, in the object table's order.
  void StoreLost(StoreId store, const std::string& why);
  // Every copy of `canonical` is gone: run its task again, or fail it.
  void Rebuild(ObjectId canonical, const std::string& why);

 private:
  const Clock& clock_;
  const SchedulerLimits& limits_;
  const int max_rebuilds_;
  ObjectTable& objects_;
  OperationTable& operations_;
  TaskHistory& history_;
  ObjectDirectory& directory_;
  SchedulerStats& counters_;
};

}  // namespace cohort::runtime
