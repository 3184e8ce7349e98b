#!/usr/bin/env bash
# `make test`: every stage of the suite in order, each to the end even after another failed
# (a failed build stops the run: nothing else could pass). Prints a summary at the end: each
# stage, its result, its count of tests and its time, then the whole run's count as
# "N passed, N failed". Exit status 0 only when every stage passed.
#
# Stages (each also a make target of its own):
#   build         tools/deps.sh, the NVML header, cmake + ninja
#   programs      every program the tests call comes from a package our scripts install
#   format        clang-format and gofmt
#   unit          ctest, RelWithDebInfo
#   asan          ctest under AddressSanitizer and UndefinedBehaviorSanitizer
#   tsan          ctest under ThreadSanitizer
#   fuzz-smoke    every libFuzzer target for 10 s (make fuzz runs them 10^7 times in all)
#   compat        real jaxlib and TensorFlow clients (tests/compat)
#   python        the task runtime's Python package with real processes (tests/python)
#   bench-smoke   every benchmark scenario with tiny N, every anchor
#   e2e           the local cluster: Go tests, smoke, CRD, operator, chart, helm, dashboards
#   docker        the Dockerfile against the built programs
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=$(mktemp -d /tmp/cohort-test.XXXXXX)
STAGES=(build programs format unit asan tsan fuzz-smoke compat python bench-smoke e2e docker)
declare -A TARGET=([build]=build [programs]=programs-check [format]=format-check
  [unit]=unit-test [asan]=asan-test [tsan]=tsan-test [fuzz-smoke]=fuzz-smoke [compat]=compat-test [python]=python-test [bench-smoke]=bench-smoke
  [e2e]=e2e-test [docker]=docker-test)
declare -A RESULT PASSED FAILED SECS
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

for stage in "${STAGES[@]}"; do
  echo "======== make test: $stage (make ${TARGET[$stage]})"
  start=$SECONDS
  make --no-print-directory "${TARGET[$stage]}" 2>&1 | tee "$LOGS/$stage.log"
  status=${PIPESTATUS[0]}
  SECS[$stage]=$((SECONDS - start))
  read -r p f < <(count "$LOGS/$stage.log")
  PASSED[$stage]=$p
  FAILED[$stage]=$f
  if [[ $status == 0 ]]; then RESULT[$stage]=passed; else RESULT[$stage]=FAILED; fi
  # A stage that failed without a failed test still counts as one failure.
  if [[ $status != 0 && $f == 0 ]]; then FAILED[$stage]=1; fi
  total_passed=$((total_passed + PASSED[$stage]))
  total_failed=$((total_failed + FAILED[$stage]))
  echo "======== make test: $stage ${RESULT[$stage]} in ${SECS[$stage]} s"
  if [[ $stage == build && $status != 0 ]]; then
    echo "make test: the build failed; nothing else can pass"
    break
  fi
done

echo
echo "make test summary (logs in $LOGS)"
printf '  %-12s %-7s %7s %7s %8s\n' stage result passed failed seconds
for stage in "${STAGES[@]}"; do
  [[ -n ${RESULT[$stage]:-} ]] || { printf '  %-12s %-7s\n' "$stage" "not run"; continue; }
  printf '  %-12s %-7s %7s %7s %8s\n' "$stage" "${RESULT[$stage]}" "${PASSED[$stage]}" \
    "${FAILED[$stage]}" "${SECS[$stage]}"
done
echo "  total time: $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "tests: $total_passed passed, $total_failed failed"
for stage in "${STAGES[@]}"; do
  [[ ${RESULT[$stage]:-} == passed ]] || exit 1
done
