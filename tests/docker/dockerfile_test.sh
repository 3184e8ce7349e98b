#!/usr/bin/env bash
# The Dockerfile, checked without a container engine: the build stage uses tools/deps.sh
# and `make build` (one source of truth), and the runtime stage installs the Debian package
# of every shared library the shipped programs load (ldd on build/bin), and nothing else.
# Needs `make build`. tests/docker/dockerfile_check.py has the details.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for tool in ldd readelf dpkg dpkg-query python3; do
  command -v "$tool" >/dev/null || { echo "dockerfile test: $tool is missing"; exit 1; }
done
exec python3 "$ROOT/tests/docker/dockerfile_check.py"
