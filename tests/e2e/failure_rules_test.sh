#!/usr/bin/env bash
# failurePolicy.rules and startupDeadlineSeconds on the local cluster with the real
# kube-scheduler (a node of 4 fake nvidia.com/gpu):
#
# - a worker pod evicted through the eviction API (as kubectl drain does) restarts the gang
#   without using up maxRestarts (0 here) when a rule says RestartGangUncounted on Evicted,
#   and the job then succeeds; without the rule the same eviction fails it (MaxRestartsExceeded).
#   Their workers hold before their first step until the test puts demo/go into the job's
#   store (--hold-key), so that neither can finish before it is evicted however slowly the
#   other's pods start;
# - a job whose workers ask for more GPUs than any node has fails at its startup deadline,
#   saying which pod waited and the scheduler's reason;
# - a running job whose replicas change goes on as a new gang of the new size (its coordinator's
#   configuration written anew), not counted against maxRestarts, and succeeds;
# - in a recoverable agent-library job (spec.coordinator.recoverable) a worker that exits 3 is
#   restarted alone by a RestartWorker rule: its pod is made again, it rejoins the running gang
#   at the step it left, the other workers' pods run on untouched, and the job succeeds with
#   restarts 0 and workerRestarts 1.
set -uo pipefail
NS="rules-test-$$"
source "$(dirname "$0")/lib.sh"

cluster_up
start_operator operator

# job NAME STEPS [failurePolicy lines] [GPUs per worker] [more worker args]
job() {
  steps_job "$1" 2 "$2" "${4:-}" "  failurePolicy:
    maxRestarts: 0
${3:-}" "" "${5:-}"
}
# evict POD: the eviction API, as kubectl drain uses it.
evict() {
  "$KUBECTL" create --raw "/api/v1/namespaces/$NS/pods/$1/eviction" -f - >/dev/null <<JSON
{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "$1", "namespace": "$NS"}}
JSON
}

# ---- 1. An eviction the rules do not count.
hold=', --hold-key, demo/go'
job spot 6 '    rules:
      - {action: RestartGangUncounted, onReasons: [Evicted, Preempted, NodeLost]}' '' "$hold"
job plain 6 '' '' "$hold"
for j in spot plain; do
  wait_for "cjob/$j" '{.status.phase}' Running 90 || fail "$j runs"
done
evict spot-worker-1 || fail "evict spot-worker-1"
evict plain-worker-1 || fail "evict plain-worker-1"
# The go signal, into whichever coordinator serves spot's gang now (put fails once it is there).
go_until() { until_true "$3" "ctl $1 kv put demo/go 1 >/dev/null 2>&1; [[ \$(field cjob/$1 '{.status.phase}') == $2 ]]"; }
if wait_for cjob/spot '{.status.uncountedRestarts}' 1 60 && go_until spot Succeeded 120; then
  restart=$(k get events --field-selector involvedObject.name=spot,reason=GangRestart -o jsonpath='{.items[0].message}')
  got="$(field cjob/spot '{.status.restarts} {.status.uncountedRestarts}') $restart"
  if [[ "$got" == "0 1 "*"failurePolicy.rules[0] (RestartGangUncounted on Evicted)"* ]]; then
    pass "an evicted worker restarts the gang without using maxRestarts (0), and the job succeeds"
  else
    fail "uncounted eviction" "$got"
  fi
else
  fail "the evicted job restarts and succeeds" "$(field cjob/spot '{.status}')"
  pod_logs spot
fi
expect_failure plain MaxRestartsExceeded 60 \
  "without the rule the same eviction counts, and maxRestarts 0 fails the job"

# ---- 2. A gang that cannot be placed fails at its startup deadline.
job huge 4 '    startupDeadlineSeconds: 8' 5
if wait_for cjob/huge '{.status.phase}' Failed 60; then
  got=$(field cjob/huge '{.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')
  if [[ "$got" == "StartupDeadlineExceeded: gang 0 did not start within 8 s"*"worker 0 is Pending"*"Insufficient nvidia.com/gpu"* ]]; then
    pass "a gang that asks for 5 of 4 GPUs fails at its startup deadline, saying why"
  else
    fail "startup deadline message" "$got"
  fi
else
  fail "the unplaceable job fails at its deadline" "$(field cjob/huge '{.status}')"
fi

# ---- 3. A changed spec: a new gang.
job grow 30
if wait_for cjob/grow '{.status.phase}' Running 90; then
  k patch cjob grow --type merge -p '{"spec":{"replicas":3}}' >/dev/null
  if wait_for cjob/grow '{.status.uncountedRestarts}' 1 30 &&
    wait_for cjob/grow '{.status.tasks.registered}' 3 90; then
    config=$(field configmap/grow-coordinator '{.data.coordinator\.yaml}')
    got="$(field cjob/grow '{.status.restarts} {.status.tasks.total}') $(field pod/grow-worker-2 '{.metadata.labels.cohort\.dev/restart}')"
    if [[ "$got" == "0 3 1" && "$config" == *'"worker=3"'* ]]; then
      pass "replicas 2 -> 3 on a running job: a new gang of 3 (gang 1, restarts 0), the coordinator configured for 3"
    else
      fail "spec change" "'$got'; $(grep job: <<<"$config")"
    fi
  else
    fail "a changed spec makes a new gang" "$(field cjob/grow '{.status}')"
  fi
  wait_for cjob/grow '{.status.phase}' Succeeded 120 && pass "the grown job succeeds" || fail "the grown job succeeds"
else
  fail "grow runs"
fi

# ---- 4. A worker restarted alone rejoins a recoverable job.
k apply -f - >/dev/null <<YAML
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: rejoin
spec:
  replicas: 3
  coordinator:
    recoverable: true
  failurePolicy:
    maxRestarts: 1
    rules:
      - {action: RestartWorker, onExitCodes: [3]}
  template:
    spec:
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          args: [--steps, "12", --step-seconds, "0.5", --exit-at-step, "4", --exit-code, "3",
                 --exit-task, "1"]
YAML
uids() { k get pods -l cohort.dev/job=rejoin,cohort.dev/role=worker \
  -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}'; }
if wait_for cjob/rejoin '{.status.phase}' Running 90; then
  before=$(uids)
  if wait_for cjob/rejoin '{.status.workerRestarts}' 1 60 && wait_for cjob/rejoin '{.status.phase}' Succeeded 120; then
    after=$(uids)
    got="$(field cjob/rejoin '{.status.restarts} {.status.uncountedRestarts} {.status.workerRestarts}')"
    logs=$(k logs rejoin-worker-1 -c worker 2>&1)
    kept=0
    for w in rejoin-worker-0 rejoin-worker-2; do
      [[ " $before " == *" $w="* && " $after " == *" $(grep -o "$w=[^ ]*" <<<"$before") "* ]] && ((kept++))
    done
    replaced=$(grep -o 'rejoin-worker-1=[^ ]*' <<<"$before")
    if [[ "$got" == "0  1" && $kept == 2 && -n "$replaced" && " $after " != *" $replaced "* &&
      "$logs" == *"rejoining the running job at step 4"*"shut down cleanly"* ]]; then
      pass "a worker that exits 3 is restarted alone and rejoins at step 4; workers 0 and 2 run on in their pods; restarts 0, workerRestarts 1; the job succeeds"
    else
      fail "worker restarted alone" "status '$got', pods kept $kept, before: $before, after: $after; worker 1: $(tail -n 5 <<<"$logs")"
    fi
  else
    fail "the recoverable job restarts worker 1 and succeeds" "$(field cjob/rejoin '{.status}')"
    pod_logs rejoin
  fi
else
  fail "rejoin runs"
fi

finish
