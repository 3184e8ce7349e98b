#!/usr/bin/env bash
# `make test`: every stage of the suite in order, each to the end even after another failed
# (a failed build stops the run: nothing else could pass). Prints a summary at the end: each
# stage, its result, its count of tests and its time, then the whole run's count as
# "N passed, N failed", and which of the machine's caches were warm when it started. Exit
# status 0 only when every stage passed; a test stage whose runners ran no test has failed.
#
# Stages (each also a make target of its own):
#   build         tools/deps.sh, the NVML header, cmake + ninja
#   programs      every program the tests call comes from a package our scripts install
#   format        clang-format and gofmt
#   asan          every unit and integration test (ctest) under AddressSanitizer and
#                 UndefinedBehaviorSanitizer (clang). Not again in the RelWithDebInfo build
#                 (make unit-test runs them there): that build compiles what the later
#                 stages run, and the tests run twice already, under ASan and under TSan.
#   fuzz-smoke    every libFuzzer target (from the asan build) and atheris target (the Python
#                 worker's) for 10 s (make fuzz runs them 10^7 times in all)
#   compat        real jaxlib, TensorFlow and torch clients (tests/compat)
#   python        the task runtime's Python package with real processes (tests/python)
#   docker        the Dockerfile against the built programs
#   e2e           the local cluster: Go tests, smoke, CRD, operator, chart, helm, dashboards
#   soak-smoke    two minutes of the fault soak (make soak); beside e2e, from its start
#   bench-smoke   every benchmark scenario with tiny N, every anchor; beside e2e, after
#                 soak-smoke
#   tsan          ctest under ThreadSanitizer
# Beside the stages, in the background: tools/prepare.sh (at nice 10: the venvs, the local
# cluster's binaries, then the ThreadSanitizer build) from the start, and clang-tidy
# (tools/lint.py, nice 15: it fills what the rest leaves) once the build is done; the summary
# says how each ended, and a clang-tidy finding fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=$(mktemp -d /tmp/cohort-test.XXXXXX)
# e2e and tsan come last: on a bare machine the local cluster's binaries and then the TSan
# build (abseil, gRPC, the tree) compile in the background (tools/prepare.sh) while the stages
# before them run, and the TSan build goes on while the e2e tests wait on pods.
STAGES=(build programs format asan fuzz-smoke compat python docker e2e soak-smoke bench-smoke tsan)
declare -A TARGET=([build]=build [programs]=programs-check [format]=format-check
  [asan]=asan-test [tsan]=tsan-test [fuzz-smoke]=fuzz-smoke [compat]=compat-test [python]=python-test [bench-smoke]=bench-smoke
  [e2e]=e2e-test [docker]=docker-test [soak-smoke]=soak-smoke)
# Stages that run beside another, one after the other, from its start: they mostly wait (on
# processes starting, on sockets, on killed coordinators coming back), as e2e mostly waits on
# pods, and neither asserts a time. The summary lists them after it, with their own times.
declare -A BESIDE=([e2e]="soak-smoke bench-smoke")
declare -A BESIDE_OF BESIDE_PID
# The stages that must run tests: one whose log counts none has failed, whatever its status.
declare -A RUNS_TESTS=([programs]=1 [asan]=1 [tsan]=1 [fuzz-smoke]=1 [compat]=1
  [python]=1 [bench-smoke]=1 [e2e]=1 [docker]=1 [soak-smoke]=1)
declare -A RESULT PASSED FAILED SECS CPU BUSY
CHILD_CPU_FILE="$LOGS/.times"
source tools/children_cpu.sh
# The whole machine's busy time so far, in clock ticks (/proc/stat: all but idle and iowait):
# with the stages' own CPU, it says how much the background got and how much went unused.
machine_busy() {
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}
TICKS=$(getconf CLK_TCK)
: "${COHORT_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/cohort}"
export COHORT_CACHE

# What each of the machine's caches holds: a fresh clone reuses all of them, a bare machine
# makes them (the README's two figures for make test).
du_of() { du -sh "$1" 2>/dev/null | cut -f1; }
describe() { # NAME PATH: "NAME warm (SIZE)" or "NAME empty"
  local size
  size=$(du -s "$2" 2>/dev/null | cut -f1)
  if [[ -n $size && $size -gt 1024 ]]; then echo "$1 warm ($(du_of "$2"))"; else echo "$1 empty"; fi
}
caches() {
  local go_cache go_mod pip_cache ccache_dir
  go_cache=$(go env GOCACHE 2>/dev/null || echo "$HOME/.cache/go-build")
  go_mod=$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")
  pip_cache=$(python3 -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")
  ccache_dir=$(ccache --get-config cache_dir 2>/dev/null || echo "$HOME/.cache/ccache")
  describe ccache "$ccache_dir"
  describe "Go build cache" "$go_cache"
  describe "Go modules" "$go_mod"
  describe "pip cache" "$pip_cache"
  describe "sanitizer deps" "$COHORT_CACHE/tsan-deps"
  describe venvs "$COHORT_CACHE/venvs"
  describe "cluster binaries" "$COHORT_CACHE/local-cluster"
}
# ccache's hits and misses so far (its statistics are the machine's, so the run's are a
# difference).
ccache_counts() {
  ccache --print-stats 2>/dev/null | awk '
    /^(direct|preprocessed)_cache_hit\t/ {h += $2}
    /^cache_miss\t/ {m += $2}
    END {print h + 0, m + 0}'
}
mapfile -t CACHES_AT_START < <(caches)
read -r ccache_hits0 ccache_misses0 < <(ccache_counts)
echo "make test: caches at the start: $(IFS=,; echo "${CACHES_AT_START[*]}" | sed 's/,/, /g')"

# The Debian packages first (the background preparation must not run apt beside the build's),
# then the venvs and Go modules in the background while the stages compile (tools/prepare.sh).
bash tools/deps.sh
# background LOG PIDFILE COMMAND...: COMMAND at low priority beside the stages. Not a child of
# this shell (its CPU time would count in whichever stage was running when it ended): a
# grandchild in a session of its own, whose PID goes to PIDFILE; stopped with everything it
# started if this run is. A session is a scheduling group of its own under the kernel's
# autogroup (sched_autogroup_enabled), which shares the CPU between groups by the group's nice
# value, whatever its processes' are: without the group's nice 10, `nice` inside it meant
# nothing and the background took half the machine from the build.
background() { # NICE LOG PIDFILE COMMAND...
  local nice=$1 log=$2 pidfile=$3
  shift 3
  (setsid bash -c 'echo "$0" >/proc/self/autogroup 2>/dev/null; exec nice -n "$0" "$@"' \
    "$nice" "$@" >"$log" 2>&1 & echo $! >"$pidfile")
}
background 10 "$LOGS/prepare.log" "$LOGS/prepare.pid" bash tools/prepare.sh
prepare_pid=$(cat "$LOGS/prepare.pid")
trap 'kill -TERM -- "-$prepare_pid" 2>/dev/null; [[ -n ${lint_pid:-} ]] && kill -TERM -- "-$lint_pid" 2>/dev/null; [[ -n ${beside_pid:-} ]] && kill -TERM -- "-$beside_pid" 2>/dev/null; exit 130' INT TERM
total_passed=0
total_failed=0

# count LOG: "PASSED FAILED" for one stage's log, from whichever runner closed it.
count() {
  local log=$1 p=0 f=0 line
  # ctest: "100% tests passed, 0 tests failed out of 354"
  while read -r line; do
    local failed_n total_n
    failed_n=$(sed -E 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
    total_n=$(sed -E 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\2/' <<<"$line")
    p=$((p + total_n - failed_n))
    f=$((f + failed_n))
  done < <(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log")
  # pytest: "==== 171 passed, 2 failed in 120.31s ===="
  while read -r line; do
    [[ $line =~ ([0-9]+)\ passed ]] && p=$((p + BASH_REMATCH[1]))
    [[ $line =~ ([0-9]+)\ failed ]] && f=$((f + BASH_REMATCH[1]))
    [[ $line =~ ([0-9]+)\ errors? ]] && f=$((f + BASH_REMATCH[1]))
  done < <(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log")
  # go test -v: top-level tests
  p=$((p + $(grep -cE '^--- PASS' "$log")))
  f=$((f + $(grep -cE '^--- FAIL' "$log")))
  # our own scripts: "<what>: N passed, N failed"
  while read -r line; do
    [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]] || continue
    p=$((p + BASH_REMATCH[1]))
    f=$((f + BASH_REMATCH[2]))
  done < <(grep -E '^([A-Za-z0-9 _./-]+: )?[0-9]+ passed, [0-9]+ failed$' "$log")
  echo "$p $f"
}

# account STAGE STATUS: the stage's counts and result from its log, into the totals.
account() {
  local stage=$1 status=$2 p f
  read -r p f < <(count "$LOGS/$stage.log")
  PASSED[$stage]=$p
  FAILED[$stage]=$f
  if [[ $status == 0 ]]; then RESULT[$stage]=passed; else RESULT[$stage]=FAILED; fi
  # A test stage that ran no test has failed: a runner that found nothing is no pass.
  if [[ -n ${RUNS_TESTS[$stage]:-} && $status == 0 && $p == 0 && $f == 0 ]]; then
    echo "make test: $stage ran no test"
    status=1
    RESULT[$stage]=FAILED
  fi
  # A stage that failed without a failed test still counts as one failure.
  if [[ $status != 0 && $f == 0 ]]; then FAILED[$stage]=1; fi
  total_passed=$((total_passed + PASSED[$stage]))
  total_failed=$((total_failed + FAILED[$stage]))
  echo "======== make test: $stage ${RESULT[$stage]} in ${SECS[$stage]} s"
  [[ $status == 0 ]]
}

for stage in "${STAGES[@]}"; do
  # A stage that ran beside another has ended, or is about to: its log and result.
  if [[ -n ${BESIDE_PID[$stage]:-} ]]; then
    echo "======== make test: $stage (make ${TARGET[$stage]}, beside ${BESIDE_OF[$stage]})"
    while [[ ! -f "$LOGS/$stage.result" ]] && kill -0 "${BESIDE_PID[$stage]}" 2>/dev/null; do
      sleep 1 # polls for the file: the beside runner is not this shell's child
    done
    cat "$LOGS/$stage.log" 2>/dev/null
    read -r status secs cpu_secs <"$LOGS/$stage.result" 2>/dev/null ||
      { status=1 secs=0 cpu_secs=0; echo "make test: $stage never ended (its runner was stopped)"; }
    SECS[$stage]=$secs
    CPU[$stage]=$(awk -v c="$cpu_secs" -v w="$secs" 'BEGIN { printf "%.1f", (w > 0 ? c / w : 0) }')
    BUSY[$stage]="-"
    account "$stage" "$status"
    continue
  fi
  echo "======== make test: $stage (make ${TARGET[$stage]})"
  # The stages that run beside this one start with it, one after the other, in a session of
  # their own at the same priority.
  if [[ -n ${BESIDE[$stage]:-} ]]; then
    pairs=()
    for b in ${BESIDE[$stage]}; do pairs+=("$b=${TARGET[$b]}"); BESIDE_OF[$b]=$stage; done
    echo "make test: beside $stage: ${BESIDE[$stage]} (logs in $LOGS, shown after $stage)"
    background 0 /dev/null "$LOGS/beside.pid" bash tests/run_beside.sh "$LOGS" "${pairs[@]}"
    beside_pid=$(cat "$LOGS/beside.pid")
    for b in ${BESIDE[$stage]}; do BESIDE_PID[$b]=$beside_pid; done
  fi
  start=$SECONDS
  children_cpu
  cpu_start=$CHILD_CPU
  busy_start=$(machine_busy)
  make --no-print-directory "${TARGET[$stage]}" 2>&1 | tee "$LOGS/$stage.log"
  status=${PIPESTATUS[0]}
  SECS[$stage]=$((SECONDS - start))
  # How busy the stage kept the machine: CPU seconds over wall seconds, in cores (processes
  # a test left running are not counted); "machine": the same for everything that ran then,
  # the background included (2.0 on two cores: nothing idle).
  children_cpu
  CPU[$stage]=$(awk -v c=$((CHILD_CPU - cpu_start)) -v w=${SECS[$stage]} \
    'BEGIN { printf "%.1f", (w > 0 ? c / w : 0) }')
  BUSY[$stage]=$(awk -v b=$(($(machine_busy) - busy_start)) -v t="$TICKS" -v w=${SECS[$stage]} \
    'BEGIN { printf "%.1f", (w > 0 ? b / t / w : 0) }')
  account "$stage" "$status"
  status=$?
  if [[ $stage == build && $status != 0 ]]; then
    echo "make test: the build failed; nothing else can pass"
    break
  fi
  # clang-tidy (make lint, which CI runs after make test) beside the test stages, which mostly
  # wait on sockets, below the preparation (whose parts stages wait for; its only deadline is
  # the end): it keeps each clean file in the cache (tools/lint.py), so
  # that make lint afterwards checks only what this one could not. Its findings fail the run.
  if [[ $stage == build ]]; then
    background 15 "$LOGS/lint.log" "$LOGS/lint.pid" python3 tools/lint.py --build build --jobs "$(nproc)"
    lint_pid=$(cat "$LOGS/lint.pid")
  fi
done

# Every stage that needed a part of it waited for that part; what is left (nothing, normally)
# is waited for here, so that the run leaves nothing behind.
tail --pid="$prepare_pid" -f /dev/null
prepare_status=0
grep -q '^prepare: FAILED' "$LOGS/prepare.log" && prepare_status=1
lint_result="not run (the build failed)"
if [[ -n ${lint_pid:-} ]]; then
  tail --pid="$lint_pid" -f /dev/null
  if grep -q '^clang-tidy: clean' "$LOGS/lint.log"; then
    lint_result="clean: $(grep '^lint: [0-9]* files' "$LOGS/lint.log")"
  else
    lint_result="FAILED ($LOGS/lint.log)"
    cat "$LOGS/lint.log"
  fi
fi

echo
echo "make test summary (logs in $LOGS)"
printf '  %-12s %-7s %7s %7s %8s %6s %8s\n' stage result passed failed seconds cores machine
for stage in "${STAGES[@]}"; do
  [[ -n ${RESULT[$stage]:-} ]] || { printf '  %-12s %-7s\n' "$stage" "not run"; continue; }
  printf '  %-12s %-7s %7s %7s %8s %6s %8s\n' "$stage" "${RESULT[$stage]}" "${PASSED[$stage]}" \
    "${FAILED[$stage]}" "${SECS[$stage]}" "${CPU[$stage]}" "${BUSY[$stage]}"
done
echo "  total time: $((SECONDS / 60)) min $((SECONDS % 60)) s ($SECONDS s)"
read -r ccache_hits1 ccache_misses1 < <(ccache_counts)
if [[ -f "$LOGS/compat.log" ]]; then
  echo "  clients the compat stage covered:"
  grep -E '^compat: (covered|NOTE)' "$LOGS/compat.log" | sort -u | sed 's/^compat: /    /'
fi
echo "  clang-tidy, in the background: $lint_result"
echo "  background preparation: $(tail -n 1 "$LOGS/prepare.log")$( ((prepare_status == 0)) || echo " (it failed: $LOGS/prepare.log)")"
echo "  caches at the start: $(IFS=,; echo "${CACHES_AT_START[*]}" | sed 's/,/, /g')"
echo "  ccache in this run: $((ccache_hits1 - ccache_hits0)) hits, $((ccache_misses1 - ccache_misses0)) misses"
echo "tests: $total_passed passed, $total_failed failed"
for stage in "${STAGES[@]}"; do
  [[ ${RESULT[$stage]:-} == passed ]] || exit 1
done
[[ $lint_result == clean* ]] || exit 1
