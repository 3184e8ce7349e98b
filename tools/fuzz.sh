#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang, ASan and UBSan into build-fuzz/, and
# runs each for SECONDS (default 300; `make fuzz`), or 20 s each for `make fuzz-smoke` (in
# make test). Each target starts from its checked-in seeds (tests/fuzz/corpus/<target>) plus
# what earlier runs found (build-fuzz/corpus/<target>); a crash leaves its input in
# build-fuzz/crashes/<target>/ and fails the run. Ends with "fuzz: N passed, N failed".
#
#   tools/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
build=${FUZZ_BUILD:-build-fuzz}
if ! [[ $secs =~ ^[0-9]+$ ]] || ((secs == 0)); then
  echo "tools/fuzz.sh: SECONDS must be a positive whole number, not \"$secs\"" >&2
  exit 2
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DCOHORT_FUZZ=ON >/dev/null
targets=()
for source in tests/fuzz/*_fuzzer.cc; do targets+=("$(basename "$source" .cc)"); done
ninja -C "$build" -j "${NINJA_JOBS:-$(nproc)}" "${targets[@]}"

passed=0
failed=0
for name in "${targets[@]}"; do
  target="$build/bin/$name"
  corpus="$build/corpus/$name"
  crashes="$build/crashes/$name/"
  mkdir -p "$corpus" "$crashes"
  seeds=()
  [[ -d tests/fuzz/corpus/$name ]] && seeds=("tests/fuzz/corpus/$name")
  echo "fuzz: $name for ${secs}s"
  if "$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes" "$corpus" "${seeds[@]}" >"$build/$name.log" 2>&1; then
    passed=$((passed + 1))
    grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$build/$name.log" | tail -1
  else
    failed=$((failed + 1))
    echo "fuzz: $name FAILED; the input is in $crashes, the log in $build/$name.log:"
    grep -E -A30 'ERROR|runtime error|deadly signal|Timeout' "$build/$name.log" | head -60
  fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
