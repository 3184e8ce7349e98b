# syntax=docker/dockerfile:1
# cohort's container images, all from one build of the source tree:
#
#   docker build --target cohort-operator      -t ghcr.io/cohort/cohort-operator:0.1.0 .
#   docker build --target cohort-coordinator   -t ghcr.io/cohort/cohort-coordinator:0.1.0 .
#   docker build --target cohort-sidecar       -t ghcr.io/cohort/cohort-sidecar:0.1.0 .
#   docker build --target cohort-agent-example -t ghcr.io/cohort/cohort-agent-example:0.1.0 .
#   docker build --target cohort-objstore      -t ghcr.io/cohort/cohort-objstore:0.1.0 .
#   docker build --target cohort-worker        -t ghcr.io/cohort/cohort-worker:0.1.0 .
#
# The build stage does what a developer does on Debian 12: tools/deps.sh installs the
# packages (`make deps`), then `make build`. So the build dependencies are listed once, in
# tools/deps.sh, and the build command once, in the Makefile. The runtime stage adds only
# the shared libraries the programs load, the programs, and a non-root user; each image
# differs only in its entrypoint (every image also carries cohortctl, for debugging).
# tests/docker/dockerfile_test.sh checks all of this against the binaries in build/bin,
# since no container engine runs where the tests do.

FROM debian:bookworm AS build
WORKDIR /src
# Dependencies first, so that this layer is rebuilt only when the list changes.
COPY tools/deps.sh tools/deps.sh
RUN bash tools/deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache make build
# Debug information stays in the build stage.
RUN mkdir /out && install -s -m 0755 \
      build/bin/cohort-operator build/bin/cohort-coordinator build/bin/cohort-sidecar \
      build/bin/cohortctl build/bin/cohort-agent-example build/bin/cohort-gpu-info \
      build/bin/cohort-objstore build/bin/cohort-worker /out/
# py-spy (PyPI's binary): the sidecar records a hung Python workload's stacks with it before
# it reports the hang (docs/sidecar.md, "Progress and hangs").
RUN python3 -m venv /opt/py-spy && /opt/py-spy/bin/pip install --no-cache-dir py-spy==0.4.3

FROM debian:bookworm-slim AS runtime
# The Debian packages of the libraries the programs link (the test derives this list from
# ldd). NVML is not among them: the sidecar loads libnvidia-ml.so.1 at run time, from the
# driver the NVIDIA container toolkit mounts on GPU nodes, and runs without it elsewhere.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 \
      libcpprest2.10 \
      libfmt9 \
      libgcc-s1 \
      libgrpc++1.51 \
      libgrpc29 \
      libmicrohttpd12 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libspdlog1.10 \
      libssl3 \
      libstdc++6 \
      libyaml-cpp0.7 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/*
# uid and gid 65532, as the chart's securityContext expects.
RUN groupadd --system --gid 65532 cohort \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin cohort
COPY --from=build /out/cohort-operator /out/cohort-coordinator /out/cohort-sidecar \
     /out/cohortctl /out/cohort-agent-example /out/cohort-gpu-info /out/cohort-objstore \
     /out/cohort-worker /usr/local/bin/
USER 65532:65532

FROM runtime AS cohort-coordinator
EXPOSE 8476 8477
ENTRYPOINT ["/usr/local/bin/cohort-coordinator"]

FROM runtime AS cohort-sidecar
COPY --from=build /opt/py-spy/bin/py-spy /usr/local/bin/py-spy
EXPOSE 9477
ENTRYPOINT ["/usr/local/bin/cohort-sidecar"]

FROM runtime AS cohort-agent-example
ENTRYPOINT ["/usr/local/bin/cohort-agent-example"]

# The task runtime: one object store per node, and C++ workers with the built-in functions.
FROM runtime AS cohort-objstore
ENTRYPOINT ["/usr/local/bin/cohort-objstore"]

FROM runtime AS cohort-worker
ENTRYPOINT ["/usr/local/bin/cohort-worker"]

# Last, so that a plain `docker build .` makes the operator.
FROM runtime AS cohort-operator
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/cohort-operator"]
