"""A task killed with SIGKILL: the other tasks learn of it, from the heartbeat timeout or
from the victim's sidecar.

Coordinator and clients use the same short heartbeat timeout (jaxlib heartbeats every
half of its own). The survivors keep jaxlib's default error callback, which ends the
process with a fatal log line carrying the error the service propagated: that line says
which path told them. How fast each path is, is measured in bench/ (cohort-failure-bench),
not asserted here.
"""

import re
import signal

import pytest

from conftest import JAXLIB_CLIENTS, client_server_params
from harness import (SURVIVORS_DEADLINE_S, coordinator_binary, kill_and_wait_for_the_survivors,
                     start_cohort, start_server, start_tasks, tail, wait_for_log)

TASKS = 4
HEARTBEAT_S = 2
VICTIM = TASKS - 1
FATAL = "Terminating process because the JAX distributed service detected fatal errors"


@pytest.mark.parametrize("pair", client_server_params())
def test_killed_task_reaches_the_others_through_the_heartbeat_timeout(pair, group):
    client, server_kind = pair
    server = start_server(server_kind, group, client, TASKS, HEARTBEAT_S)
    # The survivors would stay alive far longer than the wait below: if they end, it is
    # because they were told.
    runs = start_tasks(group, client, server, "crash", TASKS, HEARTBEAT_S,
                       extra=["--wait-seconds", "600"])
    for r in runs:
        wait_for_log(r.proc, rf"task {r.task_id}: ready", 60)

    ended = kill_and_wait_for_the_survivors(group, runs, VICTIM)
    survivors = runs[:VICTIM]
    assert ended == [r.task_id for r in survivors], (
        f"only {ended} of the survivors ended within {SURVIVORS_DEADLINE_S}s of the kill")

    for r in survivors:
        log = r.log()
        assert "survived" not in r.steps(), tail(log)
        # jaxlib 0.9 exits with status 1 (LOG(QFATAL)); 0.12 aborts (LOG(FATAL)).
        assert r.proc.returncode in (1, -signal.SIGABRT), (r.proc.returncode, tail(log))
        assert FATAL in log, tail(log)
        assert "UNAVAILABLE" in log, tail(log)
        if server_kind == "cohort":
            assert re.search(rf"{re.escape(client.job_path(VICTIM))} \(incarnation \d+\) sent "
                             rf"no heartbeat for [\d.]+s, over the heartbeat timeout of "
                             rf"{HEARTBEAT_S}s", log), tail(log)
        else:
            assert re.search(r"unhealthy \(stopped sending heartbeats\):\n"
                             rf"(/job:jax_worker/replica:0/task:)?{VICTIM}\n", log), tail(log)

    assert server.proc.poll() is None, tail(server.log())
    if server_kind == "cohort":
        assert re.search(rf"task {re.escape(client.job_path(VICTIM))} \(incarnation 0x[0-9a-f]+\) "
                         r"is in error", server.log()), tail(server.log())


MAIN = JAXLIB_CLIENTS[0]


@pytest.mark.skipif(bool(MAIN.skip_reason), reason=f"{MAIN.name}: {MAIN.skip_reason}")
def test_sidecar_tells_the_others_before_the_heartbeat_timeout_does(group):
    """Only the victim has a sidecar here (the other sidecars' topology exchange never
    completes, which the exit report does not need). It sees the process exit (a shared
    process namespace: here, the machine's) and reports it; jaxlib's parked PollForError
    delivers the report to the survivors. The first error a survivor gets ends it, so its
    log says which came first: the sidecar's report, not the coordinator's heartbeat
    timeout (30 s)."""
    heartbeat_s = 30
    server = start_cohort(group, MAIN.cohort_job, TASKS, heartbeat_s,
                          extra=["--auxiliary-job", f"sidecar={TASKS}"])
    runs = start_tasks(group, MAIN, server, "crash", TASKS, heartbeat_s,
                       extra=["--wait-seconds", "600"])
    for r in runs:
        wait_for_log(r.proc, rf"task {r.task_id}: ready", 60)
    sidecar = group.start("sidecar", [
        str(coordinator_binary().parent / "cohort-sidecar"), "--http-listen", "127.0.0.1:0",
        "--sidecar-job", "sidecar", "--workload-liveness", "process", "--workload-process",
        rf"worker\.py .*--address {re.escape(server.address)} --task-id {VICTIM} "],
        env={"COHORT_COORDINATOR_ADDRESS": server.address, "COHORT_JOB_NAME": MAIN.cohort_job,
             "COHORT_TASK_ID": str(VICTIM), "COHORT_NUM_TASKS": str(TASKS),
             "COHORT_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"})
    wait_for_log(sidecar, r"watching workload process", 30)

    ended = kill_and_wait_for_the_survivors(group, runs, VICTIM)
    assert ended == [r.task_id for r in runs[:VICTIM]], (
        f"only {ended} of the survivors ended within {SURVIVORS_DEADLINE_S}s of the kill\n"
        f"{tail(open(sidecar.log_path).read())}")
    for r in runs[:VICTIM]:
        log = r.log()
        assert "survived" not in r.steps(), tail(log)
        assert FATAL in log, tail(log)
        # The sidecar's report about the victim, not the coordinator's heartbeat timeout.
        # (No POD_NAME here, so no "(pod ...)" after the task.)
        assert f"{MAIN.job_path(VICTIM)} failed: workload process" in log, tail(log)
        assert "without shutting down" in log, tail(log)
        assert "sent no heartbeat" not in log, tail(log)
