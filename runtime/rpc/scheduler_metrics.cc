#include "runtime/rpc/scheduler_metrics.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

std::function<void(absl::Duration)> AddSchedulingLatencyMetric(MetricsRegistry& registry) {
  Histogram& histogram =
      registry
          .AddHistogram("cohort_task_scheduling_seconds",
                        "Time from a task's queueing (or re-queueing) to its dispatch to a "
                        "worker, its arguments at the worker's store.",
                        {}, ExponentialBuckets(0.0001, 4, 10))
          .WithLabels({});
  return [&histogram](absl::Duration d) { histogram.Observe(absl::ToDoubleSeconds(d)); };
}

void AddSchedulerMetrics(MetricsRegistry& registry, const TaskScheduler* scheduler) {
  registry.AddCollector([scheduler] {
    SchedulerStats stats = scheduler->Stats();
    auto one = [](const char* name, const char* help, const char* type, double value) {
      return CollectedFamily{name, help, type, {{{}, value}}};
    };
    std::vector<CollectedFamily> out;
    out.push_back(CollectedFamily{"cohort_tasks",
                                  "Task runtime tasks waiting (queued) or on a worker (running).",
                                  "gauge",
                                  {{{{"state", "queued"}}, double(stats.tasks_queued)},
                                   {{{"state", "running"}}, double(stats.tasks_running)}}});
    out.push_back(one("cohort_tasks_submitted_total", "Tasks submitted.", "counter",
                      double(stats.tasks_submitted)));
    out.push_back(CollectedFamily{"cohort_tasks_finished_total",
                                  "Tasks finished, by outcome.",
                                  "counter",
                                  {{{{"outcome", "succeeded"}}, double(stats.tasks_succeeded)},
                                   {{{"outcome", "failed"}}, double(stats.tasks_failed)}}});
    out.push_back(one("cohort_tasks_retried_total",
                      "Tasks started again because their worker was lost.", "counter",
                      double(stats.tasks_retried)));
    out.push_back(one("cohort_tasks_rebuilt_total",
                      "Finished tasks started again to rebuild a lost result.", "counter",
                      double(stats.tasks_rebuilt)));
    out.push_back(one("cohort_tasks_kept",
                      "Tasks and puts the scheduler keeps: not finished, and the history's "
                      "(--max-tasks).",
                      "gauge", double(stats.tasks_kept)));
    out.push_back(one("cohort_task_history",
                      "Finished tasks and puts kept as the lineage of their results "
                      "(--task-history).",
                      "gauge", double(stats.tasks_history)));
    out.push_back(one("cohort_objects_kept",
                      "Object ids whose records the scheduler keeps (--max-objects).", "gauge",
                      double(stats.objects_kept)));
    out.push_back(one("cohort_task_workers", "Live workers (drivers not counted).", "gauge",
                      double(stats.workers_alive)));
    out.push_back(one("cohort_task_workers_lost_total", "Workers lost (gone, or silent).",
                      "counter", double(stats.workers_lost)));
    out.push_back(one("cohort_objstores_lost_total", "Object stores lost (gone, or silent).",
                      "counter", double(stats.stores_lost)));
    out.push_back(one("cohort_objects_lost_total",
                      "Objects whose every copy was lost and that could not be rebuilt.", "counter",
                      double(stats.objects_lost)));
    out.push_back(one("cohort_object_deliveries_total",
                      "Deliveries of an object from one store to another, started.", "counter",
                      double(stats.deliveries)));
    out.push_back(one("cohort_object_delivered_bytes_total",
                      "Bytes of the deliveries between stores that landed.", "counter",
                      double(stats.delivered_bytes)));
    CollectedFamily objects{
        "cohort_objstore_objects", "Objects each live store holds.", "gauge", {}};
    CollectedFamily bytes{
        "cohort_objstore_bytes", "Bytes of the objects each live store holds.", "gauge", {}};
    for (const SchedulerStats::Store& s : stats.stores) {
      if (!s.alive) continue;
      std::vector<std::pair<std::string, std::string>> labels = {{"objstore", absl::StrCat(s.id)},
                                                                 {"address", s.address}};
      objects.samples.push_back({labels, double(s.objects)});
      bytes.samples.push_back({labels, double(s.bytes)});
    }
    out.push_back(std::move(objects));
    out.push_back(std::move(bytes));
    return out;
  });
}

}  // namespace cohort::runtime
