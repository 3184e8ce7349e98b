// The operator's decisions as one pure function: from a CoordinatedJob and what exists for
// it (pods, services, the coordinator's view of its tasks), what should be created or
// deleted and what the job's status should say. No I/O and no clock: the controller
// gathers `Observed` and applies the `Plan`, so running it twice on the same input plans the
// same thing (reconcile is idempotent).
#pragma once

#include "operator/api/coordinated_job.h"
#include "operator/plan/children.h"
#include "operator/plan/observed.h"
#include "operator/plan/plan.h"

namespace cohort::controller {

// How a gang ends or restarts:
// - Success: AllWorkers when every worker's workload exited 0; Worker0 when worker 0 did.
// - A failure is a worker exiting non-zero, a worker or the coordinator pod lost, or a task
//   in error at the coordinator. Once one is seen, the plan waits `failure_settle` for the
//   rest of the gang to report, then looks at the workers that exited first (within a second
//   of the earliest): if any of them has a retryable exit code, or a task is in error at the
//   coordinator for another reason than its workload exiting (a GPU fault, a missed
//   heartbeat), or the failure did not come from an exit at all, the gang restarts; else
//   the job fails. This is what makes a killed
//   worker (137) restart the job even though its peers then exit 1 because their
//   coordination service told them a task failed, while a worker's own exit 1 fails the job.
// - Restarts stop at failurePolicy.maxRestarts: the job fails with reason MaxRestartsExceeded.
// - The coordinator with a state volume (spec.coordinator.state) restarts without the gang:
//   its container restarting in place, or (state on a PersistentVolumeClaim) its pod lost
//   and made again on the same claim, counts in status.coordinatorRestarts with an Event
//   CoordinatorRestarted. A pod lost with its state (EmptyDir, None) still restarts the gang
//   (CoordinatorLost), and so do workers that exit because their coordinator went away
//   (CoordinatorRestarted): from a second before it went until its heartbeat timeout after.
//
// A job labelled kueue.x-k8s.io/queue-name, when the operator runs with Kueue, waits for its
// Workload's admission, suspended (kueue.h; PlanQueued in kueue_plan.cc).
Plan PlanJob(const api::CoordinatedJob& job, const Observed& observed,
             const OperatorSettings& settings);

// The current gang's coordinator among `pods` (its role, its gang and the job's name for it),
// or nullptr: the pod the plan takes for the coordinator, and the one the controller watches.
const ObservedPod* GangCoordinator(const api::CoordinatedJob& job,
                                   const std::vector<ObservedPod>& pods);

}  // namespace cohort::controller
