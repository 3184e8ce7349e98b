// The coordinator restarting without the gang (policies.h), shared by gangs and the task
// runtime. With a state volume (spec.coordinator.state) the coordinator's container restarts
// in place, or (state on a PersistentVolumeClaim) its lost pod is made again on the claim; each
// restart is counted once in status.coordinatorRestarts with an Event. A coordinator lost with
// its state (EmptyDir, None, or its claim gone too) is a loss the caller's policy judges.
#include "absl/strings/str_cat.h"
#include "operator/plan/policies.h"

namespace cohort::controller::planning {

namespace {

// Counts each restart of the current gang's coordinator once, through what the status
// remembers of its pod (status.coordinatorPod): a container restarted in place, or a pod lost
// while its state is on the claim (`recreate`: the plan then makes it again).
void CountRestarts(Planner& P, const ObservedPod* coordinator, bool gone, bool recreate) {
  const api::CoordinatedJob& job = P.job;
  api::CoordinatorPodStatus& seen = P.st().coordinator_pod;
  if (coordinator && !gone) {
    if (seen.uid != coordinator->uid) {  // a new pod: restarts before now were not counted
      seen.uid = coordinator->uid;
      seen.container_restarts = 0;
    }
    const int more = coordinator->restart_count - seen.container_restarts;
    if (more <= 0) return;
    P.st().coordinator_restarts += more;
    seen.container_restarts = coordinator->restart_count;
    seen.last_restart_time = coordinator->last_exit_at.value_or(P.now());
    P.Event(
        "Warning", "CoordinatorRestarted",
        absl::StrCat("the coordinator's container restarted in place (", coordinator->restart_count,
                     " time", coordinator->restart_count == 1 ? "" : "s", " in pod ",
                     coordinator->name, ") and keeps its state on its ",
                     api::StateVolumeName(job.spec.coordinator.state.volume),
                     " volume; the gang goes on"));
  } else if (recreate && !seen.uid.empty()) {
    P.st().coordinator_restarts += 1;
    absl::Time at = P.now();
    if (coordinator && coordinator->deletion_requested_at) {
      at = *coordinator->deletion_requested_at;
    } else if (coordinator && coordinator->finished_at) {
      at = *coordinator->finished_at;
    }
    seen = api::CoordinatorPodStatus{};  // the next pod is a new one
    seen.last_restart_time = at;
    P.Event(
        "Warning", "CoordinatorRestarted",
        absl::StrCat("the coordinator pod ", CoordinatorName(job),
                     coordinator && !coordinator->terminating ? " failed" : " was deleted",
                     "; a new one starts on PersistentVolumeClaim ", CoordinatorStateClaimName(job),
                     ", which holds its state; the gang goes on"));
  }
}

// "the coordinator exited with code 1", "the coordinator pod train-coordinator was deleted and
// its PersistentVolumeClaim train-coordinator-state is gone".
std::string DescribeLoss(const api::CoordinatedJob& job, const CoordinatorFate& fate) {
  const ObservedPod* pod = fate.pod;
  std::string loss;
  if (!fate.exited) {
    loss = absl::StrCat("the coordinator pod ", CoordinatorName(job), " was deleted");
  } else if (pod->restarts_in_place) {  // evicted: the pod failed, not the process
    loss = absl::StrCat("the coordinator pod ", CoordinatorName(job), " failed");
    if (!pod->reason.empty()) absl::StrAppend(&loss, " (", pod->reason, ")");
  } else {
    loss = absl::StrCat("the coordinator exited with code ", *pod->exit_code);
  }
  if (fate.on_claim) {
    absl::StrAppend(&loss, " and its PersistentVolumeClaim ", CoordinatorStateClaimName(job),
                    " is gone");
  }
  return loss;
}

}  // namespace

absl::Time CoordinatorFate::LostAt(absl::Time seen) const {
  if (pod && exited && pod->finished_at) return *pod->finished_at;
  if (pod && pod->deletion_requested_at) return *pod->deletion_requested_at;
  return seen;
}

CoordinatorFate FollowCoordinator(Planner& P, const ObservedPod* coordinator, bool started) {
  const api::CoordinatedJob& job = P.job;
  const Observed& observed = P.observed;
  const api::StateVolume volume = job.spec.coordinator.state.volume;
  CoordinatorFate fate;
  fate.pod = coordinator;
  fate.on_claim = volume == api::StateVolume::kPersistentVolumeClaim;
  fate.gone = !coordinator || coordinator->terminating || Finished(*coordinator);
  const bool claim_usable =
      observed.coordinator_state_claim && !observed.coordinator_state_claim_terminating;
  // A pod lost on a claim that is gone too has lost its state.
  fate.recreate = fate.on_claim && (claim_usable || !fate.gone);
  if (volume != api::StateVolume::kNone) CountRestarts(P, coordinator, fate.gone, fate.recreate);

  fate.exited = coordinator && coordinator->exit_code.has_value();
  fate.lost =
      !fate.recreate && (fate.exited || (started && (!coordinator || coordinator->terminating)));
  if (fate.lost) fate.loss = DescribeLoss(job, fate);

  fate.went_away = P.st().coordinator_pod.last_restart_time;
  if (coordinator && !fate.gone && coordinator->last_exit_at &&
      (!fate.went_away || *coordinator->last_exit_at > *fate.went_away)) {
    fate.went_away = coordinator->last_exit_at;  // down now, or not counted yet
  }
  return fate;
}

}  // namespace cohort::controller::planning
