"""jax.distributed.initialize end to end: four JAX processes, CPU collectives over gloo.

"cohort": every process connects to a running cohort-coordinator; process 0's own
jaxlib service (which jax.distributed always starts) is bound to an unused local port
and sees no client. "jaxlib": JAX's usual arrangement, the service inside process 0,
for comparison.
"""

import json

import pytest

from conftest import JAXLIB_CLIENTS
from harness import COMPAT_DIR, free_port, installed_version, start_cohort, tail, wait_all

TASKS = 4
MAIN = JAXLIB_CLIENTS[0]


def jax_skip_reason():
    if MAIN.skip_reason:
        return MAIN.skip_reason
    if installed_version(MAIN.python, "jax") is None:
        return f"jax is not installed in {MAIN.python}"
    return ""


JAX_SKIP = jax_skip_reason()


@pytest.mark.skipif(bool(JAX_SKIP), reason=f"jax: {JAX_SKIP}")
@pytest.mark.parametrize("server_kind", ["cohort", "jaxlib"])
def test_four_jax_processes_compute_a_psum_and_an_all_gather(server_kind, group):
    cohort = None
    if server_kind == "cohort":
        cohort = start_cohort(group, "worker", TASKS, heartbeat_s=10, http=True)
        address = cohort.address
    else:
        address = f"127.0.0.1:{free_port()}"

    procs, outs = [], []
    for pid in range(TASKS):
        out = group.log_dir / f"jax-{pid}.json"
        argv = [MAIN.python, str(COMPAT_DIR / "jax_task.py"), address, str(pid), str(TASKS),
                str(out)]
        if cohort is not None and pid == 0:
            argv.append(f"127.0.0.1:{free_port()}")  # process 0's unused own service
        procs.append(group.start(f"jax-{pid}", argv))
        outs.append(out)
    assert wait_all(procs, timeout=240) == [], "a JAX process did not finish in time"

    results = []
    for p, out in zip(procs, outs):
        assert p.returncode == 0, tail((group.log_dir / f"{p.name}.log").read_text())
        results.append(json.loads(out.read_text()))

    for pid, r in enumerate(results):
        assert r["ok"] is True
        assert r["process_index"] == pid
        assert (r["process_count"], r["device_count"], r["local_device_count"]) == (TASKS, TASKS, 1)
        assert r["psum_local_shard"] == [10.0]  # 1 + 2 + 3 + 4
        assert r["sum_replicated"] == 10.0
        assert r["allgather"] == [7, 17, 27, 37]
        # gloo's rendezvous and the CPU topology exchange went through the store.
        assert r["gloo_ranks"] == [str(i) for i in range(TASKS)], r["gloo_keys"]
        assert r["topology_keys"] == [f"cpu:local_topology/cpu/{i}" for i in range(TASKS)]

    if cohort is not None:
        # All four clients, process 0's included, registered with cohort and shut down there.
        def rpcs(method):
            return cohort.metric("cohort_coordinator_rpcs_total", protocol="xla",
                                 method=method, code="OK")
        assert rpcs("RegisterTask") == TASKS
        assert rpcs("ShutdownTask") == TASKS
        assert rpcs("InsertKeyValue") >= 2 * TASKS
        assert rpcs("GetKeyValue") >= TASKS
        assert cohort.metric("cohort_coordinator_kv_keys") >= 2 * TASKS + 1
        assert "shutdown barrier passed" in cohort.log()
