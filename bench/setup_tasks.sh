#!/usr/bin/env bash
# The venv of bench/tasks_bench.py (.venv-bench-tasks): Ray, and the cohort package
# pip-installed from python/. The venv is made once per requirements file in the machine's
# cache (tools/venv.sh) and linked here; the package is installed afresh each time (its
# sources may have changed).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh
VENV=.venv-bench-tasks
if ! cohort_venv "$VENV" python3 bench/requirements-tasks.txt; then
  tail -n 20 "$COHORT_VENV_LOG" >&2
  echo "bench setup: Ray could not be installed from bench/requirements-tasks.txt (log: $COHORT_VENV_LOG)" >&2
  exit 1
fi
# --venv-only: only the venv (make test makes it in the background while it builds).
[[ "${1:-}" == --venv-only ]] && exit 0
"$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./python
rm -rf python/build python/*.egg-info
