"""jaxlib's distributed-runtime client, four processes, against cohort and against jaxlib.

Each (client, server) pair runs worker.py's basic scenario once (a module-scoped
fixture); the tests below each check one behaviour of that run. The same assertions
hold for both servers unless a test says otherwise, and every such difference is
listed in docs/compatibility.md.

Where one task must act after another, the scenario waits for that event (worker.py:
keys the other task sets, and against cohort its /metrics showing the calls parked), and
the tests assert the order of the steps and what they returned, never how long anything
took: timings belong in bench/.
"""

import re

import pytest

from conftest import client_server_params
from harness import ProcessGroup, start_server, start_tasks, tail, wait_all

TASKS = 4
HEARTBEAT_S = 10
LAST = TASKS - 1


class Run:
    def __init__(self, client, server, runs, late):
        self.client = client
        self.server = server
        self.runs = runs
        self.late = late

    def step(self, task, name):
        steps = self.runs[task].steps()
        assert name in steps, (
            f"task {task} never reached step {name!r}; its log:\n{tail(self.runs[task].log())}")
        return steps[name]

    def value(self, task, name):
        rec = self.step(task, name)
        assert rec["ok"], f"task {task} step {name} failed: {rec.get('error')}"
        return rec["value"]

    def error(self, task, name, code):
        rec = self.step(task, name)
        assert not rec["ok"], f"task {task} step {name} succeeded with {rec.get('value')!r}"
        assert f"{code}:" in rec["error"], rec["error"]
        return rec["error"]


@pytest.fixture(scope="module", params=client_server_params())
def run(request, tmp_path_factory):
    client, server_kind = request.param
    group = ProcessGroup(tmp_path_factory.mktemp(f"{client.name}-{server_kind}"))
    try:
        server = start_server(server_kind, group, client, TASKS, HEARTBEAT_S, http=True)
        # The last task starts once the others have begun to connect (and, against cohort,
        # wait at its register barrier), so they wait for it there.
        runs = start_tasks(group, client, server, "basic", TASKS, HEARTBEAT_S,
                           late={LAST: ("connect", "register")})
        late = wait_all([r.proc for r in runs], timeout=180)
        assert server.proc.poll() is None, f"server died:\n{tail(server.log())}"
        yield Run(client, server, runs, late)
    finally:
        group.close()


def test_every_task_finishes_the_scenario(run):
    assert run.late == []
    for r in run.runs:
        assert r.proc.returncode == 0, tail(r.log())
        assert r.steps().get("done", {}).get("value") is True, tail(r.log())


def test_connect_waits_at_the_register_barrier_for_the_last_task(run):
    last = run.step(LAST, "connect")
    assert last["ok"], last
    for t in range(LAST):
        rec = run.step(t, "connect")
        assert rec["ok"], rec
        # Tasks 0-2 began to connect before task 3 was started, and connected only once
        # it came.
        assert rec["started_at"] < last["started_at"], (rec, last)
        assert rec["ended_at"] >= last["started_at"], (rec, last)


def test_string_values_set_by_every_task_are_read_with_blocking_get(run):
    for t in range(TASKS):
        assert run.value(t, "get_others") == {str(o): f"value-{o}" for o in range(TASKS) if o != t}


def test_bytes_values_keep_every_byte(run):
    for t in range(TASKS):
        expected = {str(o): (bytes([o, 0, 255]) * 3).hex() for o in range(TASKS) if o != t}
        assert run.value(t, "get_bytes_others") == expected
        nxt = (t + 1) % TASKS
        assert run.value(t, "try_get_bytes_existing") == (bytes([nxt, 0, 255]) * 3).hex()


def test_try_get_returns_an_existing_key_and_not_found_for_a_missing_one(run):
    for t in range(TASKS):
        assert run.value(t, "try_get_existing") == f"value-{(t + 1) % TASKS}"
        err = run.error(t, "try_get_missing", "NOT_FOUND")
        assert "compat/missing" in err


def test_keys_are_normalised(run):
    # Task 0 set "/compat//norm/x/"; both spellings read it back.
    assert run.value(0, "set_unnormalised") is None
    for t in range(TASKS):
        assert run.value(t, "get_normalised") == ["n", "n"]


def test_blocking_get_of_a_missing_key_ends_at_its_timeout(run):
    for t in range(TASKS):
        # The key never comes: the call ends because its timeout ran out, which both
        # servers say with DEADLINE_EXCEEDED (not a value, not NOT_FOUND).
        run.error(t, "get_missing_with_timeout", "DEADLINE_EXCEEDED")
        # And the scenario went on past it (a call that never ended would stop it here).
        assert "dir_get" in run.runs[t].steps(), tail(run.runs[t].log())


def test_blocking_get_waits_until_another_task_sets_the_key(run):
    # Task 1 set the key only once task 0's get had begun (and, against cohort, was
    # parked there: cohort's metrics said so).
    run.value(1, "saw_late_get")
    assert run.value(1, "set_late") is None
    assert run.value(0, "get_parked_until_set") == "arrived"
    got, put = run.step(0, "get_parked_until_set"), run.step(1, "set_late")
    assert got["started_at"] < put["started_at"], (got, put)
    assert got["ended_at"] >= put["started_at"], (got, put)


def test_dir_get_lists_a_directory_in_key_order(run):
    expected = [[f"compat/str/{i}", f"value-{i}"] for i in range(TASKS)]
    expected_bytes = [[f"compat/bytes/{i}", (bytes([i, 0, 255]) * 3).hex()] for i in range(TASKS)]
    for t in range(TASKS):
        assert run.value(t, "dir_get") == expected
        assert run.value(t, "dir_get_bytes") == expected_bytes
        assert run.value(t, "dir_get_missing") == []


def test_dir_get_of_the_empty_key(run):
    keys = sorted([f"compat/str/{i}" for i in range(TASKS)]
                  + [f"compat/bytes/{i}" for i in range(TASKS)]
                  + ["compat/deldir/a", "compat/deldir/b/c", "compat/deldirx", "compat/norm/x"])
    for t in range(TASKS):
        got = run.value(t, "dir_get_root")
        if run.server.kind == "cohort":
            # cohort: the empty directory is the whole store (documented difference).
            assert got == keys
        else:
            # jaxlib looks under "/", where no normalised key lives.
            assert got == []


def test_insert_of_an_existing_key_needs_allow_overwrite(run):
    for t in range(TASKS):
        err = run.error(t, "set_existing_refused", "ALREADY_EXISTS")
        assert f"compat/str/{t}" in err
        assert run.value(t, "set_existing_overwrite") is None
        assert run.value(t, "read_overwritten") == f"new-{t}"


def test_already_exists_error_payload(run):
    err = run.error(0, "set_existing_refused", "ALREADY_EXISTS")
    payload = "type.googleapis.com/tensorflow.CoordinationServiceError" in err
    if run.client.protocol.startswith("xla."):
        # cohort marks every error as the service's own; jaxlib's service leaves this
        # one bare (documented difference). The xla client prints payloads.
        assert payload == (run.server.kind == "cohort"), err
    else:
        # The tensorflow-protocol client does not print payloads for either server.
        assert not payload, err


def test_increment_adds_atomically_across_tasks(run):
    returned = [run.value(t, "increment") for t in range(TASKS)]
    # Each call returns the running total after its own increment of t + 1.
    assert len(set(returned)) == TASKS
    assert max(returned) == 10
    for t, v in enumerate(returned):
        assert v >= t + 1
    for t in range(TASKS):
        assert run.value(t, "counter_total") == "10"


def test_increment_of_a_value_that_is_not_a_number_is_failed_precondition(run):
    err = run.error(0, "increment_text", "FAILED_PRECONDITION")
    if run.server.kind == "cohort":
        assert "not a decimal 64-bit integer" in err, err
    else:
        assert 'Failed to parse value "abc" as an integer' in err, err


def test_increment_past_32_bits(run):
    # Both add in 64 bits, but jaxlib's service parses the stored value as a 32-bit
    # integer, so a counter past 2^31 - 1 cannot be incremented again there.
    assert run.value(0, "increment_wide") == 2**31 + 5
    if run.server.kind == "cohort":
        assert run.value(0, "increment_wide_again") == 2**31 + 6
    else:
        err = run.error(0, "increment_wide_again", "FAILED_PRECONDITION")
        assert "2147483653" in err, err


def test_a_64_mib_value_goes_through_the_store(run):
    expected = run.value(0, "big_expected")
    assert expected["len"] == 64 << 20
    assert run.value(0, "set_big") is None
    for t in range(1, TASKS):
        assert run.value(t, "get_big") == expected


def test_delete_removes_a_key_or_a_directory_and_nothing_else(run):
    for step in ("delete_key", "delete_dir", "delete_missing"):
        assert run.value(0, step) is None
    for t in range(TASKS):
        assert "compat/str/0" in run.error(t, "deleted_key_gone", "NOT_FOUND")
        assert run.value(t, "sibling_kept") == "new-1"
        assert run.value(t, "deleted_dir_gone") == []
        assert run.value(t, "prefix_sibling_kept") == "3"


def test_barriers_of_all_tasks_pass(run):
    for t in range(TASKS):
        for name in ("barrier_after_set", "barrier_before_overwrite", "barrier_after_increment",
                     "barrier_before_late", "barrier_after_late", "barrier_after_big",
                     "barrier_after_delete",
                     "barrier_after_timeout", "barrier_before_edges", "barrier_final"):
            assert run.value(t, name) is None


def test_barrier_over_a_subset_passes_without_the_other_tasks(run):
    for t in range(TASKS):
        assert run.value(t, "barrier_subset") is None


def test_barrier_timeout_names_the_missing_task(run):
    # Task 3 never calls this barrier: it ends for the others because its timeout ran out
    # (DEADLINE_EXCEEDED), and the error names the task that was missing. (How close to
    # the 1.5 s deadline each server ends it is a timing: see docs/compatibility.md.)
    for t in range(LAST):
        err = run.error(t, "barrier_timeout", "DEADLINE_EXCEEDED")
        if run.server.kind == "cohort":
            assert f"1 of {TASKS} tasks missing: {run.client.job_path(LAST)}" in err, err
        else:
            assert f"# of tasks that reached the barrier: {LAST}/{TASKS}" in err, err
            # jaxlib >= 0.9.1 names tasks by id, older ones by /job:jax_worker/replica:0/task:N.
            assert re.search(rf"timed out task names:\n(/job:jax_worker/replica:0/task:)?{LAST}\n",
                             err), err
    # The timed-out barrier does not stop the task that never came.
    assert run.value(LAST, "barrier_after_timeout") is None


def test_a_caller_outside_the_task_list_fails_the_barrier_for_everyone(run):
    # Task 2 called a barrier of tasks {0, 1} first; 0 and 1 called once its call had been
    # answered (it said so through the store).
    assert run.value(2, "announce_outsider_call") is None
    outsider = run.step(2, "outsider_call")
    for t in (0, 1):
        run.value(t, "saw_outsider_call")
        assert run.step(t, "outsider_members")["started_at"] > outsider["ended_at"]
    errors = [run.error(2, "outsider_call", "INVALID_ARGUMENT")]
    errors += [run.error(t, "outsider_members", "INVALID_ARGUMENT") for t in (0, 1)]
    for err in errors:
        if run.server.kind == "cohort":
            assert f"{run.client.job_path(2)} is not one of its participants" in err, err
        else:
            assert re.search(r"non-participating task \((/job:jax_worker/replica:0/task:)?2\) "
                             r"called the barrier", err), err
    for t in range(TASKS):
        assert run.value(t, "barrier_after_outsider") is None


def test_barrier_timeout_of_zero(run):
    # Tasks 0-2 called with timeout 0 at once; task 3 called once the server had them:
    # against cohort once its metrics showed their three calls parked, against jaxlib once
    # their calls had been answered.
    run.value(LAST, "saw_others_at_zero_timeout")
    last = run.step(LAST, "zero_timeout_barrier")
    if run.server.kind == "cohort":
        # cohort: 0 means no deadline, so the barrier passes when task 3 arrives.
        assert last["ok"], last
        for t in range(LAST):
            rec = run.step(t, "zero_timeout_barrier")
            assert rec["ok"], rec
            assert rec["ended_at"] >= last["started_at"], (rec, last)
    else:
        # jaxlib: the deadline is the first arrival itself; the barrier fails before task
        # 3 comes, and task 3 gets the same failure.
        for t in range(LAST):
            run.error(t, "zero_timeout_barrier", "DEADLINE_EXCEEDED")
            assert run.step(t, "zero_timeout_barrier")["ended_at"] < last["started_at"]
        run.error(LAST, "zero_timeout_barrier", "DEADLINE_EXCEEDED")
    for t in range(TASKS):
        assert run.value(t, "barrier_after_zero_timeout") is None


def test_get_live_nodes_lists_every_task_with_one_incarnation(run):
    seen = [run.value(t, "live_nodes") for t in range(TASKS)]
    assert sorted(seen[0]) == [str(t) for t in range(TASKS)]
    assert all(s == seen[0] for s in seen)
    incarnations = set(seen[0].values())
    assert len(incarnations) == TASKS and "0" not in incarnations


def test_shutdown_waits_at_the_shutdown_barrier(run):
    for t in range(TASKS):
        assert run.value(t, "shutdown") is None
    # The last task shut down once the others had begun to (against cohort: once their
    # calls were parked at its shutdown barrier); they returned only after it came.
    run.value(LAST, "saw_others_shut_down")
    last = run.step(LAST, "shutdown")
    for t in range(LAST):
        rec = run.step(t, "shutdown")
        assert rec["started_at"] < last["started_at"], (rec, last)
        assert rec["ended_at"] >= last["started_at"], (rec, last)
    if run.server.kind == "cohort":
        assert "shutdown barrier passed" in run.server.log()
