"""jaxlib 0.4.13 over xla.DistributedRuntimeService (use_coordination_service=False),
against cohort and against jaxlib 0.4.13's own service of that protocol.

jaxlib 0.4.13 is the oldest jaxlib on PyPI for a Python this machine has (3.11) and the
newest that still speaks this protocol. This suite found four cohort bugs in it
(WaitAtBarrier missing, Shutdown without node_id, failures not reaching the other nodes,
jaxlib 0.4's topology layout); these tests now hold cohort to jaxlib's behaviour.
"""

import pytest

from harness import (ProcessGroup, kill_and_wait_for_the_survivors, legacy_client, start_cohort,
                     start_jaxlib_service, start_tasks, tail, wait_all, wait_for_log)

TASKS = 4
HEARTBEAT_S = 10
CLIENT = legacy_client()

def server_params():
    marks = [pytest.mark.skip(reason=f"{CLIENT.name}: {CLIENT.skip_reason}")] \
        if CLIENT.skip_reason else []
    return [pytest.param(kind, id=f"{CLIENT.name}-on-{kind}", marks=marks)
            for kind in ("cohort", "jaxlib")]


class Run:
    def __init__(self, kind, runs):
        self.kind = kind
        self.runs = runs

    def step(self, task, name):
        steps = self.runs[task].steps()
        assert name in steps, f"task {task} never reached {name!r}:\n{tail(self.runs[task].log())}"
        return steps[name]

    def value(self, task, name):
        rec = self.step(task, name)
        assert rec["ok"], f"task {task} step {name} failed: {rec.get('error')}"
        return rec["value"]


@pytest.fixture(scope="module", params=server_params())
def run(request, tmp_path_factory):
    kind = request.param
    group = ProcessGroup(tmp_path_factory.mktemp(f"legacy-{kind}"))
    try:
        if kind == "cohort":
            server = start_cohort(group, "worker", TASKS, HEARTBEAT_S)
        else:
            server = start_jaxlib_service(group, CLIENT, TASKS, HEARTBEAT_S, legacy=True)
        runs = start_tasks(group, CLIENT, server, "legacy", TASKS, HEARTBEAT_S,
                           extra=["--legacy", "--shutdown-timeout", "5"])
        assert wait_all([r.proc for r in runs], timeout=120) == []
        assert server.proc.poll() is None, tail(server.log())
        yield Run(kind, runs)
    finally:
        group.close()


def test_legacy_tasks_connect_and_read_each_others_values(run):
    for t in range(TASKS):
        assert run.value(t, "connect") is None
        assert run.value(t, "get_others") == {
            str(o): f"value-{o}" for o in range(TASKS) if o != t}
        assert run.value(t, "get_bytes_others") == {
            str(o): f"b{o}\u00ff".encode().hex() for o in range(TASKS) if o != t}


def test_legacy_set_always_overwrites(run):
    for t in range(TASKS):
        assert run.value(t, "set_existing") is None
        assert run.value(t, "read_overwritten") == f"new-{t}"


def test_legacy_blocking_get_of_a_missing_key_times_out(run):
    for t in range(TASKS):
        rec = run.step(t, "get_missing_with_timeout")
        # The key never comes: the call ends with an error, never a value; which error says
        # why it ended (not how long it took: timings belong in bench/).
        assert not rec["ok"], rec
        # cohort ends the wait DEADLINE_EXCEEDED. jaxlib's old service answers NOT_FOUND
        # at the same moment as the client's own RPC deadline (also 500 ms) expires, so
        # its client sees either.
        if run.kind == "cohort":
            assert "DEADLINE_EXCEEDED:" in rec["error"], rec["error"]
        else:
            assert "NOT_FOUND: legacy/never" in rec["error"] or \
                "DEADLINE_EXCEEDED: Deadline Exceeded" in rec["error"], rec["error"]


def test_legacy_3_mib_value(run):
    expected = run.value(0, "big_expected")
    assert expected["len"] == 3 << 20
    assert run.value(0, "set_big") is None
    for t in range(1, TASKS):
        assert run.value(t, "get_big") == expected


def test_legacy_barrier(run):
    for t in range(TASKS):
        assert run.value(t, "barrier") is None


def test_legacy_shutdown(run):
    # jaxlib 0.4.13's ShutdownRequest names no node; cohort knows it by its connection.
    for t in range(TASKS):
        assert run.value(t, "shutdown") is None


@pytest.mark.parametrize("kind", server_params())
def test_legacy_killed_task_stops_the_others(kind, group):
    """The old protocol has no error polling: jaxlib's old service stops itself when a
    node misses its heartbeats; cohort answers the other nodes' heartbeats with the error
    it propagates. Either way their heartbeats fail, which ends them with a fatal log
    line."""
    heartbeat_s = 2
    if kind == "cohort":
        server = start_cohort(group, "worker", TASKS, heartbeat_s)
    else:
        server = start_jaxlib_service(group, CLIENT, TASKS, heartbeat_s, legacy=True)
    # The survivors would stay alive (heartbeating) far longer than the wait below: if they
    # end, it is because they were told.
    runs = start_tasks(group, CLIENT, server, "crash", TASKS, heartbeat_s,
                       extra=["--legacy", "--wait-seconds", "600"])
    for r in runs:
        wait_for_log(r.proc, rf"task {r.task_id}: ready", 60)
    ended = kill_and_wait_for_the_survivors(group, runs, TASKS - 1)
    if kind == "cohort":
        # What cohort does see: the victim goes into ERROR after the heartbeat timeout.
        assert "/job:worker/task:3 (incarnation" in server.log()
    assert ended == [0, 1, 2], f"survivors that ended: {ended}"
    for r in runs[:-1]:
        assert "survived" not in r.steps(), tail(r.log())
        if kind == "cohort":
            # The heartbeat answer is the propagated error, naming the dead node.
            assert "Terminating process because of missing heartbeat response" in r.log(), \
                tail(r.log())
            assert "/job:worker/task:3 (incarnation" in r.log(), tail(r.log())
        else:
            assert "Terminating process because the coordinator detected missing " \
                "heartbeats" in r.log(), tail(r.log())
