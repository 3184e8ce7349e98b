#!/usr/bin/env bash
# The full benchmark run (`make bench`): installs the anchors (bench/setup.sh), builds an
# optimized build in build-bench/, runs every scenario against cohort and the anchors
# (bench/run.py, in a private network namespace when the machine allows one: loopback only,
# and no name lookups leave the machine), then the task runtime beside Ray
# (bench/tasks_bench.py), writes bench/results/*.json, then regenerates
# BENCHMARKS.md and its plots (bench/report.py).
#
# Environment: BENCH_BUILD (default build-bench), BENCH_SKIP_TORCH=1, BENCH_SKIP_SETUP=1.
# Extra arguments go to bench/run.py (for example --scenarios kv --systems cohort,etcd).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BENCH_BUILD:-build-bench}
log() { echo "bench: $*" >&2; }

[[ "${BENCH_SKIP_SETUP:-0}" == 1 ]] || bash bench/setup.sh

if [[ ! -f $BUILD/build.ninja ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD" cohort-coordinator cohort-loadgen cohort-failure-bench cohort-agent-example \
  cohort-sidecar cohort-restart-bench fake_nvml

PY=.venv-bench/bin/python
ARGS=(--bin-dir "$BUILD/bin" --python "$PY"
      --fake-nvml "$BUILD/tests/sidecar/gpu/fake_nvml/libnvidia-ml.so.1" "$@")
# More file descriptors for 16,000 simulated tasks, as far as the hard limit allows.
ulimit -n "$(ulimit -Hn)" || true
if unshare --net true 2>/dev/null; then
  log "running in a private network namespace (loopback only)"
  unshare --net env COHORT_BENCH_NETNS=private bash -c \
    'ip link set lo up && exec "$0" bench/run.py "$@"' "$PY" "${ARGS[@]}"
else
  log "no private network namespace here: running on the host's loopback"
  "$PY" bench/run.py "${ARGS[@]}"
fi
# The task runtime beside Ray (its own venv: Ray and the cohort package).
ninja -C "$BUILD" cohort-objstore cohort-worker
bash bench/setup_tasks.sh
.venv-bench-tasks/bin/python bench/tasks_bench.py --profile full --bin-dir "$BUILD/bin" \
  --systems cohort,cohort-durable,ray --out bench/results/tasks.json
# The same runtime on the local cluster, beside Ray.
bash tools/runtime-venv.sh
bash bench/tasks_k8s_bench.sh
"$PY" bench/report.py
