"""TensorFlow's coordination agent against cohort and against TensorFlow's own service.

TensorFlow connects its agent to the task named service_leader in its cluster spec.
"cohort": the cluster gets a job "coordinator" whose one task is cohort's address and
which is the leader, so no TensorFlow task starts a service. "tensorflow": worker 0
is the leader and hosts TensorFlow's own service, as usual.
"""

import json

import pytest

from harness import COMPAT_DIR, free_port, start_cohort, tail, tensorflow_client, wait_all

TASKS = 4
TF_PYTHON, TF_VERSION, TF_SKIP = tensorflow_client()


@pytest.mark.skipif(bool(TF_SKIP), reason=f"tensorflow-cpu: {TF_SKIP}")
@pytest.mark.parametrize("server_kind", ["cohort", "tensorflow"])
def test_tensorflow_tasks_share_keys_pass_barriers_and_all_reduce(server_kind, group):
    cohort = None
    leader = "self"
    if server_kind == "cohort":
        cohort = start_cohort(group, "worker", TASKS, heartbeat_s=10, http=True)
        leader = cohort.address
    workers = ",".join(f"127.0.0.1:{free_port()}" for _ in range(TASKS))
    procs, outs = [], []
    for t in range(TASKS):
        out = group.log_dir / f"tf-{t}.json"
        procs.append(group.start(f"tf-{t}", [TF_PYTHON, str(COMPAT_DIR / "tf_task.py"), leader,
                                             str(t), workers, str(out)]))
        outs.append(out)
    assert wait_all(procs, timeout=240) == [], "a TensorFlow task did not finish in time"

    steps = []
    for p, out in zip(procs, outs):
        log = (group.log_dir / f"{p.name}.log").read_text(errors="replace")
        assert p.returncode == 0, tail(log)
        steps.append(json.loads(out.read_text()))

    def value(t, name):
        rec = steps[t][name]
        assert rec["ok"], f"task {t} {name}: {rec.get('error')}"
        return rec["value"]

    for t in range(TASKS):
        assert value(t, "connect") is None
        assert value(t, "get_others") == {str(o): f"value-{o}" for o in range(TASKS) if o != t}
        err = steps[t]["get_missing_with_timeout"]["error"]
        assert err.startswith("DeadlineExceededError:") and "tf/never" in err, err
        assert value(t, "barrier_after_delete") is None
        assert "DeadlineExceededError" in steps[t]["deleted_gone"]["error"]
        assert value(t, "barrier_after_timeout") is None
        assert value(t, "all_reduce") == [10.0]  # 1 + 2 + 3 + 4
        assert value(t, "done") is True
    for t in range(TASKS - 1):
        err = steps[t]["barrier_timeout"]["error"]
        assert err.startswith("DeadlineExceededError:"), err
        if server_kind == "cohort":
            assert f"1 of {TASKS} tasks missing: /job:worker/task:{TASKS - 1}" in err, err
        else:
            assert f"timed out task names:\n/job:worker/replica:0/task:{TASKS - 1}" in err, err

    if cohort is not None:
        def rpcs(method):
            return cohort.metric("cohort_coordinator_rpcs_total", protocol="tensorflow",
                                 method=method, code="OK")
        assert rpcs("RegisterTask") == TASKS
        # TensorFlow exchanges its devices through the coordinator.
        assert rpcs("WaitForAllTasks") == TASKS
        assert rpcs("InsertKeyValue") >= TASKS
        assert rpcs("DeleteKeyValue") == 1
        assert rpcs("Barrier") >= 4 * TASKS
