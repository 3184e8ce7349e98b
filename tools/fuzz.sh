#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz in the clang ASan + UBSan build (FUZZ_BUILD,
# build-asan/ by default, configured by `make asan-test`, `make fuzz` or `make fuzz-smoke`), and
# runs each one, and each atheris target of tests/fuzz (Python, in .venv/runtime):
#   tools/fuzz.sh          (make fuzz) a fixed number of executions per target, from the
#                          table below: at least 10^7 in all
#   tools/fuzz.sh smoke    (make fuzz-smoke, in make test) 10 s per target, FUZZ_JOBS
#                          (default: the cores) at once
#   tools/fuzz.sh SECONDS  SECONDS per target
# Each target starts from its checked-in seeds (tests/fuzz/corpus/<target>) plus what earlier
# runs found (FUZZ_BUILD/fuzz/corpus/<target>); a crash leaves its input in
# FUZZ_BUILD/fuzz/crashes/<target>/ and fails the run. Prints each target's executions, and ends
# with "fuzz: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-runs}
build=${FUZZ_BUILD:-build-asan}
# Executions per target for `make fuzz`. The RPC target drives a real gRPC server per call
# (hundreds of inputs a second); the decoders run tens of thousands a second, and the TCPStore
# target a thousand (each input also runs on a fresh coordination core).
declare -A RUNS=(
  [rpc_handlers_fuzzer]=300000
  [task_runtime_fuzzer]=100000
  [state_files_fuzzer]=1000000
  [coordinated_job_fuzzer]=3000000
  [tcpstore_codec_fuzzer]=300000
  [config_files_fuzzer]=1000000
  [key_paths_fuzzer]=4000000
  [workload_outputs_fuzzer]=4000000
  [worker_handlers_fuzzer]=20000
)
if [[ $mode == smoke ]]; then
  limit=(-max_total_time=10)
elif [[ $mode =~ ^[1-9][0-9]*$ ]]; then
  limit=(-max_total_time="$mode")
elif [[ $mode != runs ]]; then
  echo "tools/fuzz.sh: give nothing (a fixed number of runs), \"smoke\" or SECONDS, not \"$mode\"" >&2
  exit 2
fi
if [[ ! -f "$build/build.ninja" ]] || ! grep -q 'rpc_handlers_fuzzer' "$build/build.ninja"; then
  echo "tools/fuzz.sh: $build is not a clang sanitizer build with the fuzz targets: run make fuzz" >&2
  exit 2
fi
# The libFuzzer targets (C++) and the atheris ones (Python: tests/fuzz/*_fuzzer.py, run by the
# task runtime's venv, which has atheris and the cohort package: tools/runtime-venv.sh). Both
# take libFuzzer's flags.
targets=()
python_targets=()
declare -A COMMAND=()
for source in tests/fuzz/*_fuzzer.cc; do
  name=$(basename "$source" .cc)
  targets+=("$name")
  COMMAND[$name]="$build/bin/$name"
done
for source in tests/fuzz/*_fuzzer.py; do
  name=$(basename "$source" .py)
  python_targets+=("$name")
  COMMAND[$name]="$PWD/.venv/runtime/bin/python $PWD/$source"
done
for name in "${targets[@]}" "${python_targets[@]}"; do
  [[ -n ${RUNS[$name]:-} ]] || { echo "tools/fuzz.sh: $name has no entry in RUNS" >&2; exit 2; }
done
ninja -C "$build" -j "${NINJA_JOBS:-$(nproc)}" "${targets[@]}"
if ((${#python_targets[@]} > 0)); then
  bash tools/runtime-venv.sh >/dev/null
fi

# One target, alone on a core: its result in $build/fuzz/NAME.result ("ok EXECUTIONS" or
# "failed"). FUZZ_JOBS targets run at once (default: the machine's cores; each is one thread).
run_target() {
  local name=$1 target corpus crashes seeds runs
  read -r -a target <<<"${COMMAND[$name]}"
  corpus="$build/fuzz/corpus/$name"
  crashes="$build/fuzz/crashes/$name/"
  mkdir -p "$corpus" "$crashes"
  seeds=()
  [[ -d tests/fuzz/corpus/$name ]] && seeds=("tests/fuzz/corpus/$name")
  local this_limit=("${limit[@]}")
  if [[ $mode == runs ]]; then this_limit=(-runs="${RUNS[$name]}"); fi
  if "${target[@]}" "${this_limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes" "$corpus" "${seeds[@]}" >"$build/fuzz/$name.log" 2>&1; then
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$build/fuzz/$name.log" | tail -1)
    echo "ok ${runs:-0}" >"$build/fuzz/$name.result"
  else
    echo failed >"$build/fuzz/$name.result"
  fi
}
jobs_at_once=${FUZZ_JOBS:-$(nproc)}
for name in "${targets[@]}" "${python_targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_at_once)); do wait -n; done
  rm -f "$build/fuzz/$name.result"
  if [[ $mode == runs ]]; then echo "fuzz: $name (-runs=${RUNS[$name]})"; else echo "fuzz: $name (${limit[*]})"; fi
  run_target "$name" &
done
wait
total_runs=0
passed=0
failed=0
for name in "${targets[@]}" "${python_targets[@]}"; do
  read -r result runs <"$build/fuzz/$name.result" || result=failed
  if [[ $result == ok ]]; then
    passed=$((passed + 1))
    total_runs=$((total_runs + runs))
    echo "fuzz: $name: $runs executions, no crash"
  else
    failed=$((failed + 1))
    echo "fuzz: $name FAILED; the input is in $build/fuzz/crashes/$name/, the log in $build/fuzz/$name.log:"
    grep -E -A30 'ERROR|runtime error|deadly signal|Timeout|Uncaught Python exception' "$build/fuzz/$name.log" | head -60
  fi
done
echo "fuzz: $total_runs executions in all"
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
