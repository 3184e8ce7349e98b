#!/usr/bin/env bash
# examples/tasks-python.yaml's map-reduce (2,000 map tasks and a 16-way reduce) on the local
# cluster with 2 and 8 worker pods of one Python worker each, and the same program on Ray from
# PyPI on this machine with as many workers (bench/tasks_mapreduce_ray.py): the figures of
# BENCHMARKS.md section 9 ("On the local cluster"). For each pod count: the driver's own time
# for the map-reduce (from its first submission to the result), and the job's time from
# `kubectl apply` to Succeeded (pods, sidecars and stores started, the driver's run, the end).
#
#   bash bench/tasks_k8s_bench.sh                  # writes bench/results/tasks_k8s.json
#   bash bench/tasks_k8s_bench.sh --smoke --out F  # make test: 200 tasks, 2 pods
#
# Needs the build, .venv/runtime (tests/python/run.sh) and .venv-bench-tasks
# (bench/setup_tasks.sh); brings the local cluster up when it is down (and down again after).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KUBECTL=build/tools/bin/kubectl
PYTHON=$ROOT/.venv/runtime/bin/python
RAY_PYTHON=$ROOT/.venv-bench-tasks/bin/python
OUT=bench/results/tasks_k8s.json
SHARDS=2000
PODS=(2 8)
while (($#)); do
  case $1 in
    --smoke) SHARDS=200; PODS=(2) ;;
    --out) OUT=$2; shift ;;
    *) echo "tasks k8s bench: unknown argument $1 (--smoke, --out FILE)"; exit 2 ;;
  esac
  shift
done
WORK=$(mktemp -d)
OPERATOR=""
started_cluster=0
NAMESPACES=()
cleanup() {
  [[ -n "$OPERATOR" ]] && kill -TERM "$OPERATOR" 2>/dev/null && wait "$OPERATOR" 2>/dev/null
  for ns in "${NAMESPACES[@]}"; do "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null 2>&1; done
  [[ $started_cluster == 1 ]] && tools/local-cluster down >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
for p in "$PYTHON" "$RAY_PYTHON"; do
  [[ -x $p ]] || { echo "tasks k8s bench: $p is missing (tests/python/run.sh, bench/setup_tasks.sh)"; exit 1; }
done

# Under tests/e2e/run.sh (COHORT_E2E_SHARED_CLUSTER) other tests share its cluster, up, with
# KUBECONFIG set: not brought up (an `up` that found the API slow would restart it) or down.
if [[ -z ${COHORT_E2E_SHARED_CLUSTER:-} ]]; then
  tools/local-cluster status >/dev/null 2>&1 || started_cluster=1
  line=$(tools/local-cluster up | tail -n 1) || { echo "tasks k8s bench: the local cluster did not come up"; exit 1; }
  export "${line?}"
fi
"$KUBECTL" apply --server-side -f charts/cohort/crds/ >/dev/null &&
  "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null || exit 1

runs=()
for pods in "${PODS[@]}"; do
  ns="tasks-bench-$pods-$$"
  NAMESPACES+=("$ns")
  "$KUBECTL" create namespace "$ns" >/dev/null
  # An operator for this namespace alone (the last one's stops), so that other tests'
  # operators can run beside it on the same cluster (tests/e2e/run.sh's lanes).
  [[ -n "$OPERATOR" ]] && kill -TERM "$OPERATOR" 2>/dev/null && wait "$OPERATOR" 2>/dev/null
  build/bin/cohort-operator --namespace "$ns" --leader-elect=false --http-listen 127.0.0.1:0 \
    --coordinator-poll 200ms >"$WORK/operator-$pods.log" 2>&1 &
  OPERATOR=$!
  # The job's time starts once the operator watches, as it would with one long running.
  synced=0
  for _ in $(seq 300); do
    grep -q 'caches synced' "$WORK/operator-$pods.log" && { synced=1; break; }
    kill -0 "$OPERATOR" 2>/dev/null || break
    sleep 0.1
  done
  if ((!synced)); then
    cat "$WORK/operator-$pods.log"
    echo "tasks k8s bench: the operator did not sync its caches within 30 s (its log above)"
    echo "tasks k8s bench: 0 passed, 1 failed"
    exit 1
  fi
  sed -e "s|command: \[python3, |command: [$PYTHON, |" \
    -e "s|^  replicas: 2|  replicas: $pods|" -e "s|workersPerPod: 2|workersPerPod: 1|" \
    -e "s|{name: SHARDS, value: \"2000\"}|{name: SHARDS, value: \"$SHARDS\"}|" \
    examples/tasks-python.yaml >"$WORK/job-$pods.yaml"
  start=$(date +%s.%N)
  "$KUBECTL" -n "$ns" apply -f "$WORK/job-$pods.yaml" >/dev/null || exit 1
  phase=""
  for _ in $(seq 1200); do
    phase=$("$KUBECTL" -n "$ns" get cjob tasks-python -o jsonpath='{.status.phase}' 2>/dev/null)
    [[ $phase == Succeeded || $phase == Failed ]] && break
    sleep 0.25
  done
  end=$(date +%s.%N)
  log=$("$KUBECTL" -n "$ns" logs tasks-python-driver -c driver 2>&1)
  driver=$(sed -nE 's/.*\(right\) in ([0-9.]+) s$/\1/p' <<<"$log")
  if [[ $phase != Succeeded || -z $driver ]]; then
    echo "tasks k8s bench: $pods pods: the job ended $phase; driver: $(tail -n 3 <<<"$log")"
    echo "tasks k8s bench: 0 passed, 1 failed"
    exit 1
  fi
  job=$(python3 -c "print(round($end - $start, 2))")
  ray=$("$RAY_PYTHON" bench/tasks_mapreduce_ray.py --workers "$pods" --shards "$SHARDS") ||
    { echo "tasks k8s bench: Ray's run failed"; echo "tasks k8s bench: 0 passed, 1 failed"; exit 1; }
  echo "tasks k8s bench: $pods worker pods: driver ${driver} s, job ${job} s; Ray with $pods workers: $ray"
  runs+=("{\"pods\": $pods, \"driver_seconds\": $driver, \"job_seconds\": $job, \"ray\": $ray}")
done
mkdir -p "$(dirname "$OUT")"
python3 - "$OUT" "$SHARDS" "${runs[@]}" <<'PY'
import json, platform, os, sys, time
out, shards, runs = sys.argv[1], int(sys.argv[2]), [json.loads(r) for r in sys.argv[3:]]
json.dump({"shards": shards, "runs": runs, "machine": {"cpus": os.cpu_count(),
           "python": platform.python_version()},
           "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
          open(out, "w"), indent=2)
PY
echo "tasks k8s bench: 1 passed, 0 failed"
