#!/usr/bin/env bash
# A real `helm install` of charts/cohort into a fresh namespace of the local cluster: the
# operator runs as a pod (in-cluster configuration, the chart's RBAC, leader election), and
# examples/quickstart.yaml, applied as a user would, reaches Succeeded. Needs `make build`
# (build/bin/cohort-operator and the programs the pods run); brings the local cluster up if it
# is not. Uninstalls and deletes the namespace at the end, pass or fail.
set -uo pipefail
TEST="helm install test"
NS="helm-install-$$"  # the release's, and the job's
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DEPLOY="$RELEASE-operator"
JOB_TIMEOUT=${JOB_TIMEOUT:-180}

diagnose_more() {
  if k get pod quickstart-coordinator >/dev/null 2>&1; then
    echo "--- quickstart-coordinator logs"
    k logs quickstart-coordinator --tail=40 2>&1
  fi
}

require "$HELM" "$KUBECTL"
require_built cohort-operator cohort-coordinator cohort-sidecar cohort-agent-example
cluster_start

# -- Install, as the README's quickstart does: the chart's defaults, so worker pods share a
# process namespace and each sidecar watches its workload's process.
if chart_install "$NS"; then
  pass "helm install: the operator Deployment is available"
else
  fail "helm install" "$out"
  diagnose
  finish
  exit 1
fi
[[ "$out" == *"examples/quickstart.yaml"* ]] && pass "helm install prints NOTES with next steps" ||
  fail "NOTES" "$out"

pod=$(k get pods -l app.kubernetes.io/component=operator -o jsonpath='{.items[0].metadata.name}')
ip=$(k get pod "$pod" -o jsonpath='{.status.podIP}')
if [[ "$(k get pod "$pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]; then
  pass "operator pod $pod is ready (/readyz)"
else
  fail "operator pod ready"
fi

# Leader election through the chart's Lease Role.
holder=""
for _ in $(seq 1 60); do
  holder=$(k get lease "$DEPLOY" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)
  [[ -n "$holder" ]] && break
  sleep 1
done
if [[ "$holder" == *"$pod"* ]]; then
  pass "the operator holds the Lease $NS/$DEPLOY ($holder)"
else
  fail "leader Lease" "holder '$holder', pod $pod"
fi

# The metrics endpoint the Service and ServiceMonitor point at (the host reaches pod IPs).
metrics=$(curl -sf --max-time 5 "http://$ip:8080/metrics")
if [[ "$metrics" == *cohort_operator_* ]]; then
  pass "operator /metrics on $ip:8080 serves cohort_operator_* series"
else
  fail "operator /metrics on $ip:8080" "${metrics:0:300}"
fi

# -- A job, as a user applies it.
if out=$(k apply -f "$ROOT/examples/quickstart.yaml" 2>&1); then
  pass "kubectl apply -f examples/quickstart.yaml"
else
  fail "kubectl apply -f examples/quickstart.yaml" "$out"
fi
phase=""
last=""
start=$SECONDS
while ((SECONDS - start < JOB_TIMEOUT)); do
  phase=$(k get cjob quickstart -o jsonpath='{.status.phase}' 2>/dev/null)
  if [[ "$phase" != "$last" ]]; then
    echo "     $((SECONDS - start))s: phase ${phase:-(none)}"
    last=$phase
  fi
  [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
  sleep 1
done
if [[ "$phase" == Succeeded ]]; then
  pass "quickstart reached Succeeded in $((SECONDS - start))s"
  restarts=$(k get cjob quickstart -o jsonpath='{.status.restarts}')
  [[ "${restarts:-0}" == 0 ]] && pass "quickstart needed no restart" ||
    fail "quickstart restarts" "$restarts"
else
  fail "quickstart reaches Succeeded within ${JOB_TIMEOUT}s" "phase '${phase}'"
fi

# The chart's default workload liveness (process): every worker pod shares its process
# namespace, and its sidecar found the workload's process and saw it exit (after the task
# shut down, so not as a failure; a failure would have shown as a restart above). The job
# succeeds on its workloads' exits, which a sidecar may log a moment later: waited for.
saw_exit() {
  k logs "$1" -c cohort-sidecar 2>/dev/null |
    grep -E 'workload process [0-9]+ \(.*cohort-agent-example.*\) exited; its task is' >/dev/null
}
for i in 0 1 2 3; do
  worker="quickstart-worker-$i"
  shared=$(k get pod "$worker" -o jsonpath='{.spec.shareProcessNamespace}' 2>&1)
  if ! log=$(k logs "$worker" -c cohort-sidecar 2>&1); then
    fail "$worker's sidecar log" "$log"
    continue
  fi
  if [[ "$shared" != true ]]; then
    fail "$worker has shareProcessNamespace" "'$shared'"
  elif ! grep -Eq 'workload process [0-9]+ (now runs )?\(.*cohort-agent-example' <<<"$log"; then
    fail "$worker's sidecar watched the workload's process" "$(grep -i workload <<<"$log" | head -5)"
  elif ! until_true 30 saw_exit "$worker"; then
    log=$(k logs "$worker" -c cohort-sidecar 2>&1)
    fail "$worker's sidecar saw the workload exit" "$(grep -i workload <<<"$log" | head -5)"
  else
    pass "$worker: shared process namespace; the sidecar watched the workload's process and saw it exit"
  fi
done

# The operator's per-job metrics saw it.
metrics=$(curl -sf --max-time 5 "http://$ip:8080/metrics")
if grep -Eq "^cohort_operator_job_phase\{[^}]*job=\"quickstart\"[^}]*phase=\"Succeeded\"[^}]*\} 1" <<<"$metrics" ||
  grep -Eq "^cohort_operator_job_phase\{[^}]*phase=\"Succeeded\"[^}]*job=\"quickstart\"[^}]*\} 1" <<<"$metrics"; then
  pass "cohort_operator_job_phase shows quickstart Succeeded"
else
  fail "cohort_operator_job_phase for quickstart" "$(grep cohort_operator_job_phase <<<"$metrics" | head -8)"
fi

# Least privilege, but enough: the API server refused the operator nothing. (This operator
# watches every namespace, so it may also meet jobs that earlier tests left in namespaces
# being deleted; the API server refuses new pods there with a 403 that is not about RBAC.)
# An unreadable or empty log proves nothing, so the log must hold the operator's startup.
if ! oplog=$(k logs "deployment/$DEPLOY" 2>&1); then
  fail "read the operator's log" "${oplog:0:300}"
elif ! grep -Eq 'cohort-operator .*: API server' <<<"$oplog" || ! grep -q 'caches synced:' <<<"$oplog"; then
  fail "the operator's log shows its startup (API server, caches synced)" "$(head -5 <<<"$oplog")"
else
  refused=$(grep -Ei 'forbidden|PERMISSION_DENIED' <<<"$oplog" |
    grep -v 'because it is being terminated' | head -5)
  if [[ -z "$refused" ]]; then
    pass "the chart's RBAC covered every call the operator made (no 403 in its log)"
  else
    fail "the API server refused the operator" "$refused"
  fi
fi

[[ $failed -eq 0 ]] || diagnose
finish
