#!/usr/bin/env bash
# make soak: the clients' venvs (tests/compat/run.sh makes them, the same the compat suite
# uses), then tests/soak/soak.py with the arguments given (SOAK_COMMAND: how the report
# names the command). Needs root, or unprivileged user
# namespaces, for the state volume's private tmpfs (unshare).
set -euo pipefail
cd "$(dirname "$0")/../.."
export COHORT_BIN_DIR="${COHORT_BIN_DIR:-build/bin}"
COMPAT_VENVS_ONLY=1 bash tests/compat/run.sh
exec .venv/bin/python tests/soak/soak.py "$@"
