#pragma once

#include <functional>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "runtime/scheduler/task_scheduler.h"

namespace cohort::runtime {

// cohort_task_scheduling_seconds (from a task's queueing to its ExecuteTask): the observer to
// give SchedulerOptions::on_dispatch.
std::function<void(absl::Duration)> AddSchedulingLatencyMetric(MetricsRegistry& registry);

// The task runtime's counts, read from the scheduler at every scrape: tasks by state and by
// outcome, workers, object stores with their objects and bytes, deliveries and losses.
void AddSchedulerMetrics(MetricsRegistry& registry, const TaskScheduler* scheduler);

}  // namespace cohort::runtime
