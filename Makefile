# cohort: `make demo` runs the main job end to end, `make test` runs every test.
# Both install what they need first (Debian packages through tools/deps.sh).
SHELL := /bin/bash
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# Warnings are errors in every build of the compiler that CI judges them by (g++), whether CI
# is set or not: the same flags give the same compile commands, so CI's fresh clone finds the
# objects a `make build` on the same machine left in ccache.
WERROR ?= ON
NINJA_JOBS ?= $(shell nproc)
# Tests run side by side: most of them wait on sockets and child processes, not on the CPU.
CTEST_JOBS ?= $(shell echo $$(( $$(nproc) * 2 )))
# What survives a fresh clone, outside it: ThreadSanitizer's abseil and gRPC, the venvs
# (tools/venv.sh) and the local cluster's binaries, each keyed by its versions. Removing it
# is always safe (the next run makes what it needs again).
export COHORT_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cohort
# ccache keys objects by paths relative to the checkout, so a fresh clone elsewhere (CI) hits
# the objects an earlier build left; two builds (RelWithDebInfo and the sanitizers) fit in 10G.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true
export CCACHE_MAXSIZE ?= 10G

.PHONY: all deps nvml-header build gpu-check test unit-test asan-test tsan-build tsan-test compat-test python-test e2e-test docker-test bench-smoke soak-smoke programs-check format-check format lint demo demo-tasks demo-pytorch bench fuzz fuzz-smoke soak clean

all: build

deps:
	@bash tools/deps.sh

# NVIDIA's nvml.h (from the nvidia-nvml-dev wheel), only for the NVML ABI check of the tests.
NVML_DIR = $(CURDIR)/build/third_party/nvml
nvml-header:
	@bash tools/nvml-header.sh $(NVML_DIR) >/dev/null
# Every build compiles each target's sources in unity batches (cmake/CohortUnity.cmake): the
# main build from nothing in 477 CPU-seconds; tools/lint.py checks each batch as one unit.
CMAKE_FLAGS = -G Ninja -DCOHORT_WERROR=$(WERROR) -DCOHORT_UNITY=ON \
  -DCOHORT_NVML_INCLUDE_DIR=$(NVML_DIR)/include -DCOHORT_REQUIRE_NVML_ABI_CHECK=ON

# Configured every time (a second of cmake), so a flag added here reaches existing builds.
# The programs, benchmarks and tools; the test binaries are built by the test targets:
# make test runs them under the sanitizers (asan-test, tsan-test), make unit-test here.
build: deps nvml-header
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCOHORT_TEST_BINARIES_IN_ALL=OFF >/dev/null
	ninja -C $(BUILD) -j $(NINJA_JOBS)
	@echo "binaries in $(BUILD)/bin/"

# The whole suite, stage by stage, with a summary at the end (tests/run_all.sh): the build,
# the programs check, formatting, unit and integration tests, the same under AddressSanitizer
# and UndefinedBehaviorSanitizer, real JAX and TensorFlow clients, the benchmark smoke test,
# the local cluster's end-to-end tests and the Dockerfile check.
test:
	@bash tests/run_all.sh

# Every unit and integration test in the RelWithDebInfo build (g++, optimized): not a stage of
# make test, which runs the same tests under ASan+UBSan and TSan. ctest fails when it finds no
# test at all (an empty or broken build directory).
unit-test: build
	ninja -C $(BUILD) -j $(NINJA_JOBS) unit-tests
	cd $(BUILD) && ctest --output-on-failure --no-tests=error --timeout 600 -j $(CTEST_JOBS)

# One clang build serves AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer
# targets (its objects carry the fuzzer's coverage hooks, which cost the tests little), Debug
# (-O0, assertions on): at -O1 it compiled 2.3 times slower.
ASAN_CMAKE = cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCOHORT_SANITIZE=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCOHORT_WERROR=OFF -DCOHORT_UNITY=ON \
  -DCOHORT_NVML_INCLUDE_DIR=$(NVML_DIR)/include -DCOHORT_REQUIRE_NVML_ABI_CHECK=ON
asan-test: deps nvml-header
	@$(ASAN_CMAKE) >/dev/null
	ninja -C $(ASAN_BUILD) -j $(NINJA_JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure --no-tests=error --timeout 900 -j $(CTEST_JOBS)

# Every unit and integration test again under ThreadSanitizer (clang; a build of its own),
# the programs the integration tests start included. abseil and gRPC are built with TSan first
# (tools/build-tsan-deps.sh, once per machine, in $(COHORT_CACHE): Debian's are not instrumented, and TSan must
# see how gRPC hands a call between its threads and what abseil's Mutex orders).
# tests/tsan.supp says what the other system libraries need and why.
TSAN_TESTS = tsan_race_canary|core_test|scheduler_test|task_runtime_test|state_store_test|common_test|gpu_test|operator_test|operator_plan_test|integration_test|auth_test|agent_test|cohortctl_test|proxy_test|upstream_parts_test|scheduler_forward_test|proxy_restart_test|sidecar_test|coordinator_binary_test|coordinator_watcher_test|tls_test|chaos_test|torch_store_test|progress_tracker_test|failure_reporter_test|stack_dump_test
TSAN_DEPS = $(COHORT_CACHE)/tsan-deps
TSAN_PROGRAMS = cohort-coordinator cohort-sidecar cohortctl cohort-agent-example cohort-objstore \
  cohort-worker
TSAN_CMAKE = cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCOHORT_TSAN=ON -DCOHORT_UNITY=ON \
  -Dabsl_DIR=$(TSAN_DEPS)/absl/lib/cmake/absl -DCOHORT_TSAN_GRPC=$(TSAN_DEPS)/grpc/lib \
  -DCOHORT_NVML_INCLUDE_DIR=$(NVML_DIR)/include -DCOHORT_REQUIRE_NVML_ABI_CHECK=ON
# The build alone: make test's background preparation (tools/prepare.sh) runs it at nice 10
# beside the other stages; the lock makes the tsan stage wait for that build, not race it.
tsan-build: deps nvml-header
	NINJA_JOBS=$(NINJA_JOBS) bash tools/build-tsan-deps.sh $(TSAN_DEPS)
	@mkdir -p $(TSAN_BUILD)
	flock $(TSAN_BUILD)/.lock sh -c '$(TSAN_CMAKE) >/dev/null && \
	  ninja -C $(TSAN_BUILD) -j $(NINJA_JOBS) $(subst |, ,$(TSAN_TESTS)) $(TSAN_PROGRAMS)'
tsan-test: tsan-build
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure --no-tests=error --timeout 900 -j $(CTEST_JOBS) -L '^($(TSAN_TESTS))$$'

# Every program the tests, benchmarks and tools call comes from a Debian package that
# tools/deps.sh installs (or its dependencies, or the base system): a tool installed by hand
# cannot hide a missing install step.
programs-check: deps
	python3 tests/deps/check_programs.py

# Real clients (jaxlib, TensorFlow) against the coordinator, from a project-local venv
# (.venv/) that tests/compat/run.sh creates and keeps up to date.
compat-test: build
	bash tests/compat/run.sh --ignore=tests/compat/test_soak.py

# The task runtime's Python package (python/), pip-installed into .venv/runtime, with drivers,
# Python and C++ workers and object stores as real processes.
python-test: build
	bash tests/python/run.sh

# The local Kubernetes cluster (tools/local-cluster: kube-apiserver, controller manager and
# a pod runner built once from the Kubernetes Go modules, cached under build/tools) and the
# end-to-end tests on it: the CRD, cohort-operator, the Helm chart (lint, templates, a real
# helm install) and every dashboard query against a real Prometheus (tests/e2e/run.sh).
e2e-test: build
	tools/local-cluster tools >/dev/null
	set -o pipefail; cd tools/localcluster && go vet ./... && go test -v ./internal/... | grep -Ev '^(=== |    )'
	bash tests/e2e/run.sh

# On a machine with an NVIDIA GPU and its driver: the sidecar's NVML view of every GPU (identity,
# telemetry, health, the XID event watch) against nvidia-smi's (tools/gpu_check.py). Uses the
# cohort-gpu-info already built when there is one (a GPU machine may lack the build's packages).
gpu-check:
	@test -x $(BUILD)/bin/cohort-gpu-info || $(MAKE) build
	python3 tools/gpu_check.py --gpu-info $(BUILD)/bin/cohort-gpu-info

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

# clang-tidy over our own sources (not the generated protobuf code); findings are errors. A
# file whose compile command, contents and headers clang-tidy already found clean is not
# checked again (tools/lint.py keeps clean results in $(COHORT_CACHE)/clang-tidy).
lint: build
	python3 tools/lint.py --build $(BUILD) --jobs $(NINJA_JOBS)

demo: build
	bash tools/demo.sh

# The task runtime on the local cluster: examples/tasks-python.yaml's map-reduce.
demo-tasks: build
	bash tools/demo-tasks.sh

# PyTorch on the local cluster: examples/pytorch-ddp.yaml, its coordinator deleted mid-training.
demo-pytorch: build
	bash tools/demo-pytorch.sh

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

# The fault soak (tests/soak/soak.py): real jaxlib, TensorFlow and agent-library clients
# through sidecars while the coordinators are killed at random, the state volume fills and
# empties and a sidecar is killed; every acknowledged value read back at the end. Writes
# RELIABILITY.md. SOAK_DURATION (default 30m); SOAK_ARGS for more of soak.py's flags (--help).
# make test runs a two-minute smoke of it (soak-smoke: tests/compat/test_soak.py, in the compat
# suite's venvs), beside its e2e stage.
SOAK_DURATION ?= 30m
soak: build
	SOAK_COMMAND="make soak SOAK_DURATION=$(SOAK_DURATION)$(if $(SOAK_ARGS), SOAK_ARGS='$(SOAK_ARGS)')" \
	  bash tests/soak/run.sh --duration $(SOAK_DURATION) --report RELIABILITY.md $(SOAK_ARGS)

soak-smoke: build
	COMPAT_TESTS=tests/compat/test_soak.py bash tests/compat/run.sh

# libFuzzer targets (tests/fuzz), built in the ASan build (build-asan/), and the atheris targets
# (tests/fuzz/*_fuzzer.py, in .venv/runtime): a fixed number of
# executions per target (make fuzz, 10^7 in all; FUZZ_SECONDS=N runs each N seconds instead),
# or 10 s each in make test (fuzz-smoke). Crashing inputs land in build-asan/fuzz/crashes/.
fuzz: deps nvml-header
	@$(ASAN_CMAKE) >/dev/null
	FUZZ_BUILD=$(ASAN_BUILD) bash tools/fuzz.sh $(FUZZ_SECONDS)

fuzz-smoke: deps nvml-header
	@$(ASAN_CMAKE) >/dev/null
	FUZZ_BUILD=$(ASAN_BUILD) bash tools/fuzz.sh smoke

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
