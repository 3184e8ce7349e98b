#!/bin/sh
# Checks sidecar/gpu/nvml_abi.h against NVIDIA's nvml.h by compiling nvml_abi_check.cc.
#
#   check_nvml_abi.sh DIR     use DIR/nvml.h (make test: tools/nvml-header.sh fetches it from
#                             the nvidia-nvml-dev wheel; a CUDA toolkit has it too)
#
# Exits 0 when the ABI matches, 1 when it does not or DIR has no nvml.h.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cxx=${CXX:-c++}
dir=${1:-}

if [ -z "$dir" ] || [ ! -f "$dir/nvml.h" ]; then
  echo "check_nvml_abi: no nvml.h in '${dir}' (tools/nvml-header.sh DIR fetches one)"
  exit 1
fi

version=$(sed -n 's/^#define NVML_API_VERSION[[:space:]]*\([0-9]*\).*/\1/p' "$dir/nvml.h" | head -n 1)
if "$cxx" -std=c++17 -fsyntax-only -I"$repo" -I"$dir" "$here/nvml_abi_check.cc"; then
  echo "check_nvml_abi: sidecar/gpu/nvml_abi.h matches $dir/nvml.h (NVML API version ${version:-?})"
else
  echo "check_nvml_abi: sidecar/gpu/nvml_abi.h does NOT match $dir/nvml.h"
  exit 1
fi
