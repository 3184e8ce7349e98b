# Helpers the end-to-end tests share; sourced (not run) by every test after it sets NS (its
# namespace; unset or empty for a test whose cases each have one, made with add_namespace or
# case_namespace) and, optionally, TEST (its name in messages).
#
#   pass MESSAGE / fail MESSAGE [DETAIL]   count and print a result
#   k ARGS...                              kubectl in the test's namespace
#   field KIND/NAME JSONPATH               a field of an object in the namespace ("" if none)
#   wait_for KIND/NAME JSONPATH VALUE SECS polls until the field equals VALUE (prints it if not)
#   until_true SECS COMMAND [ARGS...]      runs the command every 0.2 s until it succeeds; one
#                                          argument is shell code, evaluated each time: quote it
#                                          singly, so that what it reads is read anew
#   require TOOL... / require_built PROG...  exits unless each tool is on the PATH (or a path that
#                                          runs) / each program is in build/bin
#   venv_example MODULE EXAMPLE OUT COUNT  PYTHON: the project venv's Python that has MODULE (jax:
#                                          .venv, made by tests/compat/run.sh; cohort:
#                                          .venv/runtime, tests/python/run.sh; torch: .venv-bench,
#                                          bench/setup.sh; make test makes all three first), or an
#                                          exit saying how to make it; and examples/EXAMPLE as a
#                                          user applies it, written to OUT, each `command:
#                                          [python3, ...]` run by $PYTHON (the local cluster has no
#                                          images: it runs the command a container names); exits
#                                          unless COUNT were rewritten
#   case_namespace NS                      the next case's namespace (restricted Pod Security)
#                                          and a cohort-operator for it alone (--job-tls
#                                          operator; PID in $CASE_OPERATOR), the last case's
#                                          stopped: other tests' operators run beside it
#   cluster_up [ADDONS]                    the local cluster (with addons), KUBECONFIG exported, the
#                                          CRD installed, NS made; down again at the end if it was
#                                          not up before; under run.sh, its cluster as it is
#   cluster_start [ADDONS] / crd_install   its first two steps, for a test that makes the rest
#   add_namespace NS [LEVEL] [LABEL=V...]  a namespace (enforcing Pod Security LEVEL, with the
#                                          labels), deleted at the end
#   operator_for NS NAME [FLAGS...]        cohort-operator on the host watching NS only, with
#                                          OPERATOR_FLAGS (no leader election, /metrics on a free
#                                          port, a second's failure settling, 200 ms coordinator
#                                          polls; a test may set its own) and FLAGS; its PID in
#                                          $STARTED, its log in $WORK/NAME.log
#   start_operator NAME [FLAGS...]         the same for NS, with --workload-liveness none
#   stop_operator PID                      SIGTERM, and waits for it to end
#   token_file JOB                         JOB's token (Secret JOB-token) in a file; prints its path
#   chart_install NS [HELM ARGS...]        the chart as release $RELEASE in NS (made), waited for;
#                                          helm's output in $out; uninstalled at the end
#   diagnose                               the namespace's pods, jobs and Events, and the chart's
#                                          operator's log; then diagnose_more, if the test has one
#   steps_job NAME REPLICAS STEPS [GPUS] [SPEC] [META] [ARGS]
#                                          applies a job of REPLICAS workers, each the agent
#                                          example doing STEPS half-second steps (with GPUS GPUs);
#                                          SPEC and META: more lines of its spec and metadata,
#                                          indented as they go ("  suspend: true"); ARGS: more
#                                          of the worker's arguments (", --hold-key, demo/go")
#   sleeper NAME [SPEC]                    applies a job of two workers that sleep, never talking
#                                          to the coordinator
#   restricted_sleeper NAME                applies a job of one worker whose workload sleeps, its
#                                          pods within restricted Pod Security
#   ctl JOB ARGS...                        cohortctl against JOB's coordinator (its pod's IP),
#                                          with the job's token; dial timeout CTL_DIAL_TIMEOUT (3s)
#   coordinator_ready JOB                  JOB's coordinator pod is Ready
#   event_message OBJECT REASON            the message of the first Event of that reason
#   coordinator_pid JOB [NS]               the process of JOB's coordinator (in NS, default the
#                                          test's), the child of its container's init
#   pod_logs PREFIX                        the last lines of every container log of the
#                                          namespace's pods named PREFIX*
#   finish                                 the summary line; exits 1 if anything failed
# cleanup (on EXIT) stops the operators, uninstalls the Helm releases, deletes the namespaces,
# brings down a cluster it brought up, and prints the last lines of every $WORK/*.log when
# something failed (a test saves what it wants shown there).

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LC="$ROOT/tools/local-cluster"
KUBECTL="$ROOT/build/tools/bin/kubectl"
HELM="$ROOT/build/tools/bin/helm"
RELEASE=${RELEASE:-cohort}
BIN="$ROOT/build/bin"
TEST=${TEST:-$(basename "$0" .sh)}
NS=${NS:-}
WORK=$(mktemp -d)
passed=0
failed=0
started_here=0
OPERATOR_PIDS=()
OPERATOR_FLAGS=(--leader-elect=false --http-listen 127.0.0.1:0 --failure-settle 1s --coordinator-poll 200ms)
NAMESPACES=()
RELEASES=()  # namespaces holding release $RELEASE
OPERATOR_NS=""  # the chart's operator's namespace
trap cleanup EXIT  # set again by cluster_up; here so that an early exit cleans up too

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
  echo "  $1 $2 is '$got', wanted '$3' (status: $(field "$1" '{.status}'))"
  return 1
}

# Passes NAME when GOT is WANT; else fails it, saying what it got.
expect() {  # NAME GOT WANT
  if [[ "$2" == "$3" ]]; then
    pass "$1 ($2)"
  else
    fail "$1" "got '$2', wanted '$3'"
  fi
}

# Waits up to SECONDS for cjob/JOB to fail, then expects REASON of its Failed condition.
expect_failure() {  # JOB REASON SECONDS NAME
  if wait_for "cjob/$1" '{.status.phase}' Failed "$3"; then
    expect "$4" "$(field "cjob/$1" '{.status.conditions[?(@.type=="Failed")].reason}')" "$2"
  else
    fail "$4" "cjob/$1 did not fail within $3 s"
  fi
}

# Waits up to SECONDS for cjob/JOB to succeed; else fails NAME with its phase and conditions,
# and diagnoses.
expect_success() {  # JOB SECONDS NAME
  if wait_for "cjob/$1" '{.status.phase}' Succeeded "$2"; then
    pass "$3"
  else
    fail "$3" "phase '$(field "cjob/$1" '{.status.phase}')': $(field "cjob/$1" '{.status.conditions}')"
    diagnose
  fi
}

until_true() {
  local deadline=$((SECONDS + $1))
  shift
  (($# == 1)) && set -- eval "$1"
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

require() {
  local tool
  for tool; do
    command -v "$tool" >/dev/null || {
      echo "$TEST: $tool is missing"
      exit 1
    }
  done
}

require_built() {
  local program
  for program; do
    [[ -x "$BIN/$program" ]] || {
      echo "$TEST: build/bin/$program is missing (make build); the pods run it"
      exit 1
    }
  done
}

chart_install() {
  local ns=$1
  shift
  RELEASES+=("$ns")
  NAMESPACES+=("$ns")
  OPERATOR_NS=$ns
  out=$("$HELM" install "$RELEASE" "$ROOT/charts/cohort" -n "$ns" --create-namespace "$@" \
    --wait --timeout 120s 2>&1)
}

diagnose() {
  echo "--- pods"
  k get pods -o wide 2>&1
  echo "--- coordinatedjobs"
  k get cjob -o jsonpath='{range .items[*]}{.metadata.name}: {.status}{"\n"}{end}' 2>&1 | head -20
  if [[ -n "$OPERATOR_NS" ]]; then
    echo "--- operator logs"
    "$KUBECTL" -n "$OPERATOR_NS" logs "deployment/$RELEASE-operator" --tail=60 2>&1
  fi
  echo "--- events"
  k get events --sort-by=.lastTimestamp 2>&1 | tail -n 20
  if declare -F diagnose_more >/dev/null; then diagnose_more; fi
}

venv_example() {
  local hint got
  case "$1" in
    jax) PYTHON="$ROOT/.venv/bin/python3" hint="run tests/compat/run.sh (make compat-test)" ;;
    cohort) PYTHON="$ROOT/.venv/runtime/bin/python" hint="run tests/python/run.sh (make python-test)" ;;
    torch) PYTHON="$ROOT/.venv-bench/bin/python3" hint="run bash bench/setup.sh" ;;
    *) echo "$TEST: venv_example knows no venv for $1" && exit 1 ;;
  esac
  if ! "$PYTHON" -c "import $1" 2>/dev/null; then
    echo "$TEST: $PYTHON cannot import $1; $hint first"
    exit 1
  fi
  sed "s|command: \[python3, |command: [$PYTHON, |" "$ROOT/examples/$2" >"$3"
  got=$(grep -cF "command: [$PYTHON, " "$3")
  [[ "$got" == "$4" ]] && return 0
  echo "$TEST: examples/$2 has $got python3 commands, not $4: the example changed"
  exit 1
}

steps_job() {
  k apply -f - >/dev/null <<YAML
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: $1
${6:-}
spec:
  replicas: $2
${5:-}
  template:
    spec:
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          args: [--steps, "$3", --step-seconds, "0.5"${7:-}]
          ${4:+resources: {limits: {nvidia.com/gpu: $4\}\}}
YAML
}

# never_half_placed LEFT RIGHT: two gang-scheduled jobs of 3 one-GPU workers each on a node of
# 4 GPUs, watched (every 0.3 s, for 120 s at most) until both succeed. Passes when one of them
# had all 3 workers placed first and neither was ever half-placed beside the other (a worker
# holds a place while it is bound and not finished: a finished pod's GPU is free again).
never_half_placed() {
  local left=$1 right=$2 first="" half=0 l r deadline=$((SECONDS + 120))
  while ((SECONDS < deadline)); do
    # Both counts from one list, so that they are of the same moment.
    read -r l r <<<"$(k get pods -l cohort.dev/role=worker \
      -o jsonpath='{range .items[*]}{.metadata.labels.cohort\.dev/job}|{.spec.nodeName}|{.status.phase}{"\n"}{end}' 2>/dev/null |
      awk -F'|' -v a="$left" -v b="$right" '$2 != "" && $3 != "Succeeded" && $3 != "Failed" {n[$1]++} END {print n[a] + 0, n[b] + 0}')"
    if ((l > 0 && l < 3 && r > 0)) || ((r > 0 && r < 3 && l > 0)) || ((l + r > 4)); then
      if ((half == 0)); then
        echo "  $left has $l workers placed, $right $r"
        k get pods -l cohort.dev/role=worker -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.status.containerStatuses[0].state} {.metadata.deletionTimestamp}{"\n"}{end}'
      fi
      half=1
    fi
    if [[ -z "$first" ]]; then
      ((l == 3)) && first=$left
      ((r == 3)) && first=$right
    fi
    [[ "$(field "cjob/$left" '{.status.phase}')/$(field "cjob/$right" '{.status.phase}')" == Succeeded/Succeeded ]] && break
    sleep 0.3
  done
  if [[ -n "$first" && $half == 0 ]]; then
    pass "with 4 GPUs for 6 workers, $first ran whole first and the other was never half-placed"
  else
    fail "gang scheduling" "first '$first', half-placed seen: $half"
    k get pods -o wide
  fi
}

sleeper() {
  k apply -f - >/dev/null <<YAML
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata:
  name: $1
spec:
  replicas: 2
${2:-}
  template:
    spec:
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          command: [sh, -c, "while true; do sleep 1; done"]
YAML
}

restricted_sleeper() {
  k apply -f - >/dev/null <<YAML
apiVersion: cohort.dev/v1alpha1
kind: CoordinatedJob
metadata: {name: $1}
spec:
  replicas: 1
  template:
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: worker
          image: ghcr.io/cohort/cohort-agent-example:0.1.0
          command: [sh, -c, "while true; do sleep 1; done"]
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
YAML
}

token_file() {
  k get secret "$1-token" -o jsonpath='{.data.token}' | base64 -d >"$WORK/$1.token" &&
    [[ -s "$WORK/$1.token" ]] && echo "$WORK/$1.token"
}

ctl() {
  local token
  token=$(token_file "$1") || return 1
  "$BIN/cohortctl" --coordinator "$(field "pod/$1-coordinator" '{.status.podIP}'):8476" \
    --dial-timeout "${CTL_DIAL_TIMEOUT:-3s}" --auth-token-file "$token" "${@:2}"
}

coordinator_ready() {
  [[ "$(field "pod/$1-coordinator" '{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

event_message() {
  k get events --field-selector "involvedObject.name=$1,reason=$2" -o jsonpath='{.items[0].message}' 2>/dev/null
}

operator_for() {
  local ns=$1 name=$2
  shift 2
  "$BIN/cohort-operator" --namespace "$ns" "${OPERATOR_FLAGS[@]}" "$@" >"$WORK/$name.log" 2>&1 &
  STARTED=$!
  OPERATOR_PIDS+=("$STARTED")
}

# http_port PID: the port an operator started with --http-listen 127.0.0.1:0 serves /metrics on,
# from the socket table once it listens. Port 0, not fixed ports: those could be free_port's
# (tests/support/free_port.py) for a test running beside this one (run.sh's lanes).
listen_port() { ss -Hltnp 2>/dev/null | awk -v p="pid=$1," 'index($0, p) { n = split($4, a, ":"); print a[n]; exit }'; }
http_port() {
  local port=""
  until_true 30 "port=\$(listen_port $1) && [[ -n \$port ]]" ||
    { echo "  operator $1 does not listen" >&2; return 1; }
  echo "$port"
}

coordinator_pid() {
  local uid init child
  uid=$("$KUBECTL" -n "${2:-$NS}" get pod "$1-coordinator" -o jsonpath='{.metadata.uid}' 2>/dev/null)
  # The pod runner keeps the PID of each container's init in the container's directory.
  init=$(cat "$ROOT/build/local-cluster/pods/$uid/containers/coordinator/pid" 2>/dev/null) || return 1
  for child in $(cat /proc/"$init"/task/*/children 2>/dev/null); do
    if [[ "$(readlink /proc/"$child"/exe 2>/dev/null)" == "$BIN/cohort-coordinator" ]]; then
      echo "$child"
      return 0
    fi
  done
  return 1
}

start_operator() {
  local name=$1
  shift
  operator_for "$NS" "$name" --workload-liveness none "$@"
}

stop_operator() {
  [[ -n "${1:-}" ]] || return 0
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  # Reaped: cleanup must not signal the number again (another process may have it by then).
  local pid kept=()
  for pid in "${OPERATOR_PIDS[@]}"; do [[ "$pid" == "$1" ]] || kept+=("$pid"); done
  OPERATOR_PIDS=("${kept[@]}")
}

CASE_OPERATOR=""
case_namespace() {
  add_namespace "$1" restricted
  stop_operator "$CASE_OPERATOR"
  operator_for "$1" "operator-$1" --job-tls operator
  CASE_OPERATOR=$STARTED
}

add_namespace() {
  local ns=$1 labels=("${@:3}")
  [[ -z "${2:-}" ]] || labels+=("pod-security.kubernetes.io/enforce=$2")
  NAMESPACES+=("$ns")
  if ! "$KUBECTL" create namespace "$ns" >/dev/null ||
    { ((${#labels[@]} > 0)) && ! "$KUBECTL" label namespace "$ns" "${labels[@]}" >/dev/null; }; then
    echo "$TEST: cannot create namespace $ns"
    exit 1
  fi
}

cleanup() {
  local pid f ns
  for pid in "${OPERATOR_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${OPERATOR_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "${RELEASES[@]}"; do
    "$HELM" uninstall "$RELEASE" -n "$ns" --wait --timeout 60s >/dev/null 2>&1
  done
  # Only what this test made, on the cluster it made it on: an exit before cluster_up (a
  # missing tool) touches no cluster that KUBECONFIG may name.
  for ns in "${NAMESPACES[@]}"; do
    "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null 2>&1
  done
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

cluster_start() {
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
}

crd_install() {
  "$KUBECTL" apply --server-side -f "$ROOT/charts/cohort/crds/" >/dev/null &&
    "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null ||
    {
      echo "$TEST: the CRD does not install"
      exit 1
    }
}

cluster_up() {
  cluster_start "${1:-}"
  crd_install
  if [[ -n "$NS" ]]; then
    "$KUBECTL" create namespace "$NS" >/dev/null && NAMESPACES+=("$NS")
  fi
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
