#!/bin/sh
# Checks sidecar/gpu/nvml_abi.h against NVIDIA's nvml.h by compiling nvml_abi_check.cc.
#
#   check_nvml_abi.sh [DIR]     use nvml.h from DIR (default: $NVML_INCLUDE_DIR,
#                               /usr/local/cuda/include, /usr/include)
#   check_nvml_abi.sh --fetch   pip-install the nvidia-nvml-dev wheel into a temporary
#                               directory and use its nvml.h (needs network access)
#
# Exits 0 when the ABI matches, 1 when it does not, 77 (skipped) when no nvml.h is found.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cxx=${CXX:-c++}
tmp=""
trap '[ -n "$tmp" ] && rm -rf "$tmp"' EXIT

dir=""
if [ "${1:-}" = "--fetch" ]; then
  tmp=$(mktemp -d)
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$tmp" nvidia-nvml-dev
  header=$(find "$tmp" -name nvml.h | head -n 1)
  [ -n "$header" ] && dir=$(dirname "$header")
elif [ -n "${1:-}" ]; then
  dir=$1
else
  for candidate in "${NVML_INCLUDE_DIR:-}" /usr/local/cuda/include /usr/include; do
    if [ -n "$candidate" ] && [ -f "$candidate/nvml.h" ]; then
      dir=$candidate
      break
    fi
  done
fi

if [ -z "$dir" ] || [ ! -f "$dir/nvml.h" ]; then
  echo "check_nvml_abi: no nvml.h found; skipped"
  exit 77
fi

version=$(sed -n 's/^#define NVML_API_VERSION[[:space:]]*\([0-9]*\).*/\1/p' "$dir/nvml.h" | head -n 1)
if "$cxx" -std=c++17 -fsyntax-only -I"$repo" -I"$dir" "$here/nvml_abi_check.cc"; then
  echo "check_nvml_abi: sidecar/gpu/nvml_abi.h matches $dir/nvml.h (NVML API version ${version:-?})"
else
  echo "check_nvml_abi: sidecar/gpu/nvml_abi.h does NOT match $dir/nvml.h"
  exit 1
fi
