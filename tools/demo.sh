#!/usr/bin/env bash
# The main job end to end (`make demo`): the local Kubernetes cluster (a real
# kube-apiserver, see tools/README.md), the CoordinatedJob CRD, cohort-operator, and
# examples/quickstart.yaml: four workers that register with their job's coordinator,
# exchange keys, pass barriers and exit 0. Prints progress until the job succeeds, shows
# where the metrics are, then tears down what it started.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KUBECTL=build/tools/bin/kubectl
NS=${DEMO_NAMESPACE:-cohort-demo}
PORT=${OPERATOR_PORT:-18080}
WORK=$(mktemp -d -t cohort-demo.XXXXXX)
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

say "local Kubernetes cluster (kube-apiserver, controller manager, pod runner; first build takes minutes)"
tools/local-cluster status >/dev/null 2>&1 || started_cluster=1
line=$(tools/local-cluster up | tail -n 1) || { echo "demo: the local cluster did not come up"; exit 1; }
export "${line?}"
echo "   $line"

say "installing the CoordinatedJob CRD"
"$KUBECTL" apply --server-side -f charts/cohort/crds/ >/dev/null &&
  "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null || exit 1
# A namespace left by an earlier run (its deletion may still be in progress) goes first.
"$KUBECTL" delete namespace "$NS" --ignore-not-found --timeout=180s >/dev/null 2>&1
"$KUBECTL" create namespace "$NS" >/dev/null || exit 1

say "starting cohort-operator (namespace $NS; metrics on http://127.0.0.1:$PORT/metrics)"
build/bin/cohort-operator --namespace "$NS" --leader-elect=false \
  --http-listen "127.0.0.1:$PORT" >"$WORK/operator.log" 2>&1 &
OPERATOR=$!
for _ in $(seq 50); do curl -sf "127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.2; done

say "kubectl apply -f examples/quickstart.yaml"
"$KUBECTL" -n "$NS" apply -f examples/quickstart.yaml || exit 1
last=""
phase=""
for _ in $(seq 300); do
  phase=$("$KUBECTL" -n "$NS" get cjob quickstart -o jsonpath='{.status.phase}' 2>/dev/null)
  now=$("$KUBECTL" -n "$NS" get cjob quickstart \
    -o jsonpath='phase={.status.phase} workers ready={.status.tasks.ready}/{.spec.replicas} tasks registered={.status.tasks.registered} succeeded={.status.tasks.succeeded} restarts={.status.restarts}' 2>/dev/null)
  if [[ "$now" != "$last" ]]; then
    echo "   $(date +%T) $now"
    last=$now
  fi
  [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
  sleep 0.5
done

say "kubectl get pods (workers keep their logs; the coordinator is stopped)"
"$KUBECTL" -n "$NS" get pods -o wide
say "worker 0's output (kubectl logs quickstart-worker-0 -c worker; here from the pod runner's files)"
tools/local-cluster logs "$NS/quickstart-worker-0" worker 2>&1 | tail -n 8
say "events"
"$KUBECTL" -n "$NS" get events --field-selector involvedObject.kind=CoordinatedJob \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message
say "metrics: operator http://127.0.0.1:$PORT/metrics, and in every pod: coordinator :8477/metrics, sidecars :9477/metrics"
curl -s "127.0.0.1:$PORT/metrics" | grep -E '^cohort_operator_(jobs|job_restarts|reconcile_total)' | sed 's/^/   /'
if [[ "$phase" != Succeeded ]]; then
  say "demo FAILED: the job is ${phase:-not started}; operator log:"
  tail -n 40 "$WORK/operator.log"
  exit 1
fi
say "demo finished: the CoordinatedJob succeeded (status.phase=Succeeded)"
