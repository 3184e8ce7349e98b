#!/usr/bin/env bash
# The venv of bench/tasks_bench.py (.venv-bench-tasks): Ray, and the cohort package
# pip-installed from python/. A venv whose requirements did not change is not touched again;
# the package is installed afresh each time (its sources may have changed).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-bench-tasks
REQ=bench/requirements-tasks.txt
if [[ ! -x $VENV/bin/python ]]; then python3 -m venv "$VENV"; fi
stamp=$VENV/.requirements.stamp
if ! cmp -s "$REQ" "$stamp" 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$stamp"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./python
rm -rf python/build python/*.egg-info
