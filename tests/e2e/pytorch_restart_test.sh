#!/usr/bin/env bash
# examples/pytorch-ddp.yaml, a real PyTorch DistributedDataParallel training (gloo, three pods,
# a plain init_process_group(init_method="env://") script), on the local cluster with
# cohort-operator, while its coordinator pod is deleted twice mid-training (made again on the
# same claim). The job must end Succeeded with status.restarts 0 and coordinatorRestarts 2,
# the same worker pods and no container restarted (torch's store is behind each pod's sidecar,
# which rides out the outage), and the final loss equal to an undisturbed run's: the same
# program run here by three processes with torch's own TCPStore (rank 0 hosting it), no cohort
# at all. torch comes from the benchmarks' venv (.venv-bench, made by bench/setup.sh, which
# make test runs before the compat suite).
set -uo pipefail
NS="pytorch-restart-$$"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PYTHON="$ROOT/.venv-bench/bin/python3"
REF_PIDS=()

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "$TEST: $PYTHON cannot import torch; run bash bench/setup.sh first"
  exit 1
fi
cluster_up
k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null

# The example as a user applies it, run by the venv's Python (the local cluster has no images).
sed "s|command: \[python3, /app/train.py\]|command: [$PYTHON, /app/train.py]|" \
  "$ROOT/examples/pytorch-ddp.yaml" >"$WORK/pytorch-ddp.yaml"
grep -q "$PYTHON" "$WORK/pytorch-ddp.yaml" || { echo "$TEST: the example's command changed"; exit 1; }

# The undisturbed run: the example's program, three processes here with torch's own store.
"$PYTHON" - "$ROOT/examples/pytorch-ddp.yaml" "$WORK/train.py" <<'PY'
import sys
text = open(sys.argv[1]).read()
body = text.split("  train.py: |\n", 1)[1].split("\n---\n", 1)[0]
lines = [l[4:] if l.startswith("    ") else l.strip() for l in body.splitlines()]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1 2; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=3 STEPS=60 STEP_SECONDS=0 OMP_NUM_THREADS=1 \
    "$PYTHON" "$WORK/train.py" >"$WORK/reference-$r.log" 2>&1 &
  REF_PIDS+=($!)
done
for pid in "${REF_PIDS[@]}"; do wait "$pid"; done
reference=$(grep -o "final loss [0-9.]*" "$WORK/reference-0.log")
if [[ -n "$reference" ]]; then
  pass "the undisturbed run (torch's own store): $reference"
else
  fail "the undisturbed run" "$(tail -n 3 "$WORK/reference-0.log")"
fi

start_operator operator
k apply -f "$WORK/pytorch-ddp.yaml" >/dev/null

at_step() { k logs pytorch-ddp-worker-0 -c trainer 2>/dev/null | grep "^step $1 loss" >/dev/null; }
done_phase() {
  local phase
  phase=$(field cjob/pytorch-ddp "{.status.phase}")
  [[ $phase == Succeeded || $phase == Failed ]]
}
workers() {
  k get pods -l cohort.dev/role=worker \
    -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}/{.status.initContainerStatuses[0].restartCount}/{.status.containerStatuses[0].restartCount} {end}'
}
coordinator_back() { # a coordinator pod other than the one of uid $1
  local uid
  uid=$(field pod/pytorch-ddp-coordinator '{.metadata.uid}')
  [[ -n "$uid" && "$uid" != "$1" ]]
}

before=""
deleted=0
for step in 10 30; do
  if ! until_true 300 "at_step $step"; then
    fail "the training reaches step $step" "phase $(field cjob/pytorch-ddp '{.status.phase}'); $(workers)"
    break
  fi
  [[ -z "$before" ]] && before=$(workers)
  old=$(field pod/pytorch-ddp-coordinator '{.metadata.uid}')
  k delete pod pytorch-ddp-coordinator --wait=false >/dev/null && deleted=$((deleted + 1))
  # The next deletion only once the coordinator is back (a new pod of the same name).
  until_true 120 "coordinator_back $old" || fail "the coordinator comes back after deletion $deleted"
done
[[ $deleted == 2 ]] && pass "the coordinator pod was deleted twice mid-training"

if until_true 300 done_phase; then
  got=$(field cjob/pytorch-ddp '{.status.phase} restarts={.status.restarts} coordinatorRestarts={.status.coordinatorRestarts}')
  if [[ "$got" == "Succeeded restarts=0 coordinatorRestarts=2" ]]; then
    pass "coordinator deleted twice mid-training: $got"
  else
    fail "the job's status" "$got"
  fi
else
  fail "the job ends" "phase $(field cjob/pytorch-ddp '{.status.phase}')"
fi
after=$(workers)
if [[ -n "$after" && "$after" == "$before" && "$after" != *"/1"* ]]; then
  pass "the same worker pods, no container restarted ($after)"
else
  fail "the worker pods" "before: $before; after: $after"
fi
for i in 0 1 2; do k logs "pytorch-ddp-worker-$i" -c trainer >"$WORK/worker-$i.log" 2>&1; done
got=$(grep -o "final loss [0-9.]*" "$WORK/worker-0.log")
if [[ -n "$reference" && "$got" == "$reference" ]] && ! grep -qi "error\|Traceback" "$WORK"/worker-*.log; then
  pass "the final loss equals the undisturbed run's ($got)"
else
  fail "the final loss" "got '$got', undisturbed '$reference'"
  pod_logs pytorch-ddp
fi
finish
