#!/usr/bin/env bash
# Coordinator benchmarks: each scenario against a fresh coordinator on loopback.
# Prints one JSON line per run and writes them to bench/results/coordinator.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin
PORT=${PORT:-18476}
mkdir -p bench/results
OUT=bench/results/coordinator.jsonl
: >"$OUT"

run() {  # run TASKS SCENARIO [loadgen args...]
  local tasks=$1 scenario=$2; shift 2
  $BIN/cohort-coordinator --listen 127.0.0.1:$PORT --http-listen "" --job worker="$tasks" \
    --heartbeat-timeout 10m --register-timeout 10m --log-level warn &
  local pid=$!
  sleep 0.5
  $BIN/cohort-loadgen --coordinator 127.0.0.1:$PORT --tasks "$tasks" --pid $pid "$scenario" "$@" | tee -a "$OUT"
  kill -TERM $pid; wait $pid || true
}

for n in ${REGISTER_TASKS:-1000 4000}; do run "$n" register; done
run 64 kv --clients 64 --seconds 5 --value-bytes 100
run "${MEMORY_TASKS:-4000}" memory

# Failure detection (sidecar and heartbeat paths) and the sidecar's cost on 8 fake GPUs.
FAILURES=bench/results/failure.jsonl
$BIN/cohort-failure-bench --bin-dir $BIN \
  --fake-nvml build/tests/sidecar/gpu/fake_nvml/libnvidia-ml.so.1 \
  --gpu-config tests/sidecar/gpu/testdata/eight_gpus.json \
  --rounds "${FAILURE_ROUNDS:-5}" --seconds "${RESOURCE_SECONDS:-60}" | tee "$FAILURES"
