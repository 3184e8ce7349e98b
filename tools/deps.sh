#!/usr/bin/env bash
# Installs every Debian package cohort's build and tests need. Idempotent: it
# installs only what is missing. `make deps` and the Dockerfile's build stage
# both run this script, so there is one list of build dependencies.
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates curl
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libabsl-dev
  libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libcpprest-dev libssl-dev libmicrohttpd-dev
)
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev clang-format clang-tidy
  prometheus python3-venv openssl
)

want=("${BUILD_PACKAGES[@]}")
if [[ "${1:-}" != "--build-only" ]]; then
  want+=("${TEST_PACKAGES[@]}")
fi

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#want[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq

$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
