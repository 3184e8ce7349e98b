#!/usr/bin/env bash
# Isolation on a shared cluster (docs/security.md), on the local cluster's real kube-apiserver,
# with the chart installed by a real `helm install` (the operator runs as a pod) with its
# ValidatingAdmissionPolicy on:
# - the API server enforces Pod Security: a privileged pod is refused in a namespace labelled
#   pod-security.kubernetes.io/enforce=restricted; the examples' pod templates pass there, and
#   examples/quickstart.yaml runs to Succeeded there (the operator's coordinator and worker pods,
#   sidecar included, are admitted); a job whose template breaks the standard fails with
#   reason InvalidSpec and the API server's message;
# - each job's NetworkPolicy: its exact content, owned by its job, selecting the job's pods and
#   the operator's pod; written back after an edit, made again after a delete, never rewritten
#   when nothing changed, gone with its job. (The local cluster has no network plugin that
#   enforces NetworkPolicy: what is checked is the object.)
# - the chart's ValidatingAdmissionPolicy: every privilege the values do not allow is refused
#   with the policy's message, what they allow is admitted, and namespaces outside its
#   namespaceSelector are not checked.
# Needs `make build`; brings the local cluster up if it is not. Uninstalls and deletes its
# namespaces at the end, pass or fail.
set -uo pipefail
TEST="isolation test"
NS="isolation-$$"       # the jobs: restricted Pod Security, the admission policy's selector
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SYS="isolation-sys-$$"  # the release
MON="isolation-mon-$$"  # networkPolicy.metricsNamespace (need not exist)

require "$HELM" "$KUBECTL"
require_built cohort-operator cohort-coordinator cohort-sidecar cohort-agent-example
cluster_start

# The jobs' namespace: restricted Pod Security, enforced, and the label the admission policy's
# binding selects.
add_namespace "$NS" restricted "cohort-isolation-test=$$"

# ---- Pod Security admission is enforced here: a privileged pod is refused.
out=$(k apply -f - 2>&1 <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: privileged}
spec:
  containers:
    - name: c
      image: ghcr.io/cohort/cohort-agent-example:0.1.0
      securityContext: {privileged: true}
YAML
)
if [[ $? -ne 0 && "$out" == *'violates PodSecurity "restricted:latest"'*privileged* ]] &&
  ! k get pod privileged >/dev/null 2>&1; then
  pass "the API server enforces restricted Pod Security in $NS: a privileged pod is refused"
else
  fail "a privileged pod in a restricted namespace is refused" "$out"
fi

# ---- Install the chart: the operator watches $NS, job NetworkPolicies on (the default) with
# $MON as the metrics namespace, the admission policy on for namespaces labelled like $NS.
if chart_install "$SYS" --set "watchNamespace=$NS" --set "networkPolicy.metricsNamespace=$MON" \
  --set admissionPolicy.enabled=true \
  --set-string "admissionPolicy.namespaceSelector.matchLabels.cohort-isolation-test=$$" \
  --set 'admissionPolicy.allowedCapabilities={NET_BIND_SERVICE}' \
  --set 'admissionPolicy.allowedServiceAccounts={trainer}'; then
  pass "helm install with admissionPolicy.enabled=true: the operator is available"
else
  fail "helm install" "$out"
  diagnose
  finish
  exit 1
fi
operator_pod=$("$KUBECTL" -n "$SYS" get pods -l app.kubernetes.io/component=operator \
  -o jsonpath='{.items[0].metadata.name}')
policy_name="$SYS-$RELEASE-operator"
if "$KUBECTL" get validatingadmissionpolicy "$policy_name" >/dev/null 2>&1 &&
  "$KUBECTL" get validatingadmissionpolicybinding "$policy_name" >/dev/null 2>&1; then
  pass "the chart made ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding $policy_name"
else
  fail "the admission policy objects exist" "$("$KUBECTL" get validatingadmissionpolicy 2>&1)"
fi
# The API server type-checks the expressions against the CRD's schema; it reports what it
# cannot check in status.typeChecking (a typo such as `variables.pdo` would show here).
warnings=""
checked() {
  warnings=$("$KUBECTL" get validatingadmissionpolicy "$policy_name" \
    -o jsonpath='{.status.typeChecking.expressionWarnings}' 2>/dev/null)
  [[ -n "$("$KUBECTL" get validatingadmissionpolicy "$policy_name" -o jsonpath='{.status.observedGeneration}' 2>/dev/null)" ]]
}
if until_true 30 checked && [[ -z "$warnings" ]]; then
  pass "the policy's expressions type-check without warnings"
else
  fail "the policy's expressions type-check" "${warnings:-no status.observedGeneration}"
fi

# ---- The admission policy. A job whose template asks for PATCH (a JSON merge patch onto a
# small job's template spec): refused with the policy's message, or admitted.
# admission NAME PATCH [apply flags]: prints kubectl's output, exit status kubectl's.
admission() {
  local name=$1 patch=$2
  shift 2
  python3 - "$name" "$patch" >"$WORK/$name.json" <<'PY'
import json, sys
name, patch = sys.argv[1], json.loads(sys.argv[2])
spec = {"containers": [{"name": "worker", "image": "ghcr.io/cohort/cohort-agent-example:0.1.0",
                        "args": ["--steps", "1"]}]}
def merge(a, b):
    for k, v in b.items():
        a[k] = merge(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return a
print(json.dumps({"apiVersion": "cohort.dev/v1alpha1", "kind": "CoordinatedJob",
                  "metadata": {"name": name},
                  "spec": {"replicas": 1, "template": {"spec": merge(spec, patch)}}}))
PY
  "$KUBECTL" apply -f "$WORK/$name.json" "$@" 2>&1
}
refused() {  # refused WHAT NAME PATCH MESSAGE
  local what=$1 name=$2 patch=$3 want=$4 out
  if out=$(admission "$name" "$patch" -n "$NS"); then
    fail "the admission policy refuses $what" "admitted: $out"
  elif [[ "$out" == *"ValidatingAdmissionPolicy '$policy_name'"*"$want"* ]] &&
    ! k get cjob "$name" >/dev/null 2>&1; then
    pass "the admission policy refuses $what: ...${want}..."
  else
    fail "the admission policy refuses $what" "wanted '$want' from the policy in: $out"
  fi
}
admitted() {  # admitted WHAT NAME PATCH [NAMESPACE]: a server-side dry run, nothing is made
  local what=$1 name=$2 patch=$3 ns=${4:-$NS} out
  if out=$(admission "$name" "$patch" -n "$ns" --dry-run=server); then
    pass "the admission policy admits $what"
  else
    fail "the admission policy admits $what" "$out"
  fi
}
c0='"containers": [{"name": "worker", "image": "ghcr.io/cohort/cohort-agent-example:0.1.0"'
refused "a privileged container" priv "{$c0, \"securityContext\": {\"privileged\": true}}]}" \
  "a privileged container (securityContext.privileged: true) is not allowed for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowPrivileged)"
refused "a privileged init container" privinit \
  '{"initContainers": [{"name": "setup", "image": "x", "securityContext": {"privileged": true}}]}' \
  "admissionPolicy.allowPrivileged"
# (hostNetwork is refused by the CRD itself, before any policy: tests/e2e/crd_test.sh.)
refused "hostIPC" hostipc '{"hostIPC": true}' \
  "hostNetwork, hostPID and hostIPC are not allowed for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowHostNamespaces)"
refused "hostPID" hostpid '{"hostPID": true}' "admissionPolicy.allowHostNamespaces"
refused "a hostPath volume" hostpath '{"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}' \
  "hostPath volumes are not allowed for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowHostPath)"
refused "a hostPort" hostport "{$c0, \"ports\": [{\"containerPort\": 80, \"hostPort\": 80}]}]}" \
  "hostPort is not allowed for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowHostPorts)"
refused "runAsUser 0 in the pod" rootpod '{"securityContext": {"runAsUser": 0}}' \
  "runAsUser 0 (root) is not allowed for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowRunAsRoot)"
refused "runAsUser 0 in a container" rootcontainer "{$c0, \"securityContext\": {\"runAsUser\": 0}}]}" \
  "admissionPolicy.allowRunAsRoot"
refused "an added capability not allowed (SYS_ADMIN)" capsysadmin \
  "{$c0, \"securityContext\": {\"capabilities\": {\"add\": [\"NET_BIND_SERVICE\", \"SYS_ADMIN\"]}}}]}" \
  "capabilities.add may name only NET_BIND_SERVICE for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowedCapabilities)"
refused "a service account not allowed" sa '{"serviceAccountName": "cluster-admin-sa"}' \
  "serviceAccountName may be only default, trainer for CoordinatedJobs on this cluster (cohort chart value admissionPolicy.allowedServiceAccounts)"
refused "a service account not allowed, in the old field" saold '{"serviceAccount": "cluster-admin-sa"}' \
  "admissionPolicy.allowedServiceAccounts"
admitted "a plain template" plain '{}'
admitted "an allowed capability (NET_BIND_SERVICE), service account (trainer) and user (1000)" allowed \
  "{\"serviceAccountName\": \"trainer\", \"securityContext\": {\"runAsUser\": 1000}, $c0, \"securityContext\": {\"capabilities\": {\"add\": [\"NET_BIND_SERVICE\"]}}}]}"
admitted "a privileged container in a namespace outside its namespaceSelector ($SYS)" privsys \
  "{$c0, \"securityContext\": {\"privileged\": true}}]}" "$SYS"
# A task runtime job's driver template is held to the same rules as the workers'.
python3 - >"$WORK/privdriver.json" <<'PY'
import json
plain = {"containers": [{"name": "worker", "image": "ghcr.io/cohort/cohort-agent-example:0.1.0"}]}
driver = {"containers": [{"name": "driver", "image": "ghcr.io/cohort/cohort-agent-example:0.1.0",
                          "securityContext": {"privileged": True}}]}
print(json.dumps({"apiVersion": "cohort.dev/v1alpha1", "kind": "CoordinatedJob",
                  "metadata": {"name": "privdriver"},
                  "spec": {"replicas": 1, "template": {"spec": plain},
                           "tasks": {"driver": {"template": {"spec": driver}}}}}))
PY
if out=$("$KUBECTL" apply -n "$NS" -f "$WORK/privdriver.json" 2>&1); then
  fail "the admission policy refuses a privileged task runtime driver" "admitted: $out"
elif [[ "$out" == *"ValidatingAdmissionPolicy '$policy_name'"*"admissionPolicy.allowPrivileged"* ]]; then
  pass "the admission policy refuses a privileged task runtime driver"
else
  fail "the admission policy refuses a privileged task runtime driver" "$out"
fi

# ---- The examples' pod templates pass restricted Pod Security: each as a Pod, dry run.
for example in quickstart jax-cpu tasks-python; do
  if ! "$KUBECTL" create --dry-run=client -o json -f "$ROOT/examples/$example.yaml" >"$WORK/$example.all.json" 2>"$WORK/$example.err"; then
    fail "read examples/$example.yaml" "$(cat "$WORK/$example.err")"
    continue
  fi
  python3 - "$WORK/$example.all.json" >"$WORK/$example.pod.json" <<'PY'
import json, sys
text, objects, at = open(sys.argv[1]).read(), [], 0
while text[at:].strip():  # one JSON document per object
    o, end = json.JSONDecoder().raw_decode(text[at:].lstrip())
    at = len(text) - len(text[at:].lstrip()) + end
    objects += o.get("items", [o]) if o.get("kind") == "List" else [o]
for o in objects:
    if o["kind"] == "CoordinatedJob":
        templates = [("-template", o["spec"]["template"])]
        if "tasks" in o["spec"]:  # a task runtime job's driver
            templates.append(("-driver-template", o["spec"]["tasks"]["driver"]["template"]))
        for suffix, t in templates:
            print(json.dumps({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": o["metadata"]["name"] + suffix},
                              "spec": t["spec"]}))
PY
  if out=$(k create --dry-run=server -f "$WORK/$example.pod.json" 2>&1) && [[ "$out" != *Warning* ]]; then
    pass "examples/$example.yaml's pod template is admitted under restricted Pod Security"
  else
    fail "examples/$example.yaml's pod template under restricted Pod Security" "$out"
  fi
done

# ---- examples/quickstart.yaml runs there: the coordinator and the workers with their sidecar
# are admitted, and it succeeds.
if out=$(k apply -f "$ROOT/examples/quickstart.yaml" 2>&1); then
  pass "the admission policy admits examples/quickstart.yaml (a real create)"
else
  fail "kubectl apply -f examples/quickstart.yaml" "$out"
fi
expect_success quickstart 180 "examples/quickstart.yaml reaches Succeeded in the restricted namespace"
# Workers are made once the coordinator is ready; the finished workers stay for their logs.
# The job succeeds once every workload container exited 0; a pod's phase follows once its
# sidecar has stopped too.
worker_phases() { k get pods -l cohort.dev/job=quickstart,cohort.dev/role=worker -o jsonpath='{range .items[*]}{.metadata.name}:{.status.phase} {end}'; }
workers_succeeded() { [[ "$(worker_phases)" == "quickstart-worker-0:Succeeded quickstart-worker-1:Succeeded quickstart-worker-2:Succeeded quickstart-worker-3:Succeeded " ]]; }
if until_true 60 workers_succeeded; then
  pass "its coordinator and its workers were admitted; the workers: $(worker_phases)"
else
  fail "quickstart's workers" "'$(worker_phases)'"
fi
sc=$(k get pod quickstart-worker-0 -o jsonpath='{.spec.initContainers[?(@.name=="cohort-sidecar")].securityContext}')
if python3 -c '
import json, sys
sc = json.loads(sys.argv[1])
assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
              "runAsUser": 65532, "runAsGroup": 65532, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}, sc' "$sc" 2>"$WORK/sc.err"; then
  pass "the injected sidecar's securityContext is restricted: $sc"
else
  fail "the sidecar's securityContext" "$(tail -1 "$WORK/sc.err")"
fi

# ---- The job's NetworkPolicy, exactly.
# expected_policy JOB: the spec the operator must write for JOB here.
expected_policy() {
  python3 - "$1" "$SYS" "$MON" "$RELEASE" <<'PY'
import json, sys
job, sys_ns, mon, release = sys.argv[1:]
own = {"matchLabels": {"app.kubernetes.io/managed-by": "cohort-operator", "cohort.dev/job": job}}
print(json.dumps({
    "podSelector": own,
    "policyTypes": ["Ingress"],
    "ingress": [
        {"from": [{"podSelector": own}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": sys_ns}},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator",
                                                   "app.kubernetes.io/instance": release,
                                                   "app.kubernetes.io/name": "cohort"}}}],
         "ports": [{"protocol": "TCP", "port": 8476}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": mon}}}],
         "ports": [{"protocol": "TCP", "port": 8477}, {"protocol": "TCP", "port": 9477}]},
    ]}, sort_keys=True))
PY
}
policy_spec() { k get networkpolicy "$1-isolation" -o json 2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["spec"], sort_keys=True))' 2>/dev/null; }
policy_is() { [[ "$(policy_spec "$1")" == "$(expected_policy "$1")" ]]; }
if policy_is quickstart; then
  pass "NetworkPolicy quickstart-isolation: the job's pods on every port, the operator's pods on 8476, $MON on 8477 and 9477, nothing else"
else
  fail "NetworkPolicy quickstart-isolation's spec" "got $(policy_spec quickstart), want $(expected_policy quickstart)"
fi
owner=$(k get networkpolicy quickstart-isolation -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].uid}/{.metadata.ownerReferences[0].controller}')
[[ "$owner" == "CoordinatedJob/quickstart/$(field cjob/quickstart '{.metadata.uid}')/true" ]] &&
  pass "it is owned by its CoordinatedJob (controller reference)" || fail "the policy's owner" "$owner"
ops=$("$KUBECTL" -n "$SYS" get pods -l app.kubernetes.io/component=operator,app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/name=cohort \
  -o jsonpath='{.items[*].metadata.name}')
sys_label=$("$KUBECTL" get namespace "$SYS" -o jsonpath='{.metadata.labels.kubernetes\.io/metadata\.name}')
[[ -n "$ops" && "$ops" == "$operator_pod" && "$sys_label" == "$SYS" ]] &&
  pass "its operator rule selects the operator's pod $operator_pod (namespace $SYS by its kubernetes.io/metadata.name label)" ||
  fail "the operator rule selects the operator's pod" "'$ops' vs '$operator_pod', namespace label '$sys_label'"
generation=$(k get networkpolicy quickstart-isolation -o jsonpath='{.metadata.generation}')
[[ "$generation" == 1 ]] && pass "never rewritten while nothing changed (generation 1 after the whole job)" ||
  fail "the policy was rewritten" "generation $generation"

# ---- A job whose template breaks restricted Pod Security fails, naming it.
k apply -f - >/dev/null <<'YAML'
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata: {name: unrestricted}
spec:
  replicas: 1
  template:
    spec:
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
YAML
failed_job() { [[ "$(field cjob/unrestricted '{.status.phase}')" == Failed ]]; }
if until_true 60 failed_job; then
  got=$(field cjob/unrestricted '{.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')
  [[ "$got" == "InvalidSpec: the API server refused Pod unrestricted-worker-0:"*'violates PodSecurity "restricted:latest"'* ]] &&
    pass "a template that breaks restricted Pod Security fails the job: ${got:0:160}..." ||
    fail "the unrestricted job's reason" "$got"
else
  fail "a job whose template breaks restricted Pod Security fails" "phase '$(field cjob/unrestricted '{.status.phase}')'"
fi

# ---- Repair, while a job runs: an edited policy is written back, a deleted one made again;
# the policy goes with its job.
restricted_sleeper sleeper
running() { [[ "$(field cjob/sleeper '{.status.phase}')" == Running ]]; }
if until_true 60 running && policy_is sleeper; then
  selected=$(k get pods -l app.kubernetes.io/managed-by=cohort-operator,cohort.dev/job=sleeper -o name | sort | xargs)
  [[ "$selected" == "pod/sleeper-coordinator pod/sleeper-worker-0" ]] &&
    pass "its pod selector selects every pod of the job, coordinator and workers ($selected)" ||
    fail "the policy's pod selector" "selects '$selected'"
  # Mutual TLS (the chart's jobTls.mode: operator): the job's Secret holds its certificates,
  # its coordinator requires a client certificate of the job's CA, and its sidecar presents
  # one. From this machine, at the coordinator pod's IP, as the operator dials it.
  keys=$(k get secret sleeper-token -o json | python3 -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin)["data"])))')
  [[ "$keys" == "ca.crt client.crt client.key coordinator.crt coordinator.key token" ]] &&
    pass "the job's Secret holds its token and its certificates ($keys)" || fail "the job's Secret's keys" "'$keys'"
  k get configmap sleeper-coordinator -o jsonpath='{.data.coordinator\.yaml}' | grep -q '^tls-client-ca: /var/run/secrets/cohort/ca.crt$' &&
    pass "its coordinator is configured for mutual TLS (tls-client-ca)" ||
    fail "the coordinator's ConfigMap asks for client certificates" "$(k get configmap sleeper-coordinator -o jsonpath='{.data.coordinator\.yaml}')"
  for job in sleeper quickstart; do
    mkdir -p "$WORK/$job"
    for key in token ca.crt client.crt client.key; do
      k get secret "$job-token" -o jsonpath="{.data.${key//./\\.}}" | base64 -d >"$WORK/$job/$key"
    done
  done
  ip=$(k get pod sleeper-coordinator -o jsonpath='{.status.podIP}')
  sleeper_ctl() {  # [TLS flags...] ARGS: cohortctl with sleeper's token at its coordinator
    ctl sleeper --tls-server-name "sleeper-coordinator.$NS.svc" "$@" 2>&1
  }
  mine=(--tls-ca "$WORK/sleeper/ca.crt" --tls-cert "$WORK/sleeper/client.crt" --tls-key "$WORK/sleeper/client.key")
  sidecar_in() { out=$(sleeper_ctl "${mine[@]}" tasks) && grep -Eq 'sidecar.*CONNECTED' <<<"$out"; }
  if until_true 30 sidecar_in; then
    pass "with the job's client certificate cohortctl is served, and the sidecar registered over mutual TLS"
  else
    fail "cohortctl with the job's certificate sees the sidecar" "$out"
  fi
  out=$(sleeper_ctl --tls-ca "$WORK/sleeper/ca.crt" tasks); code=$?
  [[ $code == 3 ]] && pass "without a client certificate the token alone is refused (exit 3)" ||
    fail "a client without a certificate is refused" "exit $code: $out"
  out=$(sleeper_ctl --tls-ca "$WORK/sleeper/ca.crt" --tls-cert "$WORK/quickstart/client.crt" \
    --tls-key "$WORK/quickstart/client.key" tasks); code=$?
  [[ $code == 3 ]] && pass "another job's client certificate is refused (exit 3): ${out:0:200}" ||
    fail "another job's certificate is refused" "exit $code: $out"
  out=$("$ROOT/build/bin/cohortctl" --coordinator "$ip:8476" --dial-timeout 3s \
    --auth-token-file "$WORK/sleeper/token" tasks 2>&1); code=$?
  [[ $code == 3 ]] && pass "plain gRPC is refused (exit 3)" || fail "plain gRPC is refused" "exit $code: $out"
  out=$(sleeper_ctl --tls-ca "$WORK/quickstart/ca.crt" --tls-cert "$WORK/sleeper/client.crt" \
    --tls-key "$WORK/sleeper/client.key" tasks); code=$?
  [[ $code == 3 ]] && pass "a client that trusts another job's CA does not talk to this coordinator (exit 3)" ||
    fail "the coordinator is verified against the job's CA" "exit $code: $out"

  k patch networkpolicy sleeper-isolation --type json \
    -p '[{"op": "add", "path": "/spec/ingress/-", "value": {}}]' >/dev/null
  restored() { policy_is sleeper && [[ "$(k get networkpolicy sleeper-isolation -o jsonpath='{.metadata.generation}')" == 3 ]]; }
  if until_true 30 restored; then
    event=$(k get events --field-selector involvedObject.name=sleeper,reason=NetworkPolicyRestored -o jsonpath='{.items[0].message}')
    pass "an allow-everything rule added to the policy is taken out again (Event: $event)"
  else
    fail "the edited policy is written back" "$(policy_spec sleeper)"
  fi
  uid=$(k get networkpolicy sleeper-isolation -o jsonpath='{.metadata.uid}')
  k delete networkpolicy sleeper-isolation >/dev/null
  remade() {
    local now
    now=$(k get networkpolicy sleeper-isolation -o jsonpath='{.metadata.uid}' 2>/dev/null)
    [[ -n "$now" && "$now" != "$uid" ]] && policy_is sleeper
  }
  until_true 30 remade && pass "a deleted policy is made again, the same" ||
    fail "the deleted policy is made again" "$(k get networkpolicy 2>&1)"
  k delete cjob sleeper --wait=false >/dev/null
  gone() { ! k get networkpolicy sleeper-isolation >/dev/null 2>&1; }
  until_true 60 gone && pass "the policy goes with its job (garbage collection)" ||
    fail "the policy goes with its job" "$(k get networkpolicy sleeper-isolation -o yaml 2>&1 | head -20)"
else
  fail "sleeper runs with its policy" "phase '$(field cjob/sleeper '{.status.phase}')', policy $(policy_spec sleeper)"
fi

# ---- The chart's RBAC covered the operator's calls (networkpolicies included).
if ! oplog=$("$KUBECTL" -n "$SYS" logs "deployment/$RELEASE-operator" 2>&1); then
  fail "read the operator's log" "${oplog:0:300}"
elif ! grep -q 'caches synced:.* network policies' <<<"$oplog"; then
  fail "the operator's log shows its network policy cache synced" "$(grep -m3 caches <<<"$oplog")"
else
  refused=$(grep -Ei 'forbidden|PERMISSION_DENIED' <<<"$oplog" | grep -v 'violates PodSecurity' | head -5)
  [[ -z "$refused" ]] && pass "the chart's RBAC covered every call the operator made (no 403 in its log)" ||
    fail "the API server refused the operator" "$refused"
fi

[[ $failed -eq 0 ]] || diagnose
finish
