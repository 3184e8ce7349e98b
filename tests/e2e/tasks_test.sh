#!/usr/bin/env bash
# The task runtime on the local cluster (spec.tasks): examples/tasks-python.yaml, a Python
# driver's map-reduce over thousands of tasks on two worker pods of two Python workers each,
# under cohort-operator with the job's token and mutual TLS (--job-tls=operator), in
# namespaces that enforce restricted Pod Security. It must succeed with the right result; a
# worker pod deleted mid-run is made again while its tasks run elsewhere, with no restart of
# the job; the pool grows and shrinks mid-run and the result is still right; the coordinator's
# process killed mid-run restarts on its state volume with the scheduler's state and the job
# goes on with the same driver (coordinatorRestarts 1, restarts 0); a driver that
# fails fails the job with its exit code; a pod of another namespace, with no
# token and no certificate, is refused by every port that any of a running job's pods listens
# on; an invalid task runtime job is refused by the API server, naming the field. Python comes from .venv/runtime (tests/python/run.sh, which make
# test runs first).
set -uo pipefail
TEST="tasks test"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
venv_example cohort tasks-python.yaml "$WORK/example.yaml" 2
cluster_up
# The same, slower (60 ms a map task: about 30 s on four workers), to act on it mid-run.
sed 's|- {name: SHARDS, value: "2000"}|- {name: SHARDS, value: "2000"}\n                - {name: TASK_SECONDS, value: "0.06"}|' \
  "$WORK/example.yaml" >"$WORK/slow.yaml"
grep -q TASK_SECONDS "$WORK/slow.yaml" || { echo "$TEST: the example's driver env changed"; exit 1; }

job_field() { "$KUBECTL" -n "$1" get cjob tasks-python -o jsonpath="$2" 2>/dev/null; }
done_phase() { [[ "$(job_field "$1" '{.status.phase}')" == Succeeded || "$(job_field "$1" '{.status.phase}')" == Failed ]]; }
tasks_done_at_least() { (($(job_field "$1" '{.status.taskRuntime.succeeded}' || echo 0) >= $2)); }
pod_uid() { "$KUBECTL" -n "$1" get pod "$2" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
pod_running_anew() {  # NS POD OLD_UID: a pod of that name, another than OLD_UID, running
  local uid
  uid=$(pod_uid "$1" "$2")
  [[ -n "$uid" && "$uid" != "$3" ]] &&
    [[ "$("$KUBECTL" -n "$1" get pod "$2" -o jsonpath='{.status.phase}' 2>/dev/null)" == Running ]]
}
pod_gone() { ! "$KUBECTL" -n "$1" get pod "$2" >/dev/null 2>&1; }
save_logs() {  # NS TAG
  "$KUBECTL" -n "$1" logs tasks-python-driver -c driver >"$WORK/$2-driver.log" 2>&1
  "$KUBECTL" -n "$1" logs tasks-python-driver -c cohort-sidecar >"$WORK/$2-driver-sidecar.log" 2>&1
  "$KUBECTL" -n "$1" get cjob tasks-python -o yaml >"$WORK/$2-job.log" 2>&1
  "$KUBECTL" -n "$1" get events --sort-by=.lastTimestamp >"$WORK/$2-events.log" 2>&1
}
right_result() { grep -q "sum of squares below 2000000 = .* (right)" "$WORK/$1-driver.log"; }

# ---- The example, as it is.
ns="tasks-example-$$"
case_namespace "$ns"
"$KUBECTL" -n "$ns" apply -f "$WORK/example.yaml" >/dev/null
if until_true 300 done_phase "$ns"; then
  save_logs "$ns" example
  got=$(job_field "$ns" '{.status.phase} restarts={.status.restarts}')
  done_count=$(job_field "$ns" '{.status.taskRuntime.succeeded}')
  if [[ "$got" == "Succeeded restarts=0" ]] && right_result example && ((done_count >= 2000)); then
    pass "examples/tasks-python.yaml succeeds with the right sum ($done_count tasks done)"
  else
    fail "examples/tasks-python.yaml" "$got, $done_count tasks done; $(tail -n 3 "$WORK/example-driver.log")"
  fi
  wide=$("$KUBECTL" -n "$ns" get cjob tasks-python -o wide)
  if [[ "$wide" =~ TASKS-DONE\ +TASKS-RUNNING && "$wide" == *" $done_count "* ]]; then
    pass "kubectl get cjob -o wide shows the tasks done and running"
  else
    fail "kubectl get cjob -o wide" "$wide"
  fi
  if grep -q "TLS to the coordinator: mutual" "$WORK/example-driver-sidecar.log" &&
    grep -q "object store .* registered" "$WORK/example-driver-sidecar.log"; then
    pass "the driver's sidecar hosts its object store and reaches the scheduler over mutual TLS"
  else
    fail "the driver's sidecar" "$(grep -i "tls\|store" "$WORK/example-driver-sidecar.log" | head -5)"
  fi
else
  save_logs "$ns" example
  fail "examples/tasks-python.yaml ends" "phase $(job_field "$ns" '{.status.phase}')"
fi

# ---- Mid-run: a worker pod deleted, then the pool grown to three and shrunk to one.
ns="tasks-churn-$$"
case_namespace "$ns"
"$KUBECTL" -n "$ns" apply -f "$WORK/slow.yaml" >/dev/null
if until_true 180 tasks_done_at_least "$ns" 100; then
  old=$(pod_uid "$ns" tasks-python-worker-0)
  "$KUBECTL" -n "$ns" delete pod tasks-python-worker-0 --wait=false >/dev/null
  if until_true 60 pod_running_anew "$ns" tasks-python-worker-0 "$old"; then
    pass "a deleted worker pod is made again mid-run"
  else
    fail "a deleted worker pod is made again" "$("$KUBECTL" -n "$ns" get pods 2>&1)"
  fi
  "$KUBECTL" -n "$ns" patch cjob tasks-python --type merge -p '{"spec":{"replicas":3}}' >/dev/null
  if until_true 60 pod_running_anew "$ns" tasks-python-worker-2 "" &&
    until_true 30 bash -c "'$KUBECTL' -n '$ns' logs tasks-python-worker-2 -c workers 2>/dev/null | grep -q 'serving on'"; then
    pass "replicas 2 -> 3 mid-run: worker pod 2 joins the pool"
  else
    fail "replicas 2 -> 3 mid-run" "$("$KUBECTL" -n "$ns" get pods 2>&1)"
  fi
  "$KUBECTL" -n "$ns" patch cjob tasks-python --type merge -p '{"spec":{"replicas":1}}' >/dev/null
  if until_true 60 pod_gone "$ns" tasks-python-worker-2 && until_true 60 pod_gone "$ns" tasks-python-worker-1 &&
    [[ "$(job_field "$ns" '{.status.phase}')" == Running ]]; then
    pass "replicas 3 -> 1 mid-run: worker pods 1 and 2 leave while the job runs on"
  else
    fail "replicas 3 -> 1 mid-run" "$("$KUBECTL" -n "$ns" get pods 2>&1)"
  fi
else
  fail "the slow job gets going" "phase $(job_field "$ns" '{.status.phase}'), $(job_field "$ns" '{.status.taskRuntime}')"
fi
if until_true 300 done_phase "$ns"; then
  save_logs "$ns" churn
  got=$(job_field "$ns" '{.status.phase} restarts={.status.restarts}')
  if [[ "$got" == "Succeeded restarts=0" ]] && right_result churn; then
    pass "through the lost pod and the scaling, the job succeeds with the right sum and no restart"
  else
    fail "the job after the lost pod and the scaling" "$got; $(tail -n 3 "$WORK/churn-driver.log")"
  fi
else
  save_logs "$ns" churn
  fail "the slow job ends" "phase $(job_field "$ns" '{.status.phase}')"
fi

# ---- The coordinator's process killed mid-run: it restarts in its pod on its state volume
# with the scheduler's state, and the job goes on with the same driver.
ns="tasks-coordinator-$$"
case_namespace "$ns"
"$KUBECTL" -n "$ns" apply -f "$WORK/slow.yaml" >/dev/null
if until_true 180 tasks_done_at_least "$ns" 200; then
  driver_uid=$(pod_uid "$ns" tasks-python-driver)
  pid=$(coordinator_pid tasks-python "$ns")
  if [[ -n "$pid" ]] && kill -KILL "$pid"; then
    if until_true 300 done_phase "$ns"; then
      save_logs "$ns" coordinator
      got=$(job_field "$ns" '{.status.phase} restarts={.status.restarts} coordinatorRestarts={.status.coordinatorRestarts}')
      if [[ "$got" == "Succeeded restarts=0 coordinatorRestarts=1" ]] && right_result coordinator; then
        pass "the coordinator killed mid-run: the job goes on and succeeds with the right sum ($got)"
      else
        fail "the coordinator killed mid-run" "$got; $(tail -n 3 "$WORK/coordinator-driver.log")"
      fi
      # Finished pods stay for their logs: the driver that ended is the one that started.
      if [[ -n "$driver_uid" && "$(pod_uid "$ns" tasks-python-driver)" == "$driver_uid" ]]; then
        pass "the coordinator killed mid-run: the same driver pod ran to the end"
      else
        fail "the coordinator killed mid-run: the driver pod" "was $driver_uid, now $(pod_uid "$ns" tasks-python-driver)"
      fi
    else
      save_logs "$ns" coordinator
      fail "the job whose coordinator was killed ends" "phase $(job_field "$ns" '{.status.phase}')"
    fi
  else
    fail "found the coordinator's process" "pid '$pid'"
  fi
else
  fail "the job gets going (coordinator case)" "phase $(job_field "$ns" '{.status.phase}')"
fi

# ---- A stranger's pod calls every port of a running job: each listening socket of each of
# the job's pods (from the pod's network namespace, /proc/PID/net/tcp, so that none is
# missed), from a pod in another namespace with no token and no certificate
# (tests/e2e/stranger_probe.py says what each kind of port must answer).
listening() {  # NS: POD=IP:PORT:WHERE for each TCP socket listening in each of the job's pods
  local pod uid ip pidfile
  for pod in $("$KUBECTL" -n "$1" get pods -o jsonpath='{.items[*].metadata.name}'); do
    uid=$(pod_uid "$1" "$pod")
    ip=$("$KUBECTL" -n "$1" get pod "$pod" -o jsonpath='{.status.podIP}')
    pidfile=$(ls "$ROOT/build/local-cluster/pods/$uid/containers/"*/pid 2>/dev/null | head -n 1)
    [[ -n "$ip" && -n "$pidfile" ]] || continue
    python3 - "$pod" "$ip" "/proc/$(cat "$pidfile")/net" <<'PY'
import sys
pod, ip, net = sys.argv[1:]
seen = set()
for name in ("tcp", "tcp6"):
    try:
        lines = open(f"{net}/{name}").read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        if state != "0A":  # LISTEN
            continue
        addr, port = local.split(":")
        loopback = addr in ("0100007F", "00000000000000000000000001000000",
                            "0000000000000000FFFF00000100007F")
        seen.add((int(port, 16), "loopback" if loopback else "any"))
for port, where in sorted(seen):
    print(f"{pod}={ip}:{port}:{where}")
PY
  done
}
count() { grep -c "^RESULT $1 [^ ]* $2 ok " "$WORK/stranger.log"; }  # POD KIND
ports_up() {  # NS: every pod of the job listens on what its kind serves
  listening "$1" >"$WORK/targets"
  (($(grep -c "^tasks-python-worker-0=.*:any$" "$WORK/targets") >= 4)) &&
    (($(grep -c "^tasks-python-worker-1=.*:any$" "$WORK/targets") >= 4)) &&
    (($(grep -c "^tasks-python-driver=.*:any$" "$WORK/targets") >= 2)) &&
    (($(grep -c "^tasks-python-coordinator=.*:any$" "$WORK/targets") >= 2))
}
ns="tasks-ports-$$"
case_namespace "$ns"
sed 's|value: "0.06"|value: "1"|' "$WORK/slow.yaml" | "$KUBECTL" -n "$ns" apply -f - >/dev/null
stranger="tasks-stranger-$$"
add_namespace "$stranger"
"$KUBECTL" -n "$stranger" create configmap probe --from-file="$ROOT/tests/e2e/stranger_probe.py" >/dev/null
if until_true 180 tasks_done_at_least "$ns" 4 && until_true 60 ports_up "$ns"; then
  # The targets as arguments of the stranger's one container, a YAML flow list.
  args=$(sed 's/.*/"&"/' "$WORK/targets" | paste -sd, -)
  "$KUBECTL" -n "$stranger" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: stranger}
spec:
  restartPolicy: Never
  containers:
    - name: probe
      image: stranger
      command: [$PYTHON, /probe/stranger_probe.py]
      args: [$args]
      volumeMounts: [{name: probe, mountPath: /probe}]
  volumes: [{name: probe, configMap: {name: probe}}]
YAML
  stranger_done() {
    local phase
    phase=$("$KUBECTL" -n "$stranger" get pod stranger -o jsonpath='{.status.phase}' 2>/dev/null)
    [[ $phase == Succeeded || $phase == Failed ]]
  }
  until_true 120 stranger_done
  "$KUBECTL" -n "$stranger" logs stranger >"$WORK/stranger.log" 2>&1
  phase=$("$KUBECTL" -n "$stranger" get pod stranger -o jsonpath='{.status.phase}' 2>/dev/null)
  if [[ $phase == Succeeded ]] && grep -q "^stranger_probe: $(wc -l <"$WORK/targets") ports, 0 answered" "$WORK/stranger.log"; then
    pass "a stranger's pod is refused by every one of the job's $(wc -l <"$WORK/targets") listening ports"
  else
    fail "a stranger's pod calls every port" "$phase: $(grep -v " ok " "$WORK/stranger.log" | head -n 8)"
  fi
  # What the ports turned out to be, so that none of it passes by not being there.
  got="coordinator tls $(count tasks-python-coordinator tls) http $(count tasks-python-coordinator http);"
  for pod in tasks-python-worker-0 tasks-python-worker-1 tasks-python-driver; do
    got+=" ${pod#tasks-python-} grpc $(count $pod grpc) http $(count $pod http) loopback $(count $pod unreachable);"
  done
  if [[ "$got" =~ ^coordinator\ tls\ [1-9][0-9]*\ http\ [1-9] ]] &&
    [[ "$got" =~ worker-0\ grpc\ ([3-9]|[1-9][0-9])\ http\ [1-9][0-9]*\ loopback\ [1-9] ]] &&
    [[ "$got" =~ worker-1\ grpc\ ([3-9]|[1-9][0-9])\ http\ [1-9][0-9]*\ loopback\ [1-9] ]] &&
    [[ "$got" =~ driver\ grpc\ [1-9][0-9]*\ http\ [1-9] ]]; then
    pass "the ports refused: the coordinator's TLS and HTTP, each worker pod's workers, object store, sidecar HTTP and local coordinator, the driver's store and sidecar ($got)"
  else
    fail "the kinds of ports found" "$got"
  fi
else
  fail "the job's pods listen (ports case)" "phase $(job_field "$ns" '{.status.phase}'); $(cat "$WORK/targets" 2>/dev/null | tr '\n' ' ')"
fi
"$KUBECTL" -n "$ns" delete cjob tasks-python --wait=false >/dev/null 2>&1

# ---- A driver that fails fails the job, saying how.
ns="tasks-fail-$$"
case_namespace "$ns"
sed "s|command: \[$PYTHON, /app/driver.py\]|command: [$PYTHON, -c, 'import sys; sys.exit(3)']|" \
  "$WORK/example.yaml" | "$KUBECTL" -n "$ns" apply -f - >/dev/null
if until_true 120 done_phase "$ns"; then
  got=$(job_field "$ns" '{.status.phase} {.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')
  expect "a driver that exits 3 fails the job" "$got" "Failed DriverFailed: the driver exited with code 3"
else
  fail "the failing driver's job ends" "phase $(job_field "$ns" '{.status.phase}')"
fi

# ---- Invalid task runtime jobs: refused by the API server, naming the field.
refused() {  # WHAT EXPECTED-MESSAGE PATCH-SED
  local out
  out=$(sed "$3" "$WORK/example.yaml" | "$KUBECTL" -n "$ns" apply --dry-run=server -f - 2>&1)
  if [[ $? != 0 && "$out" == *"$2"* ]]; then
    pass "refused: $1"
  else
    fail "refused: $1" "$out"
  fi
}
refused "spec.tasks with framework jax" "spec.framework must be generic when spec.tasks" \
  's|^  replicas: 2|  replicas: 2\n  framework: jax|'
refused "spec.tasks.workersPerPod 0" "spec.tasks.workersPerPod" 's|workersPerPod: 2|workersPerPod: 0|'
refused "spec.tasks without a driver" "spec.tasks.driver" '/^    driver:/,/configMap: {name: tasks-python-program}/d'
refused "spec.tasks.objectStoreMemory lots" "spec.tasks.objectStoreMemory" \
  's|# objectStoreMemory: 2Gi|objectStoreMemory: lots|'

finish
