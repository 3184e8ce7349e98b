#!/usr/bin/env bash
# Kubernetes' own gang scheduling (spec.gangScheduling: {podGroup: Kubernetes}) on the local
# cluster: the real kube-scheduler with the GenericWorkload feature gate (tools/local-cluster
# turns it on, and serves scheduling.k8s.io/v1beta1), its GangScheduling plugin placing each
# job's PodGroup all or none, on a node of 4 (fake) nvidia.com/gpu. No second scheduler.
#
# 1. Each job gets a Workload and a PodGroup (gang minCount 3) before its workers, which join
#    it by spec.schedulingGroup.
# 2. Two jobs of 3 one-GPU workers each arrive together: 6 GPUs asked of 4. Neither is ever
#    half-placed (the one that waits holds no GPU), and both succeed one after the other.
# 3. A job of 5 one-GPU workers, larger than the node, stays Pending whole: none of its workers
#    is placed, and its Ready condition and an Event carry the kube-scheduler's reason.
# 4. After a gang restart the next gang is placed whole in the same PodGroup.
set -uo pipefail
NS="native-gang-test-$$"
source "$(dirname "$0")/lib.sh"

cluster_up
if ! k get --raw /apis/scheduling.k8s.io/v1beta1 >/dev/null 2>&1; then
  fail "the local cluster serves scheduling.k8s.io/v1beta1" \
    "it does not: was it started with COHORT_LOCAL_GENERIC_WORKLOAD=false? ($(k api-versions 2>&1 | grep scheduling | tr '\n' ' '))"
  finish
fi
start_operator operator

# job NAME [REPLICAS]: one-GPU workers, gang-scheduled by the kube-scheduler.
job() { steps_job "$1" "${2:-3}" 16 1 "  gangScheduling: {podGroup: Kubernetes}"; }
job left
job right

# ---- 1. The Workload, the PodGroup and the workers that join it.
workers() { k get pods -l cohort.dev/role=worker -o name 2>/dev/null | wc -l; }
if until_true 60 '(($(workers) >= 6))'; then
  workload=$(field workloads.v1beta1.scheduling.k8s.io/left \
    '{.spec.controllerRef.kind}/{.spec.controllerRef.name} {.spec.podGroupTemplates[0].name} {.spec.podGroupTemplates[0].schedulingPolicy.gang.minCount}')
  group=$(field podgroups.v1beta1.scheduling.k8s.io/left \
    '{.spec.workloadRef.workloadName}/{.spec.workloadRef.templateName} {.spec.schedulingPolicy.gang.minCount} {.metadata.ownerReferences[0].kind}')
  pod=$(field pod/left-worker-0 '{.spec.schedulingGroup.podGroupName} {.spec.schedulerName}')
  if [[ "$workload" == "CoordinatedJob/left workers 3" && "$group" == "left/workers 3 CoordinatedJob" &&
    "$pod" == "left default-scheduler" ]]; then
    pass "each job has a Workload and a PodGroup (gang minCount 3) its workers join (spec.schedulingGroup), placed by the kube-scheduler"
  else
    fail "Workload and PodGroup" "workload '$workload', group '$group', pod '$pod'"
  fi
else
  fail "both jobs make their workers" "$(k get pods 2>&1 | head -20)"
fi

# ---- 2. Never half-placed: while one job runs, the other has no worker on the node.
never_half_placed left right
scheduled=$(field podgroups.v1beta1.scheduling.k8s.io/left \
  '{.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].status}')
if wait_for cjob/left '{.status.phase}' Succeeded 60 && wait_for cjob/right '{.status.phase}' Succeeded 60; then
  pass "both jobs succeed, one after the other (PodGroup left scheduled: $scheduled)"
else
  fail "both jobs succeed"
  pod_logs left
  pod_logs right
fi

# ---- 3. Larger than the cluster: Pending whole, with the scheduler's reason.
job big 5
reason() { field cjob/big '{.status.conditions[?(@.type=="Ready")].reason}'; }
if until_true 90 '[[ $(reason) == Unschedulable ]]'; then
  message=$(field cjob/big '{.status.conditions[?(@.type=="Ready")].message}')
  event=$(k get events --field-selector involvedObject.name=big,reason=Unschedulable -o jsonpath='{.items[0].message}')
  read -r l r <<<"$(k get pods -l cohort.dev/job=big,cohort.dev/role=worker \
    -o jsonpath='{range .items[*]}{.spec.nodeName}|{.status.phase}{"\n"}{end}' |
    awk -F'|' '{n++} $1 != "" {p++} END {print n + 0, p + 0}')"
  echo "big's Ready condition: $message"
  if [[ "$(field cjob/big '{.status.phase}')" == Pending && $l == 5 && $r == 0 &&
    "$message" == "the kube-scheduler cannot place the gang (PodGroup big, Unschedulable): "* &&
    "$event" == "$message" ]]; then
    pass "a job of 5 on 4 GPUs stays Pending whole (5 workers made, none placed), the scheduler's reason in its status and an Event"
  else
    fail "the job larger than the cluster" "phase $(field cjob/big '{.status.phase}'), workers $l made $r placed, message '$message', event '$event'"
  fi
else
  fail "the job larger than the cluster is Unschedulable" "$(field cjob/big '{.status}')"
fi

# ---- 4. A gang restart: the next gang joins the same PodGroup (placed before, its condition
# stays True) and is placed whole again.
k delete cjob big --wait=false >/dev/null
steps_job again 3 40 1 "  gangScheduling: {podGroup: Kubernetes}
  failurePolicy: {maxRestarts: 1}"
if wait_for cjob/again '{.status.phase}' Running 90; then
  k delete pod again-worker-1 --wait=false >/dev/null
  if wait_for cjob/again '{.status.restarts}' 1 60 && wait_for cjob/again '{.status.phase}' Succeeded 120; then
    pass "after a gang restart (a worker's pod deleted) the next gang is placed whole in the same PodGroup and the job succeeds"
  else
    fail "the gang restart under podGroup Kubernetes" "$(field cjob/again '{.status.phase} {.status.restarts} {.status.conditions}')"
    k get pods -o wide
  fi
else
  fail "the job to restart runs" "$(field cjob/again '{.status}')"
fi

finish
