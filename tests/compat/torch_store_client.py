"""PyTorch's own TCPStore client against cohort's --torch-store-listen, one scenario per run.

Run by an interpreter that has torch (tests/compat/test_torch_store.py picks it):
    python torch_store_client.py HOST PORT SCENARIO METRICS_URL [RANK WORLD ROUNDS]
Each scenario asserts what torch's store promises and prints "ok SCENARIO" at its end; any
failure raises (exit status 1, with the traceback).
"""

import re
import sys
import threading
import time
import urllib.request
from datetime import timedelta

from torch.distributed import TCPStore


def connect(host, port, timeout_s=30):
    # is_master=False: a client of an external store, as every rank is with cohort.
    return TCPStore(host, port, None, False, timeout=timedelta(seconds=timeout_s),
                    wait_for_workers=False)


def parked_waits(metrics_url, kind):
    """The coordinator's TCPStore calls of `kind` parked now (cohort_coordinator_parked_calls):
    torch_store_wait (a WAIT's call for one key, which the key's value or an item in the queue
    of its name ends)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^cohort_coordinator_parked_calls\{kind="%s"\} (\S+)$' % kind, text, re.M)
    return float(m.group(1)) if m else None


def wait_for_parked(metrics_url, count, kind="torch_store_wait"):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if parked_waits(metrics_url, kind) == count:
            return
        time.sleep(0.02)
    raise AssertionError(
        f"not {count} parked {kind} within 30 s: {parked_waits(metrics_url, kind)}")


def expect_raises(fn, *words):
    try:
        fn()
    except Exception as e:  # torch raises DistStoreError / RuntimeError subclasses
        text = str(e)
        for w in words:
            assert w in text, (w, text)
        return e
    raise AssertionError(f"expected an error mentioning {words}")


def basics(host, port):
    store = connect(host, port)
    store.set("alpha", "one")
    assert store.get("alpha") == b"one"
    store.set("alpha", b"\x00\xffbinary")
    assert store.get("alpha") == b"\x00\xffbinary"
    assert store.add("counter", 5) == 5
    assert store.add("counter", -7) == -2
    assert store.get("counter") == b"-2"
    store.append("log", "a")
    store.append("log", "bc")
    assert store.get("log") == b"abc"
    store.multi_set(["m1", "m2"], ["x", "y"])
    assert store.multi_get(["m2", "m1"]) == [b"y", b"x"]
    assert store.check(["alpha", "m1"])
    assert not store.check(["alpha", "missing"])
    assert store.delete_key("m1")
    assert not store.delete_key("m1")
    assert not store.check(["m1"])
    # Every key this client made: alpha, counter, log, m2.
    assert store.num_keys() == 4, store.num_keys()
    assert sorted(store.list_keys()) == ["alpha", "counter", "log", "m2"], store.list_keys()


def compare_set(host, port):
    store = connect(host, port)
    # Absent, expected empty: set.
    assert store.compare_set("k", "", "first") == b"first"
    # Present and equal: replaced.
    assert store.compare_set("k", "first", "second") == b"second"
    # Present and different: unchanged, the current value answered.
    assert store.compare_set("k", "first", "third") == b"second"
    assert store.get("k") == b"second"
    # Absent, expected not empty: nothing set, `expected` answered.
    assert store.compare_set("absent", "x", "y") == b"x"
    assert not store.check(["absent"])


def waits(host, port, metrics_url):
    waiter, setter = connect(host, port), connect(host, port)
    # A get waits (parked in the coordinator) for a key that another client sets later.
    got = {}
    t = threading.Thread(target=lambda: got.update(value=waiter.get("late")))
    t.start()
    wait_for_parked(metrics_url, 1)
    assert "value" not in got
    setter.set("late", "arrived")
    t.join(30)
    assert got.get("value") == b"arrived", got
    # wait() on several keys returns once every one is set.
    done = threading.Event()
    t = threading.Thread(target=lambda: (waiter.wait(["w1", "w2"]), done.set()))
    t.start()
    wait_for_parked(metrics_url, 2)
    setter.set("w1", "1")
    wait_for_parked(metrics_url, 1)
    assert not done.is_set(), "released before every key was set"
    setter.set("w2", "2")
    assert done.wait(30)
    t.join(30)
    # A wait that times out raises, and the connection goes on working (CANCEL_WAIT).
    expect_raises(lambda: waiter.wait(["never"], timedelta(milliseconds=300)), "timeout")
    wait_for_parked(metrics_url, 0)
    assert waiter.get("late") == b"arrived"
    setter.set("never", "now")
    waiter.wait(["never"], timedelta(seconds=30))


def queues(host, port, metrics_url):
    producer, consumer, other = connect(host, port), connect(host, port), connect(host, port)
    assert consumer.queue_len("jobs") == 0
    producer.queue_push("jobs", "a")
    producer.queue_push("jobs", b"\x00b")
    # QUEUE_PUSH has no reply: only a reply on the producer's own connection orders its pushes
    # before a command of another connection (a server may read the consumer's socket first,
    # torch's too). After that, the consumer must see both.
    assert producer.queue_len("jobs") == 2
    assert consumer.queue_len("jobs") == 2
    # A queue is not a key of its name, but check() counts it as one, as torch's server does.
    assert producer.num_keys() == 0, producer.num_keys()
    assert consumer.check(["jobs"])
    assert consumer.queue_pop("jobs") == b"a"
    assert consumer.queue_pop("jobs", block=False) == b"\x00b"
    assert consumer.queue_len("jobs") == 0
    expect_raises(lambda: consumer.queue_pop("jobs", block=False), "empty")
    # A blocking pop waits in the coordinator until another client pushes; one push ends
    # one of two such pops, the one that waited longest.
    got = {}
    first = threading.Thread(target=lambda: got.update(first=consumer.queue_pop("work")))
    first.start()
    wait_for_parked(metrics_url, 1, "torch_store_wait")
    second = threading.Thread(target=lambda: got.update(second=other.queue_pop("work")))
    second.start()
    wait_for_parked(metrics_url, 2, "torch_store_wait")
    producer.queue_push("work", "one")
    first.join(30)
    assert got == {"first": b"one"}, got
    wait_for_parked(metrics_url, 1, "torch_store_wait")
    producer.queue_push("work", "two")
    second.join(30)
    assert got == {"first": b"one", "second": b"two"}, got
    # A pop that times out raises, and the connection goes on working.
    short = connect(host, port, timeout_s=1)
    expect_raises(lambda: short.queue_pop("never"), "timeout")
    wait_for_parked(metrics_url, 0, "torch_store_wait")
    producer.queue_push("never", "now")
    assert short.queue_pop("never") == b"now"


def rounds(host, port, rank, world, count):
    """One rank of `world`, through its sidecar's store, for `count` rounds: each round it
    writes a key, counts itself in, blocks until every rank's key is there, hands an item to
    the next rank's queue and blocks popping its own. Prints "round R begins" (the test kills
    the coordinator at some of them). Every ADD must count once, however often the
    coordinator went away while it was out."""
    store = connect(host, port, timeout_s=120)
    for r in range(count):
        print(f"round {r} begins", flush=True)
        store.set(f"r{r}/k{rank}", str(rank))
        store.add(f"r{r}/count", 1)
        store.wait([f"r{r}/k{j}" for j in range(world)])
        got = store.multi_get([f"r{r}/k{j}" for j in range(world)])
        assert got == [str(j).encode() for j in range(world)], (r, got)
        store.queue_push(f"q{(rank + 1) % world}", f"{r}:{rank}")
        item = store.queue_pop(f"q{rank}")
        assert item == f"{r}:{(rank - 1) % world}".encode(), (r, item)
    store.set(f"done{rank}", "1")
    store.wait([f"done{j}" for j in range(world)])
    counts = store.multi_get([f"r{r}/count" for r in range(count)])
    assert counts == [str(world).encode()] * count, counts
    assert store.queue_len(f"q{rank}") == 0


def main():
    host, port, scenario, metrics_url = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if scenario == "rounds":
        rounds(host, port, *(int(a) for a in sys.argv[5:8]))
    elif scenario in ("waits", "queues"):
        {"waits": waits, "queues": queues}[scenario](host, port, metrics_url)
    else:
        {"basics": basics, "compare_set": compare_set}[scenario](host, port)
    print(f"ok {scenario}", flush=True)


if __name__ == "__main__":
    main()
