// The policies a running job's plan is made of (PlanRun, job_plan.cc), each deciding one
// thing in a file of its own, as JobSet keeps its failure, success and startup policies:
//
//   lifecycle.cc            a finished job's TTL, suspension, resumption, the active deadline
//   gang_pods.cc            which pods are the current gang's (the rest are deleted), counts
//   spec_change.cc          a spec changed under a running gang: a new gang from it
//   coordinator_restart.cc  the coordinator restarting without the gang, or lost with it
//   success.cc              the successPolicy
//   gang_failure.cc         a failure's verdict: restart, fail, or restart single workers
//   avoided_nodes.cc        a GPU fault's node, kept off for a while
//   goodput.cc              the last failure's timeline, the time the gang trained
//   startup.cc              workers made, Running, the startup deadline, Ready
//
// A policy that decides the plan says so (returns true): PlanRun then applies no later one.
// The task runtime's plan (task_runtime_plan.cc) shares lifecycle, the pods' sort, the
// coordinator's restarts and the wait for the job's objects. Internal to operator/plan.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/plan/planner.h"

namespace cohort::controller::planning {

// lifecycle.cc: begins the status (generation, totals, address, Pending); keeps a finished
// job's status, deleting leftovers until its TTL deletes the job; deletes a suspended job's
// pods; on resumption (`resume` says why) starts the clocks again; fails a job past
// activeDeadlineSeconds. True when one of these has decided the plan.
bool PlanLifecycle(Planner& P, const Resume& resume);

// gang_pods.cc: the pods of the current gang by role, and every other pod of the job deleted
// (an earlier gang's, a worker index past spec.replicas, a name that is not the job's).
struct JobPods {
  const ObservedPod* coordinator = nullptr;
  const ObservedPod* driver = nullptr;                // task runtime jobs (`with_driver`)
  std::vector<const ObservedPod*> workers;            // by index, spec.replicas long
  std::map<std::string, const ObservedPod*> by_name;  // every pod of the job
};
JobPods SortPods(Planner& P, bool with_driver);

// How far a gang's workers got; also written to status.tasks.
struct GangCounts {
  int created = 0;  // worker pods that exist
  int running = 0;  // running or finished
  int ready = 0;
  int succeeded = 0;  // workloads that exited 0
  int failed = 0;     // workloads that exited non-zero
};
GangCounts CountGang(Planner& P, const JobPods& pods);

// spec_change.cc: a pod of the running gang was made from another version of the spec (or the
// gang shrank): the gang restarts from the new spec, not counted against maxRestarts.
bool PlanSpecChange(Planner& P, const JobPods& pods);

// coordinator_restart.cc: what became of the current gang's coordinator. With a state volume
// its restarts are counted (status.coordinatorRestarts, an Event each) and, on a claim, a
// lost pod is made again; without one (or with its claim gone) a lost coordinator is a loss.
struct CoordinatorFate {
  const ObservedPod* pod = nullptr;  // the current gang's coordinator, if it has one
  bool on_claim = false;             // its state on a PersistentVolumeClaim
  bool gone = false;                 // no pod, or its pod is going or has ended
  bool recreate = false;             // a lost pod is made again on the claim
  bool exited = false;               // its pod ended with an exit code
  // Gone for good, after the job had started (or exited at any time): the gang's failure, or
  // for the task runtime the scheduler's state lost. `loss` says what happened.
  bool lost = false;
  std::string loss;
  // When the coordinator last went away without taking the gang with it (counted restarts,
  // and a container that exited and is not counted yet).
  std::optional<absl::Time> went_away;
  // When it was lost: its exit, the request to delete its pod, else `seen` (when the operator
  // saw the failure first: the pod is already gone).
  absl::Time LostAt(absl::Time seen) const;
};
// `started`: the job had started (it ran, or pods of its gang were made), so a missing
// coordinator pod is a lost one, not one still to make.
CoordinatorFate FollowCoordinator(Planner& P, const ObservedPod* coordinator, bool started);

// success.cc: successPolicy AllWorkers (every worker's workload exited 0) or Worker0.
bool PlanSuccess(Planner& P, const JobPods& pods, const GangCounts& counts);

// gang_failure.cc: a failure of the gang (a worker's exit, a lost pod or coordinator, a task in
// error at the coordinator) waits `failure_settle` for the rest of the gang to report, then
// the verdict (job_plan.h says how): failurePolicy.rules, a permanent exit, maxRestarts, or
// a gang restart. True when there is a failure (settling or judged).
bool PlanGangFailure(Planner& P, const OperatorSettings& settings, const JobPods& pods,
                     const WorkerRestarts& restarts, const CoordinatorFate& coordinator);

// startup.cc: the workers made once the coordinator is ready; Running once they all run; a
// gang that has not started within failurePolicy.startupDeadlineSeconds fails the job,
// naming what it waited for; the Ready condition.
void PlanStartup(Planner& P, const OperatorSettings& settings, const JobPods& pods,
                 const GangCounts& counts, const ChildrenState& children);

// avoided_nodes.cc: the GPU faults among `errors` (the coordinator's, reason GPU_FAULT), each
// in an Event (GPUFault) naming the worker's node, which goes in status.avoidedNodes for
// failurePolicy.avoidNodeAfterGPUFault; true when there was one. Called once a failure has
// settled, as its verdict is made.
bool NoteGpuFaults(Planner& P, const JobPods& pods,
                   const std::vector<CoordinatorView::TaskError>& errors);
// Drops the avoided nodes whose time is over, plans again when the next one's is, and gives the
// rest to the placement of the workers this plan makes.
void PlanAvoidedNodes(Planner& P);

// goodput.cc: status.lastFailure and status.goodput. NoteRegistration: once every task of a
// running gang has registered, when (and, for the first gang, how long after the job's
// creation); the last failure's recovery when it is a later plan's. RecordFailure: the failure
// whose verdict is being made (its cause, reasons, words, and when it happened as far as known),
// which ends the gang's productive time at `failed_at`.
void NoteRegistration(Planner& P);
void RecordFailure(Planner& P, const std::string& cause, const std::vector<std::string>& reasons,
                   const std::string& what, absl::Time failed_at);
// The share of the job's time (from status.startTime to its end, or `now`) its gangs had every
// task registered; none before it started.
std::optional<double> EffectiveTrainingRatio(const api::JobStatus& st, absl::Time now);

// stragglers.cc: each worker's busy seconds per step over the median of the rest of the
// gang's (from the coordinator's snapshot: the sidecars' heartbeats); none until at least
// three workers, and half the gang, have sent one.
struct StragglerScore {
  int worker = 0;
  double score = 0;
  double busy = 0;    // its busy seconds per step
  double median = 0;  // the others'
};
std::vector<StragglerScore> StragglerScores(const CoordinatorView& view, int replicas);
// The slowest worker whose score reaches failurePolicy.stragglers.ratio is status.straggler;
// once it has been so for stragglers.for, an Event (Straggler) names it, once; another when it
// keeps up again. A running gang is looked at again every few seconds. When the straggler is
// named, a failure rule on Straggler acts: true when it decided the plan (the gang or the
// worker restarted, or the job failed); a counted restart the job has none left for is not
// made (an Event, StragglerKept, says so), since a slow gang still trains.
bool PlanStragglers(Planner& P, const JobPods& pods);

// What a job whose coordinator is not ready waits for: its NetworkPolicy, cert-manager's
// Secrets, or the coordinator pod; nothing once the coordinator is ready (startup.cc).
std::optional<std::string> WaitingForCoordinator(const Planner& P, const OperatorSettings& settings,
                                                 const ObservedPod* coordinator,
                                                 const ChildrenState& children);

// spec.gangScheduling (pod_group.cc): the job's PodGroup, made before the workers the plan
// makes (again: creating one that exists changes nothing), which their builders made members
// (the plan's Placement). Applied to every plan, queued or running.
void PlanPodGroup(const api::CoordinatedJob& job, const OperatorSettings& settings, Plan* plan);
// podGroup Kubernetes on a cluster that serves no scheduling.k8s.io Workload API
// (OperatorSettings::kubernetes_scheduling_api): fails the job, saying what it needs. True
// when it did.
bool KubernetesGangSchedulingUnavailable(Planner& P, const OperatorSettings& settings);
// podGroup Kubernetes: the kube-scheduler's word when it does not place the gang (its
// PodGroup's PodGroupInitiallyScheduled condition False; for a later gang, whose group was
// placed before, a worker's PodScheduled condition), in words; none otherwise.
std::optional<std::string> GangUnschedulable(const Planner& P, const JobPods& pods);

// A failure's settling time (OperatorSettings::failure_settle): marks the plan as seeing a
// failure, and until the time has passed since it was first seen asks to look again then.
// True while it settles.
bool FailureSettling(Planner& P, const OperatorSettings& settings);

}  // namespace cohort::controller::planning
