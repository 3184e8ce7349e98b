#!/usr/bin/env bash
# How a worker pod's sidecar is given the pod's GPUs, on the local cluster with the real
# kube-scheduler and kube-controller-manager:
#
# - DRA: the test plays a DRA driver (a DeviceClass and a ResourceSlice of two devices on the
#   node; no kubelet plugin runs here, so the containers see no device). A job whose template
#   claims one device per worker (a ResourceClaimTemplate) gets one claim per worker pod,
#   allocated a device of its own and reserved for that pod, and its sidecar references the
#   same pod-level claim as the workload (so on a real node it sees exactly that device); the
#   job succeeds.
# - The device plugin: a worker asking for nvidia.com/gpu (the node's fake ones) has a sidecar
#   told how many to expect; it sees none (no NVML here) and says so in its log, naming the
#   way to give it the pod's GPUs.
set -uo pipefail
NS="gpu-test-$$"
source "$(dirname "$0")/lib.sh"

cluster_up
start_operator operator
NODE=$("$KUBECTL" get nodes -o jsonpath='{.items[0].metadata.name}')
CLASS="gpu.e2e-$$.example.com"
cleanup_dra() {
  "$KUBECTL" delete resourceslice "$NODE-e2e-$$" deviceclass "$CLASS" --ignore-not-found >/dev/null 2>&1
}
trap 'cleanup_dra; cleanup' EXIT

# ---- 1. DRA: a pod-level claim shared by the workload and the sidecar.
"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: $CLASS
spec:
  selectors:
    - cel:
        expression: device.driver == "$CLASS"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: $NODE-e2e-$$
spec:
  driver: $CLASS
  nodeName: $NODE
  pool: {name: $NODE, generation: 1, resourceSliceCount: 1}
  devices:
    - {name: gpu-0}
    - {name: gpu-1}
YAML
k apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-gpu
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly: {deviceClassName: $CLASS}
---
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: dra
spec:
  replicas: 2
  template:
    spec:
      resourceClaims:
        - {name: gpu, resourceClaimTemplateName: one-gpu}
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          args: [--steps, "16", --step-seconds, "0.5"]
          resources:
            claims: [{name: gpu}]
YAML
if wait_for cjob/dra '{.status.phase}' Running 90; then
  claims=$(k get resourceclaims -o jsonpath='{range .items[*]}{.status.reservedFor[*].name}={.status.allocation.devices.results[*].device} {end}')
  sidecars=""
  for i in 0 1; do
    sidecars+="$(field pod/dra-worker-$i '{.spec.initContainers[?(@.name=="cohort-sidecar")].resources.claims[*].name}')"
    sidecars+="/$(field pod/dra-worker-$i '{.spec.containers[0].resources.claims[*].name}') "
  done
  if [[ "$claims" == *"dra-worker-0=gpu-"* && "$claims" == *"dra-worker-1=gpu-"* &&
    "$claims" == *"=gpu-0 "* && "$claims" == *"=gpu-1 "* && "$sidecars" == "gpu/gpu gpu/gpu " ]]; then
    pass "DRA: each worker pod's claim holds a device of its own, and its sidecar shares the workload's claim"
  else
    fail "DRA claims" "claims '$claims', sidecar/workload claims '$sidecars'"
  fi
  wait_for cjob/dra '{.status.phase}' Succeeded 90 && pass "the DRA job succeeds" ||
    fail "the DRA job succeeds" "$(field cjob/dra '{.status}')"
else
  fail "the DRA job runs" "$(field cjob/dra '{.status}'; k get pods -o wide)"
fi

# ---- 2. The device plugin: a sidecar that cannot see its pod's GPU says so.
steps_job plugin 1 4 1
if wait_for cjob/plugin '{.status.phase}' Succeeded 90; then
  expected=$(field pod/plugin-worker-0 '{.spec.initContainers[?(@.name=="cohort-sidecar")].env[?(@.name=="COHORT_EXPECTED_GPUS")].value}')
  log=$(k logs plugin-worker-0 -c cohort-sidecar 2>&1)
  if [[ "$expected" == 1 && "$log" == *"cannot see the pod's GPUs: its workload asks for 1 (nvidia.com/gpu), the sidecar sees 0"*"--sidecar-gpu-access=visible-devices"* ]]; then
    pass "a sidecar that cannot see its pod's GPU says so in its log, with the way to give it"
  else
    fail "the sidecar's GPU visibility line" "expected '$expected'; $(grep -i gpu <<<"$log" | head -5)"
  fi
else
  fail "the device plugin job succeeds" "$(field cjob/plugin '{.status}')"
fi

finish
