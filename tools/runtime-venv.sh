#!/usr/bin/env bash
# .venv/runtime: the task runtime's Python package as a user installs it (`pip install
# python/`, its protocol modules generated then), with the pinned test requirements. The venv
# is made once per requirements file in the machine's cache (tools/venv.sh) and linked here;
# the package is installed afresh each time (its sources may have changed). Used by
# tests/python/run.sh, make demo-tasks and bench/tasks_k8s_bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh
VENV=.venv/runtime
if ! cohort_venv "$VENV" python3 python/requirements-test.txt; then
  tail -n 20 "$COHORT_VENV_LOG" >&2
  echo "runtime venv: python/requirements-test.txt could not be installed (log: $COHORT_VENV_LOG)" >&2
  exit 1
fi
# --venv-only: only the venv (make test makes it in the background while it builds).
[[ "${1:-}" == --venv-only ]] && exit 0
"$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./python
rm -rf python/build python/*.egg-info
