#!/usr/bin/env bash
# The demo job: a coordinator and four local tasks (examples/agent, on the cohort agent)
# that register, exchange addresses through the key-value store, watch a key, pass
# barriers and shut down. Everything runs on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
TASKS=${TASKS:-4}
GRPC=${GRPC_PORT:-8476}
HTTP=${HTTP_PORT:-8477}
LOG=$(mktemp -t cohort-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n "${COORD:-}" ]] && kill -TERM "$COORD" 2>/dev/null && wait "$COORD" 2>/dev/null || true
}
trap cleanup EXIT

echo "== starting cohort-coordinator for job worker=$TASKS on 127.0.0.1:$GRPC (metrics on :$HTTP)"
$BIN/cohort-coordinator --listen 127.0.0.1:$GRPC --http-listen 127.0.0.1:$HTTP \
  --job worker=$TASKS --heartbeat-timeout 5s --shutdown-barrier-timeout 30s >"$LOG" 2>&1 &
COORD=$!
for _ in $(seq 50); do curl -sf 127.0.0.1:$HTTP/readyz >/dev/null && break; sleep 0.1; done
curl -sf 127.0.0.1:$HTTP/readyz >/dev/null || { cat "$LOG"; echo "coordinator did not start"; exit 1; }

echo "== launching $TASKS tasks"
for i in $(seq 0 $((TASKS - 1))); do
  $BIN/cohort-agent-example --coordinator 127.0.0.1:$GRPC --task "$i" --num-tasks "$TASKS" &
  pids+=($!)
  sleep 0.3
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()

echo "== what cohortctl shows of the finished job"
$BIN/cohortctl --coordinator 127.0.0.1:$GRPC status || true
$BIN/cohortctl --coordinator 127.0.0.1:$GRPC kv ls demo || true
echo "== what the coordinator saw (from http://127.0.0.1:$HTTP/metrics)"
curl -s 127.0.0.1:$HTTP/metrics | grep -E '^cohort_coordinator_(tasks|barriers_total|kv_keys|cluster_registered|rpcs_total\{protocol="tensorflow",method="(RegisterTask|Barrier)")' || true
echo "== coordinator log"
cat "$LOG"
rm -f "$LOG"
if [[ $status -ne 0 ]]; then echo "demo FAILED"; exit 1; fi
echo "== demo finished: every task registered, exchanged keys, passed its barriers and shut down"
