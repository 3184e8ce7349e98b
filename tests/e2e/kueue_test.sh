#!/usr/bin/env bash
# CoordinatedJobs queued by Kueue, on the local cluster with the real kube-scheduler and a node
# of 4 (fake) nvidia.com/gpu, with Kueue's API installed (tools/local-cluster up --addons
# kueue). Kueue's controller cannot run here (the Go module proxy refuses sigs.k8s.io/kueue),
# so this test plays Kueue: it reserves quota and admits Workloads by writing their status as
# Kueue's scheduler does, and evicts them as Kueue's preemption does.
#
# Two jobs that each need all 4 GPUs wait, suspended, with a Workload each; admitted in turn,
# they run one after the other and both succeed, their Workloads Finished; a job evicted
# mid-run stops without counting a restart, gives its quota back (admission cleared, queued
# again) and, admitted again, runs; a job deleted takes its Workload with it; a job's
# Workload takes its priority from the WorkloadPriorityClass its label names, and a job that
# names one that does not exist waits, saying so, until it does; a job that asks for a
# topology (Kueue's TAS annotations) gets a Workload whose workers' pod set asks for it, and,
# admitted with a topology assignment, its workers wait behind Kueue's scheduling gate until
# the test, playing Kueue's TopologyUngater, places them; then it runs and succeeds.
set -uo pipefail
NS="kueue-test-$$"
source "$(dirname "$0")/lib.sh"

FLAVOR="kueue-test-$$-gpu"
NODE=local

cluster_up kueue
start_operator operator --kueue on

# What a cluster admin sets up (Kueue would use it; here it documents the quota the test
# plays by): a flavor for the node, a ClusterQueue of 4 GPUs, and a LocalQueue.
"$KUBECTL" apply -f - >/dev/null <<YAML || fail "Kueue's API is served (ResourceFlavor, ClusterQueue, LocalQueue)"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: $FLAVOR}
spec:
  nodeLabels: {kubernetes.io/hostname: $NODE}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: $FLAVOR}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: $FLAVOR
      resources:
      - {name: cpu, nominalQuota: 32}
      - {name: memory, nominalQuota: 64Gi}
      - {name: nvidia.com/gpu, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpus, namespace: $NS}
spec: {clusterQueue: $FLAVOR}
YAML
trap 'cleanup; "$KUBECTL" delete resourceflavor,clusterqueue,workloadpriorityclass "$FLAVOR" --wait=false >/dev/null 2>&1' EXIT

# job NAME STEPS [PRIORITY-CLASS]: two workers of 2 GPUs each (all of the node's 4), queued in
# LocalQueue gpus.
job() {
  steps_job "$1" 2 "$2" 2 "" \
    "  labels: {kueue.x-k8s.io/queue-name: gpus${3:+, kueue.x-k8s.io/priority-class: $3}}"
}
workload_of() { k get workloads.kueue.x-k8s.io -l "cohort.dev/job=$1" -o jsonpath='{.items[0].metadata.name}' 2>/dev/null; }
pods_of() { k get pods -l "cohort.dev/job=$1" -o name 2>/dev/null | wc -l; }
condition() { # condition WORKLOAD TYPE: "status reason"
  field "workloads.kueue.x-k8s.io/$1" "{.status.conditions[?(@.type==\"$2\")].status} {.status.conditions[?(@.type==\"$2\")].reason}"
}

# admit WORKLOAD: what Kueue's scheduler writes when it reserves quota in the ClusterQueue
# (every pod set on the test's flavor) and no admission check is pending.
admit() {
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  k patch workloads.kueue.x-k8s.io "$1" --subresource=status --type=merge -p "{\"status\": {
    \"admission\": {\"clusterQueue\": \"$FLAVOR\", \"podSetAssignments\": [
      {\"name\": \"coordinator\", \"flavors\": {\"cpu\": \"$FLAVOR\", \"memory\": \"$FLAVOR\"}, \"count\": 1},
      {\"name\": \"workers\", \"flavors\": {\"cpu\": \"$FLAVOR\", \"memory\": \"$FLAVOR\", \"nvidia.com/gpu\": \"$FLAVOR\"},
       \"resourceUsage\": {\"nvidia.com/gpu\": \"4\"}, \"count\": 2}]},
    \"conditions\": [
      {\"type\": \"QuotaReserved\", \"status\": \"True\", \"reason\": \"QuotaReserved\", \"message\": \"Quota reserved in ClusterQueue $FLAVOR\", \"lastTransitionTime\": \"$now\"},
      {\"type\": \"Admitted\", \"status\": \"True\", \"reason\": \"Admitted\", \"message\": \"The workload is admitted\", \"lastTransitionTime\": \"$now\"},
      {\"type\": \"Evicted\", \"status\": \"False\", \"reason\": \"QuotaReserved\", \"message\": \"Previously: evicted\", \"lastTransitionTime\": \"$now\"}]}}" >/dev/null
}
# evict WORKLOAD REASON: Kueue's preemption (or a timeout) marks the admitted Workload evicted
# (the reservation stays until the job's integration gives it back).
evict() {
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  k patch workloads.kueue.x-k8s.io "$1" --subresource=status --type=merge -p "{\"status\": {\"conditions\": [
      {\"type\": \"QuotaReserved\", \"status\": \"True\", \"reason\": \"QuotaReserved\", \"message\": \"Quota reserved in ClusterQueue $FLAVOR\", \"lastTransitionTime\": \"$now\"},
      {\"type\": \"Admitted\", \"status\": \"True\", \"reason\": \"Admitted\", \"message\": \"The workload is admitted\", \"lastTransitionTime\": \"$now\"},
      {\"type\": \"Evicted\", \"status\": \"True\", \"reason\": \"$2\", \"message\": \"Preempted to accommodate a higher priority Workload\", \"lastTransitionTime\": \"$now\"}]}}" >/dev/null
}

# ---- 1. Two jobs that together need 8 GPUs of the node's 4: both wait, each with its Workload.
job first 6
job second 6
if wait_for cjob/first '{.status.phase}' Suspended 30 && wait_for cjob/second '{.status.phase}' Suspended 30 &&
  until_true 20 '[[ -n $(workload_of first) && -n $(workload_of second) ]]'; then
  wl1=$(workload_of first)
  wl2=$(workload_of second)
  got=$(field "workloads.kueue.x-k8s.io/$wl1" '{.spec.queueName} {.spec.podSets[*].name} {.spec.podSets[*].count} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].controller} {.metadata.finalizers[0]}')
  reason=$(field cjob/first '{.status.conditions[?(@.type=="Suspended")].reason}')
  if [[ "$got" == "gpus coordinator workers 1 2 CoordinatedJob/true kueue.x-k8s.io/resource-in-use" &&
    "$reason" == Queued && $(pods_of first) == 0 && $(pods_of second) == 0 ]]; then
    pass "queued jobs wait, suspended without pods, each with a Workload ($wl1: $got)"
  else
    fail "queued jobs" "workload '$got', reason '$reason', pods $(pods_of first)/$(pods_of second)"
  fi
else
  fail "queued jobs get Workloads and wait" "$(k get cjob,workloads.kueue.x-k8s.io 2>&1 | head)"
  wl1=$(workload_of first)
  wl2=$(workload_of second)
fi

# ---- 2. Admitted in turn, as Kueue would with 4 GPUs of quota: one after the other.
if [[ -n "$wl1" && -n "$wl2" ]] && admit "$wl1"; then
  if wait_for cjob/first '{.status.phase}' Running 60; then
    selector=$(field pod/first-worker-0 '{.spec.nodeSelector.kubernetes\.io/hostname} {.metadata.labels.kueue\.x-k8s\.io/podset} {.metadata.annotations.kueue\.x-k8s\.io/workload} {.spec.nodeName}')
    if [[ "$selector" == "$NODE workers $wl1 $NODE" && $(pods_of second) == 0 ]]; then
      pass "the admitted job runs where its flavor says ($selector), the other still waits"
    else
      fail "admitted pods" "'$selector', second has $(pods_of second) pods"
    fi
    if until_true 30 '[[ $(condition "$wl1" PodsReady) == "True Started" ]]'; then
      pass "PodsReady: Started once the whole gang is ready"
    else
      fail "PodsReady" "$(condition "$wl1" PodsReady)"
    fi
  fi
  if wait_for cjob/first '{.status.phase}' Succeeded 90 &&
    until_true 20 '[[ $(condition "$wl1" Finished) == "True Succeeded" ]]' &&
    until_true 20 '[[ -z $(field "workloads.kueue.x-k8s.io/$wl1" "{.metadata.finalizers}") ]]'; then
    pass "the first job succeeds; its Workload is Finished (Succeeded) and released"
  else
    fail "first job finishes" "$(condition "$wl1" Finished); $(field cjob/first '{.status}')"
    pod_logs first
  fi
  admit "$wl2"
  if wait_for cjob/second '{.status.phase}' Succeeded 120 &&
    until_true 20 '[[ $(condition "$wl2" Finished) == "True Succeeded" ]]'; then
    pass "admitted next, the second job runs on the GPUs the first gave back and succeeds"
  else
    fail "second job" "$(field cjob/second '{.status}')"
    pod_logs second
  fi
else
  fail "admit the first Workload"
fi

# ---- 3. Evicted mid-run: stops without a restart, gives the quota back, runs again when
# admitted again.
job third 600
if until_true 20 '[[ -n $(workload_of third) ]]'; then
  wl3=$(workload_of third)
  admit "$wl3"
  if wait_for cjob/third '{.status.phase}' Running 60; then
    evict "$wl3" Preempted
    if wait_for cjob/third '{.status.phase}' Suspended 30 &&
      until_true 60 '(($(pods_of third) == 0))' &&
      until_true 20 '[[ -z $(field "workloads.kueue.x-k8s.io/$wl3" "{.status.admission}") ]]'; then
      got="restarts $(field cjob/third '{.status.restarts}'), $(field cjob/third '{.status.conditions[?(@.type=="Suspended")].reason}'), QuotaReserved $(condition "$wl3" QuotaReserved), Requeued $(condition "$wl3" Requeued)"
      expect "an evicted job stops, counts no restart and gives its quota back" "$got" \
        "restarts 0, Evicted, QuotaReserved False Pending, Requeued True Preempted"
    else
      fail "evicted job stops" "$(field cjob/third '{.status.phase}'), $(pods_of third) pods, admission '$(field "workloads.kueue.x-k8s.io/$wl3" '{.status.admission}')'"
    fi
    admit "$wl3"
    if wait_for cjob/third '{.status.phase}' Running 60 && [[ "$(field cjob/third '{.status.restarts}')" == 0 ]]; then
      pass "admitted again, the evicted job runs again"
    else
      fail "readmitted job runs" "$(field cjob/third '{.status}')"
    fi
  else
    fail "third job runs once admitted"
  fi
  # ---- 4. A job deleted mid-run: its Workload goes too (the operator lets go of it).
  k delete cjob third --wait=false >/dev/null
  if until_true 60 '[[ -z $(k get workloads.kueue.x-k8s.io "$wl3" -o name 2>/dev/null) ]]'; then
    pass "a deleted job's Workload is deleted with it"
  else
    fail "workload of a deleted job" "$(k get workloads.kueue.x-k8s.io "$wl3" -o jsonpath='{.metadata.finalizers} {.metadata.deletionTimestamp}')"
  fi
else
  fail "third job gets a Workload"
fi

# ---- 5. Priority: the WorkloadPriorityClass the job's label names; a missing one holds it.
job urgent 4 "$FLAVOR"
if wait_for cjob/urgent '{.status.conditions[?(@.type=="Suspended")].reason}' PriorityClassNotFound 30 &&
  [[ -z $(workload_of urgent) ]]; then
  pass "a job whose WorkloadPriorityClass does not exist gets no Workload and says why"
else
  fail "missing priority class" "$(field cjob/urgent '{.status.conditions}'), workload '$(workload_of urgent)'"
fi
"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: $FLAVOR}
value: 1000
YAML
if until_true 30 '[[ -n $(workload_of urgent) ]]'; then
  got=$(field "workloads.kueue.x-k8s.io/$(workload_of urgent)" '{.spec.priority} {.spec.priorityClassRef.kind}/{.spec.priorityClassRef.name}')
  [[ "$got" == "1000 WorkloadPriorityClass/$FLAVOR" ]] &&
    pass "once the class exists the Workload is made with its priority ($got)" ||
    fail "workload priority" "$got"
else
  fail "the Workload is made once the priority class exists" "$(field cjob/urgent '{.status.conditions}')"
fi
k delete cjob urgent --wait=false >/dev/null

# ---- 6. Topology-aware scheduling: the request from the template's annotations; the
# admission's topology assignment gates the workers until Kueue (here the test) places them.
k apply -f - >/dev/null <<YAML
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: placed
  labels: {kueue.x-k8s.io/queue-name: gpus}
spec:
  replicas: 2
  template:
    metadata:
      annotations: {kueue.x-k8s.io/podset-required-topology: kubernetes.io/hostname}
    spec:
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          args: [--steps, "4", --step-seconds, "0.5"]
          resources: {limits: {nvidia.com/gpu: 1}}
YAML
if until_true 30 '[[ -n $(workload_of placed) ]]'; then
  wl6=$(workload_of placed)
  request=$(field "workloads.kueue.x-k8s.io/$wl6" '{.spec.podSets[1].topologyRequest.required} {.spec.podSets[1].topologyRequest.podIndexLabel}')
  [[ "$request" == "kubernetes.io/hostname cohort.dev/task-index" ]] &&
    pass "the workers' pod set asks for the template's topology ($request)" ||
    fail "topology request" "$request"
  admit "$wl6"
  k patch workloads.kueue.x-k8s.io "$wl6" --subresource=status --type=json -p '[{"op": "add", "path": "/status/admission/podSetAssignments/1/topologyAssignment",
    "value": {"levels": ["kubernetes.io/hostname"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "'$NODE'"}], "podCounts": {"universal": 2}}]}}]' >/dev/null
  if until_true 60 '[[ $(field pod/placed-worker-1 "{.spec.schedulingGates[0].name}") == kueue.x-k8s.io/topology ]]'; then
    phase=$(field pod/placed-worker-0 '{.status.phase} {.status.conditions[?(@.type=="PodScheduled")].reason}')
    [[ "$phase" == "Pending SchedulingGated" ]] &&
      pass "admitted with a topology assignment, the workers wait behind Kueue's topology gate" ||
      fail "gated workers" "$phase"
    # Kueue's TopologyUngater: each pod in its domain, then the gate off.
    for i in 0 1; do
      k patch pod "placed-worker-$i" --type=json -p '[{"op": "add", "path": "/spec/nodeSelector/kubernetes.io~1hostname", "value": "'$NODE'"},
        {"op": "remove", "path": "/spec/schedulingGates"}]' >/dev/null ||
        fail "ungate placed-worker-$i"
    done
    wait_for cjob/placed '{.status.phase}' Succeeded 90 &&
      pass "placed in their domain and ungated, the workers run and the job succeeds" ||
      fail "the TAS job succeeds" "$(field cjob/placed '{.status}')"
  else
    fail "gated workers appear" "$(k get pods -l cohort.dev/job=placed -o wide 2>&1)"
  fi
else
  fail "the TAS job gets a Workload"
fi

finish
