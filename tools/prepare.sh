#!/usr/bin/env bash
# make test's preparation in the background (tests/run_all.sh starts it first), so that a bare
# machine downloads while it compiles and compiles while its tests wait on sockets:
#   1. every venv of the suite (tools/venv.sh) and the local cluster's Go modules: network;
#   2. so that the stages' own work comes first (all of it runs at nice 10, in a scheduling
#      group at nice 10: tests/run_all.sh's background): the local cluster's binaries
#      (tools/local-cluster tools), which the e2e stage needs; then the ThreadSanitizer build
#      (make tsan-build: abseil and gRPC with TSan, then the tree), which the last stage
#      needs: on a bare machine it compiles while the e2e stage's tests wait on pods.
# One after another, not side by side: on a bare machine every core is busy from the first
# minute (the stages' compiles and tests, this, clang-tidy), and three lanes side by side
# took longer in all (63 min 27 s against 60 min 15 s; the summary's "machine" column was 2.0
# for every stage) than this order, in which the local cluster, which the e2e stage waits
# for, comes before the TSan build, which only the last stage needs.
# Every part takes the same lock as the stage that needs it, so a stage that comes to it
# while it is being made waits for it instead of making it twice. On a machine whose caches
# are warm it finds everything and ends in seconds. Each part's failure is said here and
# again, with its cause, by the stage that needs it.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
status=0
CHILD_CPU_FILE=$(mktemp)
trap 'rm -f "$CHILD_CPU_FILE"' EXIT
source tools/children_cpu.sh
# part COMMAND...: runs it; says how it ended, its wall time and the CPU time it took (a bare
# machine is CPU-bound throughout: the CPU seconds say what to make cheaper).
part() {
  local t=$SECONDS cpu
  children_cpu
  cpu=$CHILD_CPU
  "$@"
  local code=$?
  children_cpu
  if ((code == 0)); then
    echo "prepare: $* ($((SECONDS - t)) s, $((CHILD_CPU - cpu)) CPU-s)"
  else
    echo "prepare: FAILED: $* ($((SECONDS - t)) s, $((CHILD_CPU - cpu)) CPU-s)"
    status=1
  fi
}
part env COMPAT_VENVS_ONLY=1 bash tests/compat/run.sh
part bash tools/runtime-venv.sh --venv-only
part bash bench/setup.sh
part bash bench/setup_tasks.sh --venv-only
if command -v go >/dev/null; then
  part bash -c 'cd tools/localcluster && go mod download'
  part bash -c 'cd tools/localcluster/coscheduling && go mod download'
fi
if command -v go >/dev/null; then
  part tools/local-cluster tools --addons coscheduling
fi
part make --no-print-directory tsan-build
children_cpu
echo "prepare: done in $((SECONDS - start)) s, $CHILD_CPU CPU-s"
exit $status
