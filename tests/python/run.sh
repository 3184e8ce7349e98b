#!/usr/bin/env bash
# The task runtime's Python package against real processes (tests/python): installs the
# pinned test requirements into .venv/runtime, installs python/ into it with pip (the
# contract: `pip install python/` works; its protocol modules are generated then), and runs
# pytest against build/bin (or $COHORT_BIN_DIR). A venv whose requirements did not change is
# not touched again. pytest runs with --no-skips (tests/python/conftest.py), so a skipped
# test fails the run, as in tests/compat. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.venv/runtime
export COHORT_BIN_DIR="${COHORT_BIN_DIR:-build/bin}"
for p in cohort-coordinator cohort-objstore cohort-worker; do
  if [[ ! -x "$COHORT_BIN_DIR/$p" ]]; then
    echo "python-test: $COHORT_BIN_DIR/$p not found: make build first" >&2
    exit 1
  fi
done
bash tools/runtime-venv.sh
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -rs --no-skips tests/python "$@"
