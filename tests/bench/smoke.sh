#!/usr/bin/env bash
# Smoke run of the benchmark harness (part of make test): every scenario with tiny N against
# cohort and every anchor (jaxlib's service, etcd, torch's TCPStore), then a check that the
# JSON is well-formed and complete (tests/bench/check_results.py) and that the report renders
# from it. Figures are not judged. Runs against $COHORT_BIN_DIR (default build/bin).
#
# bench/setup.sh installs what the anchors need (Debian's etcd, .venv-bench with jaxlib,
# matplotlib and torch); an anchor that cannot run fails the test (run.py --strict), with
# what to install.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${COHORT_BIN_DIR:-build/bin}
BUILD=$(dirname "$BIN")
log() { echo "bench smoke: $*" >&2; }

for b in cohort-coordinator cohort-loadgen cohort-failure-bench cohort-agent-example cohort-sidecar; do
  [[ -x $BIN/$b ]] || { log "$BIN/$b not found: build first"; exit 1; }
done
if [[ "${BENCH_SKIP_TORCH:-0}" == 1 ]]; then
  log "BENCH_SKIP_TORCH=1 leaves the TCPStore anchor out, and this test runs every anchor"
  exit 1
fi
bash bench/setup.sh || { log "bench/setup.sh could not install the anchors (above)"; exit 1; }
PY=.venv-bench/bin/python
OUT=$(mktemp -d /tmp/cohort-bench-smoke.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
ARGS=(--profile smoke --strict --bin-dir "$BIN" --python "$PY" --out "$OUT/results"
      --fake-nvml "$BUILD/tests/sidecar/gpu/fake_nvml/libnvidia-ml.so.1")
start=$(date +%s)
if unshare --net true 2>/dev/null; then
  unshare --net env COHORT_BENCH_NETNS=private bash -c \
    'ip link set lo up && exec python3 bench/run.py "$@"' _ "${ARGS[@]}"
else
  python3 bench/run.py "${ARGS[@]}"
fi
log "harness ran in $(( $(date +%s) - start )) s"
python3 tests/bench/check_results.py "$OUT/results" --profile smoke --no-skips
"$PY" bench/report.py --results "$OUT/results" --out "$OUT/BENCHMARKS.md" --plots "$OUT/plots" \
  >/dev/null
grep -q "^## Goals" "$OUT/BENCHMARKS.md" || { log "the report has no Goals section"; exit 1; }
log "the report renders from the results"

# The task runtime beside Ray (bench/tasks_bench.py), tiny: every workload on both systems.
bash bench/setup_tasks.sh || { log "bench/setup_tasks.sh could not install Ray and the package"; exit 1; }
if .venv-bench-tasks/bin/python bench/tasks_bench.py --profile smoke --bin-dir "$BIN" \
    --out "$OUT/results/tasks.json"; then
  "$PY" bench/report.py --results "$OUT/results" --out "$OUT/BENCHMARKS.md" --plots "$OUT/plots" \
    >/dev/null
  grep -q "^## 9. Task runtime beside Ray" "$OUT/BENCHMARKS.md" \
    || { log "the report has no task runtime section"; exit 1; }
  echo "tasks bench: 1 passed, 0 failed"
else
  echo "tasks bench: 0 passed, 1 failed"
  exit 1
fi
