"""Real clients behind sidecar proxies ride out coordinator restarts.

The coordinator runs with --state-dir; every task talks to it through a cohort-sidecar's
proxy endpoint (--proxy-listen), two tasks per sidecar as two processes of one pod would.
While the tasks run rounds of key writes, blocking reads and barriers, the coordinator is
killed with SIGKILL and started again on the same port and directory, twice. No client may
see an error, and every key written must be there at the end.
"""

import json

import pytest

from conftest import JAXLIB_CLIENTS
from harness import (COMPAT_DIR, KILL_AT_ROUNDS, DurableCoordinator, free_port,
                     kill_during_rounds, start_proxy, start_tasks, tail, tensorflow_client,
                     wait_all)

TASKS = 4
SIDECARS = 2
ROUNDS = 40
WANTED = ("jaxlib-0.9.2", None)  # None: the main venv's jaxlib (0.12)
TF_PYTHON, TF_VERSION, TF_SKIP = tensorflow_client()


def restart_clients():
    params = []
    main = JAXLIB_CLIENTS[0]
    for client in JAXLIB_CLIENTS:
        if client is not main and client.name not in WANTED:
            continue
        marks = [pytest.mark.skip(reason=f"{client.name}: {client.skip_reason}")] \
            if client.skip_reason else []
        params.append(pytest.param(client, id=client.name, marks=marks))
    return params


def assert_all_rounds_ok(name, steps, log):
    failed = {k: v.get("error") for k, v in steps.items() if not v.get("ok")}
    assert not failed, f"{name}: steps failed: {failed}\n{tail(log)}"
    for r in range(ROUNDS):
        assert f"round {r}" in steps, f"{name}: round {r} missing\n{tail(log)}"
    assert steps["read_back"]["value"] == ROUNDS * TASKS, (name, steps["read_back"])


@pytest.mark.parametrize("client", restart_clients())
def test_jaxlib_tasks_behind_sidecars_ride_out_two_coordinator_restarts(client, group, tmp_path):
    coordinator = DurableCoordinator(group, client.cohort_job, TASKS, SIDECARS, tmp_path / "state")
    proxies = [start_proxy(group, coordinator.listen, i, SIDECARS, job=client.cohort_job)
               for i in range(SIDECARS)]
    runs = start_tasks(group, client, coordinator.server, "restart", TASKS, 10,
                       extra=["--rounds", str(ROUNDS)],
                       address_of=lambda t: proxies[t % SIDECARS][1])
    kill_during_rounds(coordinator, [r.proc for r in runs])
    assert wait_all([r.proc for r in runs], timeout=240) == [], "a task did not finish in time"
    for r in runs:
        log = r.log()
        assert r.proc.returncode == 0, tail(log)
        assert "Terminating process" not in log, tail(log)
        assert_all_rounds_ok(r.proc.name, r.steps(), log)
    assert coordinator.starts == 1 + len(KILL_AT_ROUNDS)
    for proc, _ in proxies:
        assert proc.poll() is None, tail(proc.log_path.read_text())


@pytest.mark.skipif(bool(TF_SKIP), reason=f"tensorflow-cpu: {TF_SKIP}")
def test_tensorflow_tasks_behind_a_sidecar_ride_out_two_coordinator_restarts(group, tmp_path):
    coordinator = DurableCoordinator(group, "worker", TASKS, 1, tmp_path / "state")
    _, address = start_proxy(group, coordinator.listen, 0, 1)
    workers = ",".join(f"127.0.0.1:{free_port()}" for _ in range(TASKS))
    procs, outs = [], []
    for t in range(TASKS):
        out = group.log_dir / f"tf-{t}.json"
        procs.append(group.start(f"tf-{t}", [TF_PYTHON, str(COMPAT_DIR / "tf_task.py"), address,
                                             str(t), workers, str(out), str(ROUNDS)]))
        outs.append(out)
    kill_during_rounds(coordinator, procs)
    assert wait_all(procs, timeout=240) == [], "a TensorFlow task did not finish in time"
    for p, out in zip(procs, outs):
        log = (group.log_dir / f"{p.name}.log").read_text(errors="replace")
        assert p.returncode == 0, tail(log)
        assert_all_rounds_ok(p.name, json.loads(out.read_text()), log)
