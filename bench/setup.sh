#!/usr/bin/env bash
# Installs what the benchmarks need on a Debian machine, idempotently:
#   - the Debian packages (etcd 3.4's server and etcdctl, iproute2) through tools/deps.sh,
#     as root or through sudo;
#   - .venv-bench/: jaxlib and matplotlib (bench/requirements.txt), then torch
#     (bench/requirements-torch.txt) for the TCPStore anchor; a link to a venv made once per
#     set of requirements in the machine's cache (tools/venv.sh). A torch that cannot be
#     installed fails the setup, unless BENCH_SKIP_TORCH=1 says to leave it out: then
#     .venv-bench/torch.skip holds that reason, and `make bench` records TCPStore as skipped
#     (the smoke test in `make test` accepts no skipped anchor).
#   bench/setup.sh            everything
#   bench/setup.sh --etcd     only the Debian packages
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-bench
log() { echo "bench setup: $*" >&2; }

bash tools/deps.sh >&2
# Debian's package may start a system etcd on :2379; the benchmark never uses it (each
# measurement starts its own etcd on a free loopback port).
[[ "${1:-}" == "--etcd" ]] && exit 0

source tools/find_python.sh
if [[ -n "${BENCH_PYTHON:-}" ]]; then
  PYTHON=$BENCH_PYTHON
elif ! PYTHON=$(find_python 3.12) && ! PYTHON=$(find_python 3.13); then
  PYTHON=python3
fi
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  log "$PYTHON cannot create venvs (Debian: apt-get install python3-venv; BENCH_PYTHON names another)"
  exit 1
fi
# One venv per set of requirements, made once in the machine's cache (tools/venv.sh).
source tools/venv.sh
reqs=(bench/requirements.txt)
if [[ "${BENCH_SKIP_TORCH:-0}" != 1 ]]; then reqs+=(bench/requirements-torch.txt); fi
if ! cohort_venv "$VENV" "$PYTHON" "${reqs[@]}"; then
  tail -n 20 "$COHORT_VENV_LOG" >&2
  log "${reqs[*]} could not be installed into $VENV: $(grep -m1 -E 'ERROR|error:' "$COHORT_VENV_LOG" | cut -c1-300)." \
    "jaxlib and matplotlib are needed for the jaxlib anchor and the plots, torch (about 5 GB) for" \
    "the TCPStore anchor; BENCH_SKIP_TORCH=1 leaves torch out of make bench (log: $COHORT_VENV_LOG)"
  exit 1
fi
if [[ "${BENCH_SKIP_TORCH:-0}" == 1 ]]; then
  echo "not installed: BENCH_SKIP_TORCH=1" >"$VENV/torch.skip"
  log "TCPStore anchor left out: BENCH_SKIP_TORCH=1"
fi
log "ready: $VENV ($(cohort_py_version "$VENV/bin/python"))"
