#!/usr/bin/env bash
# examples/pytorch-ddp.yaml, a real PyTorch DistributedDataParallel training (gloo, three pods,
# a plain init_process_group(init_method="env://") script), on the local cluster with
# cohort-operator, while its coordinator pod is deleted twice mid-training (made again on the
# same claim). The job must end Succeeded with status.restarts 0 and coordinatorRestarts 2,
# the same worker pods and no container restarted (torch's store is behind each pod's sidecar,
# which rides out the outage), and the final loss equal to an undisturbed run's: the same
# program run here by three processes with torch's own TCPStore (rank 0 hosting it), no cohort
# at all. Then the same program under torchrun with a RestartWorker rule, and again with
# spec.elastic (for both the operator sets up torchrun's c10d rendezvous through the sidecars'
# store and PET_MAX_RESTARTS):
# worker 1's pod is deleted mid-training; the operator makes it again alone, the other agents
# restart their processes and meet the new pod's agent in a new rendezvous round, and the job
# succeeds with restarts 0 and workerRestarts 1, workers 0 and 2 never restarted. torch comes
# from the benchmarks' venv (.venv-bench, made by bench/setup.sh, which make test runs before
# the compat suite).
set -uo pipefail
NS="pytorch-restart-$$"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REF_PIDS=()
venv_example torch pytorch-ddp.yaml "$WORK/pytorch-ddp.yaml" 1
cluster_up
k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null

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

# ---- a worker's pod deleted: torchrun's agents meet its replacement, with a RestartWorker
# rule (JOB pytorch-rejoin) or with spec.elastic (pytorch-elastic, minReplicas 2), which implies
# that rule
k delete cjob pytorch-ddp --wait=true --timeout=120s >/dev/null 2>&1
rejoin_case() {
  local job=$1 mode=$2
  "$PYTHON" - "$WORK/pytorch-ddp.yaml" "$WORK/$job.yaml" "$PYTHON" "$job" "$mode" <<'PY'
import sys
text, python, job, mode = open(sys.argv[1]).read(), sys.argv[3], sys.argv[4], sys.argv[5]
def swap(old, new):
    global text
    assert old in text, f"the example changed: {old!r} is not in it"
    text = text.replace(old, new, 1)
swap(f"command: [{python}, /app/train.py]",
     f"command: [{python}, -m, torch.distributed.run, /app/train.py]")
swap('- {name: STEPS, value: "60"}', '- {name: STEPS, value: "80"}')
if mode == "rule":
    swap("  coordinator:\n", "  coordinator:\n    recoverable: true\n")
    swap("  template:\n    spec:\n      securityContext:",
         "  failurePolicy:\n    rules:\n      - {action: RestartWorker, onReasons: [PodDeleted]}\n"
         "  template:\n    spec:\n      securityContext:")
else:
    swap("  coordinator:\n", "  elastic: {minReplicas: 2, maxReplicas: 3}\n  coordinator:\n")
swap("name: pytorch-ddp\nspec:", f"name: {job}\nspec:")
open(sys.argv[2], "w").write(text)
PY
  k apply -f "$WORK/$job.yaml" >/dev/null
  rejoin_at_step() { # c10d numbers the nodes as they join: rank 0, which prints the steps, may be any
    local i
    for i in 0 1 2; do
      k logs "$job-worker-$i" -c trainer 2>/dev/null | grep "^step $1 loss" >/dev/null && return 0
    done
    return 1
  }
  rejoin_workers() {
    k get pods -l "cohort.dev/role=worker,cohort.dev/job=$job" \
      -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}/{.status.initContainerStatuses[0].restartCount}/{.status.containerStatuses[0].restartCount} {end}'
  }
  rejoin_done() {
    local phase
    phase=$(field "cjob/$job" "{.status.phase}")
    [[ $phase == Succeeded || $phase == Failed ]]
  }
  if until_true 300 "rejoin_at_step 10"; then
    before=$(rejoin_workers)
    old=$(field "pod/$job-worker-1" '{.metadata.uid}')
    k delete pod "$job-worker-1" --wait=false >/dev/null
    if until_true 300 rejoin_done; then
      got=$(field "cjob/$job" '{.status.phase} restarts={.status.restarts} workerRestarts={.status.workerRestarts}')
      expect "$mode: worker 1's pod deleted mid-training" "$got" "Succeeded restarts=0 workerRestarts=1"
    else
      fail "$mode: worker 1's pod deleted: the job ends" "phase $(field "cjob/$job" '{.status.phase}')"
    fi
    after=$(rejoin_workers)
    new=$(field "pod/$job-worker-1" '{.metadata.uid}')
    same=1
    for i in 0 2; do
      w=$(grep -o "$job-worker-$i=[^ ]*" <<<"$before")
      [[ -n "$w" && " $after " == *" $w "* && "$w" == *"/0/0" ]] || same=0
    done
    if [[ $same == 1 && -n "$new" && "$new" != "$old" ]]; then
      pass "$mode: workers 0 and 2 ran on in their pods; worker 1 got a new pod ($after)"
    else
      fail "$mode: the worker pods" "before: $before; after: $after"
    fi
    ended=0
    for i in 0 1 2; do
      k logs "$job-worker-$i" -c trainer >"$WORK/$job-worker-$i.log" 2>&1
      grep -q "^final loss [0-9.]*" "$WORK/$job-worker-$i.log" && ended=$((ended + 1))
    done
    if [[ $ended == 3 ]]; then
      pass "$mode: every worker, the new one included, trained to the end after the agents met again"
    else
      fail "$mode: the training's end" "$ended of 3 workers printed a final loss"
      pod_logs "$job-worker"
    fi
  else
    fail "$mode: torchrun: the training reaches step 10" "phase $(field "cjob/$job" '{.status.phase}')"
    pod_logs "$job"
  fi
  k delete cjob "$job" --wait=true --timeout=120s >/dev/null 2>&1
}
rejoin_case pytorch-rejoin rule
rejoin_case pytorch-elastic elastic
finish
