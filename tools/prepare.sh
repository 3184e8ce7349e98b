#!/usr/bin/env bash
# make test's preparation in the background (tests/run_all.sh starts it first, at nice 10 in a
# scheduling group at nice 10, so that the stages' own work comes first), so that a bare
# machine downloads while it compiles and compiles while its tests wait on sockets. Three
# lanes run side by side, each in order:
#   venvs    every venv of the suite (tools/venv.sh): network and unpacking;
#   cluster  the local cluster's Go modules, then its binaries (tools/local-cluster tools),
#            which the e2e stage needs;
#   tsan     the ThreadSanitizer build (make tsan-build: abseil and gRPC with TSan, then the
#            tree), which the last stage needs.
# One after another, they left the machine part idle whenever the one running was serial
# (pip, Go's linker, cmake), and the TSan build started only once Kubernetes was built; side
# by side, a bare machine's cores stay busy until the last stage.
# Every part takes the same lock as the stage that needs it, so a stage that comes to it
# while it is being made waits for it instead of making it twice. On a machine whose caches
# are warm it finds everything and ends in seconds. Each part's failure is said here and
# again, with its cause, by the stage that needs it.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
# part LANE COMMAND...: runs COMMAND; says how it ended and how long it took; returns its status.
part() {
  local lane=$1 t=$SECONDS
  shift
  if "$@"; then
    echo "prepare: [$lane] $* ($((SECONDS - t)) s)"
  else
    echo "prepare: [$lane] FAILED: $* ($((SECONDS - t)) s)"
    return 1
  fi
}
venvs() {
  local status=0
  part venvs env COMPAT_VENVS_ONLY=1 bash tests/compat/run.sh || status=1
  part venvs bash tools/runtime-venv.sh --venv-only || status=1
  part venvs bash bench/setup.sh || status=1
  part venvs bash bench/setup_tasks.sh --venv-only || status=1
  return $status
}
cluster() {
  command -v go >/dev/null || { echo "prepare: [cluster] no Go: the e2e stage will say so"; return 0; }
  part cluster bash -c 'cd tools/localcluster && go mod download' &&
    part cluster bash -c 'cd tools/localcluster/coscheduling && go mod download' &&
    part cluster tools/local-cluster tools --addons coscheduling
}
tsan() {
  part tsan make --no-print-directory tsan-build
}
venvs &
venvs_pid=$!
cluster &
cluster_pid=$!
tsan &
tsan_pid=$!
status=0
for pid in $venvs_pid $cluster_pid $tsan_pid; do
  wait "$pid" || status=1
done
echo "prepare: done in $((SECONDS - start)) s"
exit $status
