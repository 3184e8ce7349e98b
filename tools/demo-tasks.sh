#!/usr/bin/env bash
# The task runtime on Kubernetes end to end (`make demo-tasks`): the local cluster, the CRD,
# cohort-operator, and examples/tasks-python.yaml: a Python driver's map-reduce over 2,000
# tasks on two worker pods of two Python task workers each. Prints the job's progress (tasks
# done and running, from the scheduler) until the driver exits, then the driver's output,
# then tears down what it started. Python and the cohort package come from .venv/runtime
# (made here when missing, as tests/python/run.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/demo-lib.sh
NS=${DEMO_NAMESPACE:-cohort-demo-tasks}
PORT=${OPERATOR_PORT:-18081}
PYTHON=$ROOT/.venv/runtime/bin/python

say "the cohort Python package in .venv/runtime (tools/runtime-venv.sh)"
bash tools/runtime-venv.sh || exit 1

demo_up

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
