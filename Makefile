# cohort: `make demo` runs the main job end to end, `make test` runs every test.
# Both install what they need first (Debian packages through tools/deps.sh).
SHELL := /bin/bash
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
ASAN_BUILD ?= build-asan
WERROR ?= $(if $(CI),ON,OFF)
NINJA_JOBS ?= $(shell nproc)

.PHONY: all deps build test unit-test asan-test compat-test e2e-test docker-test bench-smoke format-check format lint demo bench clean

all: build

deps:
	@bash tools/deps.sh

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCOHORT_WERROR=$(WERROR)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(NINJA_JOBS)
	@echo "binaries in $(BUILD)/bin/"

# The whole suite: formatting, unit and integration tests, the same tests under
# AddressSanitizer and UndefinedBehaviorSanitizer, then real JAX and TensorFlow clients.
test: build format-check unit-test asan-test compat-test bench-smoke e2e-test docker-test

unit-test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600

asan-test: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCOHORT_SANITIZE=ON -DCOHORT_WERROR=$(WERROR)
	ninja -C $(ASAN_BUILD) -j $(NINJA_JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure --timeout 900

# Real clients (jaxlib, TensorFlow) against the coordinator, from a project-local venv
# (.venv/) that tests/compat/run.sh creates and keeps up to date.
compat-test: build
	bash tests/compat/run.sh

# The local Kubernetes cluster (tools/local-cluster: kube-apiserver, controller manager and
# a pod runner built once from the Kubernetes Go modules, cached under build/tools) and the
# end-to-end tests on it: the CRD, cohort-operator, the Helm chart (lint, templates, a real
# helm install) and every dashboard query against a real Prometheus (tests/e2e/run.sh).
e2e-test: build
	tools/local-cluster tools >/dev/null
	cd tools/localcluster && go vet ./... && go test ./internal/...
	bash tests/e2e/run.sh

# The Dockerfile cannot be built here (no container engine): check that it builds with the
# same scripts as `make build` and installs every shared library the binaries load.
docker-test: build
	bash tests/docker/dockerfile_test.sh

SOURCES = $(shell git ls-files '*.cc' '*.h')
format-check: deps
	@clang-format --style=file --dry-run --Werror $(SOURCES) && echo "format: clean"
	@test -z "$$(cd tools/localcluster && gofmt -l .)" || { cd tools/localcluster && gofmt -l .; echo "gofmt: the files above"; exit 1; }

format: deps
	clang-format --style=file -i $(SOURCES)

# clang-tidy over our own sources (not the generated protobuf code); findings are errors.
lint: build
	run-clang-tidy -p $(BUILD) -quiet -j $(NINJA_JOBS) '/(agent|common|operator|service|sidecar|bench|examples|tests)/[^/]+' \
	  > $(BUILD)/clang-tidy.log 2>&1 || { grep -E 'error:|warning:' $(BUILD)/clang-tidy.log; exit 1; }
	@echo "clang-tidy: clean"

demo: build
	bash tools/demo.sh

# Benchmarks side by side with jaxlib's service, etcd 3.4 and TCPStore (bench/README.md):
# installs etcd-server and .venv-bench, builds build-bench/ (Release), writes
# bench/results/*.json, BENCHMARKS.md and docs/bench/*.png. About 30 minutes. The operator's
# figures on the local cluster: bash bench/operator_bench.sh.
bench: deps
	bash bench/run.sh

# Every benchmark scenario with tiny N against cohort and each available anchor; checks the
# JSON is complete, not the figures (about 75 s). After compat-test: it uses .venv's jaxlib
# when .venv-bench is missing.
bench-smoke: build
	bash tests/bench/smoke.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
