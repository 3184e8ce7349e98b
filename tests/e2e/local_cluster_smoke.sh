#!/usr/bin/env bash
# Smoke test of the local cluster (tools/local-cluster): brings it up, runs pods that
# exercise what cohort's end-to-end tests rely on (pod networking and service names,
# native sidecars and emptyDir hand-off, a shared process namespace, exit codes, probes,
# deletion, the controller manager, the scheduler's GPU counting), and brings it down again. Exits non-zero if any check fails.
#
# If the cluster was already up, it is left up and only this test's namespace goes.
set -uo pipefail
TEST="local-cluster smoke"
NS="lc-smoke-$$"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TIMEOUT=${SMOKE_TIMEOUT:-90}

note() { echo "$TEST: $*"; }

# Its own cleanup: `up` and `down` are what this test checks, so it brings the cluster up and
# down itself (lib.sh's cluster_up is not used), and does neither twice.
cleanup() {
  set +e
  if [[ -n "${KUBECONFIG:-}" && ${down_done:-0} == 0 ]]; then
    "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
  fi
  if [[ $started_here == 1 && ${down_done:-0} == 0 ]]; then "$LC" down >/dev/null 2>&1; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# wait_until DESCRIPTION COMMAND...: retries COMMAND (its output dropped) until it succeeds or
# TIMEOUT seconds pass.
quietly() { "$@" >/dev/null 2>&1; }
wait_until() {
  local what=$1
  shift
  until_true "$TIMEOUT" quietly "$@" || {
    note "timed out waiting for $what"
    return 1
  }
}

phase_is() { [[ "$(field "pod/$1" '{.status.phase}')" == "$2" ]]; }
gone() { ! k get "$1" >/dev/null 2>&1; }
sidecar_stopped() { [[ -n "$(field "pod/$1" '{.status.initContainerStatuses[0].state.terminated.finishedAt}')" ]]; }
restarted() {
  local n
  n=$(field "pod/$1" '{.status.containerStatuses[0].restartCount}')
  ((${n:-0} >= 1))
}

# --- up ------------------------------------------------------------------------------
"$LC" status >/dev/null 2>&1 || started_here=1
if ! out=$("$LC" up); then
  echo "$out"
  fail "up"
  finish
  exit 1
fi
export KUBECONFIG=${out##*KUBECONFIG=}
if [[ "$(tail -n1 <<<"$out")" == "KUBECONFIG=$KUBECONFIG" && -f "$KUBECONFIG" ]] &&
  "$KUBECTL" get node -o jsonpath='{.items[0].status.conditions[?(@.type=="Ready")].status}' | grep -qx True; then
  pass "up prints KUBECONFIG last and the node is Ready"
else
  fail "up prints KUBECONFIG last and the node is Ready"
fi
"$KUBECTL" create namespace "$NS" >/dev/null
# The namespace's service account appears shortly after the namespace.
wait_until "service account" k get serviceaccount default

# --- two servers on one port, a Service and a headless Service -------------------------
for i in 0 1; do
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: web-$i, labels: {app: web}}
spec:
  hostname: web-$i
  subdomain: web-hl
  containers:
  - name: web
    image: python:3
    command: [sh, -c, 'echo "\$POD_NAME" > index.html && exec python3 -m http.server 8080']
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
YAML
done >"$WORK/web.yaml"
cat >>"$WORK/web.yaml" <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: web-hl}
spec: {clusterIP: None, selector: {app: web}, ports: [{port: 8080}]}
YAML
k apply -f "$WORK/web.yaml" >/dev/null
rm -f "$WORK/web.yaml"
if k wait --for=condition=Ready pod/web-0 pod/web-1 --timeout="${TIMEOUT}s" >/dev/null &&
  phase_is web-0 Running && phase_is web-1 Running; then
  pass "two pods listening on the same port are Running and Ready"
else
  fail "two pods listening on the same port are Running and Ready"
fi

ip0=$(field pod/web-0 '{.status.podIP}')
ip1=$(field pod/web-1 '{.status.podIP}')
if [[ -n "$ip0" && -n "$ip1" && "$ip0" != "$ip1" ]] && [[ "$(curl -s --max-time 5 "http://$ip1:8080/")" == web-1 ]]; then
  pass "pods have distinct addresses ($ip0, $ip1), reachable from the host"
else
  fail "pods have distinct addresses, reachable from the host" "'$ip0' '$ip1'"
fi

# --- a third pod reaches them by service name and hostname.subdomain -------------------
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  restartPolicy: Never
  containers:
  - name: curl
    image: curlimages/curl
    command:
    - sh
    - -c
    - |
      set -e
      get() { curl -sf --max-time 5 "\$1"; }
      case "\$(get http://web:8080/)" in web-0|web-1) ;; *) exit 11;; esac
      case "\$(get http://web.$NS.svc.cluster.local:8080/)" in web-0|web-1) ;; *) exit 12;; esac
      test "\$(get http://web-0.web-hl:8080/)" = web-0 || exit 13
      test "\$(get http://web-1.web-hl.$NS.svc.cluster.local:8080/)" = web-1 || exit 14
      sa=/var/run/secrets/kubernetes.io/serviceaccount
      curl -sf --max-time 5 --cacert \$sa/ca.crt -H "Authorization: Bearer \$(cat \$sa/token)" \
        "https://kubernetes.default.svc/api/v1/namespaces/\$(cat \$sa/namespace)/pods/web-0" >/dev/null && exit 15
      curl -sf --max-time 5 --cacert \$sa/ca.crt -H "Authorization: Bearer \$(cat \$sa/token)" \
        https://kubernetes.default.svc/version >/dev/null || exit 16
YAML
if wait_until "client to finish" phase_is client Succeeded; then
  pass "a pod reaches both by service name and hostname.subdomain, and the API with its token"
else
  fail "a pod reaches both by service name and hostname.subdomain, and the API with its token" \
    "exit $(field pod/client '{.status.containerStatuses[0].state.terminated.exitCode}')"
fi

# --- native sidecar hands a file to the workload through an emptyDir -------------------
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: handoff}
spec:
  restartPolicy: Never
  volumes: [{name: handoff, emptyDir: {}}]
  initContainers:
  - name: sidecar
    image: python:3
    restartPolicy: Always
    command: [python3, -c, 'import time; open("/handoff/rank.tmp","w").write("rank=7\n"); __import__("os").rename("/handoff/rank.tmp","/handoff/rank"); time.sleep(3600)']
    volumeMounts: [{name: handoff, mountPath: /handoff}]
  containers:
  - name: main
    image: python:3
    command: [sh, -c, 'while [ ! -f /handoff/rank ]; do sleep 0.1; done; cat /handoff/rank']
    volumeMounts: [{name: handoff, mountPath: /handoff}]
YAML
if wait_until "handoff to finish" phase_is handoff Succeeded &&
  wait_until "sidecar to stop" sidecar_stopped handoff &&
  [[ "$(k logs handoff -c main)" == rank=7 ]]; then
  pass "native sidecar + emptyDir hand-off: pod Succeeded, sidecar stopped, kubectl logs works"
else
  fail "native sidecar + emptyDir hand-off" "phase $(field pod/handoff '{.status.phase}')"
fi

# --- shareProcessNamespace: one PID namespace for the pod's containers ------------------
# main sees the sidecar's processes by their command lines, and /pause as PID 1; when the
# pod is done, nothing of the sidecar is left, not even the child it put in the background.
shared_marker="lc-smoke-shared-$NS"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: shared-pid}
spec:
  shareProcessNamespace: true
  restartPolicy: Never
  initContainers:
  - name: sidecar
    image: python:3
    restartPolicy: Always
    command: [sh, -c, 'python3 -c "import time; time.sleep(3600)" $shared_marker & exec python3 -c "import time; time.sleep(3600)" $shared_marker']
  containers:
  - name: main
    image: busybox
    env: [{name: NS, value: "$NS"}]
    command: [sh, -c, 'for i in \$(seq 100); do cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" "\n" >procs; if [ "\$(grep -cx -- "lc-smoke-shared-\$NS" procs)" = 2 ]; then tr "\0" " " </proc/1/cmdline; exit 0; fi; sleep 0.1; done; exit 1']
YAML
if wait_until "shared-pid to finish" phase_is shared-pid Succeeded &&
  wait_until "its sidecar to stop" sidecar_stopped shared-pid &&
  [[ "$(k logs shared-pid -c main)" == "/pause " ]] && ! pgrep -f "$shared_marker" >/dev/null; then
  pass "shareProcessNamespace: containers see each other's processes, /pause is PID 1, none is left"
else
  fail "shareProcessNamespace" "phase $(field pod/shared-pid '{.status.phase}'), main's log '$(k logs shared-pid -c main 2>&1 | head -3)', left: $(pgrep -f "$shared_marker" | tr '\n' ' ')"
fi

# --- exit codes ------------------------------------------------------------------------
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: exit3}
spec:
  restartPolicy: Never
  containers: [{name: main, image: busybox, command: [sh, -c, 'exit 3']}]
YAML
if wait_until "exit3 to fail" phase_is exit3 Failed &&
  [[ "$(field pod/exit3 '{.status.containerStatuses[0].state.terminated.exitCode}')" == 3 ]]; then
  pass "a container exiting 3 under restartPolicy Never: pod Failed, exitCode 3"
else
  fail "a container exiting 3 under restartPolicy Never: pod Failed, exitCode 3"
fi

# --- RestartAllContainers: a container's exit restarts the whole pod in place ----------
# The pod runner plays the kubelet's semantics of container restart rules; the API server's
# validation of the spec and of each status write is the real one.
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: in-place}
spec:
  restartPolicy: Never
  volumes: [{name: data, emptyDir: {}}]
  initContainers:
  - {name: helper, image: busybox, restartPolicy: Always, command: [sh, -c, 'sleep 3600'],
     volumeMounts: [{name: data, mountPath: /data}]}
  containers:
  - name: main
    image: busybox
    restartPolicy: Never
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [42]}}
    # The first run leaves a mark in the emptyDir and asks for the restart; the second finds it.
    command: [sh, -c, 'if [ -f /data/ran ]; then echo again; exit 0; fi; touch /data/ran; exit 42']
    volumeMounts: [{name: data, mountPath: /data}]
YAML
# The second run's "again" says the emptyDir outlived the first (the pod is the same one: a
# bare pod is never made again).
if wait_until "in-place to succeed" phase_is in-place Succeeded; then
  got="$(field pod/in-place '{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.reason} {.status.initContainerStatuses[0].restartCount} {.status.conditions[?(@.type=="AllContainersRestarting")].status}')"
  if [[ "$got" == "1 RestartingAllContainers 1 False" && "$(k logs in-place -c main)" == again ]]; then
    pass "an exit matching a RestartAllContainers rule restarts every container in place: emptyDir kept, restartCount 1 each, then Succeeded"
  else
    fail "RestartAllContainers in place" "status '$got'; main's log '$(k logs in-place -c main 2>&1 | head -3)'"
  fi
else
  fail "RestartAllContainers in place" "phase $(field pod/in-place '{.status.phase}'): $(field pod/in-place '{.status.containerStatuses}')"
fi

# --- liveness probe restarts a container -----------------------------------------------
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: unhealthy}
spec:
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'touch healthy; sleep 2; rm healthy; sleep 3600']
    livenessProbe: {exec: {command: [test, -f, healthy]}, periodSeconds: 1, failureThreshold: 1}
YAML
if wait_until "a restart" restarted unhealthy; then
  pass "a failing liveness probe restarts the container"
else
  fail "a failing liveness probe restarts the container"
fi

# --- deleting a pod stops its processes ------------------------------------------------
marker="lc-smoke-marker-$NS"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: doomed}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'sleep 3600 & exec python3 -c "import time; time.sleep(3600)" $marker']
YAML
if wait_until "doomed to run" phase_is doomed Running && wait_until "its process" pgrep -f "$marker" &&
  k delete pod doomed --timeout="${TIMEOUT}s" >/dev/null && ! pgrep -f "$marker" >/dev/null &&
  gone pod/doomed; then
  pass "deleting a pod stops its processes and removes the pod"
else
  fail "deleting a pod stops its processes and removes the pod"
fi

# --- the controller manager: Deployments and garbage collection ------------------------
k create deployment pause --image=registry.k8s.io/pause:3.10 >/dev/null
if k rollout status deployment/pause --timeout="${TIMEOUT}s" >/dev/null &&
  [[ "$(k get pods -l app=pause -o jsonpath='{.items[0].status.phase}')" == Running ]]; then
  pass "a Deployment creates a running pod"
else
  fail "a Deployment creates a running pod"
fi

k create configmap owner >/dev/null
owner_uid=$(field configmap/owner '{.metadata.uid}')
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: "$owner_uid"}]
YAML
k delete configmap owner >/dev/null
if wait_until "dependent to be collected" gone configmap/dependent; then
  pass "an owner-referenced ConfigMap is garbage-collected with its owner"
else
  fail "an owner-referenced ConfigMap is garbage-collected with its owner"
fi

# --- the scheduler: the real kube-scheduler counts the node's 4 (fake) GPUs --------------
gpu_pod() { # gpu_pod NAME GPUS
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: busybox, command: [sleep, "600"], resources: {limits: {nvidia.com/gpu: $2}}}
YAML
}
unschedulable() { [[ "$(field "pod/$1" '{.status.conditions[?(@.type=="PodScheduled")].reason}')" == Unschedulable ]]; }
gpu_pod gpus-3 3
gpu_pod gpus-2 2
if wait_until "the 3-GPU pod to run" phase_is gpus-3 Running && wait_until "the 2-GPU pod to wait" unschedulable gpus-2 &&
  [[ "$(field pod/gpus-3 '{.spec.nodeName}')" == local &&
    "$(field pod/gpus-2 '{.status.conditions[?(@.type=="PodScheduled")].message}')" == *"Insufficient nvidia.com/gpu"* ]]; then
  k delete pod gpus-3 --wait=false >/dev/null
  if wait_until "the 2-GPU pod to run once 3 GPUs are free" phase_is gpus-2 Running; then
    pass "kube-scheduler places pods by the node's GPUs: 3 of 4 taken, a 2-GPU pod waits until they are free"
  else
    fail "a waiting GPU pod is placed once GPUs are free"
  fi
else
  fail "kube-scheduler counts GPUs" "$(k get pods -o wide 2>&1; field pod/gpus-2 '{.status.conditions}')"
fi
k delete pod gpus-2 gpus-3 --wait=false >/dev/null 2>&1

# --- down ------------------------------------------------------------------------------
# The namespace goes first, so the next `up` of this cluster does not restart its pods.
"$KUBECTL" delete namespace "$NS" --timeout="${TIMEOUT}s" >/dev/null 2>&1
if [[ $started_here == 1 ]]; then
  down_done=1
  "$LC" down >/dev/null
  namespaces=$(ip netns list 2>/dev/null | grep -c '^cohort-' || true)
  if ! "$LC" status >/dev/null 2>&1 && [[ $namespaces == 0 ]] && ! ip link show cohort0 >/dev/null 2>&1 &&
    ! pgrep -f "$marker" >/dev/null && ! pgrep -f "build/tools/bin/" >/dev/null; then
    pass "down stops every process and removes the network namespaces and bridge"
  else
    fail "down stops every process and removes the network namespaces and bridge"
  fi
else
  note "the cluster was already up; leaving it up"
fi

finish
