// The plan of a task runtime job (spec.tasks): a coordinator that serves the scheduler, a pool
// of worker pods whose sidecars host the object stores, and a driver pod. Unlike a gang, a
// worker pod that ends is replaced on its own (the scheduler runs its tasks again elsewhere
// and rebuilds its objects); the driver's exit decides the job.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// The driver decides: its exit ends the job, and a started job whose driver pod is gone fails.
bool DriverDecides(Planner& P, const ObservedPod* driver, bool started) {
  const api::JobStatus& st = P.st();
  if (driver && driver->exit_code) {
    if (*driver->exit_code == 0) {
      P.Finish(true, "DriverSucceeded",
               absl::StrCat("the driver exited 0 (", st.task_runtime->succeeded,
                            " tasks succeeded, ", st.task_runtime->failed, " failed)"));
    } else {
      P.Finish(false, "DriverFailed", DescribeExit(*driver, "the driver"));
    }
    return true;
  }
  if (started && (!driver || driver->terminating)) {
    P.Finish(false, "DriverLost",
             absl::StrCat("the driver pod ", DriverPodName(P.job), " was deleted before it ended"));
    return true;
  }
  return false;
}

// A lost coordinator (without a state volume to come back on) takes everything: the
// scheduler's state went with it. The job starts again, up to maxRestarts, once the failure
// has settled.
void RestartForLostCoordinator(Planner& P, const OperatorSettings& settings,
                               const std::string& what) {
  if (FailureSettling(P, settings)) return;
  const int counted = P.st().restarts;
  const int max_restarts = P.job.spec.failure_policy.max_restarts;
  if (counted >= max_restarts) {
    P.Finish(false, "MaxRestartsExceeded",
             absl::StrCat("the job was started again ", counted, " time", counted == 1 ? "" : "s",
                          " (failurePolicy.maxRestarts ", max_restarts, "); last failure: ", what));
    return;
  }
  P.Restart("CoordinatorLost",
            absl::StrCat("restart ", counted + 1, " of at most ", max_restarts, ": ", what,
                         " and the scheduler's state with it (give the coordinator a state "
                         "volume to keep it)"),
            what);
}

// Running once the driver runs; Ready once it and every worker pod are.
void TaskRuntimeReadiness(Planner& P, const OperatorSettings& settings, const JobPods& pods,
                          const ChildrenState& children, int running, int ready, int replaced) {
  api::JobStatus& st = P.st();
  const int replicas = P.job.spec.replicas;
  const ObservedPod* coordinator = pods.coordinator;
  const ObservedPod* driver = pods.driver;
  if (driver && driver->phase == "Running" && coordinator && coordinator->phase == "Running" &&
      st.phase != phase::kRunning) {
    if (st.phase == phase::kRestarting) {
      P.Condition(kConditionRestarting, false, "Recovered",
                  absl::StrCat("restart ", st.Gang(), " is running"));
    }
    st.phase = phase::kRunning;
    P.Event("Normal", "Running",
            absl::StrCat("the driver and ", running, " of ", replicas, " worker pods run"));
  }
  const bool driver_ready = driver && driver->ready;
  if (driver_ready && ready == replicas) {
    P.Condition(kConditionReady, true, "AllWorkersReady",
                absl::StrCat("the driver and all ", replicas, " worker pods are ready"));
    return;
  }
  P.Condition(kConditionReady, false, "WaitingForWorkers",
              WaitingForCoordinator(P, settings, coordinator, children)
                  .value_or(absl::StrCat(
                      driver_ready ? "the driver is ready; " : "the driver is not ready; ", ready,
                      " of ", replicas, " worker pods are ready",
                      replaced > 0 ? absl::StrCat(" (", replaced, " being replaced)") : "")));
}

}  // namespace

Plan PlanTaskRuntime(Planner& P, const OperatorSettings& settings) {
  const api::CoordinatedJob& job = P.job;
  const Observed& observed = P.observed;
  api::JobStatus& st = P.st();
  const int replicas = job.spec.replicas;
  const int gang = st.Gang();

  // ---- Sort pods. Workers past spec.replicas (the pool shrank) and pods of an earlier gang
  // go; a worker's SIGTERM lets it finish its task first (python -m cohort.worker).
  const JobPods pods = SortPods(P, /*with_driver=*/true);
  const ObservedPod* coordinator = pods.coordinator;
  const ObservedPod* driver = pods.driver;
  const std::vector<const ObservedPod*>& workers = pods.workers;

  // ---- Counts: worker pods, and the scheduler's tasks.
  int running = 0, ready = 0, replaced = 0;
  for (const ObservedPod* w : workers) {
    if (!w) continue;
    if (w->phase == "Running") ++running;
    if (w->ready) ++ready;
  }
  st.tasks.ready = ready;
  st.tasks.registered = ready;
  st.tasks.succeeded = st.tasks.failed = 0;
  if (observed.coordinator && observed.coordinator->task_runtime) {
    st.task_runtime = *observed.coordinator->task_runtime;
  } else if (!st.task_runtime) {
    st.task_runtime = api::TaskRuntimeStatus{};
  }

  // ---- The coordinator: kept through restarts by its state volume, as a gang's.
  const bool started = st.phase == phase::kRunning;
  const CoordinatorFate fate = FollowCoordinator(P, coordinator, started);

  // ---- The driver decides; a lost coordinator starts the job again.
  if (DriverDecides(P, driver, started)) return std::move(P.plan);
  if (fate.lost) {
    RestartForLostCoordinator(P, settings, fate.loss);
    return std::move(P.plan);
  }

  // ---- Worker pods that ended are replaced; their tasks run elsewhere meanwhile.
  for (int i = 0; i < replicas; ++i) {
    const ObservedPod* w = workers[i];
    if (!w || w->terminating || !(w->exit_code || Finished(*w))) continue;
    P.plan.delete_pods.push_back(w->name);
    ++replaced;
    P.Event("Normal", "WorkerReplaced",
            absl::StrCat(w->exit_code ? DescribeExit(*w) : absl::StrCat("worker ", i, " ended"),
                         "; a new pod ", w->name,
                         " takes its place, and the scheduler runs its tasks elsewhere"));
  }

  // ---- Create what is missing: the job's objects and coordinator, then (once the
  // coordinator is ready) the workers and the driver.
  const ChildrenState children =
      PlanChildren(P, settings, coordinator, fate.recreate, fate.on_claim, gang);
  if (coordinator && coordinator->ready && !fate.gone) {
    for (int i = 0; i < replicas; ++i) {
      if (!pods.by_name.count(WorkerPodName(job, i))) {
        P.plan.create.push_back(WorkerPod(job, i, gang, settings, children.tls, P.placement));
      }
    }
    if (!pods.by_name.count(DriverPodName(job))) {
      P.plan.create.push_back(DriverPod(job, gang, settings, children.tls, P.placement));
    }
  }

  TaskRuntimeReadiness(P, settings, pods, children, running, ready, replaced);
  return std::move(P.plan);
}

}  // namespace cohort::controller::planning
