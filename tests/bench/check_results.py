"""Checks that a benchmark run's JSON is well-formed and complete: every scenario file is
there, every system that was not skipped has a record for every point of the profile, no
record failed, and every record carries the fields report.py reads. Figures are not
judged. Exit status 0 when complete; prints what is missing otherwise.

  python tests/bench/check_results.py RESULTS_DIR [--profile smoke]
"""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_profile(name):
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PROFILES[name]


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


class Checker:
    def __init__(self, results, profile):
        self.results = results
        self.p = profile
        self.problems = []
        machine = self.load("machine")
        self.machine = machine if isinstance(machine, dict) else {}
        self.skipped = self.machine.get("skipped", {})
        self.checked = 0

    def load(self, name):
        path = self.results / f"{name}.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            self.problems.append(f"{path}: {e}")
            return []
        if data.get("scenario") != name or "records" not in data:
            self.problems.append(f"{path}: not a {name} result file")
            return []
        return data["records"]

    def want(self, records, fields, what, **match):
        """One record matching `match`, without error, with numeric `fields` (dotted)."""
        if match.get("system") in self.skipped:
            return
        found = [r for r in records if all(r.get(k) == v for k, v in match.items())]
        if not found:
            self.problems.append(f"{what}: no record for {match}")
            return
        r = found[0]
        self.checked += 1
        if "error" in r:
            self.problems.append(f"{what} {match}: failed: {r['error']}")
            return
        for field in fields:
            value = r
            for part in field.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if not number(value):
                self.problems.append(f"{what} {match}: field {field} is {value!r}")

    def run(self):
        for key in ("cpu", "cores", "versions", "commit"):
            if key not in self.machine:
                self.problems.append(f"machine.json: no {key}")
        reg = self.load("register")
        for n in self.p["register_tasks"]:
            for s in ("cohort", "cohort-tensorflow", "jaxlib", "cohort-torch", "tcpstore",
                      "cohort-torch-cpp", "tcpstore-cpp"):
                if "torch" in s or "tcpstore" in s:
                    if n > self.p["tcpstore_max_tasks"]:
                        continue
                self.want(reg, ["register_seconds", "round_p50_ms", "round_p99_ms",
                                "burst_seconds", "task_release.p99_ms"], "register",
                          system=s, tasks=n)
        hb = self.load("heartbeat")
        for n in self.p["heartbeat_tasks"]:
            for s in ("cohort", "jaxlib"):
                self.want(hb, ["heartbeats_per_second", "server_cpu_percent_of_one_core",
                               "server_cpu_us_per_heartbeat", "latency.p99_ms"], "heartbeat",
                          system=s, tasks=n)
        kv = self.load("kv")
        for v in self.p["kv_values"]:
            for c in self.p["kv_clients"]:
                if v * c > 2 << 30:
                    continue
                for s in ("cohort", "jaxlib", "etcd", "cohort-torch", "tcpstore"):
                    # torch's client (cohort's TCPStore protocol and torch's server) adds add.
                    ops = ("set", "get", "blocking_get") + (
                        ("add",) if s in ("tcpstore", "cohort-torch") else ())
                    self.want(kv, [f"phases.{op}.{f}" for op in ops
                                   for f in ("ops_per_second", "latency.p99_ms")],
                              "kv", system=s, value_bytes=v, clients=c)
        durable = self.load("durable")
        for v in self.p["durable_values"]:
            for c in self.p["kv_clients"]:
                for s in ("cohort", "cohort-durable", "cohort-durable-fast", "etcd-disk"):
                    self.want(durable, [f"phases.{op}.{f}" for op in ("set", "get", "blocking_get")
                                        for f in ("ops_per_second", "latency.p99_ms")],
                              "durable", system=s, value_bytes=v, clients=c)
        mem = self.load("memory")
        for n in self.p["memory_tasks"]:
            for s in ("cohort", "jaxlib"):
                self.want(mem, ["bytes_per_task", "bytes_per_parked_call", "rss_kib_before"],
                          "memory", system=s, tasks=n, channels=max(16, n // 100))
        for n in self.p["tcpstore_memory_tasks"]:
            for s in ("tcpstore-cpp", "cohort-torch-cpp", "cohort-torch-sidecar-cpp"):
                if s == "tcpstore-cpp" and n > self.p["tcpstore_memory_torch_max"]:
                    continue
                self.want(mem, ["bytes_per_rank", "bytes_per_waiting_rank", "rss_kib_before"],
                          "memory", system=s, tasks=n)
        fail = self.load("failure")
        for n in self.p["failure_tasks"]:
            for s in ("cohort", "jaxlib"):
                self.want(fail, ["all_told_seconds", "first_told_seconds", "told"], "failure",
                          system=s, tasks=n, scenario="failure")
        if "sidecar" not in self.skipped:
            for n in self.p["sidecar_tasks"]:
                for sc in ("exit", "xid", "hang"):
                    self.want(fail, ["p50_ms", "max_ms", "first_told_p50_ms"], "sidecar path",
                              scenario=f"failure_detection_{sc}", tasks=n)
            self.want(fail, ["cpu_percent_of_one_core", "rss_kib"], "sidecar cost",
                      scenario="sidecar_resources")
            self.want(fail, ["cpu_percent_of_one_core", "rss_kib"], "sidecar cost with progress",
                      scenario="sidecar_resources_progress")
        restart = self.load("restart")
        for n in self.p["restart_tasks"]:
            self.want(restart, ["served_p50_ms", "served_max_ms", "failed_calls"],
                      "coordinator restart", scenario="coordinator_restart", tasks=n)
            self.want(restart, ["through_sidecars.kib_per_task", "direct.kib_per_task"],
                      "memory behind sidecars", scenario="coordinator_memory_behind_sidecars",
                      tasks=n)
        self.want(restart, ["added_p50_us", "through_sidecar.p50_ms"], "sidecar latency",
                  scenario="sidecar_latency")
        for k in self.p["tasks_per_sidecar"]:
            self.want(restart, ["through_sidecars.kib_per_task_with_sidecars",
                                "through_sidecars.sidecar_kib_per_task",
                                "through_sidecars.coordinator_cpu_ms_per_task_per_min",
                                "through_sidecars.sidecar_cpu_ms_per_task_per_min"],
                      "memory and CPU per task at a pod size",
                      scenario="memory_by_tasks_per_sidecar", tasks_per_sidecar=k)
        return self.problems


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results")
    p.add_argument("--profile", default="smoke")
    p.add_argument("--no-skips", action="store_true",
                   help="a skipped system or path is a problem too (make test)")
    args = p.parse_args()
    checker = Checker(Path(args.results), load_profile(args.profile))
    problems = checker.run()
    if args.no_skips:
        problems += [f"{s} was skipped ({why})" for s, why in checker.skipped.items()]
    for s, why in checker.skipped.items():
        print(f"skipped: {s}: {why}")
    for problem in problems:
        print(f"problem: {problem}")
    print(f"bench records: {checker.checked} passed, {len(problems)} failed")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
