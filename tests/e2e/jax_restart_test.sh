#!/usr/bin/env bash
# examples/jax-cpu.yaml, a real JAX program (jax.distributed, gloo collectives, a barrier
# and a key per step), on the local cluster with cohort-operator, while its coordinator
# crashes: once its process is killed with SIGKILL mid-run (it restarts in its pod), once its
# pod is deleted mid-run (made again on the same claim). Each time the job must end
# Succeeded with status.restarts 0, coordinatorRestarts 1, the same worker pods and no
# worker container restarted: the workers talk to the coordinator through their sidecars,
# which ride out the outage. The job runs as a cluster admin would run it: its namespace
# enforces restricted Pod Security and the operator issues the job its token and mutual-TLS
# certificates (--job-tls=operator), so the sidecars ride out the outage over TLS. JAX comes
# from the compat suite's venv (.venv, made by tests/compat/run.sh, which make test runs
# first).
set -uo pipefail
TEST="jax restart test"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
venv_example jax jax-cpu.yaml "$WORK/jax-cpu.yaml" 1
cluster_up

# Every worker has logged its step 10: well into the run, well before its end (step 39).
mid_run() {
  local i
  for i in 0 1 2 3; do
    "$KUBECTL" -n "$1" logs "jax-cpu-worker-$i" -c worker 2>/dev/null | grep "step 10:" >/dev/null || return 1
  done
}
phase() { "$KUBECTL" -n "$1" get cjob jax-cpu -o jsonpath='{.status.phase}' 2>/dev/null; }
done_phase() { [[ "$(phase "$1")" == Succeeded || "$(phase "$1")" == Failed ]]; }
workers() {
  "$KUBECTL" -n "$1" get pods -l cohort.dev/role=worker \
    -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}/{.status.initContainerStatuses[0].restartCount}/{.status.containerStatuses[0].restartCount} {end}'
}

# save_logs NS HOW: the case's container logs and events, which the report at the end shows
# (on every way out of a case: a case that fails early needs them most).
save_logs() {
  local i
  for i in 0 1 2 3; do
    "$KUBECTL" -n "$1" logs "jax-cpu-worker-$i" -c worker >"$WORK/$2-worker-$i.log" 2>&1
    "$KUBECTL" -n "$1" logs "jax-cpu-worker-$i" -c cohort-sidecar >"$WORK/$2-sidecar-$i.log" 2>&1
  done
  "$KUBECTL" -n "$1" logs jax-cpu-coordinator -c coordinator >"$WORK/$2-coordinator.log" 2>&1
  "$KUBECTL" -n "$1" get events --sort-by=.lastTimestamp >"$WORK/$2-events.log" 2>&1
}

# run_case NAME HOW: runs the example in a namespace of its own and interrupts its
# coordinator mid-run by HOW (kill or delete).
run_case() {
  local ns="jax-restart-$1-$$" how=$2 before after pid old got i
  case_namespace "$ns"
  "$KUBECTL" -n "$ns" apply -f "$WORK/jax-cpu.yaml" >/dev/null
  if ! until_true 300 mid_run "$ns"; then
    fail "$how: the job reaches step 10 on every worker" "phase $(phase "$ns"); $(workers "$ns")"
    save_logs "$ns" "$how"
    return
  fi
  before=$(workers "$ns")
  # Mutual TLS is on: the job's Secret holds its certificates, the coordinator serves them and
  # every sidecar dials it over TLS. (grep reads all of kubectl's output: grep -q would stop at
  # the first match, and kubectl, still writing, would die of SIGPIPE, which pipefail reports.)
  if [[ -n "$("$KUBECTL" -n "$ns" get secret jax-cpu-token -o jsonpath='{.data.ca\.crt}')" ]] &&
    "$KUBECTL" -n "$ns" logs jax-cpu-worker-0 -c cohort-sidecar | grep "TLS to the coordinator: mutual" >/dev/null; then
    pass "$how: the job runs in a restricted namespace over mutual TLS"
  else
    fail "$how: the job's certificates and its sidecar's TLS" "$("$KUBECTL" -n "$ns" logs jax-cpu-worker-0 -c cohort-sidecar | grep TLS)"
  fi
  if [[ $how == kill ]]; then
    pid=$(coordinator_pid jax-cpu "$ns")
    if [[ -z "$pid" ]] || ! kill -KILL "$pid"; then
      fail "$how: found the coordinator's process" "pid '$pid'"
      save_logs "$ns" "$how"
      return
    fi
  else
    old=$("$KUBECTL" -n "$ns" get pod jax-cpu-coordinator -o jsonpath='{.metadata.uid}')
    "$KUBECTL" -n "$ns" delete pod jax-cpu-coordinator --wait=false >/dev/null
  fi
  if ! until_true 300 done_phase "$ns"; then
    fail "$how: the job ends" "phase $(phase "$ns")"
    save_logs "$ns" "$how"
    return
  fi
  after=$(workers "$ns")
  got=$("$KUBECTL" -n "$ns" get cjob jax-cpu -o jsonpath='{.status.phase} restarts={.status.restarts} coordinatorRestarts={.status.coordinatorRestarts}')
  if [[ "$got" == "Succeeded restarts=0 coordinatorRestarts=1" ]]; then
    pass "coordinator ${how/kill/kille}d mid-run: $got"
  else
    fail "coordinator ${how/kill/kille}d mid-run: the job's status" "$got"
    "$KUBECTL" -n "$ns" get events --sort-by=.lastTimestamp >"$WORK/$how-events.log" 2>&1
    "$KUBECTL" -n "$ns" get cjob jax-cpu -o yaml >"$WORK/$how-job.log" 2>&1
  fi
  # The same worker pods, none of their containers restarted.
  if [[ "$after" == "$before" && "$after" != *"/1"* && -n "$after" ]]; then
    pass "$how: the same worker pods, no container restarted ($after)"
  else
    fail "$how: the worker pods" "before: $before; after: $after"
  fi
  save_logs "$ns" "$how"
  if grep -q "40 steps, every sum right, all-gather = \[0, 1, 2, 3\]" "$WORK/$how-worker-0.log" &&
    ! grep -qi "Terminating process\|UNAVAILABLE" "$WORK"/"$how"-worker-*.log; then
    pass "$how: every worker ran its 40 steps with right sums and no coordination error"
  else
    fail "$how: the workers' output" "$(tail -n 5 "$WORK/$how-worker-0.log")"
  fi
}

run_case kill kill
run_case delete delete
stop_operator "$CASE_OPERATOR"
finish
