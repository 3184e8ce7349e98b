#!/usr/bin/env bash
# PyTorch on Kubernetes end to end (`make demo-pytorch`): the local cluster, the CRD,
# cohort-operator, and examples/pytorch-ddp.yaml: a DistributedDataParallel training on three
# pods (gloo on CPUs, a plain init_process_group script) whose store is each pod's sidecar.
# Halfway through, the coordinator's pod is deleted: the training goes on (watch the steps),
# the job succeeds with no worker restarted. Prints the job's progress, rank 0's output and the
# job's events, then tears down what it started. torch comes from .venv-bench (bench/setup.sh,
# made here when missing; PyPI's torch wheel is large).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/demo-lib.sh
NS=${DEMO_NAMESPACE:-cohort-demo-pytorch}
PORT=${OPERATOR_PORT:-18082}
PYTHON=$ROOT/.venv-bench/bin/python3

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  say "torch in .venv-bench (bash bench/setup.sh; PyPI's wheel is large)"
  bash bench/setup.sh || exit 1
fi

demo_up

# The local cluster has no images: it runs the command a container names, here the venv's
# Python (a cluster runs the example's image, examples/pytorch-ddp/Dockerfile).
sed -e "s|command: \[python3, |command: [$PYTHON, |" examples/pytorch-ddp.yaml >"$WORK/pytorch-ddp.yaml"
say "kubectl apply -f examples/pytorch-ddp.yaml"
"$KUBECTL" -n "$NS" apply -f "$WORK/pytorch-ddp.yaml" || exit 1
last=""
phase=""
deleted=0
for _ in $(seq 1200); do
  phase=$("$KUBECTL" -n "$NS" get cjob pytorch-ddp -o jsonpath='{.status.phase}' 2>/dev/null)
  step=$("$KUBECTL" -n "$NS" logs pytorch-ddp-worker-0 -c trainer 2>/dev/null | grep -o "^step [0-9]* loss [0-9.]*" | tail -n 1)
  now="phase=$phase ready=$("$KUBECTL" -n "$NS" get cjob pytorch-ddp -o jsonpath='{.status.tasks.ready}' 2>/dev/null)/3 ${step:-}"
  if [[ "$now" != "$last" ]]; then
    echo "   $(date +%T) $now"
    last=$now
  fi
  if [[ $deleted == 0 && "$step" == "step 2"* ]]; then
    say "kubectl delete pod pytorch-ddp-coordinator (mid-training)"
    "$KUBECTL" -n "$NS" delete pod pytorch-ddp-coordinator --wait=false
    deleted=1
  fi
  [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
  sleep 0.5
done

say "kubectl get cjob -o wide"
"$KUBECTL" -n "$NS" get cjob -o wide
say "rank 0's output (kubectl logs pytorch-ddp-worker-0 -c trainer)"
tools/local-cluster logs "$NS/pytorch-ddp-worker-0" trainer 2>&1 | tail -n 4
say "events"
"$KUBECTL" -n "$NS" get events --field-selector involvedObject.kind=CoordinatedJob \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message
if [[ "$phase" != Succeeded ]]; then
  say "demo FAILED: the job is ${phase:-not started}; operator log:"
  tail -n 40 "$WORK/operator.log"
  exit 1
fi
say "demo finished: the training rode out its coordinator's deletion and the CoordinatedJob succeeded"
