// What the task scheduler shows of itself (cohortctl, /metrics, the original's GetSchedulerInfo
// and GetTaskInfo): views computed from its tables, and the cumulative counters' saved form.
// Pure functions of the tables (no lock of their own: the scheduler holds its lock around them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/scheduler/function_table.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/member_table.h"
#include "runtime/scheduler/object_table.h"
#include "runtime/scheduler/operation_table.h"

namespace cohort::runtime {

struct TaskStatusView {
  OperationId operation = 0;
  std::string function_name;
  std::string worker_address;
  std::string error_message;
};

struct TaskInfoView {
  std::vector<TaskStatusView> failed;
  std::vector<TaskStatusView> running;
  uint64_t succeeded = 0;
};

struct OperationView {
  OperationId id = 0;
  OperationId creator = 0;
  bool is_put = false;
  ObjectId put_object = 0;
  TaskSpec task;
};

struct SchedulerInfoView {
  std::vector<OperationId> queued;  // in queue order
  std::map<std::string, std::pair<std::vector<WorkerId>, uint64_t>> functions;
  std::vector<WorkerId> idle_workers;
  // Indexed by object id (entry 0 stands for none): its alias target (itself when
  // canonical) and its count (0 once released).
  std::vector<ObjectId> target_objectid;
  std::vector<int64_t> reference_count;
  std::vector<OperationView> operations;
};

// Counters and gauges for /metrics and cohortctl.
struct SchedulerStats {
  uint64_t tasks_submitted = 0;
  uint64_t tasks_queued = 0;
  uint64_t tasks_running = 0;  // assigned to a worker (its arguments moving, or executing)
  uint64_t tasks_succeeded = 0;
  uint64_t tasks_failed = 0;
  uint64_t tasks_retried = 0;
  uint64_t tasks_rebuilt = 0;  // started again to rebuild a lost object
  uint64_t workers_alive = 0;
  uint64_t workers_lost = 0;
  uint64_t stores_lost = 0;
  uint64_t objects_lost = 0;   // lost with no way to rebuild them
  uint64_t tasks_kept = 0;     // tasks and puts kept: not finished, and the history's
  uint64_t tasks_history = 0;  // finished ones kept (--task-history)
  uint64_t objects_kept = 0;   // object ids whose records are kept (--max-objects)
  uint64_t deliveries = 0;
  uint64_t delivered_bytes = 0;  // of the deliveries that landed
  struct Store {
    StoreId id = 0;
    std::string address;
    bool alive = true;
    uint64_t objects = 0;
    uint64_t bytes = 0;
  };
  std::vector<Store> stores;
};

// The tasks (not puts) failed and running; `succeeded`, the count of those that succeeded.
TaskInfoView TaskInfoOf(const OperationTable& operations, const MemberTable& members,
                        uint64_t succeeded);
SchedulerInfoView SchedulerInfoOf(const OperationTable& operations, const FunctionTable& functions,
                                  const MemberTable& members, const ObjectTable& objects);
// `counters` with the gauges filled in; `history`: the finished tasks kept.
SchedulerStats StatsOf(SchedulerStats counters, const OperationTable& operations, size_t history,
                       const MemberTable& members, const ObjectTable& objects);

// SchedulerStats' cumulative fields (tasks_submitted ... delivered_bytes), in a fixed order: as
// SchedulerChanges::counters saves them.
std::vector<uint64_t> SavedCounters(const SchedulerStats& stats);
void RestoreCounters(const std::vector<uint64_t>& saved, SchedulerStats* stats);

}  // namespace cohort::runtime
