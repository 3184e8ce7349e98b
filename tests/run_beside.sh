#!/usr/bin/env bash
# tests/run_all.sh's stages that run beside another stage: LOGS STAGE=TARGET... runs
# `make TARGET` for each STAGE, one after the other, and leaves for run_all.sh to read
#   LOGS/STAGE.log     the stage's output
#   LOGS/STAGE.result  "STATUS SECONDS CPU_SECONDS" once it has ended
# run_all.sh starts it in a session of its own (so that its CPU does not count in the stage
# it runs beside) when that stage starts, and waits for the results when the stage has ended.
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=$1
shift
CHILD_CPU_FILE="$LOGS/.beside-times"
source tools/children_cpu.sh
for pair in "$@"; do
  stage=${pair%%=*}
  target=${pair#*=}
  start=$SECONDS
  children_cpu
  cpu_start=$CHILD_CPU
  make --no-print-directory "$target" >"$LOGS/$stage.log" 2>&1
  status=$?
  children_cpu
  echo "$status $((SECONDS - start)) $((CHILD_CPU - cpu_start))" >"$LOGS/$stage.result.tmp"
  mv "$LOGS/$stage.result.tmp" "$LOGS/$stage.result"
done
