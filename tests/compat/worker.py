"""One task (or jaxlib's own coordination service) of a compatibility scenario.

The test process starts this file with the Python interpreter of a client's virtual
environment, so one pytest run can drive several jaxlib versions side by side. Every
step of a scenario is recorded, value or error, in a JSON file that the test asserts
on; a step that fails does not stop the scenario, so both servers' answers to every
step can be compared.

Only the standard library and jaxlib are imported here: the interpreter running this
file is not the one running pytest.
"""

import argparse
import hashlib
import importlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.request

BIG_VALUE_BYTES = 64 << 20
# How long a blocking call, or a wait for an event another task or the server brings about,
# may take before the step is recorded as failed and the scenario goes on: only so that
# nothing hangs, never a timing check.
WAIT_MS = 30_000


def load_jaxlib():
    """Returns jaxlib's extension module holding the distributed runtime bindings."""
    errors = []
    for name in ("jaxlib._jax", "jaxlib.xla_extension"):
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
            continue
        if hasattr(module, "get_distributed_runtime_client"):
            return module
        errors.append(f"{name}: no get_distributed_runtime_client")
    raise ImportError("; ".join(errors))


def big_value():
    return random.Random(20261122).randbytes(BIG_VALUE_BYTES)


class Recorder:
    """Runs steps and keeps what each one returned or raised."""

    def __init__(self, path, task_id):
        self.path = path
        self.steps = {}
        self.task_id = task_id

    def run(self, name, fn):
        # Taken before the line below, which others wait on (harness.start_tasks), so that
        # whatever they do once they saw it starts later than this step.
        started_at = time.time()  # wall clock: ordering across the tasks of one host
        print(f"task {self.task_id}: {name} begins", flush=True)
        start = time.monotonic()
        try:
            value = fn()
            record = {"ok": True, "value": value}
        except Exception as e:  # the error text is what the test compares
            record = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        record["seconds"] = round(time.monotonic() - start, 3)
        record["started_at"] = started_at
        record["ended_at"] = time.time()
        self.steps[name] = record
        self.flush()
        print(f"task {self.task_id}: {name} -> {json.dumps(record)[:300]}", flush=True)
        return record

    def note(self, name, value):
        self.steps[name] = {"ok": True, "value": value, "seconds": 0.0}
        self.flush()

    def flush(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.steps, f)
        os.replace(tmp, self.path)


def takes_use_coordination_service(fn):
    """jaxlib <= 0.4 chose the protocol per client and service with a positional flag."""
    return "use_coordination_service" in (fn.__doc__ or "")


def heartbeat_kwargs(fn, heartbeat_timeout):
    if "heartbeat_timeout" in (fn.__doc__ or ""):
        return {"heartbeat_timeout": heartbeat_timeout}
    # jaxlib <= 0.4: the timeout is an interval times a number of missed heartbeats.
    return {"heartbeat_interval": max(1, heartbeat_timeout // 2), "max_missing_heartbeats": 2}


KEEP_ALIVE = []  # clients are never destroyed: main() exits without running destructors


def make_client(jx, args):
    fn = jx.get_distributed_runtime_client
    kwargs = dict(
        rpc_timeout=args.rpc_timeout,
        init_timeout=args.init_timeout,
        shutdown_timeout=args.shutdown_timeout,
        # shutdown_on_destruction=False would also make shutdown() skip ShutdownTask:
        # leave it on; main() ends the process without running destructors.
        **heartbeat_kwargs(fn, args.heartbeat_timeout),
    )
    if takes_use_coordination_service(fn):
        client = fn(args.address, args.task_id, not args.legacy, **kwargs)
    else:
        client = fn(args.address, args.task_id, **kwargs)
    # A destroyed client shuts down again and joins its heartbeat thread, which can
    # block for minutes after a failed shutdown.
    KEEP_ALIVE.append(client)
    return client


def pairs(entries):
    return sorted([k, v] for k, v in entries)


# ---------------------------------------------------------------- events between tasks
# Where the scenario needs one task to act only after something happened elsewhere, it
# waits for that event (bounded by WAIT_MS), never for a while. Events other tasks
# bring about travel as keys under signal/ (outside compat/, which the dir tests list).
# What happens inside a server is visible only in cohort's /metrics: --metrics-url, which
# the harness passes against cohort, lets a task wait until cohort holds the other tasks'
# calls parked; against jaxlib's own service the keys are all there is.


def announced(client, key, fn):
    """A step that first sets key, then calls fn: a task that waited for key knows this
    step had begun (its started_at is earlier) when it goes on."""
    def step():
        client.key_value_set(key, "1")
        return fn()
    return step


def wait_for_keys(client, keys):
    """Waits until every key is set (by the tasks that announce an event with it)."""
    return [client.blocking_key_value_get(k, WAIT_MS) for k in keys]


def cohort_metric(url, name, **labels):
    """The value of one series of cohort's /metrics, or None when it is absent."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or line.startswith("#") or m.group(1) != name:
            continue
        if dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")) == labels:
            return float(m.group(3))
    return None


def wait_for_parked(url, kind, count):
    """Waits until cohort holds at least count parked calls of kind (its gauge
    cohort_coordinator_parked_calls): the calls have reached it and wait there."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        got = cohort_metric(url, "cohort_coordinator_parked_calls", kind=kind)
        if got is not None and got >= count:
            return int(got)
        if time.monotonic() > deadline:
            raise TimeoutError(f"cohort held {got} parked {kind} calls, not {count}, "
                               f"after {WAIT_MS / 1000:g} s")
        time.sleep(0.05)


def digest(data):
    return {"len": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def scenario_basic(jx, args, rec):
    """Every client call, in a fixed order that all tasks follow."""
    t, n = args.task_id, args.num_tasks
    others = [o for o in range(n) if o != t]
    everyone = list(range(n))
    client = make_client(jx, args)

    if not rec.run("connect", client.connect)["ok"]:
        return
    rec.run("set", lambda: client.key_value_set(f"compat/str/{t}", f"value-{t}"))
    rec.run("set_bytes",
            lambda: client.key_value_set_bytes(f"compat/bytes/{t}", bytes([t, 0, 255]) * 3))
    if t == 0:
        def set_deldir():
            client.key_value_set("compat/deldir/a", "1")
            client.key_value_set("compat/deldir/b/c", "2")
            client.key_value_set("compat/deldirx", "3")
        rec.run("set_deldir", set_deldir)
        rec.run("set_unnormalised", lambda: client.key_value_set("/compat//norm/x/", "n"))
    rec.run("barrier_after_set", lambda: client.wait_at_barrier("compat/after_set", WAIT_MS))

    rec.run("get_others", lambda: {
        str(o): client.blocking_key_value_get(f"compat/str/{o}", WAIT_MS) for o in others})
    rec.run("get_bytes_others", lambda: {
        str(o): client.blocking_key_value_get_bytes(f"compat/bytes/{o}", WAIT_MS).hex()
        for o in others})
    rec.run("try_get_existing",
            lambda: client.key_value_try_get(f"compat/str/{(t + 1) % n}"))
    rec.run("try_get_bytes_existing",
            lambda: client.key_value_try_get_bytes(f"compat/bytes/{(t + 1) % n}").hex())
    rec.run("try_get_missing", lambda: client.key_value_try_get("compat/missing"))
    rec.run("get_normalised", lambda: [client.key_value_try_get("compat/norm/x"),
                                       client.key_value_try_get("compat//norm/x/")])
    rec.run("get_missing_with_timeout",
            lambda: client.blocking_key_value_get("compat/never", 500))
    rec.run("dir_get", lambda: pairs(client.key_value_dir_get("compat/str")))
    rec.run("dir_get_bytes", lambda: pairs(
        (k, v.hex()) for k, v in client.key_value_dir_get_bytes("compat/bytes")))
    rec.run("dir_get_missing", lambda: pairs(client.key_value_dir_get("compat/nothing")))
    rec.run("dir_get_root", lambda: sorted(k for k, _ in client.key_value_dir_get_bytes("")))
    # Nobody changes a key before every task has read them all.
    rec.run("barrier_before_overwrite",
            lambda: client.wait_at_barrier("compat/before_overwrite", WAIT_MS))
    rec.run("set_existing_refused",
            lambda: client.key_value_set(f"compat/str/{t}", "again"))
    rec.run("set_existing_overwrite",
            lambda: client.key_value_set(f"compat/str/{t}", f"new-{t}", allow_overwrite=True))
    rec.run("read_overwritten", lambda: client.key_value_try_get(f"compat/str/{t}"))
    if hasattr(client, "key_value_increment"):
        rec.run("increment", lambda: client.key_value_increment("compat/counter", t + 1))
    rec.run("barrier_after_increment",
            lambda: client.wait_at_barrier("compat/after_increment", WAIT_MS))
    if hasattr(client, "key_value_increment"):
        rec.run("counter_total", lambda: client.key_value_try_get("compat/counter"))

    # A blocking get that parks until another task sets the key. Task 1 sets it once task
    # 0's get has begun (its announcement) and, against cohort, waits at cohort. Tasks 2
    # and 3 wait at a barrier meanwhile, so the get is the only one parked.
    rec.run("barrier_before_late", lambda: client.wait_at_barrier("compat/before_late", WAIT_MS))
    if t == 0:
        rec.run("get_parked_until_set", announced(
            client, "signal/late_get",
            lambda: client.blocking_key_value_get("compat/late", WAIT_MS)))
    elif t == 1:
        def saw_late_get():
            wait_for_keys(client, ["signal/late_get"])
            if args.metrics_url:
                wait_for_parked(args.metrics_url, "key_value_get", 1)
        rec.run("saw_late_get", saw_late_get)
        rec.run("set_late", lambda: client.key_value_set("compat/late", "arrived"))
    rec.run("barrier_after_late", lambda: client.wait_at_barrier("compat/after_late", WAIT_MS))

    # 64 MiB through the store.
    if t == 0:
        rec.run("set_big", lambda: client.key_value_set_bytes("compat/big", big_value()))
    else:
        rec.run("get_big", lambda: digest(
            client.blocking_key_value_get_bytes("compat/big", 120_000)))
    rec.note("big_expected", digest(big_value()))
    rec.run("barrier_after_big", lambda: client.wait_at_barrier("compat/after_big", 120_000))

    if t == 0:
        rec.run("delete_key", lambda: client.key_value_delete("compat/str/0"))
        rec.run("delete_dir", lambda: client.key_value_delete("compat/deldir"))
        rec.run("delete_missing", lambda: client.key_value_delete("compat/not/there"))
    rec.run("barrier_after_delete", lambda: client.wait_at_barrier("compat/after_delete", WAIT_MS))
    rec.run("deleted_key_gone", lambda: client.key_value_try_get("compat/str/0"))
    rec.run("sibling_kept", lambda: client.key_value_try_get("compat/str/1"))
    rec.run("deleted_dir_gone", lambda: pairs(client.key_value_dir_get("compat/deldir")))
    rec.run("prefix_sibling_kept", lambda: client.key_value_try_get("compat/deldirx"))

    # Barriers over a subset: {0, 1} and {2, 3} pass without the other pair.
    pair = [0, 1] if t < 2 else [2, 3]
    name = "compat/pair01" if t < 2 else "compat/pair23"
    rec.run("barrier_subset",
            lambda: client.wait_at_barrier(name, WAIT_MS, process_ids=pair))

    # A barrier that task n-1 never reaches times out for the others.
    if t != n - 1:
        rec.run("barrier_timeout", lambda: client.wait_at_barrier("compat/without_last", 1500))
    rec.run("barrier_after_timeout",
            lambda: client.wait_at_barrier("compat/after_timeout", WAIT_MS))

    # Edge cases where cohort's documentation names a deviation; the tests compare.
    rec.run("barrier_before_edges", lambda: client.wait_at_barrier("compat/before_edges", WAIT_MS))
    # A caller outside the barrier's task list, arriving before the members: they call
    # once its call has been answered.
    if t == 2:
        rec.run("outsider_call", lambda: client.wait_at_barrier(
            "compat/outsider", 3000, process_ids=[0, 1]))
        rec.run("announce_outsider_call",
                lambda: client.key_value_set("signal/outsider_called", "1"))
    elif t < 2:
        rec.run("saw_outsider_call", lambda: wait_for_keys(client, ["signal/outsider_called"]))
        rec.run("outsider_members", lambda: client.wait_at_barrier(
            "compat/outsider", 3000, process_ids=[0, 1]))
    rec.run("barrier_after_outsider",
            lambda: client.wait_at_barrier("compat/after_outsider", WAIT_MS))
    # A barrier timeout of 0, the last task arriving after the others' calls have had
    # their answer from the server: cohort parks them (0: no deadline), which its metrics
    # show; jaxlib's service fails them at its deadline, after which they say so.
    if t == n - 1:
        def saw_others_at_zero_timeout():
            if args.metrics_url:
                wait_for_parked(args.metrics_url, "barrier", n - 1)
            else:
                wait_for_keys(client, [f"signal/zero_timeout_answered/{o}" for o in others])
        rec.run("saw_others_at_zero_timeout", saw_others_at_zero_timeout)
    rec.run("zero_timeout_barrier", lambda: client.wait_at_barrier("compat/zero_timeout", 0))
    if t != n - 1:
        rec.run("announce_zero_timeout_answered",
                lambda: client.key_value_set(f"signal/zero_timeout_answered/{t}", "1"))
    rec.run("barrier_after_zero_timeout",
            lambda: client.wait_at_barrier("compat/after_zero_timeout", WAIT_MS))
    if t == 0 and hasattr(client, "key_value_increment"):
        client.key_value_set("compat/text", "abc")
        rec.run("increment_text", lambda: client.key_value_increment("compat/text", 1))
        rec.run("increment_wide", lambda: client.key_value_increment("compat/wide", 2**31 + 5))
        rec.run("increment_wide_again", lambda: client.key_value_increment("compat/wide", 1))

    rec.run("live_nodes", lambda: {str(k): str(v) for k, v in
                                   client.get_live_nodes(everyone).items()})
    rec.run("barrier_final", lambda: client.wait_at_barrier("compat/final", WAIT_MS))
    # The last task shuts down once the others have begun to (and, against cohort, wait
    # at its shutdown barrier), so that they wait for it there.
    if t == n - 1:
        def saw_others_shut_down():
            wait_for_keys(client, [f"signal/shutdown/{o}" for o in others])
            if args.metrics_url:
                wait_for_parked(args.metrics_url, "shutdown", n - 1)
        rec.run("saw_others_shut_down", saw_others_shut_down)
        rec.run("shutdown", client.shutdown)
    else:
        rec.run("shutdown", announced(client, f"signal/shutdown/{t}", client.shutdown))


def scenario_crash(jx, args, rec):
    """All tasks connect; the test kills the last one with SIGKILL.

    The survivors keep jaxlib's default error callback, which ends the process with
    a fatal log line naming the error: the test watches for that exit. (A Python
    missed_heartbeat_callback cannot be used: jaxlib cannot convert the error status
    to a Python object and aborts with std::bad_cast.)
    """
    t = args.task_id
    client = make_client(jx, args)
    if not rec.run("connect", client.connect)["ok"]:
        return
    rec.run("barrier_connected", lambda: client.wait_at_barrier("compat/connected", WAIT_MS))
    print(f"task {t}: ready", flush=True)
    # Stay alive (heartbeating in jaxlib's own thread) until killed or told off.
    time.sleep(args.wait_seconds)
    rec.note("survived", True)


def scenario_restart(jx, args, rec):
    """Rounds of key-value writes, blocking reads of the other tasks' keys and barriers,
    while the test kills and restarts the coordinator behind the tasks' sidecar proxies.

    Every step of every round is recorded; the test wants them all OK. At the end every
    task reads back every key of every round: nothing written may be lost.
    """
    t, n = args.task_id, args.num_tasks
    others = [o for o in range(n) if o != t]
    client = make_client(jx, args)
    if not rec.run("connect", client.connect)["ok"]:
        return
    for r in range(args.rounds):
        # harness.wait_for_log waits on "round R begins" to time the kills.
        rec.run(f"round {r}", lambda r=r: (
            client.key_value_set(f"restart/{r}/{t}", f"value-{r}-{t}"),
            {str(o): client.blocking_key_value_get(f"restart/{r}/{o}", WAIT_MS) for o in others},
            client.wait_at_barrier(f"restart/round-{r}", WAIT_MS),
            None)[-1])
        time.sleep(args.round_seconds)
    rec.run("read_back", lambda: sum(
        client.blocking_key_value_get(f"restart/{r}/{o}", WAIT_MS) == f"value-{r}-{o}"
        for r in range(args.rounds) for o in range(n)))
    rec.run("shutdown", client.shutdown)


def scenario_legacy(jx, args, rec):
    """jaxlib <= 0.4 over xla.DistributedRuntimeService: key-value, barrier, shutdown.

    Tasks synchronise through blocking gets, since barriers are part of what is
    compared.
    """
    t, n = args.task_id, args.num_tasks
    others = [o for o in range(n) if o != t]
    client = make_client(jx, args)
    if not rec.run("connect", client.connect)["ok"]:
        return
    rec.run("set", lambda: client.key_value_set(f"legacy/str/{t}", f"value-{t}"))
    rec.run("set_bytes", lambda: client.key_value_set(f"legacy/bytes/{t}", f"b{t}\u00ff"))
    rec.run("get_others", lambda: {
        str(o): client.blocking_key_value_get(f"legacy/str/{o}", WAIT_MS) for o in others})
    rec.run("get_bytes_others", lambda: {
        str(o): client.blocking_key_value_get_bytes(f"legacy/bytes/{o}", WAIT_MS).hex()
        for o in others})
    rec.run("get_missing_with_timeout",
            lambda: client.blocking_key_value_get("legacy/never", 500))
    rec.run("set_existing", lambda: client.key_value_set(f"legacy/str/{t}", f"new-{t}"))
    rec.run("read_overwritten", lambda: client.blocking_key_value_get(f"legacy/str/{t}", 1000))
    # These clients set str values only, and cannot receive a message over gRPC's default
    # 4 MiB (nor can jaxlib's own service of this protocol): 3 MiB of hex text.
    big = big_value()[:3 << 19].hex()
    if t == 0:
        rec.run("set_big", lambda: client.key_value_set("legacy/big", big))
    else:
        rec.run("get_big", lambda: digest(
            client.blocking_key_value_get_bytes("legacy/big", WAIT_MS)))
    rec.note("big_expected", digest(big.encode()))
    rec.run("barrier", lambda: client.wait_at_barrier("legacy/barrier", 10_000))
    # Nobody shuts down before every task is past its barrier call.
    rec.run("set_past_barrier", lambda: client.key_value_set(f"legacy/past/{t}", "1"))
    rec.run("get_past_barrier", lambda: [
        client.blocking_key_value_get(f"legacy/past/{o}", WAIT_MS) for o in others])
    rec.run("shutdown", client.shutdown)


def serve(jx, args):
    """jaxlib's own coordination service, until SIGTERM."""
    fn = jx.get_distributed_runtime_service
    doc = fn.__doc__ or ""
    kwargs = dict(shutdown_timeout=args.shutdown_timeout,
                  **heartbeat_kwargs(fn, args.heartbeat_timeout))
    if "cluster_register_timeout" in doc:
        kwargs["cluster_register_timeout"] = args.init_timeout
    if takes_use_coordination_service(fn):
        service = fn(args.address, args.num_tasks, not args.legacy, **kwargs)
    else:
        service = fn(args.address, args.num_tasks, **kwargs)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"serving on {args.address}", flush=True)
    while not stop.wait(0.2):
        pass
    service.shutdown()
    print("service stopped", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", required=True,
                   choices=["basic", "crash", "legacy", "restart", "serve", "version"])
    p.add_argument("--legacy", action="store_true",
                   help="jaxlib <= 0.4: use xla.DistributedRuntimeService")
    p.add_argument("--address", default="")
    p.add_argument("--task-id", type=int, default=0)
    p.add_argument("--num-tasks", type=int, default=4)
    p.add_argument("--out", default="")
    p.add_argument("--heartbeat-timeout", type=int, default=10)
    p.add_argument("--init-timeout", type=int, default=60)
    p.add_argument("--shutdown-timeout", type=int, default=30)
    p.add_argument("--rpc-timeout", type=int, default=60)
    p.add_argument("--wait-seconds", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=40, help="restart: rounds")
    p.add_argument("--round-seconds", type=float, default=0.25, help="restart: pause per round")
    p.add_argument("--metrics-url", default="",
                   help="cohort's /metrics (against cohort only): basic waits there for the "
                        "calls it waits for to be parked")
    args = p.parse_args()

    if args.scenario == "version":
        import jaxlib
        load_jaxlib()
        print(json.dumps({"jaxlib": jaxlib.__version__}))
        return
    jx = load_jaxlib()
    if args.scenario == "serve":
        serve(jx, args)
        return
    rec = Recorder(args.out, args.task_id)
    scenarios = {"basic": scenario_basic, "crash": scenario_crash, "legacy": scenario_legacy,
                 "restart": scenario_restart}
    scenarios[args.scenario](jx, args, rec)
    rec.note("done", True)
    sys.stdout.flush()
    os._exit(0)  # skip destructors: a client that already failed may block in them


if __name__ == "__main__":
    main()
