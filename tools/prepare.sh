#!/usr/bin/env bash
# make test's preparation in the background (tests/run_all.sh starts it first): what waits on
# the network more than on the CPU, so that a bare machine downloads while it compiles. Makes
# every venv of the suite (tools/venv.sh: each waits for the other's lock, so a stage that
# needs one while it is being made just waits) and downloads the local cluster's Go modules.
# On a machine whose caches are warm it finds everything and ends in seconds. Each part's
# failure is said here and again, with its cause, by the stage that needs it.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
status=0
part() {
  local t=$SECONDS
  if "$@"; then
    echo "prepare: $* ($((SECONDS - t)) s)"
  else
    echo "prepare: FAILED: $* ($((SECONDS - t)) s)"
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
echo "prepare: done in $((SECONDS - start)) s"
exit $status
