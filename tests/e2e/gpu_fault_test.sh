#!/usr/bin/env bash
# A GPU fault blamed on its node, on the local cluster with real jaxlib: examples/jax-cpu.yaml,
# two workers, on a cluster with a spare node (tainted cohort.dev/spare-node, which the job
# tolerates) and the fake NVML (tests/sidecar/gpu/fake_nvml) loaded by the sidecars of the pods
# that ask for it (annotation local-cluster.cohort.dev/fake-nvml), as the NVIDIA container
# toolkit would give them the node's driver. The fake is the only stand-in: the sidecar loads
# it through its real loading path, and the scheduler, the API server and the operator are real.
#
# While the first gang runs, the test raises XID 79 with NVML recovery action 1 (GPU reset) on
# GPU 0 of worker 0's sidecar (through the pod's fake-NVML control FIFO). Then:
# - worker 0's sidecar reports its task in error, reason gpu_fault, naming the GPU, the XID and
#   the recovery action;
# - the operator sends an Event GPUFault naming worker 0's node, lists the node in
#   status.avoidedNodes and restarts the gang without counting it (status.uncountedRestarts 1,
#   status.restarts 0);
# - every worker of the next gang runs on the other node, its pod excluding the faulty one by
#   a required node affinity; the job then succeeds;
# - the operator's metric cohort_cjob_avoided_node_until_seconds names the node;
# - status.lastFailure keeps the failure's timeline (failed, detected, decided, recovered once
#   the next gang registered), `kubectl describe cjob` shows it, and the time to detect it and
#   the restart's downtime are metrics (printed: measured, not asserted).
set -uo pipefail
TEST="gpu fault test"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
venv_example jax jax-cpu.yaml "$WORK/jax-cpu.yaml" 1
# Alone, the test brings up a cluster with what it needs; under run.sh the shared one has it.
export COHORT_LOCAL_SPARE_NODES=${COHORT_LOCAL_SPARE_NODES:-1}
export COHORT_LOCAL_FAKE_NVML=${COHORT_LOCAL_FAKE_NVML:-$ROOT/build/tests/sidecar/gpu/fake_nvml/libnvidia-ml.so.1}
cluster_up
NODES=$("$KUBECTL" get nodes -o jsonpath='{range .items[*]}{.metadata.name} {end}')
if [[ "$NODES" != *"-spare-1 "* ]]; then
  echo "$TEST: the local cluster has no spare node ($NODES): bring it up with COHORT_LOCAL_SPARE_NODES=1 and COHORT_LOCAL_FAKE_NVML (tests/e2e/run.sh does)"
  exit 1
fi

NS="gpu-fault-$$"
add_namespace "$NS" baseline
operator_for "$NS" operator-gpu-fault
OPERATOR=$STARTED

python3 - "$WORK/jax-cpu.yaml" >"$WORK/faulty.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
text = text.replace("name: jax-cpu\n", "name: faulty\n").replace("replicas: 4", "replicas: 2")
text = text.replace("  failurePolicy:\n    maxRestarts: 2\n", "  failurePolicy:\n    maxRestarts: 0\n")
text = text.replace("  template:\n    spec:\n", """  template:
    metadata:
      annotations: {local-cluster.cohort.dev/fake-nvml: "true"}
    spec:
      tolerations:
        - {key: cohort.dev/spare-node, operator: Exists, effect: NoSchedule}
""", 1)
text = text.replace("          command: [", '          env:\n            - {name: STEPS, value: "30"}\n          command: [', 1)
print(text, end="")
PY
"$KUBECTL" -n "$NS" apply -f "$WORK/faulty.yaml" >/dev/null

field_in() { "$KUBECTL" -n "$NS" get "$1" -o jsonpath="$2" 2>/dev/null; }
phase() { field_in cjob/faulty '{.status.phase}'; }
ended() { [[ "$(phase)" == Succeeded || "$(phase)" == Failed ]]; }

# The first gang running, and worker 0's sidecar holding the fake NVML (its control FIFO
# exists once the fake is initialised).
FIFO=""
first_gang_runs() {
  ended && return 0
  [[ "$(field_in cjob/faulty '{.status.phase} {.status.tasks.registered}')" == "Running 2" ]] || return 1
  FIFO=$("$LC" nvml-fifo "$NS/faulty-worker-0" 2>/dev/null) || return 1
  [[ -p "$FIFO" ]]
}
if ! until_true 300 first_gang_runs || ended; then
  fail "the first gang runs with the fake NVML" "$(field_in cjob/faulty '{.status}') fifo ${FIFO:-none}"
  stop_operator "$OPERATOR"
  finish
  exit 1
fi
FAULTY=$(field_in pod/faulty-worker-0 '{.spec.nodeName}')
echo "first gang: worker 0 on $FAULTY, worker 1 on $(field_in pod/faulty-worker-1 '{.spec.nodeName}')"
"$KUBECTL" -n "$NS" logs faulty-worker-0 -c cohort-sidecar -f >"$WORK/first-sidecar-0.log" 2>&1 &
FOLLOW=$!

# XID 79 (fallen off the bus) on GPU 0, the driver asking for a GPU reset (recovery action 1).
# Opening a FIFO waits for its reader: bounded.
if timeout 10 bash -c 'echo "xid 0 79 1" >"$1"' _ "$FIFO"; then
  pass "XID 79 raised on worker 0's GPU 0 on node $FAULTY"
else
  fail "raising the XID through $FIFO" "the fake's control FIFO took no line"
fi

restarted() { ended || [[ "$(field_in cjob/faulty '{.status.uncountedRestarts}')" == 1 ]]; }
until_true 120 restarted
got=$(field_in cjob/faulty '{.status.restarts} {.status.uncountedRestarts}')
if [[ "$got" == "0 1" ]]; then
  pass "the GPU fault restarts the gang, not counted against maxRestarts 0 ($got)"
else
  fail "an uncounted restart" "$got; $(field_in cjob/faulty '{.status.conditions}')"
fi
avoided=$(field_in cjob/faulty '{.status.avoidedNodes[*].node}')
if [[ "$avoided" == "$FAULTY" ]]; then
  pass "status.avoidedNodes lists $FAULTY"
else
  fail "status.avoidedNodes" "${avoided:-none}, want $FAULTY"
fi
event=$("$KUBECTL" -n "$NS" get events --field-selector involvedObject.name=faulty,reason=GPUFault -o jsonpath='{.items[0].message}' 2>/dev/null)
echo "the GPUFault Event: $event"
if [[ "$event" == "worker 0 on node $FAULTY: "*"GPU 0 ("*"XID 79"*"recovery action: GPU reset"*"keep off node $FAULTY until"* ]]; then
  pass "an Event GPUFault names the node, the GPU, the XID and the recovery action"
else
  fail "the GPUFault Event" "${event:-none}"
fi

# The next gang: every worker elsewhere, excluded from the faulty node by its pod's affinity.
second_gang_placed() {
  local i node
  for i in 0 1; do
    [[ "$(field_in "pod/faulty-worker-$i" '{.metadata.labels.cohort\.dev/restart}')" == 1 ]] || return 1
    node=$(field_in "pod/faulty-worker-$i" '{.spec.nodeName}')
    [[ -n "$node" ]] || return 1
  done
}
if until_true 120 second_gang_placed; then
  nodes=$(for i in 0 1; do field_in "pod/faulty-worker-$i" '{.spec.nodeName} '; done)
  if [[ "$nodes" != *"$FAULTY "* ]]; then
    pass "the restarted gang runs off node $FAULTY (on: $nodes)"
  else
    fail "the restarted gang avoids $FAULTY" "on: $nodes"
  fi
  terms=$(field_in pod/faulty-worker-0 '{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0]}')
  if [[ "$terms" == *'"metadata.name"'* && "$terms" == *'"NotIn"'* && "$terms" == *"\"$FAULTY\""* ]]; then
    pass "its pods exclude $FAULTY by a required node affinity"
  else
    fail "the pods' node affinity" "${terms:-none}"
  fi
else
  fail "the restarted gang is placed" "$(field_in cjob/faulty '{.status}')"
fi

port=$(http_port "$OPERATOR")
metric=$(curl -s --max-time 5 "127.0.0.1:$port/metrics" | grep "^cohort_cjob_avoided_node_until_seconds{" | grep "cjob=\"faulty\"")
if [[ "$metric" == *"node=\"$FAULTY\""* ]]; then
  pass "cohort_cjob_avoided_node_until_seconds names $FAULTY"
else
  fail "the avoided node's metric" "${metric:-absent}"
fi

# Goodput: the failure's timeline, recovered once the next gang registered.
recovered() { [[ -n "$(field_in cjob/faulty '{.status.lastFailure.recoveredAt}')" ]] || ended; }
until_true 300 recovered
timeline=$(field_in cjob/faulty '{.status.lastFailure}')
echo "status.lastFailure: $timeline"
if [[ "$timeline" == *'"GPUFault"'* && "$timeline" == *'"recoveredAt"'* ]]; then
  pass "status.lastFailure keeps the GPU fault's timeline, recovered"
else
  fail "status.lastFailure" "${timeline:-none}"
fi
describe=$("$KUBECTL" -n "$NS" describe cjob faulty 2>&1)
if grep -q "Last Failure:" <<<"$describe" && grep -q "Recovered At:" <<<"$describe"; then
  pass "kubectl describe cjob shows the last failure's timeline"
else
  fail "kubectl describe" "$(grep -A12 "Status:" <<<"$describe" | head -n 20)"
fi
goodput=$(curl -s --max-time 5 "127.0.0.1:$port/metrics" |
  grep -E '^cohort_cjob_(failure_detection|restart_downtime)_seconds\{' | grep 'cjob="faulty"')
echo "measured: $goodput" | tr '\n' ' '
echo
if [[ "$goodput" == *restart_downtime* && "$goodput" == *failure_detection* ]]; then
  pass "the time to detect the fault and the restart's downtime are metrics"
else
  fail "the goodput metrics" "${goodput:-absent}"
fi

until_true 300 ended
got=$(field_in cjob/faulty '{.status.phase} {.status.restarts} {.status.uncountedRestarts}')
[[ "$got" == "Succeeded 0 1" ]] && pass "the job then succeeds ($got)" || fail "the job's end" "$got"

kill "$FOLLOW" 2>/dev/null
wait "$FOLLOW" 2>/dev/null
if grep -q "reporting to the coordinator (gpu_fault): GPU 0 (.*XID 79.*recovery action: GPU reset" "$WORK/first-sidecar-0.log"; then
  pass "worker 0's sidecar reported the fault with its recovery action"
else
  fail "the sidecar's report" "$(grep -i "xid\|gpu_fault" "$WORK/first-sidecar-0.log" | head -n 5)"
fi
"$KUBECTL" -n "$NS" get events --sort-by=.lastTimestamp >"$WORK/events.log" 2>&1
stop_operator "$OPERATOR"
finish
