#!/usr/bin/env bash
# The Helm chart (charts/cohort): helm lint; helm template with the value sets in
# tests/chart/values/ (defaults, monitoring on, one watched namespace, custom images and
# resources, bring-your-own RBAC, isolation: the admission policy), each checked object by object (tests/chart/chart_checks.py)
# and applied to the local cluster's kube-apiserver with a server-side dry run, under the
# restricted Pod Security Standard; bad values refused by the schema; and monitoring on a
# cluster without the Prometheus Operator CRDs failing with a clear message. Needs the
# local cluster up (tools/local-cluster up). Exit status 0 only when every check passed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HELM="$ROOT/build/tools/bin/helm"
KUBECTL="$ROOT/build/tools/bin/kubectl"
CHART="$ROOT/charts/cohort"
HERE="$ROOT/tests/chart"
export KUBECONFIG="${KUBECONFIG:-$ROOT/build/local-cluster/kubeconfig}"
RELEASE=cohort-test
NS="chart-test-$$"
WATCH_NS="chart-test-$$-team"
WORK=$(mktemp -d)
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1${2:+: $2}"; }
cleanup() {
  "$KUBECTL" delete namespace "$NS" "$WATCH_NS" --wait=false >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

for tool in "$HELM" "$KUBECTL"; do
  [[ -x "$tool" ]] || { echo "chart test: $tool is missing (tools/local-cluster tools)"; exit 1; }
done
if ! "$KUBECTL" get --raw /readyz >/dev/null 2>&1; then
  echo "chart test: the local cluster is not up (tools/local-cluster up)"
  exit 1
fi

# -- Lint.
for set in "" "--set dashboards.enabled=true" "--set watchNamespace=team-a" "--set admissionPolicy.enabled=true"; do
  if out=$("$HELM" lint --strict "$CHART" $set 2>&1); then
    pass "helm lint --strict ${set:-(defaults)}"
  else
    fail "helm lint --strict ${set:-(defaults)}" "$out"
  fi
done

# -- The schema refuses bad values, naming the problem.
refused() {
  local what=$1 want=$2
  shift 2
  local out
  if out=$("$HELM" template "$RELEASE" "$CHART" "$@" 2>&1); then
    fail "schema refuses $what" "rendered"
  elif [[ "$out" == *"$want"* ]]; then
    pass "schema refuses $what"
  else
    fail "schema refuses $what" "wanted '$want' in: $out"
  fi
}
refused "a misspelt key" "additional properties 'monitring' not allowed" --set monitring.enabled=true
refused "an unknown log level" "/operator/logLevel" --set operator.logLevel=loud
refused "a negative replica count" "/replicaCount" --set replicaCount=-1
refused "a malformed scrape interval" "/monitoring/interval" --set monitoring.interval=often
refused "an invalid namespace name" "/watchNamespace" --set watchNamespace=Team_A
refused "an unknown validation action" "/admissionPolicy/validationActions" \
  --set admissionPolicy.enabled=true --set 'admissionPolicy.validationActions={Block}'
refused "an unknown job TLS mode" "/jobTls/mode" --set jobTls.mode=vault
refused "cert-manager without an issuer" "/jobTls/issuerRef/name" --set jobTls.mode=cert-manager
refused "an unknown issuer kind" "/jobTls/issuerRef/kind" --set jobTls.mode=cert-manager \
  --set jobTls.issuerRef.name=ca --set jobTls.issuerRef.kind=AcmeIssuer
refused "an invalid metrics namespace" "/networkPolicy/metricsNamespace" --set networkPolicy.metricsNamespace=Mon_1

# -- Monitoring without the monitoring.coreos.com/v1 API: a clear error, not "no matches
# for kind ServiceMonitor" half-way through an install.
want="monitoring.enabled=true needs the Prometheus Operator CRDs (monitoring.coreos.com/v1"
if out=$("$HELM" template "$RELEASE" "$CHART" --set monitoring.enabled=true 2>&1); then
  fail "monitoring without the CRDs fails to render" "it rendered"
elif [[ "$out" == *"$want"* ]]; then
  pass "monitoring without the CRDs fails to render, saying what to do"
else
  fail "monitoring without the CRDs fails to render" "unclear message: $out"
fi
if "$KUBECTL" api-versions | grep -qx monitoring.coreos.com/v1; then
  echo "SKIP helm install --dry-run=server with monitoring: this cluster serves monitoring.coreos.com/v1"
elif out=$("$HELM" install "$RELEASE" "$CHART" -n default --dry-run=server --set monitoring.enabled=true 2>&1); then
  fail "helm install with monitoring on a cluster without the CRDs fails" "it succeeded"
elif [[ "$out" == *"$want"* ]]; then
  pass "helm install with monitoring on this cluster (no monitoring CRDs) fails with the same message"
else
  fail "helm install with monitoring on a cluster without the CRDs" "unclear message: $out"
fi

# -- Namespaces for the dry runs, under the restricted Pod Security Standard.
for ns in "$NS" "$WATCH_NS"; do
  "$KUBECTL" create namespace "$ns" >/dev/null &&
    "$KUBECTL" label namespace "$ns" pod-security.kubernetes.io/enforce=restricted \
      pod-security.kubernetes.io/warn=restricted >/dev/null ||
    { fail "create namespace $ns"; exit 1; }
done
serves_monitoring=0
"$KUBECTL" api-versions | grep -qx monitoring.coreos.com/v1 && serves_monitoring=1

# -- Every value set: render, check, dry-run on the API server.
for file in "$HERE"/values/*.yaml; do
  set=$(basename "$file" .yaml)
  values="$WORK/$set.values.yaml"
  sed "s/WATCH_NAMESPACE/$WATCH_NS/" "$file" >"$values"
  watch=""
  grep -q '^watchNamespace:' "$values" && watch=$WATCH_NS
  extra=()
  [[ $set == monitoring ]] && extra=(--api-versions monitoring.coreos.com/v1)
  rendered="$WORK/$set.yaml"
  if ! out=$("$HELM" template "$RELEASE" "$CHART" -n "$NS" --include-crds -f "$values" "${extra[@]}" 2>&1 >"$rendered"); then
    fail "[$set] helm template" "$out"
    continue
  fi
  pass "[$set] helm template ($(grep -c '^kind:' "$rendered") objects)"
  if ! out=$(python3 "$HERE/chart_checks.py" split "$rendered" "$WORK/$set.builtin.yaml" \
    "$WORK/$set.monitors.yaml" 2>&1); then
    fail "[$set] split the rendered chart into built-in kinds and monitors" "$out"
    continue
  fi
  apply_file="$WORK/$set.builtin.yaml"
  [[ $serves_monitoring == 1 ]] && apply_file="$rendered"
  if "$KUBECTL" apply --server-side --force-conflicts --field-manager=cohort-chart-test \
    --dry-run=server -o json -f "$apply_file" >"$WORK/$set.json" 2>"$WORK/$set.err"; then
    if grep -q "violate PodSecurity" "$WORK/$set.err"; then
      fail "[$set] restricted Pod Security Standard" "$(cat "$WORK/$set.err")"
    else
      pass "[$set] server-side dry run on the kube-apiserver, restricted Pod Security: $(python3 -c \
        'import json,sys; d=json.load(open(sys.argv[1])); print(len(d.get("items",[d])), "objects accepted")' "$WORK/$set.json")"
    fi
    report=$(python3 "$HERE/chart_checks.py" check "$set" "$WORK/$set.json" "$WORK/$set.monitors.yaml" "$NS" "$watch" 2>&1)
    status=$?
    echo "$report"
    passed=$((passed + $(grep -c '^PASS' <<<"$report")))
    failed=$((failed + $(grep -c '^FAIL' <<<"$report")))
    [[ $status -ne 0 && $(grep -c '^FAIL' <<<"$report") -eq 0 ]] && fail "[$set] chart_checks.py" "exit status $status"
  else
    fail "[$set] server-side dry run" "$(cat "$WORK/$set.err")"
  fi
  if [[ $set == monitoring && $serves_monitoring == 0 ]]; then
    echo "NOTE [$set] the ServiceMonitors and PodMonitor were checked as text only: this cluster has no monitoring.coreos.com CRDs to dry-run them against"
  fi
done

# -- NOTES.txt renders with next steps.
for set in "" "--set dashboards.enabled=true" "--set watchNamespace=team-a"; do
  if out=$("$HELM" install "$RELEASE" "$CHART" -n "$NS" --dry-run=client $set 2>&1) &&
    [[ "$out" == *"kubectl apply"*"examples/quickstart.yaml"* && "$out" == *"Dashboards"* ]]; then
    pass "NOTES.txt renders next steps ${set:-(defaults)}"
  else
    fail "NOTES.txt ${set:-(defaults)}" "$out"
  fi
done

echo "chart test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
