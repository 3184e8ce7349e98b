#include "operator/plan/job_plan.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/plan/kueue.h"
#include "operator/plan/planner.h"

namespace cohort::controller {

using json = nlohmann::json;
namespace phase = api::phase;

namespace planning {

ChildrenState PlanChildren(Planner& P, const OperatorSettings& settings,
                           const ObservedPod* coordinator, bool recreate_coordinator, bool on_claim,
                           int gang) {
  const Observed& observed = P.observed;
  const api::CoordinatedJob& job = P.job;
  JobTls tls = observed.token_secret_tls;
  if (!observed.token_secret) {
    tls = NewJobTls(settings);
    if (tls == JobTls::kOperator && !observed.fresh_certificates) tls = JobTls::kNone;
    P.plan.create.push_back(
        TokenSecret(job, observed.fresh_token,
                    tls == JobTls::kOperator ? &*observed.fresh_certificates : nullptr, tls));
  }
  // cert-manager's certificates: asked for (again, harmlessly, while they are not issued:
  // creating one that exists changes nothing), and waited for.
  const bool certificates_ready = tls != JobTls::kCertManager || observed.certificates_issued;
  if (!certificates_ready) {
    for (json& certificate : CertManagerCertificates(job, settings)) {
      P.plan.create.push_back(std::move(certificate));
    }
    P.Requeue(absl::Seconds(5));
  }
  bool policy_in_place = true;
  if (settings.network_policy) {
    json want = NetworkPolicy(job, settings);
    if (!observed.network_policy) {
      P.plan.create.push_back(std::move(want));
      policy_in_place = false;
    } else if (observed.network_policy->value("spec", json()) != want["spec"]) {
      // Changed by someone, or made under other settings (a chart upgrade): put ours back.
      want["metadata"]["resourceVersion"] =
          observed.network_policy->value("/metadata/resourceVersion"_json_pointer, std::string());
      P.plan.update.push_back(std::move(want));
      P.Event("Warning", "NetworkPolicyRestored",
              absl::StrCat("NetworkPolicy ", NetworkPolicyName(job),
                           " differed from the operator's; its spec is written back"));
    }
  } else if (observed.network_policy) {
    P.plan.delete_network_policy = true;
  }
  // A claim being deleted is not used; the next one gets the pod.
  const bool coordinator_pod_exists =
      std::any_of(observed.pods.begin(), observed.pods.end(),
                  [&](const ObservedPod& p) { return p.name == CoordinatorName(job); });
  // The coordinator's configuration follows the spec: written anew between gangs (before the
  // next coordinator starts) when the spec it was written from changed.
  if (!observed.coordinator_config_map) {
    P.plan.create.push_back(CoordinatorConfigMap(job, tls));
  } else if (observed.coordinator_config_hash != SpecHash(job) && !coordinator_pod_exists) {
    json config = CoordinatorConfigMap(job, tls);
    config["metadata"]["resourceVersion"] = observed.coordinator_config_version;
    P.plan.update.push_back(std::move(config));
  }
  if (!observed.coordinator_service) P.plan.create.push_back(CoordinatorService(job));
  if (!observed.workers_service) P.plan.create.push_back(WorkersService(job));
  if (on_claim && !observed.coordinator_state_claim) {
    P.plan.create.push_back(CoordinatorStateClaim(job));
  }
  if (recreate_coordinator && coordinator && Finished(*coordinator) && !coordinator->terminating) {
    P.plan.delete_pods.push_back(coordinator->name);  // evicted: make room for the new one
  }
  if (!coordinator_pod_exists && !observed.coordinator_state_claim_terminating && policy_in_place &&
      certificates_ready) {
    P.plan.create.push_back(CoordinatorPod(job, gang, *P.st().start_time, settings, tls));
  }
  return {tls, policy_in_place, certificates_ready};
}

}  // namespace planning

namespace {

// spec.gangScheduling: the workers the plan makes join the job's PodGroup, which is made
// (again: creating one that exists changes nothing) whenever they are.
void PlanPodGroup(const api::CoordinatedJob& job, Plan* plan) {
  std::optional<json> group = PodGroup(job);
  if (!group) return;
  bool workers = false;
  for (json& object : plan->create) {
    if (object.value("kind", "") != "Pod" ||
        object.value("/metadata/labels/cohort.dev~1role"_json_pointer, "") != "worker") {
      continue;
    }
    JoinPodGroup(job, &object);
    workers = true;
  }
  if (workers) plan->create.insert(plan->create.begin(), std::move(*group));
}

}  // namespace

Plan PlanJob(const api::CoordinatedJob& job, const Observed& observed,
             const OperatorSettings& settings) {
  const std::string queue = kueue::QueueName(job);
  Plan plan = !queue.empty() && observed.kueue ? planning::PlanQueued(job, observed, settings)
                                               : planning::PlanRun(job, observed, settings);
  if (!queue.empty() && !observed.kueue && job.status.phase.empty()) {
    plan.events.push_back(
        {"Warning", "QueueIgnored",
         absl::StrCat("the job names LocalQueue ", queue, " (label ", kueue::kQueueNameLabel,
                      "), but this operator runs without Kueue (--kueue): it starts now")});
  }
  PlanPodGroup(job, &plan);
  return plan;
}

namespace planning {

Plan PlanRun(const api::CoordinatedJob& job, const Observed& observed,
             const OperatorSettings& settings, const Resume& resume) {
  Planner P{job, observed, Plan{}};
  api::JobStatus& st = P.plan.status = job.status;
  const int replicas = job.spec.replicas;
  const int gang = st.Gang();
  st.observed_generation = job.generation;
  st.tasks.total = replicas;
  st.coordinator_address = CoordinatorAddress(job);
  if (st.phase.empty()) {
    st.phase = phase::kPending;
    P.Event("Normal", "Pending", absl::StrCat("starting a coordinator and ", replicas, " workers"));
  }

  // ---- Finished jobs keep their status; only leftovers and the TTL remain.
  if (st.phase == phase::kSucceeded || st.phase == phase::kFailed) {
    P.DeletePods(/*include_finished=*/false, /*coordinator_last=*/true);
    P.ScheduleTtl();
    return std::move(P.plan);
  }

  // ---- Suspended: no pods. Resuming starts a gang as if new.
  if (job.spec.suspend) {
    P.DeletePods(/*include_finished=*/true);
    if (st.phase != phase::kSuspended) {
      st.phase = phase::kSuspended;
      P.Condition(kConditionSuspended, true, "Suspended", "spec.suspend is true; pods deleted");
      P.Condition(kConditionReady, false, "Suspended", "the job is suspended");
      P.Event("Normal", "Suspended", "the job is suspended: its pods are deleted");
    }
    st.tasks.registered = st.tasks.ready = 0;
    st.coordinator_pod = api::CoordinatorPodStatus{};
    st.restarting_workers.clear();
    return std::move(P.plan);
  }
  if (st.phase == phase::kSuspended) {
    st.phase = phase::kPending;
    st.start_time = observed.now;  // the deadline counts from the resume
    st.gang_start_time = observed.now;
    P.Condition(kConditionSuspended, false, resume.reason, resume.message);
    P.Event("Normal", resume.reason, absl::StrCat(resume.message, ": starting its pods"));
  }
  if (!st.start_time) st.start_time = observed.now;
  if (!st.gang_start_time) st.gang_start_time = observed.now;

  // ---- Deadline.
  if (job.spec.active_deadline_seconds) {
    const absl::Time end = *st.start_time + absl::Seconds(*job.spec.active_deadline_seconds);
    if (observed.now >= end) {
      P.Finish(false, "DeadlineExceeded",
               absl::StrCat("the job ran longer than activeDeadlineSeconds (",
                            *job.spec.active_deadline_seconds, ")"));
      return std::move(P.plan);
    }
    P.Requeue(end - observed.now);
  }

  if (job.spec.tasks) return planning::PlanTaskRuntime(P, settings);

  // ---- Sort pods: this gang's, and leftovers of earlier gangs (deleted).
  const ObservedPod* coordinator = nullptr;
  std::vector<const ObservedPod*> workers(replicas, nullptr);
  std::map<std::string, const ObservedPod*> by_name;
  for (const auto& p : observed.pods) {
    by_name[p.name] = &p;
    const bool current = p.restart == gang;
    if (current && p.role == "coordinator" && p.name == CoordinatorName(job)) {
      coordinator = &p;
    } else if (current && p.role == "worker" && p.index >= 0 && p.index < replicas &&
               p.name == WorkerPodName(job, p.index)) {
      workers[p.index] = &p;
    } else if (!p.terminating) {
      P.plan.delete_pods.push_back(p.name);
    }
  }

  // ---- Workers being restarted alone (RestartWorker).
  const WorkerRestarts restarts = FollowWorkerRestarts(P, workers);

  // ---- A spec changed under a running gang (replicas, the template, the coordinator's
  // settings): a clean new gang starts from it. Not a failure: it is not counted against
  // maxRestarts. Pods made before operators marked them are left alone.
  {
    const std::string hash = SpecHash(job);
    const ObservedPod* stale = nullptr;
    if (coordinator && !coordinator->spec_hash.empty() && coordinator->spec_hash != hash) {
      stale = coordinator;
    }
    for (const ObservedPod* w : workers) {
      if (!stale && w && !w->spec_hash.empty() && w->spec_hash != hash) stale = w;
    }
    // A worker index past the new replicas (the gang shrank) was sorted out as a leftover.
    for (const auto& p : observed.pods) {
      if (!stale && p.restart == gang && p.role == "worker" && p.index >= replicas) stale = &p;
    }
    if (stale) {
      P.Restart("SpecChanged",
                absl::StrCat("the job's spec changed (generation ", job.generation,
                             "): a new gang starts from it; not counted against maxRestarts"),
                "the spec changed", /*counted=*/false);
      return std::move(P.plan);
    }
  }

  // ---- Counts.
  int created = 0, running = 0, ready = 0, succeeded = 0, failed = 0;
  for (const ObservedPod* w : workers) {
    if (!w) continue;
    ++created;
    if (w->phase == "Running" || Finished(*w)) ++running;
    if (w->ready) ++ready;
    if (w->exit_code && *w->exit_code == 0) ++succeeded;
    if (w->exit_code && *w->exit_code != 0) ++failed;
  }
  st.tasks.ready = ready;
  st.tasks.succeeded = succeeded;
  st.tasks.failed = failed;
  st.tasks.registered = observed.coordinator ? observed.coordinator->registered : 0;

  // ---- The coordinator restarting without the gang (a state volume).
  const api::StateVolume volume = job.spec.coordinator.state.volume;
  const bool on_claim = volume == api::StateVolume::kPersistentVolumeClaim;
  const bool coordinator_gone = !coordinator || coordinator->terminating || Finished(*coordinator);
  const bool claim_usable =
      observed.coordinator_state_claim && !observed.coordinator_state_claim_terminating;
  // A pod lost on a claim that is gone too has lost its state.
  const bool recreate_coordinator = on_claim && (claim_usable || !coordinator_gone);
  if (volume != api::StateVolume::kNone) {
    P.CountCoordinatorRestarts(coordinator, coordinator_gone, recreate_coordinator);
  }

  // ---- Success.
  const bool worker0_done = workers[0] && workers[0]->exit_code && *workers[0]->exit_code == 0;
  if (job.spec.success_policy == api::SuccessPolicy::kWorker0 && worker0_done) {
    P.Finish(true, "Worker0Succeeded", "worker 0 exited 0 (successPolicy Worker0)");
    return std::move(P.plan);
  }
  if (succeeded == replicas) {
    P.Finish(true, "AllWorkersSucceeded", absl::StrCat("all ", replicas, " workers exited 0"));
    return std::move(P.plan);
  }

  // ---- Failures of this gang.
  std::vector<std::string> signals;
  std::string cause = "WorkerFailed";
  std::vector<const ObservedPod*> exits;
  for (const ObservedPod* w : workers) {
    if (w && w->exit_code && *w->exit_code != 0) exits.push_back(w);
  }
  for (const ObservedPod* w : exits) signals.push_back(DescribeExit(*w));
  // Pods created earlier for this gang that are gone: deleted by someone, or evicted.
  const bool gang_started = st.phase == phase::kRunning || created > 0;
  if (st.phase == phase::kRunning) {
    for (int i = 0; i < replicas; ++i) {
      if (restarts.Skips(i)) continue;
      if (!workers[i] || (workers[i]->terminating && !workers[i]->exit_code)) {
        signals.push_back(
            absl::StrCat("worker ", i, " pod ", WorkerPodName(job, i), " was deleted"));
        if (exits.empty()) cause = "WorkerLost";
      }
    }
  }
  const bool coordinator_exited = coordinator && coordinator->exit_code.has_value();
  const bool coordinator_lost =
      !recreate_coordinator &&
      (coordinator_exited || (gang_started && (!coordinator || coordinator->terminating)));
  std::string coordinator_loss;
  if (coordinator_lost) {
    if (!coordinator_exited) {
      coordinator_loss = absl::StrCat("the coordinator pod ", CoordinatorName(job), " was deleted");
    } else if (coordinator->restarts_in_place) {  // evicted: the pod failed, not the process
      coordinator_loss = absl::StrCat("the coordinator pod ", CoordinatorName(job), " failed");
      if (!coordinator->reason.empty()) {
        absl::StrAppend(&coordinator_loss, " (", coordinator->reason, ")");
      }
    } else {
      coordinator_loss = absl::StrCat("the coordinator exited with code ", *coordinator->exit_code);
    }
    if (on_claim) {
      absl::StrAppend(&coordinator_loss, " and its PersistentVolumeClaim ",
                      CoordinatorStateClaimName(job), " is gone");
    }
    signals.push_back(coordinator_loss);
    if (exits.empty()) cause = "CoordinatorLost";
  }
  // When the coordinator last went away without taking the gang with it.
  std::optional<absl::Time> coordinator_went_away = st.coordinator_pod.last_restart_time;
  if (coordinator && !coordinator_gone && coordinator->last_exit_at &&
      (!coordinator_went_away || *coordinator->last_exit_at > *coordinator_went_away)) {
    coordinator_went_away = coordinator->last_exit_at;  // down now, or not counted yet
  }
  // The coordinator's errors, but those of workers being restarted alone.
  std::vector<CoordinatorView::TaskError> errors;
  if (observed.coordinator) {
    for (const auto& e : observed.coordinator->errors) {
      if (!restarts.SkipsError(e)) errors.push_back(e);
    }
  }
  if (!errors.empty()) {
    for (const auto& e : errors) {
      signals.push_back(e.Describe());
    }
    if (exits.empty() && signals.size() == errors.size()) {
      cause = "TaskError";
    }
  }

  if (!signals.empty()) {
    P.plan.failure_seen = true;
    // What ended the gang as failure rules name it, as far as the pods show it now (an evicted
    // pod may be gone by the time the failure settles: the controller keeps what was seen).
    FailureFacts facts;
    facts.reasons = observed.failure_reasons;
    const auto note = [&facts](const std::string& r) {
      if (!r.empty() &&
          std::find(facts.reasons.begin(), facts.reasons.end(), r) == facts.reasons.end()) {
        facts.reasons.push_back(r);
      }
    };
    for (const ObservedPod* w : exits) note(FailureReasonOf(*w));
    if (st.phase == phase::kRunning) {
      for (int i = 0; i < replicas; ++i) {
        if (restarts.Skips(i)) continue;
        if (!workers[i]) {
          note(api::failure_reason::kPodDeleted);
        } else if (workers[i]->terminating && !workers[i]->exit_code) {
          const std::string r = FailureReasonOf(*workers[i]);
          note(r.empty() ? api::failure_reason::kPodDeleted : r);
        }
      }
    }
    if (coordinator_lost) {
      note(api::failure_reason::kCoordinatorLost);
      if (coordinator) note(FailureReasonOf(*coordinator));
    }
    for (const auto& e : errors) {
      if (!e.IsWorkloadExitReport()) note(TaskErrorReason(e));
    }
    P.plan.failure_reasons = facts.reasons;
    const absl::Time first = observed.failure_first_seen.value_or(observed.now);
    if (observed.now < first + settings.failure_settle) {
      P.Requeue(first + settings.failure_settle - observed.now);
      return std::move(P.plan);
    }
    // The workers that exited first decide: one retryable exit among them, or a failure that
    // is not an exit at all, restarts the gang.
    bool permanent = false;
    std::string first_exit;
    absl::Time earliest = absl::InfiniteFuture();
    if (!exits.empty()) {
      for (const ObservedPod* w : exits) {
        earliest = std::min(earliest, w->finished_at.value_or(observed.now));
      }
      permanent = true;
      for (const ObservedPod* w : exits) {
        if (w->finished_at.value_or(observed.now) > earliest + absl::Seconds(1)) continue;
        if (first_exit.empty()) first_exit = DescribeExit(*w);
        if (api::IsRetryableExitCode(job.spec.failure_policy, *w->exit_code)) {
          permanent = false;
          first_exit = DescribeExit(*w);
          break;
        }
      }
    }
    // An error the coordinator holds that is not a workload's exit came first: the exits
    // that follow are the tasks stopping because of it.
    std::string infra;
    // So did a lost coordinator, unless the exits came well before it: workers whose
    // coordinator goes away stop with an error of their own (jaxlib and the agent exit 1).
    if (coordinator_lost) {
      absl::Time lost_at = first;  // a pod already gone: when the operator saw it
      if (coordinator && coordinator_exited && coordinator->finished_at) {
        lost_at = *coordinator->finished_at;
      } else if (coordinator && coordinator->deletion_requested_at) {
        lost_at = *coordinator->deletion_requested_at;
      }
      if (exits.empty() || earliest + absl::Seconds(1) >= lost_at) {
        infra = coordinator_loss;
        cause = "CoordinatorLost";
        permanent = false;
      }
    }
    // Workers whose coordinator restarted under them may stop too (until the sidecar proxy
    // rides out the outage, jaxlib does): from a second before until a heartbeat timeout
    // after, an exit that would fail the job is the coordinator's doing.
    if (permanent && infra.empty() && coordinator_went_away) {
      absl::Duration heartbeat = absl::Seconds(30);
      (void)absl::ParseDuration(job.spec.coordinator.heartbeat_timeout, &heartbeat);
      if (earliest + absl::Seconds(1) >= *coordinator_went_away &&
          earliest <= *coordinator_went_away + heartbeat) {
        infra = absl::StrCat(first_exit, " after the coordinator restarted");
        cause = "CoordinatorRestarted";
        permanent = false;
      }
    }
    for (const auto& e : errors) {
      if (e.IsWorkloadExitReport() || !infra.empty()) continue;
      infra = e.Describe();
      cause = "TaskError";
      permanent = false;
      break;
    }
    const std::string what = !infra.empty()       ? infra
                             : first_exit.empty() ? signals.front()
                                                  : first_exit;
    // ---- failurePolicy.rules: what ended the gang (the exit codes of the first exits, and
    // the reasons above), matched in order before the exit code rule.
    for (const ObservedPod* w : exits) {
      if (w->finished_at.value_or(observed.now) > earliest + absl::Seconds(1)) continue;
      if (*w->exit_code > 0) facts.exit_codes.push_back(*w->exit_code);
    }
    if (const RuleMatch m = MatchFailureRule(job.spec.failure_policy, facts); m.rule) {
      const std::string by =
          absl::StrCat("failurePolicy.rules[", m.index, "] (",
                       api::FailureActionName(m.rule->action), " on ", m.matched, ")");
      switch (m.rule->action) {
        case api::FailureAction::kFailJob:
          P.Finish(false, "FailureRule", absl::StrCat(what, "; ", by, " fails the job"));
          return std::move(P.plan);
        case api::FailureAction::kRestartGangUncounted:
          P.Restart(
              cause,
              absl::StrCat("gang restart, not counted against maxRestarts by ", by, ": ", what),
              what, /*counted=*/false);
          return std::move(P.plan);
        case api::FailureAction::kRestartGang:
          permanent = false;
          break;
        case api::FailureAction::kRestartWorker: {
          // The failed workers alone, when the coordinator is still there for the rest of the
          // gang (else the gang restarts, counted).
          if (coordinator_lost) {
            permanent = false;
            break;
          }
          std::vector<int> failed;
          for (int i = 0; i < replicas; ++i) {
            const ObservedPod* w = workers[i];
            const bool exited = w && w->exit_code && *w->exit_code != 0;
            const bool lost = st.phase == phase::kRunning && !restarts.Skips(i) &&
                              (!w || (w->terminating && !w->exit_code));
            const bool in_error = std::any_of(errors.begin(), errors.end(), [i](const auto& e) {
              return CoordinatorView::TaskIndex(e.task) == i;
            });
            if (exited || lost || in_error) failed.push_back(i);
          }
          if (failed.empty()) {
            permanent = false;
            break;
          }
          RestartWorkers(P, workers, failed, by, what);
          return std::move(P.plan);
        }
      }
    }
    if (permanent) {
      P.Finish(false, "WorkerFailed",
               absl::StrCat(what, ", which failurePolicy counts as permanent"));
      return std::move(P.plan);
    }
    // Workers restarted alone count against maxRestarts too.
    const int counted = st.restarts + st.worker_restarts;
    if (counted >= job.spec.failure_policy.max_restarts) {
      P.Finish(false, "MaxRestartsExceeded",
               absl::StrCat("the gang failed after ", counted, " restart", counted == 1 ? "" : "s",
                            st.worker_restarts > 0
                                ? absl::StrCat(" (", st.worker_restarts, " of single workers)")
                                : "",
                            " (failurePolicy.maxRestarts ", job.spec.failure_policy.max_restarts,
                            "); last failure: ", what));
      return std::move(P.plan);
    }
    P.Restart(cause,
              absl::StrCat("gang restart ", counted + 1, " of at most ",
                           job.spec.failure_policy.max_restarts, ": ", what),
              what);
    return std::move(P.plan);
  }

  // ---- Create what is missing: the token, the NetworkPolicy, services and config, the
  // coordinator (once the policy exists, so that no pod of the job runs unprotected), then
  // (once it is ready, so workers find it) the workers.
  const ChildrenState children =
      PlanChildren(P, settings, coordinator, recreate_coordinator, on_claim, gang);
  const JobTls tls = children.tls;
  const bool policy_in_place = children.policy_in_place;
  const bool certificates_ready = children.certificates_ready;
  if (coordinator && coordinator->ready) {
    for (int i = 0; i < replicas; ++i) {
      if (!by_name.count(WorkerPodName(job, i))) {
        P.plan.create.push_back(WorkerPod(job, i, gang, settings, tls));
      }
    }
  }

  // ---- Phase and readiness.
  if (running == replicas && coordinator && coordinator->phase == "Running") {
    if (st.phase != phase::kRunning) {
      if (st.phase == phase::kRestarting) {
        P.Condition(kConditionRestarting, false, "Recovered",
                    absl::StrCat("gang ", gang, " is running"));
      }
      st.phase = phase::kRunning;
      P.Event("Normal", "Running", absl::StrCat("all ", replicas, " workers are running"));
    }
  }
  // ---- A gang that does not start in time (pods the cluster cannot place, images that do
  // not pull) fails the job, saying what it waited for.
  const std::optional<int64_t> startup = job.spec.failure_policy.startup_deadline_seconds;
  if (st.phase != phase::kRunning && startup && st.gang_start_time) {
    const absl::Time deadline = *st.gang_start_time + absl::Seconds(*startup);
    if (observed.now >= deadline) {
      std::vector<std::string> waiting;
      const auto why = [](const ObservedPod* p, const std::string& name) {
        if (!p) return absl::StrCat(name, " was not made yet");
        return absl::StrCat(name, " is ", p->phase.empty() ? "Pending" : p->phase,
                            p->unschedulable.empty() ? "" : absl::StrCat(": ", p->unschedulable));
      };
      if (!coordinator || coordinator->phase != "Running") {
        waiting.push_back(why(coordinator, "the coordinator"));
      }
      for (int i = 0; i < replicas && waiting.size() < 3; ++i) {
        if (!workers[i] || (workers[i]->phase != "Running" && !Finished(*workers[i]))) {
          waiting.push_back(why(workers[i], absl::StrCat("worker ", i)));
        }
      }
      P.Finish(false, "StartupDeadlineExceeded",
               absl::StrCat(
                   "gang ", gang, " did not start within ", *startup,
                   " s (failurePolicy.startupDeadlineSeconds): ", absl::StrJoin(waiting, "; ")));
      return std::move(P.plan);
    }
    P.Requeue(deadline - observed.now);
  }
  if (ready == replicas) {
    P.Condition(kConditionReady, true, "AllWorkersReady",
                absl::StrCat("all ", replicas, " workers are ready"));
  } else {
    const std::string waiting =
        !policy_in_place && !coordinator
            ? absl::StrCat("waiting for the NetworkPolicy ", NetworkPolicyName(job))
        : !certificates_ready && !coordinator
            ? absl::StrCat("waiting for cert-manager to issue Secrets ", CoordinatorTlsName(job),
                           " and ", ClientTlsName(job), " (Certificates of the same names, from ",
                           settings.job_tls_issuer, ")")
        : !coordinator || !coordinator->ready
            ? "waiting for the coordinator pod to be ready"
            : absl::StrCat(ready, " of ", replicas, " workers are ready");
    P.Condition(kConditionReady, false, "WaitingForWorkers", waiting);
  }
  return std::move(P.plan);
}

}  // namespace planning

}  // namespace cohort::controller
