#!/usr/bin/env bash
# Smoke run of the benchmark harness (part of make test): every scenario with tiny N against
# cohort and every anchor available here, then a check that the JSON is well-formed and
# complete (tests/bench/check_results.py) and that the report renders from it. Figures are
# not judged. Runs against $COHORT_BIN_DIR (default build/bin).
#
# Anchors: jaxlib and torch come from .venv-bench (make bench) or else .venv (the compat
# suite's jaxlib); etcd is installed if missing (bench/setup.sh --etcd). An anchor that is
# not available is skipped, and the check accepts it only with its recorded reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${COHORT_BIN_DIR:-build/bin}
BUILD=$(dirname "$BIN")
log() { echo "bench smoke: $*" >&2; }

for b in cohort-coordinator cohort-loadgen cohort-failure-bench cohort-agent-example cohort-sidecar; do
  [[ -x $BIN/$b ]] || { log "$BIN/$b not found: build first"; exit 1; }
done
bash bench/setup.sh --etcd || log "etcd could not be installed; the etcd anchor is skipped"

PY=python3
for candidate in .venv-bench/bin/python .venv/bin/python; do
  if [[ -x $candidate ]]; then PY=$candidate; break; fi
done
OUT=$(mktemp -d /tmp/cohort-bench-smoke.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
ARGS=(--profile smoke --bin-dir "$BIN" --python "$PY" --out "$OUT/results"
      --fake-nvml "$BUILD/tests/sidecar/gpu/fake_nvml/libnvidia-ml.so.1")
start=$(date +%s)
if unshare --net true 2>/dev/null; then
  unshare --net env COHORT_BENCH_NETNS=private bash -c \
    'ip link set lo up && exec python3 bench/run.py "$@"' _ "${ARGS[@]}"
else
  python3 bench/run.py "${ARGS[@]}"
fi
log "harness ran in $(( $(date +%s) - start )) s"
python3 tests/bench/check_results.py "$OUT/results" --profile smoke
"$PY" bench/report.py --results "$OUT/results" --out "$OUT/BENCHMARKS.md" --plots "$OUT/plots" \
  >/dev/null
grep -q "^## Goals" "$OUT/BENCHMARKS.md"
echo "bench smoke: 1 passed, 0 failed"
