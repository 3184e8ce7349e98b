#!/usr/bin/env bash
# The main job end to end (`make demo`): the local Kubernetes cluster (a real
# kube-apiserver, see tools/README.md), the CoordinatedJob CRD, cohort-operator, and
# examples/quickstart.yaml: four workers that register with their job's coordinator,
# exchange keys, pass barriers and exit 0. Prints progress until the job succeeds, shows
# where the metrics are, then tears down what it started.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/demo-lib.sh
NS=${DEMO_NAMESPACE:-cohort-demo}
PORT=${OPERATOR_PORT:-18080}

demo_up

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
