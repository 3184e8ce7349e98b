// The limits on what the task scheduler keeps, and the refusal of a call past one: shared by the
// scheduler and its tables, each of which checks the limits on what it holds.
#pragma once

#include <cstddef>

#include "absl/status/status.h"

namespace cohort::runtime {

// What a caller with the job's token can make the scheduler keep. A call past a limit is refused
// RESOURCE_EXHAUSTED, naming the limit and the coordinator's flag that raises it, and changes
// nothing.
struct SchedulerLimits {
  // Tasks and puts kept (--max-tasks): those not finished, and the finished ones of the history.
  size_t max_tasks = 1'000'000;
  // Finished tasks and puts kept, the newest (--task-history): the lineage a lost object is
  // computed again from. Past it the oldest is forgotten, with the records of its results that
  // were let go. Keep it below max_tasks, or finished tasks can fill that.
  size_t task_history = 100'000;
  // Object ids kept (--max-objects): task results and puts, and the ids they contain.
  size_t max_objects = 4'000'000;
  // Workers and drivers registered and not lost (--max-task-workers).
  size_t max_workers = 10'000;
  // Object stores registered and not lost (--max-object-stores).
  size_t max_stores = 10'000;
  // Names in the function table (--max-functions).
  size_t max_functions = 100'000;
  // Bytes of exported functions and reusable variables, in all (--max-export-bytes).
  size_t max_export_bytes = size_t{1} << 30;
  // Object ids one call names (--max-ids-per-call): reference counts, contained ids, a task's
  // arguments.
  size_t max_ids_per_call = 100'000;
};

// RESOURCE_EXHAUSTED unless `more` new ones fit beside `have` under `limit` (SchedulerLimits);
// `what` is what is limited, `flag` the coordinator's flag that raises the limit.
absl::Status Fits(size_t have, size_t more, size_t limit, const char* what, const char* flag);

}  // namespace cohort::runtime
