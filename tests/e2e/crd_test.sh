#!/usr/bin/env bash
# The CoordinatedJob CRD on the local cluster's real kube-apiserver: it installs, a valid
# job is stored with its defaults and shows in `kubectl get cjob`, and invalid jobs are
# refused by the API server with a message that names the problem. Brings the cluster up
# if it is not, and down again if it brought it up.
set -uo pipefail
TEST="crd test"
NS="crd-test-$$"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CRD="$ROOT/charts/cohort/crds/coordinatedjobs.cohort.dev.yaml"

cluster_start  # the CRD's install is this test's first case
"$KUBECTL" create namespace "$NS" >/dev/null && NAMESPACES+=("$NS")

if out=$("$KUBECTL" apply --server-side -f "$CRD" 2>&1) &&
  "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null 2>&1; then
  pass "the CRD installs and is established"
else
  fail "the CRD installs and is established" "$out"
fi

if out=$(k apply -f "$ROOT/examples/quickstart.yaml" 2>&1); then
  defaults=$(k get cjob quickstart -o jsonpath='{.spec.successPolicy} {.spec.suspend} {.spec.failurePolicy.maxRestarts}')
  if [[ "$defaults" == "AllWorkers false 3" ]]; then
    pass "examples/quickstart.yaml is accepted, with defaults filled in"
  else
    fail "examples/quickstart.yaml defaults" "got '$defaults'"
  fi
else
  fail "examples/quickstart.yaml is accepted" "$out"
fi

header=$(k get cjob 2>&1 | head -n 1)
if [[ "$header" =~ NAME\ +PHASE\ +READY\ +REPLICAS\ +RESTARTS\ +AGE ]] && k get cjob quickstart >/dev/null 2>&1; then
  pass "kubectl get cjob shows Phase, Ready, Replicas, Restarts and Age"
else
  fail "printer columns" "$header"
fi

wide=$(k get cjob -o wide 2>&1 | head -n 1)
if [[ "$wide" =~ RESTARTS\ +COORD-RESTARTS\ +TASKS-DONE\ +TASKS-RUNNING\ +AGE ]]; then
  pass "kubectl get cjob -o wide adds Coord-Restarts, Tasks-Done and Tasks-Running"
else
  fail "the wide printer column" "$wide"
fi
state=$(k get cjob quickstart -o jsonpath='{.spec.coordinator.state.volume}')
if [[ "$state" == Auto ]]; then
  pass "spec.coordinator.state.volume defaults to Auto"
else
  fail "spec.coordinator.state.volume default" "got '$state'"
fi

out=$(k patch cjob quickstart --dry-run=server --type merge \
  -p '{"spec":{"coordinator":{"state":{"volume":"PersistentVolumeClaim"}}}}' 2>&1)
if [[ $? -ne 0 && "$out" == *"spec.coordinator.state cannot change once the job exists"* ]]; then
  pass "spec.coordinator.state cannot change once the job exists"
else
  fail "spec.coordinator.state is immutable" "$out"
fi

# What makes another job cannot change; what a new gang can take (replicas) can.
refused=""
for patch in '{"spec":{"framework":"jax"}}' \
  '{"spec":{"tasks":{"driver":{"template":{"spec":{"containers":[{"name":"d","image":"x"}]}}}}}}' \
  '{"spec":{"gangScheduling":{"podGroup":"Volcano"}}}'; do
  out=$(k patch cjob quickstart --dry-run=server --type merge -p "$patch" 2>&1) && refused+=" accepted:$patch"
  [[ "$out" == *"cannot"* ]] || refused+=" $out"
done
if [[ -z "$refused" ]] && k patch cjob quickstart --dry-run=server --type merge -p '{"spec":{"replicas":6}}' >/dev/null 2>&1; then
  pass "framework, spec.tasks and gangScheduling cannot change once the job exists; replicas can"
else
  fail "immutable fields" "$refused"
fi

if out=$(k patch cjob quickstart --subresource=status --type=merge \
  -p '{"status":{"phase":"Running","restarts":1,"tasks":{"total":4,"ready":4}}}' 2>&1) &&
  [[ "$(k get cjob quickstart -o jsonpath='{.status.phase}/{.status.tasks.ready}')" == "Running/4" ]]; then
  pass "status is a subresource the operator can write"
else
  fail "status subresource" "$out"
fi

# refused NAME EXPECTED-TEXT PATCH: a minimal valid job changed by PATCH (JSON merged into
# it; null removes a field) is refused by the API server (server-side dry run), and the
# message contains EXPECTED-TEXT.
refused() {
  local name=$1 want=$2 patch=$3 out
  out=$(python3 - "$patch" <<'PY' | k create --dry-run=server -f - 2>&1
import json, sys
job = {"apiVersion": "cohort.dev/v1alpha1", "kind": "CoordinatedJob",
       "metadata": {"name": "bad"},
       "spec": {"replicas": 4, "template": {"spec": {"containers": [
           {"name": "worker", "image": "ghcr.io/cohort/cohort-agent-example:0.1.0"}]}}}}
def merge(a, b):
    for key, value in b.items():
        if value is None:
            a.pop(key, None)
        elif isinstance(value, dict) and isinstance(a.get(key), dict):
            merge(a[key], value)
        else:
            a[key] = value
merge(job, json.loads(sys.argv[1]))
print(json.dumps(job))
PY
)
  if [[ $? -ne 0 && "$out" == *"$want"* ]]; then
    pass "refused: $name"
  else
    fail "refused: $name" "wanted '$want' in: $out"
  fi
}
refused "no replicas" 'spec.replicas: Invalid value: 0' '{"spec":{"replicas":0}}'
refused "an unknown framework" 'spec.framework: Unsupported value: "mxnet"' '{"spec":{"framework":"mxnet"}}'
refused "a template without containers" 'spec.template.spec.containers' '{"spec":{"template":{"spec":{"containers":[]}}}}'
refused "a malformed duration" 'spec.coordinator.heartbeatTimeout' '{"spec":{"coordinator":{"heartbeatTimeout":"ten seconds"}}}'
refused "an exit code both retryable and permanent" 'an exit code cannot be both retryable and permanent' \
  '{"spec":{"failurePolicy":{"retryableExitCodes":[137],"permanentExitCodes":[1,137]}}}'
refused "a negative restart limit" 'spec.failurePolicy.maxRestarts' '{"spec":{"failurePolicy":{"maxRestarts":-1}}}'
refused "no template" 'spec.template: Required value' '{"spec":{"template":null}}'
refused "a name too long for the pod hostnames" 'metadata.name must start with a lower-case letter and have at most 42' \
  '{"metadata":{"name":"a-name-that-is-far-too-long-for-worker-hostnames"}}'
refused "a name that is no DNS-1035 label" 'metadata.name must start with a lower-case letter' '{"metadata":{"name":"1st-job"}}'
refused "an unknown state volume" 'spec.coordinator.state.volume: Unsupported value: "HostPath"' \
  '{"spec":{"coordinator":{"state":{"volume":"HostPath"}}}}'
refused "a storage class on an emptyDir" 'storageClassName applies only to volume PersistentVolumeClaim or Auto' \
  '{"spec":{"coordinator":{"state":{"volume":"EmptyDir","storageClassName":"fast"}}}}'
refused "a size for no state" 'volume None keeps no state to size' \
  '{"spec":{"coordinator":{"state":{"volume":"None","size":"1Gi"}}}}'
refused "a malformed state size" 'spec.coordinator.state.size' \
  '{"spec":{"coordinator":{"state":{"volume":"PersistentVolumeClaim","size":"1GB"}}}}'
refused "a coordinator pod field that is not for scheduling" 'unknown field "spec.coordinator.podTemplate.spec.hostNetwork"' \
  '{"spec":{"coordinator":{"podTemplate":{"spec":{"hostNetwork":true}}}}}'
refused "hostNetwork in the workers' template" 'spec.template.spec: Invalid value: hostNetwork is not allowed: the workload'"'"'s sidecar serves the job'"'"'s coordinator' \
  '{"spec":{"template":{"spec":{"hostNetwork":true}}}}'
refused "hostNetwork in the driver's template" 'spec.tasks.driver.template.spec: Invalid value: hostNetwork is not allowed' \
  '{"spec":{"tasks":{"driver":{"template":{"spec":{"hostNetwork":true,"containers":[{"name":"driver","image":"x"}]}}}}}}'
refused "a RestartWorker rule in a job that is not recoverable" 'a RestartWorker failure rule needs spec.coordinator.recoverable true' \
  '{"spec":{"failurePolicy":{"rules":[{"action":"RestartWorker","onExitCodes":[3]}]}}}'
refused "a RestartWorker rule in a jax job" 'a RestartWorker failure rule needs' \
  '{"spec":{"framework":"jax","coordinator":{"recoverable":true},"failurePolicy":{"rules":[{"action":"RestartWorker","onExitCodes":[3]}]}}}'
refused "an uncounted gang restart on a straggler" 'RestartGangUncounted on Straggler would restart the gang without end' \
  '{"spec":{"failurePolicy":{"rules":[{"action":"RestartGangUncounted","onReasons":["Hang","Straggler"]}]}}}'

finish
