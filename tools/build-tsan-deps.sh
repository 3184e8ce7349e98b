#!/usr/bin/env bash
# Builds abseil 20220623.1 and gRPC 1.51.1 (Debian 12's versions, from Debian's source
# archive, with Debian's patches to abseil) with clang and -fsanitize=thread, for
# `make tsan-test`: TSan sees how a thread hands memory to another only in code it
# instrumented, and Debian ships both libraries uninstrumented (gRPC hands every call between
# its threads through its own atomics; abseil's Mutex is made of atomics and futexes).
#
#   DIR/absl       abseil, installed (static libraries and its CMake package); its headers
#                  are the system's, Debian's inline namespace and options included
#   DIR/grpc/lib   libgrpc++.a, libgrpc.a, libgpr.a, libupb.a, libaddress_sorting.a, built
#                  against that abseil and the system's protobuf, c-ares, re2, OpenSSL and
#                  zlib. The TSan build (CMakeLists.txt, COHORT_TSAN_GRPC) keeps the system's
#                  gRPC headers and CMake targets (the same version) and links these instead.
#
# DIR defaults to $COHORT_CACHE/tsan-deps (the machine's cache, outside the clone: make test
# builds them there in the background while it runs other stages, tools/prepare.sh). Done once
# per DIR: a stamp records the versions and the flags, and a second run with the same ones
# does nothing; one run at a time per DIR (a second waits for the first). Prints the time each
# build took.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${COHORT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort}/tsan-deps}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
exec 9>"$dir/.lock"
flock 9
pool=http://deb.debian.org/debian/pool/main
flags="-fsanitize=thread -O1 -gline-tables-only -fno-omit-frame-pointer"
launcher=$(command -v ccache || true)
jobs=${NINJA_JOBS:-$(nproc)}

# fetch URL SHA256: prints the file's path in $dir, downloaded once and checked against the
# pinned hash.
fetch() {
  local url=$1 sha256=$2 file
  file="$dir/$(basename "$url")"
  if ! echo "$sha256  $file" | sha256sum -c --status 2>/dev/null; then
    curl -fsSL --retry 3 -o "$file.part" "$url"
    echo "$sha256  $file.part" | sha256sum -c --status ||
      { echo "build-tsan-deps: $url does not have the pinned sha256 $sha256" >&2; exit 1; }
    mv "$file.part" "$file"
  fi
  echo "$file"
}
# step NAME LOG COMMAND...: runs COMMAND into LOG; on failure shows its end and stops.
step() {
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; echo "build-tsan-deps: $name failed ($log)" >&2; exit 1; }
}

# ---- abseil: Debian's source and patches (its inline namespace and options, which the
# system's headers carry, so that code compiled against those headers links with it).
absl_version=20220623.1
absl_orig_sha=abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe
absl_debian=20220623.1-1+deb12u2
absl_debian_sha=e08490fc7b6f3beca1925953b0c4fb92df2de5e2a01295e4641e2a3d4e528eeb
absl_want="abseil $absl_debian $flags"
if [[ "$(cat "$dir/absl/.built" 2>/dev/null)" != "$absl_want" ]]; then
  start=$SECONDS
  orig=$(fetch "$pool/a/abseil/abseil_${absl_version}.orig.tar.gz" "$absl_orig_sha")
  patches=$(fetch "$pool/a/abseil/abseil_${absl_debian}.debian.tar.xz" "$absl_debian_sha")
  rm -rf "$dir/absl-src" "$dir/absl-obj" "$dir/absl"
  mkdir -p "$dir/absl-src"
  tar -xzf "$orig" -C "$dir/absl-src" --strip-components=1
  tar -xJf "$patches" -C "$dir/absl-src"
  for patch in $(grep -v '^#' "$dir/absl-src/debian/patches/series"); do
    patch -d "$dir/absl-src" -p1 -s <"$dir/absl-src/debian/patches/$patch"
  done
  cmp -s "$dir/absl-src/absl/base/options.h" /usr/include/absl/base/options.h || {
    echo "build-tsan-deps: abseil's options differ from the system's (libabsl-dev is not $absl_debian?)" >&2
    exit 1
  }
  step "abseil's cmake" "$dir/absl-configure.log" cmake -S "$dir/absl-src" -B "$dir/absl-obj" \
    -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_STANDARD=17 -DABSL_PROPAGATE_CXX_STD=ON -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" -DBUILD_SHARED_LIBS=OFF -DBUILD_TESTING=OFF \
    -DCMAKE_INSTALL_PREFIX="$dir/absl"
  step "abseil's build" "$dir/absl-build.log" ninja -C "$dir/absl-obj" -j "$jobs" install
  rm -rf "$dir/absl-src" "$dir/absl-obj"
  echo "$absl_want" >"$dir/absl/.built"
  echo "build-tsan-deps: abseil $absl_debian with ThreadSanitizer in $dir/absl ($((SECONDS - start)) s)"
fi

# ---- gRPC: the library only, no code generator (the system's grpc_cpp_plugin generates the
# same code).
grpc_version=1.51.1
grpc_orig_sha=b55696fb249669744de3e71acc54a9382bea0dce7cd5ba379b356b12b82d4229
grpc_flags="$flags -DGRPC_NO_XDS"
xds_sources='src/core/ext/xds/|lb_policy/xds/|resolver/(xds|google_c2p)/|filters/(rbac|server_config_selector)/|credentials/xds/|xds_(server_)?credentials[.]cc|upb-generated/(envoy|udpa|validate|opencensus|google/api|xds/(annotations|core|type))/|upbdefs-generated/'
grpc_want="grpc $grpc_version $grpc_flags without $xds_sources; $absl_want"
if [[ "$(cat "$dir/grpc/lib/.built" 2>/dev/null)" != "$grpc_want" ]]; then
  start=$SECONDS
  orig=$(fetch "$pool/g/grpc/grpc_${grpc_version}.orig.tar.gz" "$grpc_orig_sha")
  rm -rf "$dir/grpc"
  mkdir -p "$dir/grpc/src" "$dir/grpc/lib"
  tar -xzf "$orig" -C "$dir/grpc/src" --strip-components=1
  # gRPC's CMake downloads opencensus-proto when the directory is missing; nothing built here
  # uses it (Debian's no-opencensus.patch skips it the same way), and only package registries
  # are reachable.
  mkdir -p "$dir/grpc/src/third_party/opencensus-proto/src"
  # Without xDS (GRPC_NO_XDS, gRPC's own switch for its plugin registry, and its sources out
  # of the two libraries): nothing here uses it, and it is 305 of libgrpc's 701 sources (its
  # client, LB policies, resolvers, RBAC, and the upb code of Envoy's protos), about a third
  # of this build's CPU time on a bare machine, where every core is busy from start to end.
  awk -v drop="$xds_sources" '
    /^add_library\(grpc(\+\+)?$/ { inside = 1 }
    inside && /^\)/ { inside = 0 }
    !(inside && $0 ~ drop) { print }' "$dir/grpc/src/CMakeLists.txt" >"$dir/grpc/CMakeLists.txt"
  mv "$dir/grpc/CMakeLists.txt" "$dir/grpc/src/CMakeLists.txt"
  step "gRPC's cmake" "$dir/grpc/configure.log" cmake -S "$dir/grpc/src" -B "$dir/grpc/obj" \
    -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_C_FLAGS="$grpc_flags" -DCMAKE_CXX_FLAGS="$grpc_flags" \
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DBUILD_SHARED_LIBS=OFF -DgRPC_BUILD_TESTS=OFF -DgRPC_BUILD_CODEGEN=OFF -DgRPC_INSTALL=OFF \
    -DgRPC_BUILD_GRPC_CPP_PLUGIN=OFF -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF -DgRPC_BUILD_CSHARP_EXT=OFF \
    -DgRPC_ABSL_PROVIDER=package -Dabsl_DIR="$dir/absl/lib/cmake/absl" \
    -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package -DgRPC_RE2_PROVIDER=package \
    -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package -DgRPC_BENCHMARK_PROVIDER=none \
    -DProtobuf_PROTOC_LIBRARY=protoc-is-not-built-here
  # (Protobuf_PROTOC_LIBRARY: named by grpc_plugin_support, the code generators' library,
  # which is not built here.)
  step "gRPC's build" "$dir/grpc/build.log" ninja -C "$dir/grpc/obj" -j "$jobs" grpc++
  for lib in grpc++ grpc gpr upb address_sorting; do
    cp "$dir/grpc/obj/lib$lib.a" "$dir/grpc/lib/"
  done
  rm -rf "$dir/grpc/src" "$dir/grpc/obj"
  echo "$grpc_want" >"$dir/grpc/lib/.built"
  echo "build-tsan-deps: gRPC $grpc_version with ThreadSanitizer in $dir/grpc/lib ($((SECONDS - start)) s)"
fi
