#!/usr/bin/env bash
# cohort-operator end to end on the local cluster's real kube-apiserver, with real pods run
# by the pod runner: a job succeeds; a worker killed mid-run restarts the gang, which then
# succeeds with restarts=1; a permanent exit fails the job; restarts stop at maxRestarts; a
# task in error at the coordinator restarts the gang; the coordinator pod deleted mid-run
# restarts the gang; an operator restarted mid-job creates no duplicate pods and keeps the
# status right; suspend and resume; the deadline; an invalid job is refused by the API
# server; a coordinator killed or (state on a claim) deleted restarts without the gang and
# keeps its keys; two operators elect one leader and the standby takes over. Every job has a
# token (Secret <job>-token): the coordinator refuses a call without it, and the operator's
# own calls carry it, after a restart too.
# Brings the cluster up if it is not (and down again at the end if it did).
set -uo pipefail
TEST="operator e2e"
NS="operator-test-$$"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Leader election and the metrics port are each case's (start_operator's FLAGS).
OPERATOR_FLAGS=(--failure-settle 1s --coordinator-poll 200ms)
CTL_DIAL_TIMEOUT=10s

# metric PORT NAME: the value of an unlabelled sample on an operator's /metrics, or nothing.
metric() { curl -s --max-time 2 "127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
# The host process of a pod's workload container (the pod runner runs containers as
# processes; the agent example is the workload in these jobs).
workload_pid() {
  local pod=$1 d env
  for d in /proc/[0-9]*; do
    [[ "$(readlink "$d/exe" 2>/dev/null)" == "$BIN/cohort-agent-example" ]] || continue
    env=$(tr '\0' '\n' <"$d/environ" 2>/dev/null)
    # The name alone could be another test's pod: those run beside this one (run.sh's lanes).
    if grep -qx "POD_NAME=$pod" <<<"$env" && grep -qx "POD_NAMESPACE=$NS" <<<"$env"; then
      basename "$d"
      return 0
    fi
  done
  return 1
}

pod_uids() { k get pods -l "cohort.dev/job=$1" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}'; }

cluster_up

# ---- 0. The client library itself against this API server: CRUD with its error codes,
# paged lists, a watch from a list's version, 410 for a version too old, the informer's
# label-scoped cache and index, and Lease takeover.
if out=$(COHORT_TEST_NAMESPACE="$NS" "$BIN/kube_client_e2e_test" 2>&1); then
  pass "kube client, informer and leader election against the API server ($(grep -o '[0-9]* tests from [0-9]* test suite' <<<"$out" | head -n 1))"
else
  fail "kube_client_e2e_test" "$(grep -E 'Failure|Expected|Which is|FAILED' <<<"$out" | head -n 20)"
fi

start_operator operator --leader-elect=false --http-listen 127.0.0.1:0
OP=$STARTED

# ---- 1. The quickstart job succeeds.
k apply -f "$ROOT/examples/quickstart.yaml" >/dev/null
if wait_for cjob/quickstart '{.status.phase}' Succeeded 90; then
  got=$(field cjob/quickstart '{.status.restarts} {.status.tasks.succeeded}/{.status.tasks.total} {.status.conditions[?(@.type=="Succeeded")].reason}')
  if [[ "$got" == "0 4/4 AllWorkersSucceeded" ]]; then
    pass "examples/quickstart.yaml: four workers succeed (restarts 0, 4/4 succeeded)"
  else
    fail "quickstart status" "$got"
  fi
  events=$(k get events --field-selector involvedObject.name=quickstart -o jsonpath='{range .items[*]}{.reason} {end}')
  if [[ "$events" == *Pending* && "$events" == *CreatedPods* && "$events" == *Running* && "$events" == *AllWorkersSucceeded* ]]; then
    pass "Events record each decision ($events)"
  else
    fail "Events" "$events"
  fi
  owners=$(k get pods,services,configmaps,secrets -l cohort.dev/job=quickstart -o jsonpath='{range .items[*]}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].controller} {end}')
  if [[ -n "$owners" && "$(tr ' ' '\n' <<<"$owners" | sort -u | xargs)" == "CoordinatedJob/true" ]]; then
    pass "every child is owned by its CoordinatedJob"
  else
    fail "owner references" "$owners"
  fi
else
  fail "examples/quickstart.yaml succeeds"
fi

# ---- 2. A worker killed mid-run: gang restart, then success with restarts=1.
steps_job kill 4 16
if wait_for cjob/kill '{.status.phase}' Running 60 && wait_for cjob/kill '{.status.tasks.registered}' 4 30; then
  before=$(pod_uids kill)
  pid=$(workload_pid kill-worker-2)
  if [[ -n "$pid" ]] && kill -KILL "$pid"; then
    if wait_for cjob/kill '{.status.phase}' Succeeded 90; then
      got=$(field cjob/kill '{.status.restarts} {.status.conditions[?(@.type=="Restarting")].message}')
      after=$(pod_uids kill)
      if [[ "${got%% *}" == 1 && "$before" != "$after" ]]; then
        pass "a worker SIGKILLed mid-run restarts the gang, which succeeds (restarts 1)"
      else
        fail "kill: restarts" "$got"
        pod_logs kill-
      fi
      reason=$(k get events --field-selector involvedObject.name=kill,reason=GangRestart -o jsonpath='{.items[0].message}')
      if [[ "$reason" == *"worker 2 exited with code 137 (signal 9)"* ]]; then
        pass "the restart names its cause: $reason"
      else
        fail "the restart's cause" "$reason"
      fi
    else
      fail "kill: the job succeeds after the restart"
      pod_logs kill-
    fi
  else
    fail "kill: found the workload process of kill-worker-2"
  fi
else
  fail "kill: the job runs"
fi

# ---- 3. A permanent exit code fails the job at once.
k apply -f - >/dev/null <<'YAML'
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: permanent
spec:
  replicas: 3
  template:
    spec:
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          command: [sh, -c]
          args:
            - |
              if [ "$COHORT_TASK_ID" = 1 ]; then sleep 2; echo "bad input"; exit 3; fi
              exec cohort-agent-example --steps 40 --step-seconds 0.5
YAML
if wait_for cjob/permanent '{.status.phase}' Failed 60; then
  got=$(field cjob/permanent '{.status.restarts} {.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')
  if [[ "$got" == "0 WorkerFailed: worker 1 exited with code 3, which failurePolicy counts as permanent" ]]; then
    pass "a permanent exit (code 3) fails the job without a restart: $got"
  else
    fail "permanent: status" "$got"
  fi
  pods_of_permanent() { k get pods -l cohort.dev/job=permanent -o jsonpath='{range .items[*]}{.metadata.name}:{.status.phase} {end}'; }
  none_running() { [[ "$(pods_of_permanent)" != *Running* ]]; }
  # A stopping workload's ShutdownTask goes through its sidecar to the coordinator, which
  # stays until the workloads are gone; the shutdown barrier waits for the exited worker 1
  # until its heartbeat timeout (30 s), unless the pod's grace period (30 s) ends it first.
  start=$SECONDS
  until_true 75 none_running
  echo "  the failed job's running workers were gone after $((SECONDS - start)) s"
  left=$(pods_of_permanent)
  if [[ -n "$left" && "$left" != *Running* ]]; then
    pass "the failed job's running pods are stopped ($left)"
  else
    fail "permanent: pods still running" "$left"
  fi
else
  fail "permanent: the job fails"
fi

# ---- 4. Restarts stop at maxRestarts.
steps_job crashy 2 5 "" "  failurePolicy: {maxRestarts: 1}"
k patch cjob crashy --type merge -p '{"spec":{"template":{"spec":{"containers":[{"name":"worker","image":"ghcr.io/cohort/cohort-agent-example:0.1.0","args":["--steps","5","--step-seconds","0.3","--exit-at-step","1","--exit-code","137"]}]}}}}' >/dev/null
if wait_for cjob/crashy '{.status.phase}' Failed 90; then
  expect "a gang failing again after maxRestarts (1) ends Failed: restarts and reason" \
    "$(field cjob/crashy '{.status.restarts} {.status.conditions[?(@.type=="Failed")].reason}')" \
    "1 MaxRestartsExceeded"
else
  fail "crashy: the job fails"
fi

# ---- 5. The job's token: the coordinator refuses a call without it (cohortctl exits 1
# naming the token) and answers one with it. Then a task in error at the coordinator (here
# reported through cohortctl, as a sidecar reports a GPU fault) restarts the gang; the
# operator learns it from the coordinator, so its calls carry the token too. (The workers
# registering at all, through their sidecars, is the sidecars' token at work.)
steps_job taskerror 2 30
if wait_for cjob/taskerror '{.status.phase}' Running 60 && wait_for cjob/taskerror '{.status.tasks.registered}' 2 30; then
  ip=$(k get pod taskerror-coordinator -o jsonpath='{.status.podIP}')
  token=$(token_file taskerror) || fail "taskerror: the Secret taskerror-token holds a token"
  "$BIN/cohortctl" --coordinator "$ip:8476" tasks >/dev/null 2>"$WORK/anonymous.err"
  rc=$?
  if [[ $rc == 1 ]] && grep -q token "$WORK/anonymous.err"; then
    pass "the coordinator refuses a call without the job's token ($(head -c 120 "$WORK/anonymous.err"))"
  else
    fail "taskerror: an anonymous call" "exit $rc: $(cat "$WORK/anonymous.err")"
  fi
  if out=$("$BIN/cohortctl" --coordinator "$ip:8476" --auth-token-file "$token" tasks 2>&1); then
    pass "the coordinator answers a call with the token of the Secret taskerror-token"
  else
    fail "taskerror: a call with the token" "$out"
  fi
  if out=$("$BIN/cohortctl" --coordinator "$ip:8476" --auth-token-file "$token" report-error --task sidecar/1 "injected: GPU 0 fell off the bus" 2>&1); then
    if wait_for cjob/taskerror '{.status.restarts}' 1 30; then
      msg=$(field cjob/taskerror '{.status.conditions[?(@.type=="Restarting")].reason}: {.status.conditions[?(@.type=="Restarting")].message}')
      if [[ "$msg" == TaskError:*"GPU 0 fell off the bus"* ]]; then
        pass "a task in error at the coordinator restarts the gang ($msg)"
      else
        fail "taskerror: reason" "$msg"
      fi
    else
      fail "taskerror: the gang restarts"
    fi
  else
    fail "taskerror: cohortctl report-error" "$out"
  fi
  k delete cjob taskerror --wait=false >/dev/null
else
  fail "taskerror: the job runs with 2 tasks registered"
fi

# ---- 6. The coordinator pod deleted mid-run: gang restart, then success.
steps_job coordloss 2 14
if wait_for cjob/coordloss '{.status.phase}' Running 60 && wait_for cjob/coordloss '{.status.tasks.registered}' 2 30; then
  k delete pod coordloss-coordinator --wait=false >/dev/null
  if wait_for cjob/coordloss '{.status.phase}' Succeeded 90; then
    got=$(field cjob/coordloss '{.status.restarts}')
    reason=$(k get events --field-selector involvedObject.name=coordloss,reason=GangRestart -o jsonpath='{.items[0].message}')
    if [[ "$got" == 1 && "$reason" == *"coordinator"* ]]; then
      pass "the coordinator pod deleted mid-run restarts the gang, which succeeds ($reason)"
    else
      fail "coordloss: restarts" "$got / $reason"
    fi
  else
    fail "coordloss: the job succeeds"
  fi
else
  fail "coordloss: the job runs"
fi

# ---- 7. The operator restarted mid-job: no duplicate pods, status stays right, the job's
# token stays (the same Secret) and the new operator's calls to the coordinator carry it.
steps_job survive 3 30
if wait_for cjob/survive '{.status.phase}' Running 60 && wait_for cjob/survive '{.status.tasks.registered}' 3 30; then
  before=$(pod_uids survive)
  secret_before=$(k get secret survive-token -o jsonpath='{.metadata.uid} {.data.token}')
  kill -KILL "$OP"
  wait "$OP" 2>/dev/null
  start_operator operator-2 --leader-elect=false --http-listen 127.0.0.1:0
  OP=$STARTED
  OP_PORT=$(http_port "$OP")
  # Reconciled: the new operator follows survive's coordinator (the only running job) and
  # has nothing left in its queue. Any duplicate pod would have been created by then.
  settled() {
    [[ "$(metric "$OP_PORT" cohort_operator_coordinators_watched)" == 1 &&
      "$(metric "$OP_PORT" cohort_operator_queue_depth)" == 0 ]]
  }
  until_true 30 settled || fail "survive: the restarted operator follows the job with an empty queue" \
    "$(tail -n 5 "$WORK/operator-2.log")"
  after=$(pod_uids survive)
  count=$(k get pods -l cohort.dev/job=survive --no-headers 2>/dev/null | wc -l)
  if [[ "$before" == "$after" && $count == 4 ]]; then
    pass "an operator restarted mid-job adopts the running pods (same 4 pods, same UIDs)"
  else
    fail "survive: pods changed" "before '$before' after '$after' ($count pods)"
  fi
  secret_after=$(k get secret survive-token -o jsonpath='{.metadata.uid} {.data.token}')
  if [[ -n "$secret_before" && "$secret_before" == "$secret_after" ]]; then
    pass "the restarted operator keeps the job's Secret survive-token (same UID, same token)"
  else
    fail "survive: the token Secret changed"
  fi
  # Without the token its snapshots would be refused and registered would stay 0.
  if wait_for cjob/survive '{.status.tasks.registered}' 3 15; then
    pass "the restarted operator reads the coordinator with the token from the Secret (3 registered)"
  else
    fail "survive: the restarted operator sees the coordinator's tasks"
  fi
  if wait_for cjob/survive '{.status.phase}' Succeeded 90 && [[ "$(field cjob/survive '{.status.restarts}')" == 0 ]]; then
    pass "the job still succeeds with restarts 0"
  else
    fail "survive: the job succeeds with restarts 0"
  fi
else
  fail "survive: the job runs"
fi

# ---- 8. Suspend and resume; the deadline.
steps_job pause 2 4 "" "  suspend: true"
if wait_for cjob/pause '{.status.phase}' Suspended 30; then
  n=$(k get pods -l cohort.dev/job=pause --no-headers 2>/dev/null | wc -l)
  k patch cjob pause --type merge -p '{"spec":{"suspend":false}}' >/dev/null
  if [[ $n == 0 ]] && wait_for cjob/pause '{.status.phase}' Succeeded 60; then
    pass "a suspended job has no pods and runs to success once resumed"
  else
    fail "pause: resume" "$n pods while suspended"
  fi
else
  fail "pause: the job is Suspended"
fi
steps_job slow 2 100 "" "  activeDeadlineSeconds: 4"
expect_failure slow DeadlineExceeded 40 "activeDeadlineSeconds fails the job"

# ---- 9. An invalid job is refused by the API server with a clear message.
out=$(k apply -f - 2>&1 <<'YAML'
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: invalid
spec:
  replicas: 0
  template: {spec: {containers: [{name: w, image: x}]}}
YAML
)
if [[ $? -ne 0 && "$out" == *"spec.replicas"* ]] && ! k get cjob invalid >/dev/null 2>&1; then
  pass "an invalid CoordinatedJob is refused: $(grep -o 'spec.replicas[^"]*' <<<"$out" | head -n 1)"
else
  fail "invalid CoordinatedJob" "$out"
fi

# ---- 10. The coordinator's durable state (spec.coordinator.state). A coordinator killed
# with SIGKILL restarts in place and keeps its keys (EmptyDir: volume Auto, the default, on a
# cluster without a default StorageClass, as this one is); on a
# PersistentVolumeClaim even its pod may be deleted. Neither restarts the gang. The workload
# is a sleep loop that never talks to the coordinator, so the restarts tested here are the
# coordinator's own.
coordinator_field() { field "pod/$1-coordinator" "$2"; }
worker_uids() { k get pods -l "cohort.dev/job=$1,cohort.dev/role=worker" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}'; }

sleeper durable
durable_workers=""
if wait_for cjob/durable '{.status.phase}' Running 60 && until_true 30 coordinator_ready durable; then
  durable_workers=$(worker_uids durable)
  qos=$(coordinator_field durable '{.status.qosClass} {.spec.restartPolicy}')
  [[ "$qos" == "Guaranteed Always" ]] && pass "the coordinator pod is Guaranteed and restarts in place ($qos)" ||
    fail "durable: the coordinator pod's QoS class and restart policy" "$qos"
  put=$(ctl durable kv put state/key before-the-kill 2>&1)
  pid=$(coordinator_pid durable)
  if [[ -n "$pid" ]] && kill -KILL "$pid"; then
    if wait_for cjob/durable '{.status.coordinatorRestarts}' 1 60; then
      got=$(field cjob/durable '{.status.restarts} {.status.phase}')/$(coordinator_field durable '{.status.containerStatuses[0].restartCount}')
      [[ "$got" == "0 Running/1" ]] &&
        pass "a coordinator SIGKILLed restarts in place: coordinatorRestarts 1, restarts 0, restartCount 1" ||
        fail "durable: after the kill" "restarts phase/restartCount: $got"
      sample=$(curl -s --max-time 2 "127.0.0.1:$OP_PORT/metrics" | grep '^cohort_operator_job_coordinator_restarts{.*cjob="durable"')
      [[ "$sample" == *" 1" ]] && pass "the operator's metrics say so: $sample" ||
        fail "durable: cohort_operator_job_coordinator_restarts" "'$sample'"
      message=$(event_message durable CoordinatorRestarted)
      [[ "$message" == *"restarted in place"* ]] && pass "the Event CoordinatorRestarted says so: $message" ||
        fail "durable: Event CoordinatorRestarted" "$message"
      if until_true 60 coordinator_ready durable &&
        got=$(ctl durable kv get state/key 2>&1) && [[ "$got" == before-the-kill ]]; then
        pass "a key put before the kill is still there after the restart"
      else
        fail "durable: the key after the restart" "put: $put; get: $got"
      fi
    else
      fail "durable: coordinatorRestarts becomes 1"
    fi
  else
    fail "durable: found the coordinator's process" "pid '$pid'"
  fi
else
  fail "durable: the job runs with its coordinator ready"
fi

sleeper onclaim "  coordinator:
    state: {volume: PersistentVolumeClaim, size: 64Mi}"
claim_bound() { [[ "$(k get pvc onclaim-coordinator-state -o jsonpath='{.status.phase}' 2>/dev/null)" == Bound ]]; }
if wait_for cjob/onclaim '{.status.phase}' Running 60 && until_true 30 coordinator_ready onclaim && until_true 30 claim_bound; then
  pv=$(k get pvc onclaim-coordinator-state -o jsonpath='{.spec.volumeName}')
  got=$(k get pvc onclaim-coordinator-state -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].controller} {.spec.accessModes[0]} {.spec.resources.requests.storage}')
  path=$("$KUBECTL" get pv "$pv" -o jsonpath='{.spec.hostPath.path}')
  if [[ "$got" == "CoordinatedJob/true ReadWriteOnce 64Mi" && -d "$path" ]]; then
    pass "the operator's claim onclaim-coordinator-state is owned by the job and bound to $pv ($path)"
  else
    fail "onclaim: the claim" "$got, volume $pv at '$path'"
  fi
  workers=$(worker_uids onclaim)
  put=$(ctl onclaim kv put state/key on-the-claim 2>&1)
  # What an earlier gang of the job would have left on the claim, and something else.
  mkdir -p "$path/20000101T000000Z-gang-0/inner" "$path/not-a-gang"
  echo old >"$path/20000101T000000Z-gang-0/inner/log-1"
  old=$(coordinator_field onclaim '{.metadata.uid}')
  k delete pod onclaim-coordinator --wait=false >/dev/null
  replaced() { local uid; uid=$(coordinator_field onclaim '{.metadata.uid}'); [[ -n "$uid" && "$uid" != "$old" ]]; }
  if until_true 60 replaced && until_true 60 coordinator_ready onclaim; then
    got=$(field cjob/onclaim '{.status.coordinatorRestarts} {.status.restarts}')/$(coordinator_field onclaim '{.spec.volumes[?(@.name=="state")].persistentVolumeClaim.claimName} {.metadata.labels.cohort\.dev/restart}')
    [[ "$got" == "1 0/onclaim-coordinator-state 0" ]] &&
      pass "a deleted coordinator pod is made again on the same claim: coordinatorRestarts 1, restarts 0" ||
      fail "onclaim: after the deletion" "coordinatorRestarts restarts/claim gang: $got"
    if got=$(ctl onclaim kv get state/key 2>&1) && [[ "$got" == on-the-claim ]]; then
      pass "a key put before the pod was deleted is there in the new pod"
    else
      fail "onclaim: the key in the new pod" "put: $put; get: $got"
    fi
    [[ "$(worker_uids onclaim)" == "$workers" ]] && pass "the workers kept running (same pods)" ||
      fail "onclaim: workers replaced" "before '$workers' after '$(worker_uids onclaim)'"
    left=$(cd "$path" && ls -d -- * | tr '\n' ' ')
    [[ ! -e "$path/20000101T000000Z-gang-0" && -d "$path/not-a-gang" && "$left" == *-gang-0\ * ]] &&
      pass "the new coordinator removed an earlier gang's state from the claim and kept the rest: $left" ||
      fail "onclaim: earlier gangs' state" "on the claim: $left"
    message=$(event_message onclaim CoordinatorRestarted)
    [[ "$message" == *"PersistentVolumeClaim onclaim-coordinator-state"* ]] &&
      pass "the Event CoordinatorRestarted says so: $message" || fail "onclaim: Event" "$message"
  else
    fail "onclaim: a new coordinator pod becomes ready"
  fi
else
  fail "onclaim: the job runs with its coordinator ready and its claim bound"
fi
# By now any gang restart the kill had caused would have happened.
if [[ -n "$durable_workers" && "$(worker_uids durable)" == "$durable_workers" &&
  "$(field cjob/durable '{.status.restarts} {.status.phase}')" == "0 Running" ]]; then
  pass "the killed coordinator's job kept its gang (same worker pods, restarts 0)"
else
  fail "durable: the gang" "before '$durable_workers' after '$(worker_uids durable)', $(field cjob/durable '{.status.restarts} {.status.phase}')"
fi
k delete cjob onclaim --wait=false >/dev/null

# volume Auto on a cluster without a default StorageClass (with one: state_volume_test.sh, run
# alone since such a class changes every job made meanwhile).
message=$(event_message durable StateVolume)
[[ "$(field cjob/durable '{.status.coordinatorStateVolume}')" == EmptyDir &&
  "$message" == *"the cluster has no default StorageClass"* ]] &&
  pass "without a default StorageClass, volume Auto is an emptyDir, and a Warning says why: $message" ||
  fail "durable: the state volume chosen" "$(field cjob/durable '{.status.coordinatorStateVolume}'): $message"
k delete cjob durable --wait=false >/dev/null

# ---- 11. Two operators: one leader; the standby takes over when it stops.
stop_operator "$OP"
start_operator leader-a --leader-elect=true --leader-election-namespace "$NS" --lease-duration 4s --renew-deadline 3s --retry-period 500ms --http-listen 127.0.0.1:0
A=$STARTED
A_PORT=$(http_port "$A")
leader_of() { metric "$1" cohort_operator_leader; }
a_leads() { [[ "$(leader_of "$A_PORT")" == 1 ]]; }
until_true 30 a_leads || echo "  leader-a did not take the lease: $(tail -n 5 "$WORK/leader-a.log")"
start_operator leader-b --leader-elect=true --leader-election-namespace "$NS" --lease-duration 4s --renew-deadline 3s --retry-period 500ms --http-listen 127.0.0.1:0
B=$STARTED
B_PORT=$(http_port "$B")
# B has tried the lease and found it held: its log says it stands by.
b_stands_by() { grep -q 'waiting for lease .* (standby)' "$WORK/leader-b.log"; }
until_true 30 b_stands_by || echo "  leader-b never stood by: $(tail -n 5 "$WORK/leader-b.log")"
la=$(leader_of "$A_PORT")
lb=$(leader_of "$B_PORT")
holder=$(k get lease cohort-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)
if [[ "$la" == 1 && "$lb" == 0 && "$holder" == *"_$A" ]]; then
  pass "two operators: one leader (lease holder $holder), one standby"
else
  fail "leader election" "a=$la b=$lb holder=$holder"
fi
kill -KILL "$A"  # no release: the standby must wait out the lease
wait "$A" 2>/dev/null
start=$SECONDS
steps_job failover 2 2
if wait_for cjob/failover '{.status.phase}' Succeeded 60; then
  holder=$(k get lease cohort-operator -o jsonpath='{.spec.holderIdentity}')
  if [[ "$holder" == *"_$B" && "$(leader_of "$B_PORT")" == 1 ]]; then
    pass "the standby took the lease after the leader died and ran a job ($((SECONDS - start)) s)"
  else
    fail "failover: holder" "$holder"
  fi
else
  fail "failover: the standby runs the job"
fi
stop_operator "$B"

finish
