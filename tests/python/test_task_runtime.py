"""The Python package against real processes: drivers, Python and C++ workers, two stores."""
import glob
import mmap
import os
import time

import grpc
import numpy as np
import pytest

import cohort
import tasks_lib


@pytest.fixture
def two_nodes(cluster):
    a = cluster.add_store("127.0.0.2")
    b = cluster.add_store("127.0.0.3")
    cluster.add_python_worker(a, 0)
    cluster.add_python_worker(b, 1)
    cluster.add_cpp_workers(b, 2)
    cluster.wait_for_workers(4)
    cohort.init(cluster.scheduler, a)
    return cluster


def test_a_map_and_a_reduce_over_python_and_cpp_workers(two_nodes):
    squares = [tasks_lib.square.remote(i) for i in range(200)]
    # Fan in with the C++ workers' cohort.sum, eight at a time.
    level = squares
    add = cohort.function("cohort.sum")
    while len(level) > 1:
        level = [add.remote(*level[i:i + 8]) for i in range(0, len(level), 8)]
    assert cohort.get(level[0]) == sum(i * i for i in range(200))
    # And a Python task on a C++ result.
    assert cohort.get(tasks_lib.pair_sum.remote(cohort.function("cohort.add").remote(2, 3), 10)) == 15


def test_a_task_that_raises_raises_in_get_with_its_message(two_nodes):
    ref = tasks_lib.explode.remote("no such shard: 17")
    with pytest.raises(cohort.TaskError) as e:
        cohort.get(ref)
    assert "ValueError: no such shard: 17" in e.value.message
    info = cohort.api._require_client().task_info()
    assert [t.function_name for t in info.failed_task] == ["tasks_lib.explode"]
    assert "no such shard: 17" in info.failed_task[0].error_message


def test_returning_another_objects_ref_aliases_it(two_nodes):
    inner = cohort.put({"weights": [1.5, 2.5]})
    outer = tasks_lib.forward.remote([inner])
    assert cohort.get(outer) == {"weights": [1.5, 2.5]}


def test_several_results_and_nested_tasks(two_nodes):
    plus, minus = tasks_lib.split.remote(7)
    assert cohort.get([plus, minus]) == [7, -7]
    assert cohort.get(tasks_lib.submit_inner.remote(5)) == 30


def test_a_numpy_array_round_trips_and_travels_between_stores(two_nodes):
    array = np.arange(4 * 1024 * 1024, dtype=np.float32)  # 16 MiB
    ref = cohort.put(array)
    assert np.array_equal(cohort.get(ref), array)
    assert cohort.get(tasks_lib.array_sum.remote(ref)) == float(array.sum())


def test_wait_returns_the_ready_first(two_nodes, tmp_path):
    # The slow task ends only when the test lets it (a file), not after a while: it cannot
    # be ready before the test has checked that it is not.
    release = tmp_path / "release-slow"
    slow = tasks_lib.when_file_exists.remote(str(release), "slow")
    fast = tasks_lib.nap.remote(0.0, "fast")
    ready, not_ready = cohort.wait([slow, fast], num_returns=1, timeout=60)
    assert ready == [fast] and not_ready == [slow]
    ready, not_ready = cohort.wait([slow], num_returns=1, timeout=0.2)
    assert ready == [] and not_ready == [slow]
    release.touch()
    assert cohort.get(slow) == "slow"


def test_reusable_variables_are_rebuilt_after_each_task(two_nodes):
    cohort.reusable("counter", list)
    assert [cohort.get(tasks_lib.count_calls.remote()) for _ in range(3)] == [1, 1, 1]


def test_dropped_references_leave_every_store_empty(two_nodes):
    refs = [tasks_lib.square.remote(i) for i in range(50)]
    values = cohort.get(refs)
    assert values[7] == 49
    put = cohort.put(np.zeros(1000))
    del refs, put
    client = cohort.api._require_client()
    client.flush_releases()
    deadline = time.monotonic() + 20
    while True:
        info = two_nodes.scheduler_info()
        held = [i for i, count in enumerate(info.reference_count) if count]
        if not held:
            break
        assert time.monotonic() < deadline, f"still held: {held}"
        time.sleep(0.05)
    deadline = time.monotonic() + 20
    while any(two_nodes.store_ids(store) for store in two_nodes.stores):
        assert time.monotonic() < deadline, [two_nodes.store_ids(s) for s in two_nodes.stores]
        time.sleep(0.05)


def test_a_function_no_worker_has_is_a_clear_error(two_nodes):
    with pytest.raises(LookupError, match="no worker registered function 'nope.fn'"):
        cohort.api._require_client().submit("nope.fn", [], wait=0.3)
    with pytest.raises(TypeError, match="runs only as a task"):
        cohort.function("cohort.add")(1, 2)


def test_a_large_array_on_the_same_node_goes_through_shared_memory(two_nodes):
    array = np.arange(16 * 1024 * 1024, dtype=np.float64)  # 128 MiB
    ref = cohort.put(array)
    shm = glob.glob(f"/dev/shm/cohort-store-*/obj-{ref.id}-*")
    assert len(shm) == 1 and os.path.getsize(shm[0]) > array.nbytes, shm
    back = cohort.get(ref)
    assert not back.flags.writeable, "a mapped store file, read-only, not a copy"
    backing = back
    while isinstance(backing, np.ndarray):
        backing = backing.base
    assert isinstance(backing, memoryview) and isinstance(backing.obj, mmap.mmap), backing
    assert np.array_equal(back, array)
    # A task on the other node gets it delivered between the stores; its result comes back.
    assert cohort.get(tasks_lib.array_sum.remote(ref)) == float(array.sum())
    del back


def test_the_coordinator_killed_mid_run_comes_back_and_the_driver_carries_on(cluster, tmp_path):
    state = ["--state-dir", str(tmp_path / "state")]
    cluster.restart_coordinator(state)
    a = cluster.add_store("127.0.0.2")
    workers = [cluster.add_python_worker(a, i) for i in range(2)]
    cluster.wait_for_workers(2)
    cohort.init(cluster.scheduler, a)
    data = cohort.put(list(range(100)))
    slow = [tasks_lib.nap.remote(0.05, i) for i in range(60)]
    mapped = [tasks_lib.pair_sum.remote(tasks_lib.square.remote(i), 1) for i in range(30)]
    client = cohort.api._require_client()
    deadline = time.monotonic() + 30
    while client.task_info().num_succeeded < 10:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.task_info().num_succeeded < 120, "the run ended before the kill"
    cluster.restart_coordinator(state)
    # Calls made while it starts again wait for it; nothing is lost or run twice.
    more = [tasks_lib.square.remote(i) for i in range(10)]
    assert cohort.get(slow) == list(range(60))
    assert cohort.get(mapped) == [i * i + 1 for i in range(30)]
    assert cohort.get(more) == [i * i for i in range(10)]
    assert cohort.get(data) == list(range(100))
    info = client.task_info()
    assert len(info.failed_task) == 0
    assert all(w.poll() is None for w in workers), "a worker exited"
    # A worker stores its last result before it reports to the scheduler, so the driver can
    # hold every result while one worker's report is still on its way: both come back idle.
    cluster.wait_for_workers(2)
    assert len(cluster.scheduler_info().avail_worker) == 2


def test_a_bounded_history_lets_a_job_run_far_more_tasks_than_max_tasks(cluster):
    # Only the newest 3 finished tasks are kept (their lineage), and --max-tasks counts those:
    # without the history the eleventh task would be refused.
    cluster.restart_coordinator(["--max-tasks", "10", "--task-history", "3"])
    store = cluster.add_store("127.0.0.2")
    cluster.add_python_worker(store, 0)
    cluster.wait_for_workers(1)
    cohort.init(cluster.scheduler, store)
    for batch in range(12):
        args = range(5 * batch, 5 * batch + 5)
        assert cohort.get([tasks_lib.square.remote(i) for i in args]) == [i * i for i in args]
    assert len(cohort.api._require_client().task_info().failed_task) == 0
    # The history's 3, and the last task, whose worker's report may still be on its way.
    assert len(cluster.scheduler_info().computation_graph.operation) <= 4


def test_a_flood_of_tasks_past_the_limit_is_refused_and_the_others_finish(cluster):
    cluster.restart_coordinator(["--max-tasks", "40"])
    store = cluster.add_store("127.0.0.2")
    cluster.add_python_worker(store, 0)
    cluster.wait_for_workers(1)
    cohort.init(cluster.scheduler, store)
    accepted, refused = [], []
    for i in range(100):
        try:
            accepted.append(tasks_lib.square.remote(i))
        except grpc.RpcError as e:
            refused.append(e)
    assert len(accepted) == 40, [e.details() for e in refused[:1]]
    assert len(refused) == 60
    for e in refused:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
        assert "--max-tasks" in e.details(), e.details()
    assert cohort.get(accepted) == [i * i for i in range(40)]
    assert len(cohort.api._require_client().task_info().failed_task) == 0
