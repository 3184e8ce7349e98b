#!/usr/bin/env bash
# The real-client compatibility suite: installs the pinned clients into project-local
# virtual environments, then runs pytest on tests/compat against build/bin (or
# $COHORT_BIN_DIR). Idempotent: a venv whose requirements file has not changed since
# its last successful install is not touched again.
#
#   .venv/                      pytest + jax/jaxlib (tests/compat/requirements.txt)
#   .venv/clients/NAME/         one per tests/compat/clients/NAME.txt
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

if [[ ! -x "$COHORT_BIN_DIR/cohort-coordinator" ]]; then
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

# ensure_venv DIR PYTHON: creates DIR, or re-creates it for another interpreter version.
ensure_venv() {
  local dir=$1 python=$2
  local want
  want=$(py_version "$python")
  if [[ -x "$dir/bin/python" && "$(py_version "$dir/bin/python")" == "$want" ]]; then return; fi
  if [[ -e "$dir" ]]; then
    log "re-creating $dir for Python $want"
    rm -rf "$dir/bin" "$dir/lib" "$dir/lib64" "$dir/include" "$dir/pyvenv.cfg" "$dir"/.*.stamp
  fi
  "$python" -m venv "$dir"
}

# stamp_of DIR REQUIREMENTS: what a successful install of REQUIREMENTS into DIR leaves.
stamp_of() { echo "$(py_version "$1/bin/python") $(sha256sum "$2" | cut -d' ' -f1)"; }

# install DIR REQUIREMENTS STAMP: pip-installs unless STAMP says this exact file is in.
# Returns pip's status; its output is in $PIP_LOG.
PIP_LOG=$(mktemp)
trap 'rm -f "$PIP_LOG"' EXIT
install() {
  local dir=$1 req=$2 stamp=$3
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$(stamp_of "$dir" "$req")" ]]; then
    log "$dir: up to date with $req"
    return 0
  fi
  log "$dir: installing $req"
  rm -f "$stamp"
  if timeout 1800 "$dir/bin/python" -m pip install --disable-pip-version-check -q -r "$req" \
      >"$PIP_LOG" 2>&1; then
    stamp_of "$dir" "$req" >"$stamp"
    return 0
  fi
  cat "$PIP_LOG" >&2
  return 1
}

pip_reason() {
  local line
  line=$(grep -E 'ERROR|error:' "$PIP_LOG" | head -n 2 | tr '\n' ' ' | cut -c1-400)
  echo "pip install failed: ${line:-see the log of tests/compat/run.sh}"
}

# install_or_fail DIR REQUIREMENTS STAMP WHAT: installs, or stops the run saying why.
install_or_fail() {
  if ! install "$1" "$2" "$3"; then
    log "$4 could not be installed into $1 from $2: $(pip_reason)." \
      "The suite needs every client; fix the cause above (network, disk, Python version) and run again"
    exit 1
  fi
}

# The main venv: pytest and the newest jax/jaxlib.
ensure_venv "$VENV" "$PYTHON"
rm -f "$VENV/main.skip"  # left by older versions of this script
install_or_fail "$VENV" "$COMPAT/requirements.txt" "$VENV/.compat-main.stamp" "pytest, jax and jaxlib"

# One venv per extra client.
mkdir -p "$CLIENTS"
for req in "$COMPAT"/clients/*.txt; do
  name=$(basename "$req" .txt)
  dir="$CLIENTS/$name"
  rm -f "$CLIENTS/$name.skip"
  if [[ "$name" == tensorflow* && ! -f "$dir/.compat.stamp" ]]; then
    avail_kb=$(df --output=avail -k . | tail -n 1 | tr -d ' ')
    if (( avail_kb < 4 * 1024 * 1024 )); then
      log "$name needs about 2 GB of disk to install, and $((avail_kb / 1024)) MB are free here"
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
  ensure_venv "$dir" "$python" || { log "$name: could not create a venv with $python"; exit 1; }
  install_or_fail "$dir" "$req" "$dir/.compat.stamp" "$name"
done

log "running pytest on $COMPAT against $COHORT_BIN_DIR/cohort-coordinator"
set +e
"$VENV/bin/python" -m pytest "$COMPAT" -p no:cacheprovider -rsx -v --no-skips "$@"
status=$?
set -e
exit "$status"
