#!/usr/bin/env bash
# Installs every Debian package cohort's build and tests need. Idempotent: it
# installs only what is missing. `make deps` and the Dockerfile's build stage
# both run this script, so there is one list of build dependencies.
#
#   tools/deps.sh               install every build and test package that is missing
#   tools/deps.sh --build-only  only the build packages (the Dockerfile's build stage)
#   tools/deps.sh --list        print the package names, one a line, and install nothing
#                               (tests/deps/check_programs.py reads it)
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates curl
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libabsl-dev
  libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libcpprest-dev libssl-dev libmicrohttpd-dev zlib1g-dev prometheus-cpp-dev libboost-dev
)
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev clang-format clang-tidy
  # The libFuzzer targets (tools/fuzz.sh): clang and its sanitizer and fuzzer runtimes.
  clang libclang-rt-14-dev
  prometheus python3-venv openssl
  # The local cluster (tools/local-cluster): `ip` for pod network namespaces, pgrep.
  iproute2 procps
  # The sidecar's native stack dumps (tests/sidecar/stack_dump_test.cc).
  gdb
  # The benchmarks' key-value anchor (bench/, and its smoke test in make test): the server,
  # and etcdctl, which the harness uses to probe it.
  etcd-server etcd-client
  # ThreadSanitizer's abseil and gRPC, built from Debian's source archives
  # (tools/build-tsan-deps.sh): Debian's patches to abseil, and its .debian.tar.xz.
  patch xz-utils
)

want=("${BUILD_PACKAGES[@]}")
if [[ "${1:-}" != "--build-only" ]]; then
  want+=("${TEST_PACKAGES[@]}")
fi
if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${want[@]}"
  exit 0
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

# The local cluster is built from the Kubernetes Go modules, which need a recent Go (the
# machine image has one; Debian 12's golang package is too old).
if [[ "${1:-}" != "--build-only" ]]; then
  if ! command -v go >/dev/null; then
    echo "deps: Go 1.26 or newer is needed for the local cluster (tools/local-cluster)" >&2
  elif ! go version | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; then
    echo "deps: $(go version): the local cluster needs Go 1.26 or newer" >&2
  fi
fi
