"""PyTorch's TCPStore as an anchor: its server, and a driver with the loadgen's scenarios.

TCPStore's wire protocol is private to PyTorch, so the driver uses torch's own client
(one TCPStore connection per simulated task or client, a Python thread each; the blocking
calls release the GIL). It prints one JSON object shaped like cohort-loadgen's.

  serve     a TCPStore server (libuv backend) until SIGTERM; prints its port
  register  N clients connect and pass a store-based barrier (add, last one sets a key)
  barrier   rounds of that barrier; the last arrival is timed to the last release
  kv        set / get / blocking get / add with C clients and V-byte values

Any TCPStore server: torch's own (serve) or cohort's (cohort-coordinator --torch-store-listen).
"""

import argparse
import datetime
import json
import signal
import sys
import threading
import time

from torch.distributed import TCPStore

TIMEOUT = datetime.timedelta(seconds=600)
# TCPStore's libuv server drops a client whose message carries more than this
# ("Invalid payload size"), so larger values are reported as refused, not measured.
MAX_VALUE_BYTES = 8 << 20


def client(port):
    return TCPStore("127.0.0.1", port, None, False, timeout=TIMEOUT, wait_for_workers=False)


def percentiles(values):
    values = sorted(values)
    if not values:
        return {"count": 0, "p50_ms": 0, "p99_ms": 0, "max_ms": 0}

    def rank(q):
        i = max(1, min(len(values), int(q / 100 * len(values) + 0.999999)))
        return values[i - 1] * 1e3

    return {"count": len(values), "p50_ms": rank(50), "p99_ms": rank(99), "max_ms": rank(100)}


def serve(args):
    store = TCPStore("127.0.0.1", args.port, None, True, timeout=TIMEOUT,
                     wait_for_workers=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"tcpstore serving on 127.0.0.1:{store.port}", flush=True)
    while not stop.wait(0.2):
        pass


class Barrier:
    """TCPStore's usual barrier: every task adds 1; the one that reaches N sets a key that
    the others wait for."""

    def __init__(self, tasks):
        self.tasks = tasks

    def arrive(self, store, name):
        if store.add(name, 1) == self.tasks:
            store.set(name + "/done", b"1")
        else:
            store.wait([name + "/done"])


def run_threads(count, target):
    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return threads


def register(args):
    """Connects every task (one at a time: concurrent connects to a TCPStore server stall
    for seconds here), then times the store-based barrier over all of them."""
    start = time.monotonic()
    stores = [client(args.port) for _ in range(args.tasks)]
    connected = time.monotonic() - start
    barrier = Barrier(args.tasks)
    failed = []

    def task(i):
        try:
            barrier.arrive(stores[i], "register")
        except Exception as e:  # reported, not raised: the thread must end
            failed.append(repr(e))

    start = time.monotonic()
    for t in run_threads(args.tasks, task):
        t.join()
    took = time.monotonic() - start
    return stores, {"register_seconds": took, "connect_seconds": connected,
                    "register_failed": len(failed)}


def barrier_rounds(args, stores):
    barrier = Barrier(args.tasks)
    rounds, releases = [], []
    # One burst first: every task arrives at once.
    start = time.monotonic()
    burst = [threading.Thread(target=barrier.arrive, args=(stores[i], "burst"))
             for i in range(args.tasks)]
    for t in burst:
        t.start()
    for t in burst:
        t.join()
    burst_seconds = time.monotonic() - start
    for r in range(args.rounds):
        name = f"round/{r}"
        released = [0.0] * args.tasks
        arrived = threading.Semaphore(0)

        def waiter(i):
            store = stores[i]
            store.add(name, 1)
            arrived.release()
            store.wait([name + "/done"])
            released[i] = time.monotonic()

        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(1, args.tasks)]
        for t in threads:
            t.start()
        for _ in threads:
            arrived.acquire()
        time.sleep(0.02 + 2e-6 * args.tasks)
        last = time.monotonic()
        barrier.arrive(stores[0], name)
        released[0] = time.monotonic()
        for t in threads:
            t.join()
        rounds.append(max(released) - last)
        releases.extend(x - last for x in released)
    r = percentiles(rounds)
    return {"burst_seconds": burst_seconds, "rounds": args.rounds,
            "round_p50_ms": r["p50_ms"], "round_p99_ms": r["p99_ms"],
            "round_max_ms": r["max_ms"], "task_release": percentiles(releases),
            "failed_calls": 0, "released_before_last_arrival": 0}


def kv(args):
    value = b"v" * args.value_bytes
    stores = [client(args.port) for _ in range(args.clients)]
    setters = [client(args.port) for _ in range(args.clients)]
    phases = {}
    for op in args.ops.split(","):
        if op == "get":
            for c, s in enumerate(stores):
                s.set(f"bench/kv/{c}", value)
        stop = threading.Event()
        latency = [[] for _ in range(args.clients)]
        errors = [0]

        def loop(c):
            store, setter, n = stores[c], setters[c], 0
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    if op == "set":
                        store.set(f"bench/kv/{c}", value)
                    elif op == "add":
                        store.add(f"bench/add/{c}", 1)
                    elif op == "get":
                        if len(store.get(f"bench/kv/{c}")) != len(value):
                            raise ValueError("wrong value")
                    else:
                        key = f"bench/wait/{c}/{n}"
                        n += 1
                        # The setter writes right behind the waiting get, as the loadgen
                        # does; the key is deleted afterwards so the next wait is real.
                        t = threading.Timer(0, setter.set, args=(key, value))
                        t.start()
                        got = store.get(key)
                        latency[c].append(time.monotonic() - t0)
                        t.join()
                        store.delete_key(key)
                        if len(got) != len(value):
                            raise ValueError("wrong value")
                        continue
                    latency[c].append(time.monotonic() - t0)
                except Exception:
                    errors[0] += 1

        start = time.monotonic()
        threads = run_threads(args.clients, loop)
        time.sleep(args.seconds)
        stop.set()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        all_latency = [x for per in latency for x in per]
        rate = len(all_latency) / wall
        phases[op] = {"ops": len(all_latency), "errors": errors[0], "ops_per_second": rate,
                      "mib_per_second": rate * args.value_bytes / (1 << 20),
                      "latency": percentiles(all_latency)}
    return {"clients": args.clients, "value_bytes": args.value_bytes,
            "seconds_per_phase": args.seconds, "phases": phases}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=["serve", "register", "barrier", "kv"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--ops", default="set,get,blocking_get,add")
    args = p.parse_args()
    if args.scenario == "serve":
        serve(args)
        return
    out = {"scenario": args.scenario, "protocol": "tcpstore"}
    if args.scenario == "kv" and args.value_bytes > MAX_VALUE_BYTES:
        out["error"] = (f"TCPStore's server refuses values over {MAX_VALUE_BYTES >> 20} MiB "
                        "(Invalid payload size)")
    elif args.scenario == "kv":
        out.update(kv(args))
    else:
        out["tasks"] = args.tasks
        stores, reg = register(args)
        out.update(reg)
        if args.scenario == "barrier" and not reg["register_failed"]:
            out.update(barrier_rounds(args, stores))
    print(json.dumps(out), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
