#!/usr/bin/env bash
# Hang detection on the local cluster with real jaxlib: examples/jax-cpu.yaml, three workers,
# failurePolicy.progressTimeout 20s and spec.sidecar.stackDumps.
#
# - hung: HANG_AT_STEP=1:4 stops process 1 in the middle of step 4 of the first run (after the
#   step's psum, before its key and barrier), alive and heartbeating. Processes 0 and 2 wait at
#   the step's barrier: waiting on a peer, not hung. Process 1's sidecar finds no progress for
#   20 s, records its stacks with py-spy (from the compat venv, first on the pods' PATH) into
#   its log, and reports the task hung: reason Hang, which the job's rule
#   {RestartGangUncounted on Hang} matches. The gang restarts once, uncounted, and the job
#   succeeds; the restart's Event names the task, says "no progress for 20s" and carries the
#   stacks' summary.
# - healthy: the same job without HANG_AT_STEP, of the same length, at the same time: no stall
#   is found and the job succeeds without a restart.
# How long the hung task took to be reported, from its last step to the report, is printed
# (measured, not asserted).
set -uo pipefail
TEST="hang test"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
venv_example jax jax-cpu.yaml "$WORK/jax-cpu.yaml" 1
if [[ ! -x "$ROOT/.venv/bin/py-spy" ]]; then
  echo "$TEST: $ROOT/.venv/bin/py-spy is missing; run tests/compat/run.sh (make compat-test) first"
  exit 1
fi
cluster_up

# job NS NAME STEPS [ENV=VALUE...]: the example as a job of three workers, hang detection on,
# and a straggler named after 10 s at 1.5 times the others' pace (unless STRAGGLERS=default).
job() {
  python3 - "$WORK/jax-cpu.yaml" "$2" "$3" "${@:4}" >"$WORK/$2.yaml" <<'PY'
import sys
text, name, steps = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
env = dict(a.split("=", 1) for a in sys.argv[4:])
stragglers = "" if env.pop("STRAGGLERS", "") == "default" else "    stragglers: {ratio: 1.5, for: 10s}\n"
# STRAGGLER_RULE=1: one restart allowed, and a rule that restarts the gang for a straggler.
straggler_rule = env.pop("STRAGGLER_RULE", "") == "1"
text = text.replace("name: jax-cpu\n", f"name: {name}\n").replace("replicas: 4", "replicas: 3")
text = text.replace("  failurePolicy:\n    maxRestarts: 2\n", """  failurePolicy:
    maxRestarts: """ + ("1" if straggler_rule else "0") + """
    progressTimeout: 20s
""" + stragglers + """    rules:
      - {action: RestartGangUncounted, onReasons: [Hang]}
""" + ("      - {action: RestartGang, onReasons: [Straggler]}\n" if straggler_rule else "") + """  sidecar:
    stackDumps: true
""")
env["STEPS"] = steps
lines = "".join(f'            - {{name: {k}, value: "{v}"}}\n' for k, v in env.items())
text = text.replace("          command: [", "          env:\n" + lines + "          command: [", 1)
print(text, end="")
PY
  "$KUBECTL" -n "$1" apply -f "$WORK/$2.yaml" >/dev/null
}
field_in() { "$KUBECTL" -n "$1" get "$2" -o jsonpath="$3" 2>/dev/null; }
phase() { field_in "$1" "cjob/$2" '{.status.phase}'; }
ended() { [[ "$(phase "$1" "$2")" == Succeeded || "$(phase "$1" "$2")" == Failed ]]; }
save_logs() {
  local i
  for i in 0 1 2; do
    "$KUBECTL" -n "$1" logs "$2-worker-$i" -c worker >"$WORK/$2-worker-$i.log" 2>&1
    "$KUBECTL" -n "$1" logs "$2-worker-$i" -c cohort-sidecar >"$WORK/$2-sidecar-$i.log" 2>&1
  done
  "$KUBECTL" -n "$1" get events --sort-by=.lastTimestamp >"$WORK/$2-events.log" 2>&1
}

# The privileged Pod Security Standard: stackDumps gives the sidecar SYS_PTRACE, which baseline
# refuses (the API server's admission says so, and the operator's Event with it).
add_namespace "hang-$$" privileged
operator_for "hang-$$" operator-hang
HANG_OPERATOR=$STARTED
# The hung job's straggler rule is the default (2 minutes): its stuck task, busy and stepless,
# would otherwise be named a straggler before its hang is reported.
job "hang-$$" hung 12 HANG_AT_STEP=1:4 STRAGGLERS=default
job "hang-$$" healthy 12

# The first gang's worker 1, its sidecar's log followed to its end (its pod is made anew by the
# restart).
worker1_runs() {
  local phase
  phase=$(phase "hang-$$" hung)
  [[ $phase == Failed ]] && return 0 # no sooner
  [[ $(field_in "hang-$$" pod/hung-worker-1 "{.status.phase}") == Running ]]
}
if until_true 300 worker1_runs && [[ $(phase "hang-$$" hung) != Failed ]]; then
  "$KUBECTL" -n "hang-$$" logs -f hung-worker-1 -c cohort-sidecar >"$WORK/hung-first-sidecar-1.log" 2>&1 &
  FOLLOW=$!
else
  fail "the hung job's worker 1 runs" "$(field_in "hang-$$" cjob/hung '{.status}')"
  FOLLOW=""
fi
restarted() {
  [[ $(phase "hang-$$" hung) == Failed || $(field_in "hang-$$" cjob/hung "{.status.uncountedRestarts}") == 1 ]]
}
if until_true 300 restarted && [[ $(field_in "hang-$$" cjob/hung "{.status.uncountedRestarts}") == 1 ]]; then
  pass "the hung task restarts the gang, uncounted (RestartGangUncounted on Hang)"
else
  fail "the hung task restarts the gang" "$("$KUBECTL" -n "hang-$$" get cjob hung -o jsonpath='{.status}')"
fi
restart=$("$KUBECTL" -n "hang-$$" get events --field-selector involvedObject.name=hung,reason=GangRestart -o jsonpath='{.items[0].message}')
echo "the restart's Event: $restart"
if [[ "$restart" == *"task:1"* && "$restart" == *"no progress for 20s"* &&
  "$restart" == *"py-spy"* && "$restart" == *"stuck_in_step"* &&
  "$restart" == *"(RestartGangUncounted on Hang)"* ]]; then
  pass "the restart's Event names task 1, no progress for 20s and its stacks (stuck_in_step)"
else
  fail "the restart's Event" "$restart"
fi
if until_true 300 ended "hang-$$" hung && until_true 300 ended "hang-$$" healthy; then
  got="$(field_in "hang-$$" cjob/hung '{.status.phase} {.status.restarts} {.status.uncountedRestarts}')"
  if [[ "$got" == "Succeeded 0 1" ]]; then
    pass "the restarted gang runs its 12 steps and the job succeeds ($got)"
  else
    fail "the hung job's end" "$got"
  fi
  got="$(field_in "hang-$$" cjob/healthy '{.status.phase} {.status.restarts} {.status.uncountedRestarts}')"
  if [[ "$got" == "Succeeded 0 0" || "$got" == "Succeeded 0 " ]]; then
    pass "the healthy job of the same length succeeds without a restart ($got)"
  else
    fail "the healthy job's end" "$got"
  fi
else
  fail "both jobs end" "hung $(phase "hang-$$" hung), healthy $(phase "hang-$$" healthy)"
fi
save_logs "hang-$$" hung
save_logs "hang-$$" healthy
if grep -q "workload is stalled" "$WORK"/healthy-sidecar-*.log "$WORK"/hung-sidecar-[02].log; then
  fail "no stall found but in the hung task" "$(grep -h "workload is stalled" "$WORK"/healthy-sidecar-*.log "$WORK"/hung-sidecar-[02].log)"
else
  pass "neither the healthy job's tasks nor the hung task's peers (waiting at its barrier) are found stalled"
fi
if [[ -n "$FOLLOW" ]]; then
  # The followed container ended with its pod; kubectl may linger on the stream.
  kill "$FOLLOW" 2>/dev/null
  wait "$FOLLOW" 2>/dev/null
fi
first="$WORK/hung-first-sidecar-1.log"
if grep -q "the workload's stacks (process [0-9]*, by .*py-spy" "$first" && grep -q "stuck_in_step" "$first"; then
  pass "the hung task's stacks, by py-spy, are in its sidecar's log"
else
  fail "the stacks in the sidecar's log" "$(grep -A3 "stalled\|stacks" "$first" | head -n 20)"
fi
# Measured: the stall as the sidecar saw it (its last progress some time ago, polled every
# second) and the report after the stacks were recorded.
echo "measured: $(grep -h "workload is stalled" "$first" | head -n 1)"
echo "measured: $(grep -h "reporting to the coordinator" "$first" | head -n 1 | cut -c1-160)"

# ---- A straggler: process 2 computes at half speed; the others wait for it at each step's
# barrier. It is named in an Event and in the operator's metric; a rule restarts the gang for
# it once (maxRestarts 1); named again in the next gang, it is kept (no restart left), and the
# job still succeeds.
job "hang-$$" slow 40 SLOW_PROCESS=2 STRAGGLER_RULE=1
straggler_event() {
  "$KUBECTL" -n "hang-$$" get events --field-selector involvedObject.name=slow,reason=Straggler \
    -o jsonpath='{.items[0].message}' 2>/dev/null
}
port=$(http_port "$HANG_OPERATOR")
score() {
  curl -s --max-time 2 "127.0.0.1:$port/metrics" |
    awk '/^cohort_task_straggler_score\{.*cjob="slow".*worker="2"/ {print $2}'
}
# Worker 2's score, read while the job runs (the operator serves it for running jobs only).
best=""
named() {
  local s
  s=$(score)
  [[ -n "$s" ]] && best=$s
  [[ -n "$(straggler_event)" ]] || ended "hang-$$" slow
}
if until_true 300 named; then
  event=$(straggler_event)
  echo "the straggler's Event: $event"
  # "worker 2 (node NAME) is a straggler: ...", NAME a node of the cluster.
  named_node=""
  if [[ "$event" =~ ^worker\ 2\ \(([a-z]+)\ ([a-z0-9.-]+)\)\ is\ a\ straggler:\ its\ steps\ take\ it\  ]] &&
    [[ ${BASH_REMATCH[1]} == node ]]; then
    named_node=${BASH_REMATCH[2]}
  fi
  if [[ -n "$named_node" ]] && "$KUBECTL" get nodes "$named_node" >/dev/null 2>&1; then
    pass "the half-speed worker is named, with its node ($named_node), in an Event (Straggler)"
  else
    fail "the straggler's Event" "${event:-none; the job ended $(phase "hang-$$" slow)}"
  fi
fi
got=$best
echo "measured: worker 2's cohort_task_straggler_score ${got:-absent}"
if [[ -n "$got" ]] && awk -v s="$got" 'BEGIN { exit !(s >= 1.5) }'; then
  pass "cohort_task_straggler_score names worker 2 ($got)"
else
  fail "worker 2's straggler score" "${got:-absent}"
fi
until_true 600 ended "hang-$$" slow
got="$(field_in "hang-$$" cjob/slow '{.status.phase} {.status.restarts} {.status.lastFailure.cause}')"
restart=$("$KUBECTL" -n "hang-$$" get events --field-selector involvedObject.name=slow,reason=GangRestart -o jsonpath='{.items[0].message}')
kept=$("$KUBECTL" -n "hang-$$" get events --field-selector involvedObject.name=slow,reason=StragglerKept -o jsonpath='{.items[0].message}')
echo "the straggler's restart: $restart"
echo "the straggler kept: $kept"
if [[ "$got" == "Succeeded 1 Straggler" && "$restart" == *"(RestartGang on Straggler): worker 2 ("*" is a straggler"* &&
  "$kept" == *"the job has used its 1 restarts"* ]]; then
  pass "a rule restarts the gang for the straggler once (restarts 1, lastFailure cause Straggler); named again, it is kept, and the job succeeds ($got)"
else
  fail "the slow job's rule and end" "status '$got'; restart '$restart'; kept '$kept'"
fi
others=$("$KUBECTL" -n "hang-$$" get events --field-selector reason=Straggler -o jsonpath='{range .items[*]}{.involvedObject.name} {end}')
if [[ -n "$others" && -z "${others//slow /}" ]]; then
  pass "no straggler named in the healthy or the hung job"
else
  fail "Straggler Events only for the slow job" "$others"
fi
stop_operator "$HANG_OPERATOR"
finish
