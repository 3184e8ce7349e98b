#!/usr/bin/env bash
# Puts NVIDIA's nvml.h, from the nvidia-nvml-dev wheel on PyPI (pinned below), in DIR/include,
# for the NVML ABI check of `make test` (tests/sidecar/gpu/check_nvml_abi.sh). cohort itself
# never compiles against nvml.h: sidecar/gpu/nvml_abi.h declares the ABI it loads at run time,
# and the check proves that declaration equal to NVIDIA's. Idempotent; prints DIR/include.
#
#   tools/nvml-header.sh DIR
set -euo pipefail
WHEEL=nvidia-nvml-dev==13.5.37
dir=${1:?usage: tools/nvml-header.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# make build and make tsan-build (tools/prepare.sh runs it beside the build) both come here.
exec 9>"$dir/.lock"
flock 9
if [[ -f "$dir/include/nvml.h" && "$(cat "$dir/.wheel" 2>/dev/null)" == "$WHEEL" ]]; then
  echo "$dir/include"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --dest "$tmp" "$WHEEL" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "nvml-header: could not download $WHEEL from PyPI (it carries nvml.h for the NVML ABI check)" >&2
  exit 1
fi
python3 - "$tmp" <<'PY'
import pathlib, sys, zipfile
tmp = pathlib.Path(sys.argv[1])
(wheel,) = tmp.glob("*.whl")
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith("/include/nvml.h")]
    if not names:
        sys.exit(f"nvml-header: {wheel.name} has no include/nvml.h")
    (tmp / "nvml.h").write_bytes(z.read(names[0]))
PY
mkdir -p "$dir/include"
mv "$tmp/nvml.h" "$dir/include/nvml.h"
echo "$WHEEL" >"$dir/.wheel"
echo "nvml-header: $dir/include/nvml.h from $WHEEL" >&2
echo "$dir/include"
