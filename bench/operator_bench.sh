#!/usr/bin/env bash
# cohort-operator on the local cluster (tools/local-cluster), three figures:
#   1. apply -> every worker pod Running (and -> every task registered) for WORKERS (64, 256);
#   2. a worker SIGKILLed -> the restarted gang Running again (and registered);
#   3. the operator's memory (RSS) with JOBS (200) CoordinatedJobs of one worker each.
# Writes one JSON line per figure to bench/results/operator.jsonl. Brings the cluster up
# if needed (and down again if it did).
#   WORKERS="64 256" JOBS=200 bash bench/operator_bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KUBECTL=build/tools/bin/kubectl
BIN=build/bin
NS=operator-bench-$$
OUT=bench/results/operator.jsonl
WORK=$(mktemp -d)
OPERATOR=""
started=0
mkdir -p bench/results
: >"$OUT"

cleanup() {
  [[ -n "$OPERATOR" ]] && kill -TERM "$OPERATOR" 2>/dev/null && wait "$OPERATOR" 2>/dev/null
  "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
  # Wait for the pods to go so a next run starts from an idle node.
  for _ in $(seq 240); do
    [[ -z "$("$KUBECTL" get pods -n "$NS" --no-headers 2>/dev/null | head -n 1)" ]] && break
    sleep 1
  done
  [[ $started == 1 ]] && tools/local-cluster down >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { python3 -c "print(round($2 - $1, 3))"; }
emit() { echo "$1" | tee -a "$OUT"; }

tools/local-cluster status >/dev/null 2>&1 || started=1
# A gang of N workers and its coordinator on the one node: room for the largest (a cluster
# already up keeps its own, and says so).
most=0
for n in ${WORKERS-64}; do ((n > most)) && most=$n; done
export COHORT_LOCAL_NODE_PODS=$((most + 16 > 250 ? most + 16 : 250))
line=$(tools/local-cluster up | tail -n 1) || exit 1
export "${line?}"
pods=$("$KUBECTL" get node "${COHORT_LOCAL_NODE_NAME:-local}" -o jsonpath='{.status.allocatable.pods}')
if ((pods < most + 1)); then
  echo "operator bench: the node takes $pods pods, fewer than $((most + 1)) (a gang of $most and its coordinator); tools/local-cluster down first, so that it starts with COHORT_LOCAL_NODE_PODS=$COHORT_LOCAL_NODE_PODS"
  exit 1
fi
"$KUBECTL" apply --server-side -f charts/cohort/crds/ >/dev/null
"$KUBECTL" create namespace "$NS" >/dev/null
$BIN/cohort-operator --namespace "$NS" --leader-elect=false --workload-liveness none \
  --http-listen 127.0.0.1:0 --log-level info >"$WORK/operator.log" 2>&1 &
OPERATOR=$!
sleep 1

job() {  # job NAME REPLICAS
  "$KUBECTL" -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata: {name: $1}
spec:
  replicas: $2
  coordinator: {heartbeatTimeout: 60s}
  template:
    spec:
      terminationGracePeriodSeconds: 5
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          args: [--steps, "100000", --step-seconds, "1"]
YAML
}
# wait_until JOB JSONPATH VALUE TIMEOUT: prints the time it became true, or fails
wait_until() {
  local deadline=$((SECONDS + $4))
  while ((SECONDS < deadline)); do
    [[ "$("$KUBECTL" -n "$NS" get cjob "$1" -o jsonpath="$2" 2>/dev/null)" == "$3" ]] && { now; return 0; }
    sleep 0.1
  done
  echo "operator bench: $1 $2 never became $3" >&2
  return 1
}
workload_pid() {
  local d
  for d in /proc/[0-9]*; do
    [[ "$(readlink "$d/exe" 2>/dev/null)" == "$ROOT/$BIN/cohort-agent-example" ]] || continue
    tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "POD_NAME=$1" && { basename "$d"; return 0; }
  done
  return 1
}
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

for n in ${WORKERS-64}; do
  name=gang$n
  t0=$(now)
  job "$name" "$n"
  t_running=$(wait_until "$name" '{.status.phase}' Running 600) || exit 1
  t_registered=$(wait_until "$name" '{.status.tasks.registered}' "$n" 600) || exit 1
  emit "{\"scenario\": \"apply_to_running\", \"workers\": $n, \"seconds_to_all_pods_running\": $(elapsed "$t0" "$t_running"), \"seconds_to_all_tasks_registered\": $(elapsed "$t0" "$t_registered")}"

  sleep 5  # a gang at work, not one still starting up
  pid=$(workload_pid "$name-worker-1")
  t0=$(now)
  kill -KILL "$pid"
  wait_until "$name" '{.status.restarts}' 1 120 >/dev/null || exit 1
  # When the operator decided, from its own log (kubectl polling would add its own delay).
  t_restarting=$(python3 - "$WORK/operator.log" "$name" <<'PY'
import datetime, sys
for line in open(sys.argv[1]):
    if f"/{sys.argv[2]}: Running -> Restarting" in line:
        print(datetime.datetime.fromisoformat(line.split()[0]).timestamp())
        break
PY
)
  t_running=$(wait_until "$name" '{.status.phase}' Running 600) || exit 1
  t_registered=$(wait_until "$name" '{.status.tasks.registered}' "$n" 600) || exit 1
  # The operator's own timeline (status.lastFailure, to the millisecond): from its restart
  # decision to every task of the next gang registered, by recreation of every pod.
  recovered=""
  for _ in $(seq 100); do
    recovered=$("$KUBECTL" -n "$NS" get cjob "$name" -o jsonpath='{.status.lastFailure.decidedAt} {.status.lastFailure.recoveredAt}')
    [[ "$recovered" == *" "?* ]] && break
    sleep 0.1
  done
  decided_to_registered=$(python3 -c '
import datetime, sys
a, b = (datetime.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in sys.argv[1:3])
print(round((b - a).total_seconds(), 3))' $recovered 2>/dev/null || echo null)
  emit "{\"scenario\": \"gang_restart\", \"workers\": $n, \"seconds_to_restart_decided\": $(elapsed "$t0" "$t_restarting"), \"seconds_to_gang_running\": $(elapsed "$t0" "$t_running"), \"seconds_to_all_tasks_registered\": $(elapsed "$t0" "$t_registered"), \"decided_to_registered_seconds\": $decided_to_registered, \"restart\": \"recreate\", \"failure_settle_seconds\": 1}"
  "$KUBECTL" -n "$NS" delete cjob "$name" --wait=false >/dev/null
  for _ in $(seq 300); do
    [[ -z "$("$KUBECTL" -n "$NS" get pods --no-headers 2>/dev/null | head -n 1)" ]] && break
    sleep 1
  done
done

jobs=${JOBS:-200}
if ((jobs > 0)); then
  rss_idle=$(rss_mib "$OPERATOR")
  t0=$(now)
  applies=()
  for i in $(seq 1 "$jobs"); do
    job "small$i" 1 &
    applies+=($!)
    if ((${#applies[@]} == 20)); then wait "${applies[@]}"; applies=(); fi
  done
  ((${#applies[@]})) && wait "${applies[@]}"
  deadline=$((SECONDS + 900))
  while ((SECONDS < deadline)); do
    running=$("$KUBECTL" -n "$NS" get cjob -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$')
    ((running >= jobs)) && break
    sleep 2
  done
  t_all=$(now)
  sleep 10  # a few coordinator polls and resyncs at steady state
  cpu=$(ps -o %cpu= -p "$OPERATOR" | tr -d ' ')
  emit "{\"scenario\": \"operator_memory\", \"jobs\": $jobs, \"jobs_running\": $running, \"pods\": $((jobs * 2)), \"operator_rss_mib_idle\": $rss_idle, \"operator_rss_mib\": $(rss_mib "$OPERATOR"), \"operator_cpu_percent_lifetime\": ${cpu:-0}, \"seconds_until_all_running\": $(elapsed "$t0" "$t_all")}"
fi
python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()], indent=1))' \
  "$OUT" >bench/results/operator.json
