#!/usr/bin/env bash
# The chart with jobTls.mode=cert-manager, installed by a real `helm install` on the local
# cluster, with cert-manager's own Certificate CRD (from its Go module,
# github.com/cert-manager/cert-manager, deploy/crds). cert-manager's controller does not run
# here: the test plays it, as the Kueue tests play Kueue. It issues every Certificate the
# operator asks for from a CA of its own (openssl), into the Secret the Certificate names, as
# cert-manager does: tls.crt, tls.key and ca.crt, type kubernetes.io/tls, with the
# Certificate's secretTemplate labels; subject, DNS names and usages from its spec.
#
# Checks:
# - the operator (whose RBAC may only create Certificates) asks for a job's two Certificates
#   from the chart's issuer and starts no pod before they are issued, its Ready condition
#   saying why;
# - once they are issued, examples/quickstart.yaml succeeds in a namespace enforcing
#   restricted Pod Security, over mutual TLS with cert-manager's certificates;
# - a running job's coordinator serves a client with the job's client certificate, and
#   refuses one the same issuer signed for another job (--tls-client-name) and one with none.
# Brings the local cluster up if it is not (and down again at the end). Exit status 0 only
# when every check passed.
set -uo pipefail
TEST="cert-manager test"
NS="cert-manager-$$"  # the jobs: restricted Pod Security
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The cert-manager release whose Certificate API the operator writes to.
CERT_MANAGER_VERSION=v1.21.2
SYS="cert-manager-sys-$$"  # the release

diagnose_more() {
  echo "--- certificates and secrets"
  k get certificates,secrets 2>&1
}

require "$HELM" "$KUBECTL" go openssl
require_built cohort-operator cohort-coordinator cohort-sidecar cohort-agent-example cohortctl
cluster_start

# ---- cert-manager's Certificate API, from its own source.
crds=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json \
  "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/deploy/crds
if "$KUBECTL" apply --server-side -f "$crds/cert-manager.io_certificates.yaml" >/dev/null &&
  "$KUBECTL" wait --for=condition=Established crd/certificates.cert-manager.io --timeout=60s >/dev/null; then
  pass "cert-manager $CERT_MANAGER_VERSION's Certificate CRD is served"
else
  echo "$TEST: cannot install $crds/cert-manager.io_certificates.yaml"
  exit 1
fi

# The issuer's CA (what a ClusterIssuer of kind CA holds).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=cohort-test-issuer -keyout "$WORK/issuer.key" -out "$WORK/issuer.crt" 2>/dev/null ||
  { echo "$TEST: openssl cannot make a CA"; exit 1; }

# sign NAME CN DNS,... USAGE,...: a P-256 key and a certificate NAME.{key,crt} from the issuer.
sign() {
  local name=$1 cn=$2 dns=$3 usages=$4 san="" eku="" u
  for d in ${dns//,/ }; do san+="${san:+,}DNS:$d"; done
  for u in ${usages//,/ }; do
    case $u in
      server-auth) eku+="${eku:+,}serverAuth" ;;
      client-auth) eku+="${eku:+,}clientAuth" ;;
    esac
  done
  printf 'subjectAltName=%s\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n' "$san" "$eku" >"$WORK/$name.ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
    -keyout "$WORK/$name.key" -out "$WORK/$name.csr" 2>/dev/null &&
    openssl x509 -req -days 1 -in "$WORK/$name.csr" -CA "$WORK/issuer.crt" -CAkey "$WORK/issuer.key" \
      -CAcreateserial -extfile "$WORK/$name.ext" -out "$WORK/$name.crt" 2>/dev/null
}

# issue CERTIFICATE: what cert-manager's controller does for a Certificate of our issuer.
issue() {
  local certificate=$1 spec
  spec=$(k get certificate "$certificate" -o json) || return 1
  # secretName, commonName, dnsNames, usages, issuer, labels: one line each.
  mapfile -t f < <(python3 -c '
import json, sys
s = json.load(sys.stdin)["spec"]
print(s["secretName"]); print(s.get("commonName", "")); print(",".join(s.get("dnsNames", [])))
print(",".join(u.replace(" ", "-") for u in s.get("usages", [])))
print(s["issuerRef"].get("kind", "") + "/" + s["issuerRef"]["name"])
print(" ".join(f"{k}={v}" for k, v in s.get("secretTemplate", {}).get("labels", {}).items()))' <<<"$spec")
  [[ "${f[4]}" == ClusterIssuer/cohort-test-ca ]] || { echo "issue: $certificate names issuer ${f[4]}"; return 1; }
  sign "$certificate" "${f[1]}" "${f[2]}" "${f[3]}" || return 1
  k create secret generic "${f[0]}" --type kubernetes.io/tls --from-file=tls.crt="$WORK/$certificate.crt" \
    --from-file=tls.key="$WORK/$certificate.key" --from-file=ca.crt="$WORK/issuer.crt" >/dev/null &&
    k label secret "${f[0]}" ${f[5]} >/dev/null
}

# ---- The namespace, and the chart with cert-manager's certificates.
add_namespace "$NS" restricted
if chart_install "$SYS" --set "watchNamespace=$NS" --set jobTls.mode=cert-manager \
  --set jobTls.issuerRef.name=cohort-test-ca; then
  pass "helm install with jobTls.mode=cert-manager: the operator is available"
else
  fail "helm install" "$out"
  diagnose
  finish
  exit 1
fi

# ---- A job asks for its Certificates and waits for them.
if out=$(k apply -f "$ROOT/examples/quickstart.yaml" 2>&1); then
  pass "kubectl apply -f examples/quickstart.yaml"
else
  fail "kubectl apply -f examples/quickstart.yaml" "$out"
fi
asked() { k get certificate quickstart-coordinator-tls quickstart-client-tls >/dev/null 2>&1; }
if until_true 60 asked; then
  issuer=$(k get certificate quickstart-coordinator-tls -o jsonpath='{.spec.issuerRef.kind}/{.spec.issuerRef.name} {.spec.dnsNames}')
  pass "the operator asks for the job's two Certificates of the chart's issuer ($issuer)"
else
  fail "the job's Certificates are asked for" "$(k get certificates 2>&1)"
  diagnose
fi
# The operator has processed the job without its certificates: the reconcile that asks for
# them (operator/plan/job_plan.cc) decides then not to make the coordinator pod, and
# writes why into the Ready condition. Once that condition is there, no pod may exist (nor
# can a later reconcile make one while the Secrets are missing).
WAITING_FOR_CERTIFICATES="waiting for cert-manager to issue Secrets quickstart-coordinator-tls and quickstart-client-tls"
ready_message() { field cjob/quickstart '{.status.conditions[?(@.type=="Ready")].message}'; }
ready_reason() { field cjob/quickstart '{.status.conditions[?(@.type=="Ready")].reason}'; }
says_waiting_for_certificates() { [[ "$(ready_message)" == "$WAITING_FOR_CERTIFICATES"* ]]; }
if until_true 60 says_waiting_for_certificates; then
  pods=$(k get pods -l cohort.dev/job=quickstart -o name 2>/dev/null)
  if [[ -z "$pods" ]]; then
    pass "no pod starts before the certificates are issued; Ready ($(ready_reason)) says: $(ready_message)"
  else
    fail "no pod before the certificates" "pods '$pods' while Ready says: $(ready_message)"
  fi
else
  fail "the operator says it waits for the certificates" \
    "Ready '$(ready_reason)': '$(ready_message)', pods '$(k get pods -l cohort.dev/job=quickstart -o name 2>/dev/null)'"
  diagnose
fi
for certificate in quickstart-coordinator-tls quickstart-client-tls; do
  issue "$certificate" || fail "issue $certificate as cert-manager would"
done
expect_success quickstart 180 \
  "examples/quickstart.yaml succeeds in the restricted namespace with cert-manager's certificates"
config=$(k get configmap quickstart-coordinator -o jsonpath='{.data.coordinator\.yaml}')
[[ "$config" == *"tls-client-ca: /var/run/secrets/cohort/ca.crt"*"tls-client-name: quickstart.$NS.client.cohort.dev"* ]] &&
  pass "its coordinator requires client certificates of the issuer carrying the job's name" ||
  fail "the coordinator's TLS settings" "$config"

# ---- A running job: its coordinator, from this machine at the pod's IP.
restricted_sleeper sleeper
asked_sleeper() { k get certificate sleeper-coordinator-tls sleeper-client-tls >/dev/null 2>&1; }
until_true 60 asked_sleeper &&
  issue sleeper-coordinator-tls && issue sleeper-client-tls ||
  fail "the sleeper job's certificates are asked for and issued"
running() { [[ "$(field cjob/sleeper '{.status.phase}')" == Running ]]; }
if until_true 90 running; then
  for key in tls.crt tls.key; do
    k get secret sleeper-client-tls -o jsonpath="{.data.${key//./\\.}}" | base64 -d >"$WORK/sleeper-client.$key"
  done
  sleeper_tasks() {  # [TLS flags...]: cohortctl tasks at the sleeper's coordinator
    ctl sleeper --tls-ca "$WORK/issuer.crt" --tls-server-name "sleeper-coordinator.$NS.svc" "$@" tasks 2>&1
  }
  sidecar_in() { out=$(sleeper_tasks --tls-cert "$WORK/sleeper-client.tls.crt" --tls-key "$WORK/sleeper-client.tls.key") &&
    grep -Eq 'sidecar.*CONNECTED' <<<"$out"; }
  if until_true 30 sidecar_in; then
    pass "with the job's client certificate cohortctl is served, and the sidecar registered over mutual TLS"
  else
    fail "the job's client certificate is served" "$out"
  fi
  # The same issuer, another job's name: what any other job of the cluster holds.
  sign other-job "other.$NS.client.cohort.dev" "other.$NS.client.cohort.dev" client-auth
  out=$(sleeper_tasks --tls-cert "$WORK/other-job.crt" --tls-key "$WORK/other-job.key"); code=$?
  [[ $code == 3 ]] && pass "another job's client certificate from the same issuer is refused (exit 3)" ||
    fail "another job's certificate of the same issuer is refused" "exit $code: $out"
  out=$(sleeper_tasks); code=$?
  [[ $code == 3 ]] && pass "no client certificate: refused (exit 3)" ||
    fail "a client without a certificate is refused" "exit $code: $out"
else
  fail "the sleeper job runs" "phase '$(field cjob/sleeper '{.status.phase}')': $(field cjob/sleeper '{.status.conditions}')"
  diagnose
fi

finish
