#!/usr/bin/env bash
# Gang scheduling with a PodGroup (spec.gangScheduling: SchedulerPlugins) on the local cluster:
# scheduler-plugins' coscheduling scheduler runs beside the real kube-scheduler
# (tools/local-cluster up --addons coscheduling), on a node of 4 (fake) nvidia.com/gpu.
#
# Two jobs of 3 one-GPU workers each arrive together: 6 GPUs asked of 4. Placed pod by pod,
# one of them would get 3 and the other the last one, which it would hold while its other two
# wait for GPUs that the first only frees when it ends. With their PodGroups the second job
# gets none until all three of its workers fit: it is never half-scheduled, and both succeed
# one after the other.
set -uo pipefail
NS="cosched-test-$$"
source "$(dirname "$0")/lib.sh"

cluster_up coscheduling
start_operator operator

# job NAME: three workers of one GPU each, gang-scheduled.
job() { steps_job "$1" 3 16 1 "  gangScheduling: {podGroup: SchedulerPlugins}"; }
job left
job right

# ---- 1. The PodGroups: every worker of a job in one group of minMember 3, placed by the
# coscheduling scheduler.
workers() { k get pods -l cohort.dev/role=worker -o name 2>/dev/null | wc -l; }
if until_true 60 '(($(workers) >= 6))'; then
  got=$(field podgroup.scheduling.x-k8s.io/left '{.spec.minMember} {.metadata.ownerReferences[0].kind}')
  pod=$(field pod/left-worker-0 '{.metadata.labels.scheduling\.x-k8s\.io/pod-group} {.spec.schedulerName}')
  if [[ "$got" == "3 CoordinatedJob" && "$pod" == "left scheduler-plugins-scheduler" ]]; then
    pass "each job's workers form a PodGroup (minMember 3) placed by the coscheduling scheduler"
  else
    fail "PodGroup" "group '$got', pod '$pod'"
  fi
else
  fail "both jobs make their workers" "$(k get pods 2>&1 | head -20)"
fi

# ---- 2. Never half-scheduled: while one job runs, the other has no worker on the node.
never_half_placed left right

# ---- 3. Both finish.
if wait_for cjob/left '{.status.phase}' Succeeded 60 && wait_for cjob/right '{.status.phase}' Succeeded 60; then
  pass "both jobs succeed, one after the other ($(field cjob/left '{.status.restarts}')/$(field cjob/right '{.status.restarts}') restarts)"
else
  fail "both jobs succeed"
  pod_logs left
  pod_logs right
fi

finish
