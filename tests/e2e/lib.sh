# Helpers the end-to-end tests share; sourced (not run) by a test after it sets NS (its
# namespace) and, optionally, TEST (its name in messages). Newer tests use it; the older ones
# still carry copies of these and move over as they are touched.
#
#   pass MESSAGE / fail MESSAGE [DETAIL]   count and print a result
#   k ARGS...                              kubectl in the test's namespace
#   field KIND/NAME JSONPATH               a field of an object in the namespace ("" if none)
#   wait_for KIND/NAME JSONPATH VALUE SECS polls until the field equals VALUE (prints it if not)
#   until_true SECS 'SHELL CODE'           evaluates the code every 0.2 s until it succeeds;
#                                          single-quoted, so that what it reads is read anew
#   start_operator NAME [FLAGS...]         cohort-operator on the host for the namespace; its
#                                          PID in $STARTED, its log in $WORK/NAME.log
#   cluster_up [ADDONS]                    the local cluster (with addons), KUBECONFIG exported;
#                                          down again at the end if it was not up before;
#                                          under run.sh, its cluster as it is
#   ctl JOB ARGS...                        cohortctl against JOB's coordinator (its pod's IP),
#                                          with the job's token (Secret JOB-token)
#   pod_logs PREFIX                        the last lines of every container log of the
#                                          namespace's pods named PREFIX*
#   finish                                 the summary line; exits 1 if anything failed
# cleanup (on EXIT) stops the operators, deletes the namespace, and prints the operators' logs
# when something failed.

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LC="$ROOT/tools/local-cluster"
KUBECTL="$ROOT/build/tools/bin/kubectl"
BIN="$ROOT/build/bin"
TEST=${TEST:-$(basename "$0" .sh)}
WORK=$(mktemp -d)
passed=0
failed=0
started_here=0
OPERATOR_PIDS=()

pass() {
  passed=$((passed + 1))
  echo "PASS $1"
}
fail() {
  failed=$((failed + 1))
  echo "FAIL $1${2:+: $2}"
}
k() { "$KUBECTL" -n "$NS" "$@"; }
field() { k get "$1" -o jsonpath="$2" 2>/dev/null; }

wait_for() {
  local deadline=$((SECONDS + $4)) got
  while ((SECONDS < deadline)); do
    got=$(field "$1" "$2")
    [[ "$got" == "$3" ]] && return 0
    sleep 0.2
  done
  echo "  $1 $2 is '$got', wanted '$3'"
  return 1
}

until_true() {
  local deadline=$((SECONDS + $1))
  shift
  until eval "$*"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

ctl() {
  local ip
  ip=$(field "pod/$1-coordinator" '{.status.podIP}')
  k get secret "$1-token" -o jsonpath='{.data.token}' | base64 -d >"$WORK/$1.token" || return 1
  "$BIN/cohortctl" --coordinator "$ip:8476" --dial-timeout 3s --auth-token-file "$WORK/$1.token" "${@:2}"
}

start_operator() {
  local name=$1
  shift
  "$BIN/cohort-operator" --namespace "$NS" --leader-elect=false --http-listen 127.0.0.1:0 \
    --workload-liveness none --failure-settle 1s --coordinator-poll 200ms "$@" \
    >"$WORK/$name.log" 2>&1 &
  STARTED=$!
  OPERATOR_PIDS+=("$STARTED")
}

cleanup() {
  local pid f
  for pid in "${OPERATOR_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${OPERATOR_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
  [[ $started_here == 1 ]] && "$LC" down >/dev/null 2>&1
  if ((failed > 0)); then
    for f in "$WORK"/*.log; do
      [[ -f "$f" ]] || continue
      echo "---- $(basename "$f") (last 40 lines)"
      tail -n 40 "$f"
    done
  fi
  rm -rf "$WORK"
}

cluster_up() {
  local line args=()
  [[ -n "${1:-}" ]] && args=(--addons "$1")
  # Under tests/e2e/run.sh (COHORT_E2E_SHARED_CLUSTER) other tests share its cluster, up with
  # every addon and KUBECONFIG set: not brought up here (an `up` that found the API slow
  # would restart it under them) or down.
  if [[ -z ${COHORT_E2E_SHARED_CLUSTER:-} ]]; then
    "$LC" status >/dev/null 2>&1 || started_here=1
    line=$("$LC" up "${args[@]}" | tail -n 1) || {
      echo "$TEST: the local cluster did not come up"
      exit 1
    }
    export "${line?}"
  fi
  trap cleanup EXIT
  "$KUBECTL" apply --server-side -f "$ROOT/charts/cohort/crds/" >/dev/null &&
    "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null ||
    {
      echo "$TEST: the CRD does not install"
      exit 1
    }
  "$KUBECTL" create namespace "$NS" >/dev/null
}

pod_logs() {
  local f
  for f in "$ROOT/build/local-cluster/logs/pods/${NS}_$1"*/*/*.log; do
    [[ -f "$f" ]] || continue
    echo "  ---- ${f#"$ROOT/build/local-cluster/logs/pods/"} (last 15 lines)"
    tail -n 15 "$f" | sed 's/^/  /'
  done
}

finish() {
  echo "$TEST: $passed passed, $failed failed"
  ((failed == 0))
}
