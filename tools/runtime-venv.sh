#!/usr/bin/env bash
# .venv/runtime: the task runtime's Python package as a user installs it (`pip install
# python/`, its protocol modules generated then), with the pinned test requirements. A venv
# whose requirements did not change is not touched again; the package is installed afresh
# each time (its sources may have changed). Used by tests/python/run.sh, make demo-tasks and
# bench/tasks_k8s_bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv/runtime
REQ=python/requirements-test.txt
if [[ ! -x $VENV/bin/python ]]; then python3 -m venv "$VENV"; fi
stamp=$VENV/.requirements.stamp
if ! cmp -s "$REQ" "$stamp" 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$stamp"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./python
rm -rf python/build python/*.egg-info
