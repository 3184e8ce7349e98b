# What the demos share (tools/demo.sh, demo-tasks.sh, demo-pytorch.sh); sourced after a demo
# sets NS (its namespace) and PORT (its operator's HTTP port), from the repository's root.
#
#   say MESSAGE      a step, as the demos print them
#   demo_up          the local cluster (brought up if it is not, and down again at the end),
#                    the CRD, the namespace made afresh, cohort-operator for it ($OPERATOR,
#                    its log in $WORK/operator.log); cleanup on EXIT
ROOT=$PWD
KUBECTL=build/tools/bin/kubectl
WORK=$(mktemp -d -t cohort-demo.XXXXXX)
OPERATOR=""
started_cluster=0

say() { echo "== $*"; }

cleanup() {
  [[ -n "$OPERATOR" ]] && kill -TERM "$OPERATOR" 2>/dev/null && wait "$OPERATOR" 2>/dev/null
  "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
  if [[ $started_cluster == 1 ]]; then
    say "stopping the local cluster"
    tools/local-cluster down >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}

demo_up() {
  local line
  trap cleanup EXIT
  say "local Kubernetes cluster (kube-apiserver, controller manager, pod runner; first build takes minutes)"
  tools/local-cluster status >/dev/null 2>&1 || started_cluster=1
  line=$(tools/local-cluster up | tail -n 1) || { echo "demo: the local cluster did not come up"; exit 1; }
  export "${line?}"
  echo "   $line"

  say "installing the CoordinatedJob CRD"
  "$KUBECTL" apply --server-side -f charts/cohort/crds/ >/dev/null &&
    "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null || exit 1
  # A namespace left by an earlier run (its deletion may still be in progress) goes first.
  "$KUBECTL" delete namespace "$NS" --ignore-not-found --timeout=180s >/dev/null 2>&1
  "$KUBECTL" create namespace "$NS" >/dev/null || exit 1

  say "starting cohort-operator (namespace $NS; metrics on http://127.0.0.1:$PORT/metrics)"
  build/bin/cohort-operator --namespace "$NS" --leader-elect=false \
    --http-listen "127.0.0.1:$PORT" >"$WORK/operator.log" 2>&1 &
  OPERATOR=$!
  for _ in $(seq 50); do curl -sf "127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.2; done
}
