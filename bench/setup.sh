#!/usr/bin/env bash
# Installs what the benchmarks need on a Debian machine, idempotently:
#   - the Debian packages (etcd 3.4's server and etcdctl, iproute2) through tools/deps.sh,
#     as root or through sudo;
#   - .venv-bench/: jaxlib and matplotlib (bench/requirements.txt), then torch
#     (bench/requirements-torch.txt) for the TCPStore anchor. A torch that cannot be
#     installed fails the setup, unless BENCH_SKIP_TORCH=1 says to leave it out: then
#     .venv-bench/torch.skip holds that reason, and `make bench` records TCPStore as skipped
#     (the smoke test in `make test` accepts no skipped anchor).
# A venv whose requirements file has not changed since its last successful install is not
# touched again.
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
version() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'; }
if [[ ! -x $VENV/bin/python || "$(version "$VENV/bin/python")" != "$(version "$PYTHON")" ]]; then
  log "creating $VENV with $PYTHON (Python $(version "$PYTHON"))"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi

stamp_of() { echo "$(version "$VENV/bin/python") $(sha256sum "$1" | cut -d' ' -f1)"; }
# install REQUIREMENTS STAMP: pip-installs unless STAMP says this exact file is in.
install() {
  local req=$1 stamp=$2
  if [[ -f $stamp && "$(cat "$stamp")" == "$(stamp_of "$req")" ]]; then return 0; fi
  log "installing $req into $VENV"
  rm -f "$stamp"
  timeout 1800 "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$req" \
    >"$VENV/pip.log" 2>&1 || return 1
  stamp_of "$req" >"$stamp"
}

if ! install bench/requirements.txt "$VENV/.bench.stamp"; then
  tail -n 20 "$VENV/pip.log" >&2
  log "jaxlib/matplotlib could not be installed: the jaxlib anchor and the plots need them"
  exit 1
fi
rm -f "$VENV/torch.skip"
if [[ "${BENCH_SKIP_TORCH:-0}" == 1 ]]; then
  echo "not installed: BENCH_SKIP_TORCH=1" >"$VENV/torch.skip"
  log "TCPStore anchor left out: BENCH_SKIP_TORCH=1"
elif ! install bench/requirements-torch.txt "$VENV/.torch.stamp"; then
  tail -n 20 "$VENV/pip.log" >&2
  log "torch could not be installed into $VENV (about 5 GB; the TCPStore anchor needs it):" \
    "$(grep -m1 -E 'ERROR|error:' "$VENV/pip.log" | cut -c1-300)." \
    "BENCH_SKIP_TORCH=1 leaves it out of make bench"
  exit 1
fi
log "ready: $VENV ($(version "$VENV/bin/python"))"
