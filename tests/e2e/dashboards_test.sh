#!/usr/bin/env bash
# Every PromQL expression of every Grafana dashboard in charts/cohort/dashboards, run
# against a real Prometheus that scrapes a coordinator, sidecars on fake GPUs and the
# operator (tests/e2e/dashboards_test.py says how). Needs `make build`; brings the local
# cluster up for the operator if it is not (and down again at the end).
#   OPERATOR_METRICS=HOST:PORT   scrape this operator instead of starting build/bin/cohort-operator
set -euo pipefail
TEST="dashboards test"
NS=""  # the Python test makes its own
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

cluster_start
python3 "$ROOT/tests/e2e/dashboards_test.py"
