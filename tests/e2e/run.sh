#!/usr/bin/env bash
# Every end-to-end test on the local cluster. Most of a test's time is spent waiting on pods,
# so after the smoke test they run in lanes side by side on one shared cluster:
#
#   1. the smoke test, alone: it starts and stops a cluster of its own, and its `down` checks
#      that no cohort-* network namespace or cluster process is left;
#   2. one cluster up with both addons (Kueue's API, the coscheduling scheduler), so that no
#      test adds cluster-wide things while others run, and the CRD applied once, before any
#      operator watches it;
#   3. helm install (its operator watches every namespace, so it runs while no other test has
#      jobs) beside the Helm chart test (server-side dry runs only);
#   4. three lanes side by side, each running its tests one after another:
#        heavy  the JAX example with its coordinator crashing, the task runtime (the two
#               longest Python ones), then a GPU fault moving a gang off its node (on the
#               cluster's spare node, which only its pods tolerate)
#        gpu    Kueue, gang scheduling, GPU visibility, failure rules: they ask for the node's
#               4 (fake) GPUs, so never two at a time; then the task runtime benchmark's smoke
#               run, the dashboards and the hang test (no GPU), which even out the lanes'
#               times
#        api    CRD, isolation, cert-manager certificates, operator, the PyTorch example with
#               its coordinator deleted twice
#   5. the default StorageClass test, alone (such a class changes every job made meanwhile);
#   6. down again at the end whatever happened (trap).
# Tests side by side must not meet: each works in namespaces of its own, runs its operators
# for those only (--namespace, the chart's watchNamespace), names its cluster-wide objects
# after itself, and listens on port 0 or a free_port; under COHORT_E2E_SHARED_CLUSTER (set
# here) none brings the cluster up or down.
#
# Each test's output goes to a log of its own in $LOGS; when a test ends its summary is
# printed: the "NAME: N passed, N failed" lines that tests/run_all.sh counts, then
# "==== passed: TEST (N s)" or "==== FAILED: TEST (N s)"; failed tests' logs come in full at
# the end. Runs every test even after a failure; exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS=$(mktemp -d /tmp/cohort-e2e.XXXXXX)
# The lines tests/run_all.sh counts for our own scripts (its count()).
COUNTED='^([A-Za-z0-9 _./-]+: )?[0-9]+ passed, [0-9]+ failed$'
declare -A CMD=(
  [local_cluster_smoke]="bash tests/e2e/local_cluster_smoke.sh"
  [helm_install_test]="bash tests/e2e/helm_install_test.sh"
  [chart_test]="bash tests/chart/chart_test.sh"
  [jax_restart_test]="bash tests/e2e/jax_restart_test.sh"
  [hang_test]="bash tests/e2e/hang_test.sh"
  [gpu_fault_test]="bash tests/e2e/gpu_fault_test.sh"
  [pytorch_restart_test]="bash tests/e2e/pytorch_restart_test.sh"
  [tasks_test]="bash tests/e2e/tasks_test.sh"
  [tasks_k8s_bench]="bash bench/tasks_k8s_bench.sh --smoke --out $LOGS/tasks_k8s.json"
  [kueue_test]="bash tests/e2e/kueue_test.sh"
  [coscheduling_test]="bash tests/e2e/coscheduling_test.sh"
  [native_gang_test]="bash tests/e2e/native_gang_test.sh"
  [gpu_visibility_test]="bash tests/e2e/gpu_visibility_test.sh"
  [failure_rules_test]="bash tests/e2e/failure_rules_test.sh"
  [crd_test]="bash tests/e2e/crd_test.sh"
  [isolation_test]="bash tests/e2e/isolation_test.sh"
  [cert_manager_test]="bash tests/e2e/cert_manager_test.sh"
  [dashboards_test]="bash tests/e2e/dashboards_test.sh"
  [operator_test]="bash tests/e2e/operator_test.sh"
  [state_volume_test]="bash tests/e2e/state_volume_test.sh"
)
ORDER=()             # every test started, in order
declare -A LANE_PID  # the lanes running: each the leader of a process group of its own
cluster=0

# run NAME: runs one test, its output to $LOGS/NAME.log, its result to $LOGS/NAME.result, and
# prints its summary.
run() {
  local name=$1 cmd start=$SECONDS status secs counted
  read -ra cmd <<<"${CMD[$name]}"
  "${cmd[@]}" </dev/null >"$LOGS/$name.log" 2>&1
  status=$?
  secs=$((SECONDS - start))
  if ((status == 0)); then
    echo "passed $secs" >"$LOGS/$name.result"
    counted=$(grep -E "$COUNTED" "$LOGS/$name.log")
    # One write, so that another lane's lines do not come between.
    printf '%s==== passed: %s (%d s)\n' "${counted:+$counted$'\n'}" "${CMD[$name]}" "$secs"
  else
    echo "FAILED $secs" >"$LOGS/$name.result"
    echo "==== FAILED: ${CMD[$name]} ($secs s; its log follows at the end)"
  fi
}

# start_lane NAME TEST...: runs the tests one after another in the background, in a process
# group of its own (set -m), so that whatever they started can be stopped by its ID.
start_lane() {
  local name=$1
  shift
  ORDER+=("$@")
  echo "==== lane $name: $*"
  set -m
  (
    start=$SECONDS
    for t in "$@"; do run "$t"; done
    echo "==== lane $name done in $((SECONDS - start)) s"
  ) </dev/null &
  LANE_PID[$name]=$!
  set +m
}

# wait_lanes: waits for every lane; stops what a lane's tests left running (a test stops
# what it starts; whatever is left is named here).
wait_lanes() {
  local name pid left
  for name in "${!LANE_PID[@]}"; do
    pid=${LANE_PID[$name]}
    wait "$pid"
    if left=$(pgrep -g "$pid" -a); then
      echo "e2e: lane $name left processes running; stopping them: $left"
      kill -TERM -- "-$pid" 2>/dev/null
    fi
    unset "LANE_PID[$name]"
  done
}

cleanup() {
  local pid
  for pid in "${LANE_PID[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
  for pid in "${LANE_PID[@]}"; do wait "$pid" 2>/dev/null; done
  ((cluster)) && tools/local-cluster down >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "e2e: each test's log is in $LOGS"
ORDER+=(local_cluster_smoke)
run local_cluster_smoke

cluster=1
# A spare node (tainted: only pods that tolerate it land there) and the fake NVML for the pods
# that ask for it (tests/e2e/gpu_fault_test.sh).
if ! line=$(COHORT_LOCAL_SPARE_NODES=1 \
  COHORT_LOCAL_FAKE_NVML="$PWD/build/tests/sidecar/gpu/fake_nvml/libnvidia-ml.so.1" \
  tools/local-cluster up --addons kueue,coscheduling | tail -n 1); then
  echo "e2e: the local cluster did not come up"
  exit 1
fi
export "${line?}"
KUBECTL=build/tools/bin/kubectl
if ! "$KUBECTL" apply --server-side -f charts/cohort/crds/ >/dev/null ||
  ! "$KUBECTL" wait --for=condition=Established crd/coordinatedjobs.cohort.dev --timeout=60s >/dev/null; then
  echo "e2e: the CRD does not install"
  exit 1
fi
export COHORT_E2E_SHARED_CLUSTER=1

start_lane helm helm_install_test
start_lane chart chart_test
wait_lanes

start=$SECONDS
start_lane heavy jax_restart_test tasks_test gpu_fault_test
start_lane gpu kueue_test coscheduling_test native_gang_test gpu_visibility_test failure_rules_test \
  tasks_k8s_bench dashboards_test hang_test
start_lane api crd_test isolation_test cert_manager_test operator_test pytorch_restart_test
wait_lanes
echo "e2e: the lanes took $((SECONDS - start)) s"
# Alone: a default StorageClass changes every job made while it exists.
start_lane storage state_volume_test
wait_lanes

failed=()
for t in "${ORDER[@]}"; do
  result=unfinished secs="?"
  read -r result secs 2>/dev/null <"$LOGS/$t.result"
  [[ $result == passed ]] && continue
  failed+=("${CMD[$t]}")
  echo "==== log of ${CMD[$t]} ($LOGS/$t.log)"
  cat "$LOGS/$t.log"
  echo "==== FAILED: ${CMD[$t]} ($secs s)"
done
if ((${#failed[@]})); then
  printf 'e2e: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "e2e: every test passed in $SECONDS s"
