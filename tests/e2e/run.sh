#!/usr/bin/env bash
# Every end-to-end test on the local cluster, in order, on one cluster: the smoke test (it
# starts and stops a cluster of its own), then one cluster up for the CRD, operator, JAX
# example with its coordinator crashing, task runtime, Kueue (with Kueue's API added to the
# cluster), gang scheduling (with the coscheduling scheduler added), failure rules, Helm chart,
# helm install, isolation, cert-manager certificates and dashboard tests, and down again at the
# end whatever happened.
# Runs every test even after a failure; exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
failed=()
run() {
  echo "==== $*"
  local start=$SECONDS
  if "$@"; then
    echo "==== passed: $* ($((SECONDS - start)) s)"
  else
    echo "==== FAILED: $* ($((SECONDS - start)) s)"
    failed+=("$*")
  fi
}

run bash tests/e2e/local_cluster_smoke.sh
if ! line=$(tools/local-cluster up | tail -n 1); then
  echo "e2e: the local cluster did not come up"
  exit 1
fi
export "${line?}"
trap 'tools/local-cluster down >/dev/null 2>&1' EXIT
run bash tests/e2e/crd_test.sh
run bash tests/e2e/operator_test.sh
run bash tests/e2e/jax_restart_test.sh
run bash tests/e2e/tasks_test.sh
run bash tests/e2e/kueue_test.sh
run bash tests/e2e/coscheduling_test.sh
run bash tests/e2e/failure_rules_test.sh
run bash tests/e2e/gpu_visibility_test.sh
run bash bench/tasks_k8s_bench.sh --smoke --out "$(mktemp -d)/tasks_k8s.json"
run bash tests/chart/chart_test.sh
run bash tests/e2e/helm_install_test.sh
run bash tests/e2e/isolation_test.sh
run bash tests/e2e/cert_manager_test.sh
run bash tests/e2e/dashboards_test.sh
if ((${#failed[@]})); then
  printf 'e2e: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "e2e: every test passed"
