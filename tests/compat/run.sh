#!/usr/bin/env bash
# The real-client compatibility suite: installs the pinned clients into project-local
# virtual environments, then runs pytest on tests/compat against build/bin (or
# $COHORT_BIN_DIR). Idempotent: each venv is made once per interpreter version and
# requirements file, in the machine's cache (tools/venv.sh), and linked into the clone:
#
#   .venv                       pytest + jax/jaxlib (tests/compat/requirements.txt)
#   .venv/clients/NAME          one per tests/compat/clients/NAME.txt
#
# Every client is required: one that cannot be installed fails the run with pip's error
# and what to do, and pytest runs with --no-skips, so a skipped test fails it too.
#
# Environment: COHORT_BIN_DIR (default build/bin), COMPAT_PYTHON (interpreter for the
# venvs). Extra arguments go to pytest (-k to run some tests while working on them).
set -euo pipefail
cd "$(dirname "$0")/../.."

COMPAT=tests/compat
VENV=.venv
CLIENTS="$VENV/clients"
export COHORT_BIN_DIR="${COHORT_BIN_DIR:-build/bin}"

log() { echo "compat: $*" >&2; }

# COMPAT_VENVS_ONLY=1: only make the venvs (make test does it in the background while it
# builds, tools/prepare.sh).
if [[ -z "${COMPAT_VENVS_ONLY:-}" && ! -x "$COHORT_BIN_DIR/cohort-coordinator" ]]; then
  log "$COHORT_BIN_DIR/cohort-coordinator not found: build it first (make build) or set COHORT_BIN_DIR"
  exit 1
fi

source tools/find_python.sh

# jax/jaxlib 0.11 and later need Python >= 3.12; Debian 12's python3 is 3.11. Use a
# 3.12 where one is installed (pyenv's included), else python3 and requirements.txt's
# fallback pins.
if [[ -n "${COMPAT_PYTHON:-}" ]]; then
  PYTHON=$COMPAT_PYTHON
elif ! PYTHON=$(find_python 3.12) && ! PYTHON=$(find_python 3.13); then
  PYTHON=python3
fi
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  log "$PYTHON cannot create venvs (Debian: apt-get install python3-venv)"
  exit 1
fi
py_version() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true; }
PY_VERSION=$(py_version "$PYTHON")
log "using $PYTHON (Python $PY_VERSION)"

# The venvs are made once per interpreter version and requirements file in the machine's
# cache (tools/venv.sh) and linked here: .venv, then .venv/clients/NAME.
source tools/venv.sh

# install_or_fail LINK PYTHON REQUIREMENTS WHAT: links the venv, or stops the run saying why.
install_or_fail() {
  if ! cohort_venv "$1" "$2" "$3"; then
    tail -n 20 "$COHORT_VENV_LOG" >&2
    local line
    line=$(grep -E 'ERROR|error:' "$COHORT_VENV_LOG" | head -n 2 | tr '\n' ' ' | cut -c1-400)
    log "$4 could not be installed into $1 from $3: pip install failed: ${line:-see $COHORT_VENV_LOG}." \
      "The suite needs every client; fix the cause above (network, disk, Python version) and run again"
    exit 1
  fi
}

# The main venv: pytest and the newest jax/jaxlib.
install_or_fail "$VENV" "$PYTHON" "$COMPAT/requirements.txt" "pytest, jax and jaxlib"

# One venv per extra client.
mkdir -p "$CLIENTS"
for req in "$COMPAT"/clients/*.txt; do
  name=$(basename "$req" .txt)
  dir="$CLIENTS/$name"
  if [[ "$name" == tensorflow* && ! -f "$(cohort_venv_path "$PYTHON" "$req")/.complete" ]]; then
    mkdir -p "$COHORT_CACHE"
    avail_kb=$(df --output=avail -k "$COHORT_CACHE" | tail -n 1 | tr -d ' ')
    if (( avail_kb < 4 * 1024 * 1024 )); then
      log "$name needs about 2 GB of disk to install, and $((avail_kb / 1024)) MB are free in $COHORT_CACHE"
      exit 1
    fi
  fi
  # A "# python: X.Y" line in the requirements file asks for that interpreter.
  python=$PYTHON
  want=$(sed -n 's/^# python: *\([0-9.]*\).*/\1/p' "$req" | head -n 1)
  if [[ -n "$want" ]] && ! python=$(find_python "$want"); then
    log "$name needs Python $want (with venv), and none was found on PATH, in pyenv or in /usr/bin"
    exit 1
  fi
  install_or_fail "$dir" "$python" "$req" "$name"
done
if [[ -n "${COMPAT_VENVS_ONLY:-}" ]]; then
  log "every venv is ready"
  exit 0
fi

log "running pytest on $COMPAT against $COHORT_BIN_DIR/cohort-coordinator"
set +e
"$VENV/bin/python" -m pytest "$COMPAT" -p no:cacheprovider -rsx -v --no-skips "$@"
status=$?
set -e
exit "$status"
