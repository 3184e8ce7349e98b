#include "service/server/coordinator_metrics.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort {

CoordinatorMetrics::CoordinatorMetrics(MetricsRegistry& registry)
    : registry_(registry),
      barriers_(registry.AddCounter("cohort_coordinator_barriers_total",
                                    "Barrier instances finished, by result (passed or the "
                                    "failing status code).",
                                    {"result"})),
      barrier_seconds_(registry.AddHistogram(
          "cohort_coordinator_barrier_duration_seconds",
          "Time from a barrier instance's first arrival until it passed or failed.", {"result"},
          ExponentialBuckets(0.001, 4, 12))),
      errors_(registry.AddCounter(
          "cohort_coordinator_errors_propagated_total",
          "Errors propagated to every task (only the first error of the service's "
          "life propagates), by source job; \"service\" for its own.",
          {"job"})) {
  barriers_.WithLabels({"passed"});
  barrier_seconds_.WithLabels({"passed"});
}

void CoordinatorMetrics::OnBarrierDone(const std::string&, int64_t, const absl::Status& result,
                                       absl::Duration open_for) {
  std::string label = result.ok() ? "passed" : absl::StatusCodeToString(result.code());
  barriers_.WithLabels({label}).Increment();
  barrier_seconds_.WithLabels({result.ok() ? "passed" : "failed"})
      .Observe(absl::ToDoubleSeconds(open_for));
}

void CoordinatorMetrics::OnErrorPropagated(const TaskName& source, const absl::Status&) {
  errors_.WithLabels({source.job.empty() ? "service" : source.job}).Increment();
}

void CoordinatorMetrics::Attach(const CoordinationService* service) {
  registry_.AddCollector([service] {
    std::vector<CollectedFamily> out;
    absl::Time now = service->Now();
    CollectedFamily tasks{"cohort_coordinator_tasks", "Tasks by job and state.", "gauge", {}};
    CollectedFamily since{"cohort_coordinator_task_seconds_since_heartbeat",
                          "Seconds since each connected task's last heartbeat (or registration).",
                          "gauge",
                          {}};
    CollectedFamily incarnation{
        "cohort_coordinator_task_connected", "1 when the task is connected, else 0.", "gauge", {}};
    std::map<std::pair<std::string, std::string>, double> counts;
    for (const auto& job : service->config().jobs) {
      for (TaskState s : {TaskState::kDisconnected, TaskState::kConnected, TaskState::kError}) {
        counts[{job.name, TaskStateName(s)}] = 0;
      }
    }
    for (const TaskStateInfo& t : service->AllTasks()) {
      counts[{t.task.job, TaskStateName(t.state)}] += 1;
      std::string id = absl::StrCat(t.task.id);
      incarnation.samples.push_back(
          {{{"job", t.task.job}, {"task", id}}, t.state == TaskState::kConnected ? 1.0 : 0.0});
      if (t.state == TaskState::kConnected) {
        since.samples.push_back(
            {{{"job", t.task.job}, {"task", id}}, absl::ToDoubleSeconds(now - t.last_heartbeat)});
      }
    }
    for (const auto& [key, n] : counts) {
      tasks.samples.push_back({{{"job", key.first}, {"state", key.second}}, n});
    }
    out.push_back(std::move(tasks));
    out.push_back(std::move(since));
    out.push_back(std::move(incarnation));

    CollectedFamily parked{"cohort_coordinator_parked_calls",
                           "Blocking calls waiting inside the coordinator, by kind.",
                           "gauge",
                           {}};
    for (int k = 0; k < kNumParkKinds; ++k) {
      auto kind = static_cast<ParkKind>(k);
      parked.samples.push_back(
          {{{"kind", ParkKindName(kind)}}, static_cast<double>(service->ParkedCalls(kind))});
    }
    out.push_back(std::move(parked));

    CollectedFamily open{
        "cohort_coordinator_barriers_open", "Barrier instances in flight.", "gauge", {}};
    CollectedFamily missing{"cohort_coordinator_barrier_missing_tasks",
                            "Tasks that have not yet arrived at each open barrier.",
                            "gauge",
                            {}};
    auto barriers = service->OpenBarriers();
    open.samples.push_back({{}, static_cast<double>(barriers.size())});
    for (const auto& b : barriers) {
      missing.samples.push_back({{{"barrier", b.id}}, static_cast<double>(b.missing.size())});
    }
    out.push_back(std::move(open));
    out.push_back(std::move(missing));

    KeyValueStore::Stats kv = service->KeyValueStats();
    out.push_back({"cohort_coordinator_kv_keys",
                   "Keys in the key-value store.",
                   "gauge",
                   {{{}, static_cast<double>(kv.keys)}}});
    out.push_back({"cohort_coordinator_kv_bytes",
                   "Bytes of keys and values in the key-value store.",
                   "gauge",
                   {{{}, static_cast<double>(kv.bytes)}}});
    out.push_back({"cohort_coordinator_cluster_registered",
                   "1 once every workload task has registered (the register barrier passed; "
                   "without the barrier: while all are connected).",
                   "gauge",
                   {{{}, service->ClusterRegistered() ? 1.0 : 0.0}}});
    return out;
  });
}

}  // namespace cohort
