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
# What a run covers depends on the interpreters the machine has (jaxlib 0.11 and later need
# Python >= 3.12). The log says it: each venv's interpreter; a NOTE when the main venv falls
# back to a Python older than 3.12, naming the jaxlib versions that leaves out; and, before
# and after pytest, one line per venv of what it tested, read from the venv's installed
# distributions, such as
#   compat: covered jaxlib 0.10.2, jax 0.10.2 (Python 3.11.2, .venv)
#
# Environment: COHORT_BIN_DIR (default build/bin), COMPAT_PYTHON (interpreter for the
# venvs), COMPAT_TESTS (what pytest runs, default tests/compat; make soak-smoke names its one
# file). Extra arguments go to pytest (-k to run some tests while working on them).
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
source tools/venv.sh

py_version() { cohort_py_version "$1" 2>/dev/null || true; }
# install_hint X.Y: what to install for an interpreter of that version that makes venvs.
install_hint() {
  echo "install Python $1 with its venv module (Debian: apt-get install python$1 python$1-venv," \
    "where the release has them, or through pyenv: pyenv install $1)"
}

# jax/jaxlib 0.11 and later need Python >= 3.12; Debian 12's python3 is 3.11. Use a
# 3.12 where one is installed (pyenv's included), else python3 and requirements.txt's
# fallback pins, which the NOTE below spells out.
FALLBACK=0
if [[ -n "${COMPAT_PYTHON:-}" ]]; then
  PYTHON=$COMPAT_PYTHON
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    log "COMPAT_PYTHON=$PYTHON: no such interpreter on this machine. Set COMPAT_PYTHON to one" \
      "that exists, or unset it (then Python 3.12 where found, else python3); for 3.12: $(install_hint 3.12)"
    exit 1
  fi
elif ! PYTHON=$(find_python 3.12) && ! PYTHON=$(find_python 3.13); then
  PYTHON=python3
  FALLBACK=1
fi
PY_VERSION=$(py_version "$PYTHON")
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  minor=${PY_VERSION%.*}
  log "$PYTHON (Python ${PY_VERSION:-of unknown version}) cannot create venvs: $(install_hint "${minor:-3}")"
  exit 1
fi
log "$VENV: interpreter $(command -v "$PYTHON") (Python $PY_VERSION)"

# Below 3.12, requirements.txt's markers pick its fallback jax/jaxlib: say so, with the pins.
pin_of() {  # pin_of '>=' or '<': requirements.txt's jaxlib pin under that python_version marker
  sed -n "s/^jaxlib==\([^ ;]*\) *; *python_version *$1.*/\1/p" "$COMPAT/requirements.txt" | head -n 1
}
NOTE=""
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  if ((FALLBACK)); then
    why="no Python 3.12 or 3.13 was found (on PATH, in pyenv or in /usr/bin), so $VENV uses python3, Python $PY_VERSION"
  else
    why="COMPAT_PYTHON=$COMPAT_PYTHON is Python $PY_VERSION"
  fi
  NOTE="NOTE: $why. requirements.txt therefore installs jax/jaxlib $(pin_of '<') instead of $(pin_of '>='):"
  NOTE+=" jaxlib 0.11 and later ($(pin_of '>=') included) are NOT covered by this run."
  NOTE+=" To cover them: $(install_hint 3.12), or set COMPAT_PYTHON to a Python >= 3.12"
  log "$NOTE"
fi

# The venvs are made once per interpreter version and requirements file in the machine's
# cache (tools/venv.sh) and linked here: .venv, then .venv/clients/NAME.

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
  # The big ones: TensorFlow (about 2 GB installed) and torch (about 5 GB with its CUDA
  # libraries), refused early with the figures rather than halfway through pip.
  need_gb=0
  case "$name" in tensorflow*) need_gb=4 ;; torch*) need_gb=7 ;; esac
  if (( need_gb > 0 )) && [[ ! -f "$(cohort_venv_path "$PYTHON" "$req")/.complete" ]]; then
    mkdir -p "$COHORT_CACHE"
    avail_kb=$(df --output=avail -k "$COHORT_CACHE" | tail -n 1 | tr -d ' ')
    if (( avail_kb < need_gb * 1024 * 1024 )); then
      log "$name needs about $((need_gb - 2)) GB of disk to install, and $((avail_kb / 1024)) MB are free in $COHORT_CACHE"
      exit 1
    fi
  fi
  # A "# python: X.Y" line in the requirements file asks for that interpreter.
  python=$PYTHON
  want=$(sed -n 's/^# python: *\([0-9.]*\).*/\1/p' "$req" | head -n 1)
  if [[ -n "$want" ]] && ! python=$(find_python "$want"); then
    log "$name ($req) needs Python $want, and none that can make venvs was found on PATH," \
      "in pyenv or in /usr/bin: $(install_hint "$want")"
    exit 1
  fi
  log "$dir: interpreter $(command -v "$python") (Python $(py_version "$python"))"
  install_or_fail "$dir" "$python" "$req" "$name"
done

# What each venv holds, read from its installed distributions (not by importing jax, which
# is slow and can fail for reasons of its own): one line per venv, before and after pytest.
covered() {
  local dir=$1 what
  what=$("$dir/bin/python" - 2>/dev/null <<'PY'
import importlib.metadata as m
found = []
for dist in ("jaxlib", "jax", "tensorflow-cpu", "tensorflow", "torch"):
    try:
        found.append(f"{dist} {m.version(dist)}")
    except m.PackageNotFoundError:
        pass
print(", ".join(found) or "no jaxlib, jax, TensorFlow or torch")
PY
  ) || what="nothing known (its interpreter could not list its distributions)"
  echo "compat: covered $what (Python $(py_version "$dir/bin/python"), $dir)"
}
SUMMARY=("$(covered "$VENV")")
for req in "$COMPAT"/clients/*.txt; do
  SUMMARY+=("$(covered "$CLIENTS/$(basename "$req" .txt)")")
done
# PyTorch's TCPStore client: the torch of the benchmarks' venv (bench/setup.sh, which make test
# also runs in the background; it waits for that run rather than making the venv twice).
if [[ -z "${COMPAT_VENVS_ONLY:-}" ]]; then
  if ! bash bench/setup.sh >"$COHORT_CACHE/compat-bench-setup.log" 2>&1; then
    tail -n 20 "$COHORT_CACHE/compat-bench-setup.log" >&2
    log "the torch client (.venv-bench, bench/setup.sh) could not be installed; the suite needs it"
    exit 1
  fi
  if [[ -f .venv-bench/torch.skip ]]; then
    log "the torch client is left out of .venv-bench ($(cat .venv-bench/torch.skip)); the suite" \
      "needs it: run bench/setup.sh without BENCH_SKIP_TORCH"
    exit 1
  fi
  torch=$(.venv-bench/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))')
  SUMMARY+=("compat: covered torch $torch (Python $(py_version .venv-bench/bin/python), .venv-bench)")
fi
summary() {
  printf '%s\n' "${SUMMARY[@]}" >&2
  if [[ -n "$NOTE" ]]; then log "$NOTE"; fi
}
summary
if [[ -n "${COMPAT_VENVS_ONLY:-}" ]]; then
  log "every venv is ready"
  exit 0
fi

log "running pytest on $COMPAT against $COHORT_BIN_DIR/cohort-coordinator"
set +e
"$VENV/bin/python" -m pytest "${COMPAT_TESTS:-$COMPAT}" -p no:cacheprovider -rsx -v --no-skips "$@"
status=$?
set -e
log "pytest exited $status; the clients this run covered:"
summary
exit "$status"
