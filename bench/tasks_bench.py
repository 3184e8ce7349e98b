#!/usr/bin/env python3
"""The task runtime side by side with Ray (from PyPI), the same workloads on the same machine:

  sync_empty_task     one empty task at a time, submitted and waited for (round trip)
  async_empty_tasks   batches of empty tasks submitted at once, then all waited for
  small_objects       puts, then gets, of small objects from the driver
  bandwidth           put and get of one large numpy array (100 MiB in the full profile)
  map_reduce          square over N tasks, then a fan-in sum tree of 8-way tasks

cohort runs as real processes on loopback: cohort-coordinator (the scheduler), one
cohort-objstore and W Python workers (python -m cohort.worker); Ray as `ray.init(num_cpus=W)`.
Both run W workers; the driver is this process. Each system runs in a child process of its
own, so that one's threads and memory do not touch the other's figures.

  python3 bench/tasks_bench.py --profile full --out bench/results/tasks.json
  python3 bench/tasks_bench.py --profile smoke --out /tmp/tasks.json   # make test

Needs the venv bench/setup_tasks.sh makes (.venv-bench-tasks: ray, grpcio, numpy,
cloudpickle and the cohort package). Prints a table; writes JSON.
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

PROFILES = {
    "smoke": dict(workers=2, sync_calls=20, batch=100, batches=2, small=50, array_mib=1,
                  map_tasks=50, repeats=1),
    "full": dict(workers=2, sync_calls=1000, batch=1000, batches=5, small=1000, array_mib=100,
                 map_tasks=1000, repeats=3),
}
WORKLOADS = ["sync_empty_task", "async_empty_tasks", "small_objects", "bandwidth", "map_reduce"]


def empty():
    return None


def square(x):
    return x * x


def add_all(*xs):
    return sum(xs)


class Cohort:
    name = "cohort"

    def __init__(self, bin_dir, workers, durable=False):
        from free_port import free_port

        import cohort

        self.cohort = cohort
        self.tmp = tempfile.mkdtemp(prefix="cohort-tasks-bench-")
        self.procs = []
        self.scheduler = f"127.0.0.1:{free_port()}"
        self.store = f"127.0.0.1:{free_port()}"
        # durable: every scheduler change written to a --state-dir log before it is answered.
        state = ["--state-dir", os.path.join(self.tmp, "state")] if durable else []
        self._start([bin_dir / "cohort-coordinator", "--listen", self.scheduler, "--http-listen",
                     "", "--job", "driver=1", "--log-level", "warn", *state], "coordinator")
        self._start([bin_dir / "cohort-objstore", "--listen", self.store, "--scheduler",
                     self.scheduler, "--capacity", "8GiB"], "objstore")
        self._wait_for(lambda: "registered with" in self._log("objstore"), "the object store")
        for i in range(workers):
            self._start([sys.executable, "-m", "cohort.worker", "--scheduler", self.scheduler,
                         "--objstore", self.store, "--log-level", "warning"], f"worker-{i}")
        cohort.init(self.scheduler, self.store)
        client = cohort.api._require_client()
        self._wait_for(lambda: len(client.scheduler_info().avail_worker) == workers,
                       "the workers")
        self.empty = cohort.remote(empty)
        self.square = cohort.remote(square)
        self.add_all = cohort.remote(add_all)

    def _start(self, argv, name):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        self.procs.append(subprocess.Popen([str(a) for a in argv], stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def _log(self, name):
        with open(os.path.join(self.tmp, f"{name}.log")) as f:
            return f.read()

    def _wait_for(self, ready, what):
        deadline = time.monotonic() + 60
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up; logs in {self.tmp}")
            time.sleep(0.05)

    def get(self, refs):
        return self.cohort.get(refs)

    def put(self, value):
        return self.cohort.put(value)

    def stop(self):
        self.cohort.shutdown()
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()


class Ray:
    name = "ray"

    def __init__(self, bin_dir, workers):
        import ray

        self.ray = ray
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 object_store_memory=4 << 30)
        self.empty = ray.remote(empty)
        self.square = ray.remote(square)
        self.add_all = ray.remote(add_all)
        # Workers start lazily: wait until each has run a task.
        ray.get([self.empty.remote() for _ in range(workers * 4)])

    def get(self, refs):
        return self.ray.get(refs)

    def put(self, value):
        return self.ray.put(value)

    def stop(self):
        self.ray.shutdown()


def run_workloads(system, p):
    import numpy as np

    out = {}
    # Warm up: functions exported, workers busy once.
    system.get([system.empty.remote() for _ in range(20)])

    latencies = []
    for _ in range(p["sync_calls"]):
        t = time.perf_counter()
        system.get(system.empty.remote())
        latencies.append(time.perf_counter() - t)
    out["sync_empty_task"] = {"p50_ms": statistics.median(latencies) * 1e3,
                              "mean_ms": statistics.fmean(latencies) * 1e3,
                              "calls": p["sync_calls"]}

    rates = []
    for _ in range(p["batches"]):
        t = time.perf_counter()
        system.get([system.empty.remote() for _ in range(p["batch"])])
        rates.append(p["batch"] / (time.perf_counter() - t))
    out["async_empty_tasks"] = {"tasks_per_s": max(rates), "batch": p["batch"],
                                "batches": p["batches"]}

    payload = b"x" * 100
    t = time.perf_counter()
    refs = [system.put(payload) for _ in range(p["small"])]
    put_rate = p["small"] / (time.perf_counter() - t)
    t = time.perf_counter()
    for r in refs:
        assert system.get(r) == payload
    get_rate = p["small"] / (time.perf_counter() - t)
    del refs
    out["small_objects"] = {"puts_per_s": put_rate, "gets_per_s": get_rate, "count": p["small"],
                            "bytes": len(payload)}

    array = np.random.default_rng(7).random(p["array_mib"] * (1 << 20) // 8)
    mib = array.nbytes / (1 << 20)
    best_put, best_get = 0.0, 0.0
    for _ in range(p["repeats"]):
        t = time.perf_counter()
        ref = system.put(array)
        best_put = max(best_put, mib / (time.perf_counter() - t))
        t = time.perf_counter()
        back = system.get(ref)
        best_get = max(best_get, mib / (time.perf_counter() - t))
        assert back.shape == array.shape and back[123] == array[123]
        del ref, back
    out["bandwidth"] = {"put_mib_per_s": best_put, "get_mib_per_s": best_get, "mib": mib}

    times = []
    for _ in range(p["repeats"]):
        t = time.perf_counter()
        level = [system.square.remote(i) for i in range(p["map_tasks"])]
        while len(level) > 1:
            level = [system.add_all.remote(*level[i:i + 8]) for i in range(0, len(level), 8)]
        total = system.get(level[0])
        times.append(time.perf_counter() - t)
        n = p["map_tasks"]
        assert total == (n - 1) * n * (2 * n - 1) // 6, total
    out["map_reduce"] = {"seconds": min(times), "tasks": p["map_tasks"]}
    return out


def child(system_name, profile, bin_dir, out_path):
    p = PROFILES[profile]
    if system_name == "cohort":
        system = Cohort(Path(bin_dir), p["workers"])
    elif system_name == "cohort-durable":
        system = Cohort(Path(bin_dir), p["workers"], durable=True)
    else:
        system = Ray(Path(bin_dir), p["workers"])
    try:
        result = run_workloads(system, p)
    finally:
        system.stop()
    Path(out_path).write_text(json.dumps(result))


ROWS = [
    ("sync_empty_task", "p50_ms", "round trip of an empty task, p50 (ms)", "lower"),
    ("async_empty_tasks", "tasks_per_s", "empty tasks a second, batches", "higher"),
    ("small_objects", "puts_per_s", "small puts a second", "higher"),
    ("small_objects", "gets_per_s", "small gets a second", "higher"),
    ("bandwidth", "put_mib_per_s", "put of a large array (MiB/s)", "higher"),
    ("bandwidth", "get_mib_per_s", "get of a large array (MiB/s)", "higher"),
    ("map_reduce", "seconds", "map-reduce (s)", "lower"),
]


def comparisons(results):
    """(label, cohort, ray, cohort's figure over Ray's turned so that > 1 is ahead, or None)."""
    out = []
    for workload, metric, label, better in ROWS:
        c = results.get("cohort", {}).get(workload, {}).get(metric)
        r = results.get("ray", {}).get(workload, {}).get(metric)
        ratio = None if c is None or r is None or not c or not r else (
            r / c if better == "lower" else c / r)
        out.append((label, c, r, ratio))
    return out


def table(results):
    def fmt(v):
        return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3g}")

    durable = "cohort-durable" in results
    lines = ["| workload | cohort | Ray | cohort vs Ray |"
             + (" cohort with `--state-dir` |" if durable else ""),
             "|---|---|---|---|" + ("---|" if durable else "")]
    for (workload, metric, _, _), (label, c, r, ratio) in zip(ROWS, comparisons(results)):
        line = f"| {label} | {fmt(c)} | {fmt(r)} | {'-' if ratio is None else f'{ratio:.2f}x'} |"
        if durable:
            line += f" {fmt(results['cohort-durable'].get(workload, {}).get(metric))} |"
        lines.append(line)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--systems", default="cohort,ray")
    parser.add_argument("--bin-dir", default=str(REPO / "build" / "bin"))
    parser.add_argument("--out", required=True, help="JSON results file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.profile, args.bin_dir, args.child_out)
        return 0
    try:
        from importlib.metadata import version

        ray_version = version("ray")
    except Exception:  # Ray not installed: its run fails below, saying so
        ray_version = "?"
    results = {"profile": args.profile, "params": PROFILES[args.profile], "ray_version": ray_version,
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    failed = []
    for name in args.systems.split(","):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            code = subprocess.call([sys.executable, __file__, "--child", name, "--profile",
                                    args.profile, "--bin-dir", args.bin_dir, "--child-out",
                                    f.name, "--out", args.out])
            if code != 0:
                failed.append(name)
                continue
            results[name] = json.loads(Path(f.name).read_text())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    if failed:
        print(f"tasks bench: {', '.join(failed)} failed (above)", file=sys.stderr)
        return 1
    for name in args.systems.split(","):
        missing = [w for w in WORKLOADS if w not in results.get(name, {})]
        if missing:
            print(f"tasks bench: {name} lacks {missing}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
