#!/usr/bin/env bash
# Every PromQL expression of every Grafana dashboard in charts/cohort/dashboards, run
# against a real Prometheus that scrapes a coordinator, sidecars on fake GPUs and the
# operator (tests/e2e/dashboards_test.py says how). Needs `make build` and the local
# cluster up (tools/local-cluster up), for the operator.
#   OPERATOR_METRICS=HOST:PORT   scrape this operator instead of starting build/bin/cohort-operator
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if ! command -v prometheus >/dev/null && [[ -z "${PROMETHEUS:-}" ]]; then
  echo "dashboards test: installing Debian's prometheus (its service is not started)"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  # policy-rc.d 101 keeps the package's service from starting where an init system runs.
  added_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    added_policy=1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
  [[ $added_policy == 1 ]] && $SUDO rm -f /usr/sbin/policy-rc.d
fi

export KUBECONFIG="${KUBECONFIG:-$ROOT/build/local-cluster/kubeconfig}"
# Under tests/e2e/run.sh (COHORT_E2E_SHARED_CLUSTER) its cluster is up: not asked again (with
# other tests running, a slow API would look down).
if [[ -z ${COHORT_E2E_SHARED_CLUSTER:-} ]] && ! "$ROOT/tools/local-cluster" status >/dev/null 2>&1; then
  echo "dashboards test: the local cluster is not up (tools/local-cluster up); the operator needs it"
  exit 1
fi
exec python3 "$ROOT/tests/e2e/dashboards_test.py"
