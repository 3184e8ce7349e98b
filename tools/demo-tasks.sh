#!/usr/bin/env bash
# The task runtime on Kubernetes end to end (`make demo-tasks`): the local cluster, the CRD,
# cohort-operator, and examples/tasks-python.yaml: a Python driver's map-reduce over 2,000
# tasks on two worker pods of two Python task workers each. Prints the job's progress (tasks
# done and running, from the scheduler) until the driver exits, then the driver's output,
# then tears down what it started. Python and the cohort package come from .venv/runtime
# (made here when missing, as tests/python/run.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KUBECTL=build/tools/bin/kubectl
NS=${DEMO_NAMESPACE:-cohort-demo-tasks}
PORT=${OPERATOR_PORT:-18081}
PYTHON=$ROOT/.venv/runtime/bin/python
WORK=$(mktemp -d -t cohort-demo-tasks.XXXXXX)
OPERATOR=""
started_cluster=0

say() { echo "== $*"; }
cleanup() {
  [[ -n "$OPERATOR" ]] && kill -TERM "$OPERATOR" 2>/dev/null && wait "$OPERATOR" 2>/dev/null
  "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
  if [[ $started_cluster == 1 ]]; then
    say "stopping the local cluster"
    tools/local-cluster down >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

say "the cohort Python package in .venv/runtime (tools/runtime-venv.sh)"
bash tools/runtime-venv.sh || exit 1

say "local Kubernetes cluster (kube-apiserver, controller manager, pod runner; first build takes minutes)"
tools/local-cluster status >/dev/null 2>&1 || started_cluster=1
line=$(tools/local-cluster up | tail -n 1) || { echo "demo: the local cluster did not come up"; exit 1; }
export "${line?}"
echo "   $line"

say "installing the CoordinatedJob CRD"
"$KUBECTL" apply --server-side -f charts/cohort/crds/ >/dev/null &&
  "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null || exit 1
"$KUBECTL" delete namespace "$NS" --ignore-not-found --timeout=180s >/dev/null 2>&1
"$KUBECTL" create namespace "$NS" >/dev/null || exit 1

say "starting cohort-operator (namespace $NS; metrics on http://127.0.0.1:$PORT/metrics)"
build/bin/cohort-operator --namespace "$NS" --leader-elect=false \
  --http-listen "127.0.0.1:$PORT" >"$WORK/operator.log" 2>&1 &
OPERATOR=$!
for _ in $(seq 50); do curl -sf "127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.2; done

# The local cluster has no images: it runs the command a container names, here the venv's
# Python (a cluster runs the example's image, examples/tasks-python/Dockerfile).
sed -e "s|command: \[python3, |command: [$PYTHON, |" examples/tasks-python.yaml >"$WORK/tasks-python.yaml"
say "kubectl apply -f examples/tasks-python.yaml"
"$KUBECTL" -n "$NS" apply -f "$WORK/tasks-python.yaml" || exit 1
last=""
phase=""
for _ in $(seq 600); do
  phase=$("$KUBECTL" -n "$NS" get cjob tasks-python -o jsonpath='{.status.phase}' 2>/dev/null)
  now=$("$KUBECTL" -n "$NS" get cjob tasks-python \
    -o jsonpath='phase={.status.phase} worker pods ready={.status.tasks.ready}/{.spec.replicas} tasks done={.status.taskRuntime.succeeded} running={.status.taskRuntime.running} failed={.status.taskRuntime.failed}' 2>/dev/null)
  if [[ "$now" != "$last" ]]; then
    echo "   $(date +%T) $now"
    last=$now
  fi
  [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
  sleep 0.5
done

say "kubectl get cjob -o wide"
"$KUBECTL" -n "$NS" get cjob -o wide
say "the driver's output (kubectl logs tasks-python-driver -c driver)"
tools/local-cluster logs "$NS/tasks-python-driver" driver 2>&1 | tail -n 8
say "events"
"$KUBECTL" -n "$NS" get events --field-selector involvedObject.kind=CoordinatedJob \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message
if [[ "$phase" != Succeeded ]]; then
  say "demo FAILED: the job is ${phase:-not started}; operator log:"
  tail -n 40 "$WORK/operator.log"
  exit 1
fi
say "demo finished: the driver exited 0 and the CoordinatedJob succeeded"
