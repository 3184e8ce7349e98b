#!/usr/bin/env bash
# spec.coordinator.state.volume Auto (the default) on a cluster with a default StorageClass:
# the operator gives the coordinator's state a PersistentVolumeClaim, so the state outlives the
# coordinator's pod. The class names the local cluster's provisioner (the pod runner's); the
# API server's DefaultStorageClass admission gives it to the operator's claim, which names
# none. A job made before the class existed keeps the emptyDir it was given.
#
# A default StorageClass changes every job made while it exists, so tests/e2e/run.sh runs
# this test alone, after the lanes. (Without a default class: operator_test.sh, "durable".)
set -uo pipefail
NS="state-volume-test-$$"
source "$(dirname "$0")/lib.sh"

cluster_up
start_operator operator
CLASS="cohort-e2e-default-$$"

remove_class() { "$KUBECTL" delete storageclass "$CLASS" --ignore-not-found --wait=false >/dev/null 2>&1; }
trap 'remove_class; cleanup' EXIT

# ---- 1. Before any default class: an emptyDir, said in a Warning.
sleeper before
if wait_for cjob/before '{.status.coordinatorStateVolume}' EmptyDir 30; then
  message=$(event_message before StateVolume)
  [[ "$message" == *"the cluster has no default StorageClass"* ]] &&
    pass "without a default StorageClass volume Auto is an emptyDir, said in a Warning: $message" ||
    fail "before: the event" "$message"
else
  fail "before: status.coordinatorStateVolume"
fi

# ---- 2. A default class: the next job's state goes on a claim of it.
"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $CLASS
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: cohort.dev/local-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
YAML
sleeper auto "  coordinator:
    state: {size: 32Mi}"
claim_bound() { [[ "$(field pvc/auto-coordinator-state '{.status.phase}')" == Bound ]]; }
if wait_for cjob/auto '{.status.phase}' Running 90 && until_true 60 coordinator_ready auto &&
  until_true 60 claim_bound; then
  got="$(field cjob/auto '{.spec.coordinator.state.volume} {.status.coordinatorStateVolume}')"
  got+="/$(field pvc/auto-coordinator-state '{.spec.storageClassName} {.spec.resources.requests.storage} {.metadata.ownerReferences[0].kind}')"
  got+="/$(field pod/auto-coordinator '{.spec.volumes[?(@.name=="state")].persistentVolumeClaim.claimName}')"
  message=$(event_message auto StateVolume)
  [[ "$got" == "Auto PersistentVolumeClaim/$CLASS 32Mi CoordinatedJob/auto-coordinator-state" &&
    "$message" == *"StorageClass $CLASS, the cluster's default"* ]] &&
    pass "with a default StorageClass volume Auto is a claim of it, owned by the job, mounted: $message" ||
    fail "auto: the claim" "$got; event: $message"

  # ---- 3. The state outlives the coordinator's pod, and the gang goes on.
  workers=$(k get pods -l cohort.dev/job=auto,cohort.dev/role=worker -o jsonpath='{.items[*].metadata.uid}')
  put=$(ctl auto kv put state/key on-the-default-claim 2>&1)
  old=$(field pod/auto-coordinator '{.metadata.uid}')
  k delete pod auto-coordinator --wait=false >/dev/null
  replaced() { local uid; uid=$(field pod/auto-coordinator '{.metadata.uid}'); [[ -n "$uid" && "$uid" != "$old" ]]; }
  if until_true 60 replaced && until_true 60 coordinator_ready auto; then
    got=$(ctl auto kv get state/key 2>&1)
    after=$(k get pods -l cohort.dev/job=auto,cohort.dev/role=worker -o jsonpath='{.items[*].metadata.uid}')
    [[ "$got" == on-the-default-claim && "$after" == "$workers" &&
      "$(field cjob/auto '{.status.restarts}')" == 0 ]] &&
      pass "the coordinator's pod deleted: its key is there in the new pod, the gang kept" ||
      fail "auto: after the pod was deleted" "put: $put; get: $got; workers '$workers' -> '$after'; restarts $(field cjob/auto '{.status.restarts}')"
  else
    fail "auto: a new coordinator pod becomes ready"
  fi
else
  fail "auto: the job runs with its coordinator ready and its claim bound" \
    "$(k get pvc 2>&1 | tail -n 2); event: $(event_message auto StateVolume)"
fi

# ---- 4. The earlier job keeps its choice.
[[ "$(field cjob/before '{.status.coordinatorStateVolume}')" == EmptyDir &&
  -z "$(field pvc/before-coordinator-state '{.metadata.name}')" ]] &&
  pass "a job made before the default StorageClass keeps its emptyDir" ||
  fail "before: the choice changed" "$(field cjob/before '{.status.coordinatorStateVolume}')"

k delete cjob before auto --wait=false >/dev/null
finish
