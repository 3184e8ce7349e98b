"""Runs every benchmark scenario against cohort and the anchors, in one run on one machine,
and writes bench/results/<scenario>.json (then report.py turns them into BENCHMARKS.md).

Each measurement gets a fresh server on a loopback port: cohort-coordinator, jaxlib's
own service (bench/jaxlib_service.py), etcd 3.4 (Debian's), or PyTorch's TCPStore
(bench/tcpstore_driver.py). cohort-loadgen drives cohort, jaxlib and etcd; TCPStore is
driven by its own Python driver with the same parameters, and so is cohort's TCPStore
protocol (cohort-torch: cohort-coordinator --torch-store-listen) and the same through a pod's
sidecar (cohort-torch-sidecar: cohort-sidecar --torch-store-proxy-listen in front of the
coordinator, every command carried over its gRPC port), with torch's own client against
every server in the same run. Every process is started here,
stopped here by its PID, and given a deadline.

  python3 bench/run.py                      # the full run
  python3 bench/run.py --profile smoke      # tiny N, every scenario, for make test
"""

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
from free_port import free_port  # noqa: E402  (below the ephemeral range, as the tests')
MIB = 1 << 20
# On the machine's disk, not tmpfs: the durable scenario's state directories and etcd-disk.
DISK_TMP = "/var/tmp" if os.path.isdir("/var/tmp") else None
# The systems torch's own client drives (bench/tcpstore_driver.py).
TCPSTORE_PROTOCOL = ("tcpstore", "cohort-torch", "cohort-torch-sidecar")
# The same servers driven from C++ (cohort-loadgen --protocol tcpstore, bench/tcpstore_load.h),
# each with the server it drives: the store barrier (register, barrier), where torch's Python
# client, a thread per rank, would otherwise be what is measured at 1,000 ranks and more, and
# the memory per connected rank.
TCPSTORE_CPP = {"tcpstore-cpp": "tcpstore", "cohort-torch-cpp": "cohort-torch",
                "cohort-torch-sidecar-cpp": "cohort-torch-sidecar"}

PROFILES = {
    "full": {
        "register_tasks": [1000, 4000, 16000],
        "barrier_rounds": {1000: 20, 4000: 20, 16000: 10},
        "tcpstore_max_tasks": 4000,
        "tcpstore_memory_tasks": [1000, 4000],
        "tcpstore_memory_torch_max": 1000,
        "heartbeat_tasks": [1000, 4000, 16000],
        "heartbeat_interval": 1.0,
        "heartbeat_seconds": 10,
        "kv_tasks": 4000,
        "kv_clients": [1, 64, 512],
        "kv_values": [100, 64 << 10, 16 * MIB],
        "kv_seconds": 3,
        "durable_values": [100, 64 << 10],
        "durable_runs": 3,
        "memory_tasks": [1000, 4000, 16000],
        "failure_tasks": [1000, 4000, 16000],
        "failure_heartbeat_timeout": 4,
        "memory_connection_per_task_max": 4000,
        "sidecar_first_n_extra": ["heartbeat", "resources", "resources-progress"],
        "sidecar_tasks": [2, 1000, 4000, 16000],
        "sidecar_rounds": 5,
        "resource_seconds": 30,
        "restart_tasks": [1000, 4000],
        "restart_sidecars": 50,
        "restart_rounds": 3,
        "pod_tasks": 256,
        "tasks_per_sidecar": [1, 4, 8],
        "cpu_window": 10,
        "timeout": 600,
    },
    "smoke": {
        "register_tasks": [20, 40],
        "barrier_rounds": {20: 2, 40: 2},
        "tcpstore_max_tasks": 40,
        "tcpstore_memory_tasks": [20],
        "tcpstore_memory_torch_max": 20,
        "heartbeat_tasks": [20, 40],
        "heartbeat_interval": 0.5,
        "heartbeat_seconds": 1,
        "kv_tasks": 20,
        "kv_clients": [4],
        "kv_values": [100, 64 << 10],
        "kv_seconds": 0.3,
        "durable_values": [100],
        "durable_runs": 1,
        "memory_tasks": [20, 40],
        "failure_tasks": [20, 40],
        "failure_heartbeat_timeout": 1,
        "memory_connection_per_task_max": 0,
        "sidecar_first_n_extra": ["resources", "resources-progress"],
        "sidecar_tasks": [2, 8],
        "sidecar_rounds": 1,
        "resource_seconds": 2,
        "restart_tasks": [16],
        "restart_sidecars": 2,
        "restart_rounds": 1,
        "pod_tasks": 8,
        "tasks_per_sidecar": [1, 8],
        "cpu_window": 1,
        "timeout": 60,
    },
}


def median_of_runs(runs):
    """One kv record from runs of the same point: each phase's rate, count and latencies are
    the medians of the runs' (each run's rate kept in phase_rates), its errors the most any
    run had. A failed run makes the record a failed one."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return {**failed[0], "runs": len(runs), "failed_runs": len(failed)}
    merged = json.loads(json.dumps(runs[0]))
    merged["runs"] = len(runs)
    merged["wall_seconds"] = round(sum(r.get("wall_seconds", 0) for r in runs), 2)
    merged["phase_rates"] = {}
    for name, phase in merged.get("phases", {}).items():
        seen = [r["phases"][name] for r in runs if name in r.get("phases", {})]
        merged["phase_rates"][name] = [p["ops_per_second"] for p in seen]
        for key in ("ops_per_second", "ops", "mib_per_second"):
            if key in phase:
                phase[key] = statistics.median(p[key] for p in seen)
        if "errors" in phase:
            phase["errors"] = max(p["errors"] for p in seen)
        for key in phase.get("latency", {}):
            phase["latency"][key] = statistics.median(p["latency"][key] for p in seen)
    return merged


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def cmd(argv):
    """The stripped stdout of a short command; empty when it cannot run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def wait_port(port, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def connections(tasks):
    """How many HTTP/2 connections the simulated tasks share: at least 16, at most 100
    tasks each. jaxlib's service stalls with about 1,000 calls parked on one connection
    (16,000 tasks over 16 connections never finished registering), so every system gets
    the same spread; a real job has one connection per task."""
    return max(16, tasks // 100)


def stop(proc, grace=10):
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass


class Server:
    """One server process for one measurement; a context manager that stops it by PID."""

    def __init__(self, kind, argv, port, logs, env=None, cleanup=None):
        self.kind, self.port, self.cleanup = kind, port, cleanup
        self.log_path = logs / f"{kind}-{port}.log"
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        if not wait_port(port, self.proc, 60):
            self.__exit__()
            raise RuntimeError(f"{kind} did not start: {self.log_tail()}")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid

    def log_tail(self):
        try:
            return self.log_path.read_text(errors="replace")[-600:]
        except OSError:
            return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop(self.proc)
        if self.cleanup:
            self.cleanup()


class Bench:
    def __init__(self, args):
        self.args = args
        self.p = PROFILES[args.profile]
        self.bin = Path(args.bin_dir).resolve()
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs = Path(tempfile.mkdtemp(prefix="cohort-bench-logs."))
        self.python = args.python
        self.systems = set(args.systems.split(","))
        self.skipped = {}
        self.check_anchors()

    # ------------------------------------------------------------ anchors

    def check_anchors(self):
        if "jaxlib" in self.systems and not self.py_has("jaxlib"):
            self.skip("jaxlib", f"jaxlib is not importable by {self.python}")
        # cohort's TCPStore protocol (cohort-torch) is driven by torch's client too.
        torch_users = [s for s in TCPSTORE_PROTOCOL if s in self.systems
                       or s.split("-")[0] in self.systems]
        if torch_users and not self.py_has("torch"):
            reason = "torch is not installed"
            note = REPO / ".venv-bench" / "torch.skip"
            if note.exists():
                reason = note.read_text().strip()
            for system in torch_users:
                self.skip(system, reason)
        if "etcd" in self.systems:
            for program, package in (("etcd", "etcd-server"), ("etcdctl", "etcd-client")):
                if not shutil.which(program):
                    self.skip("etcd", f"{program} is not installed (tools/deps.sh installs it; "
                              f"Debian: apt-get install {package})")
                    break
        if self.args.strict and self.skipped:
            raise SystemExit("bench: --strict: every anchor must run, and these cannot: " +
                             "; ".join(f"{s}: {why}" for s, why in self.skipped.items()) +
                             ". bench/setup.sh installs what the anchors need")

    def skip(self, system, reason):
        log(f"{system}: skipped: {reason}")
        self.systems.discard(system)
        self.skipped[system] = reason

    def py_has(self, module):
        try:
            return subprocess.run([self.python, "-c", f"import {module}"], timeout=120,
                                  capture_output=True).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def py_version(self, dist):
        try:
            out = subprocess.run(
                [self.python, "-c",
                 f"import importlib.metadata as m; print(m.version({dist!r}))"],
                timeout=60, capture_output=True, text=True)
            return out.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            return None

    # ------------------------------------------------------------ servers

    def cohort(self, tasks, heartbeat_timeout="10m", sync=None):
        """sync: None, the state in memory; else --state-dir on this machine's disk with
        --state-sync-interval `sync` ("0": every answer after its fdatasync, group commit)."""
        port = free_port()
        extra, cleanup = [], None
        if sync is not None:
            data = Path(tempfile.mkdtemp(prefix="cohort-bench-state.", dir=DISK_TMP))
            extra = ["--state-dir", str(data / "state"), "--state-sync-interval", sync]
            cleanup = lambda: shutil.rmtree(data, ignore_errors=True)  # noqa: E731
        return Server("cohort", [
            str(self.bin / "cohort-coordinator"), "--listen", f"127.0.0.1:{port}",
            "--http-listen", "", "--job", f"worker={tasks}",
            "--heartbeat-timeout", heartbeat_timeout, "--register-timeout", "10m",
            "--log-level", "warn", *extra], port, self.logs, cleanup=cleanup)

    def jaxlib(self, tasks, heartbeat_timeout=600):
        port = free_port()
        return Server("jaxlib", [
            self.python, str(REPO / "bench" / "jaxlib_service.py"),
            "--address", f"127.0.0.1:{port}", "--num-tasks", str(tasks),
            "--heartbeat-timeout", str(heartbeat_timeout), "--register-timeout", "600"],
            port, self.logs)

    def etcd(self, disk=False):
        port, peer = free_port(), free_port()
        # On tmpfs: etcd fsyncs every write, and this machine's disk makes that the whole
        # figure; on tmpfs etcd shows its best case (cohort keeps memory only). On the disk
        # (etcd-disk): beside cohort's durable state on the same disk (scenario durable).
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        data = Path(tempfile.mkdtemp(prefix="cohort-bench-etcd.", dir=DISK_TMP if disk else shm))
        server = Server("etcd", [
            "etcd", "--name", "bench", "--data-dir", str(data),
            "--listen-client-urls", f"http://127.0.0.1:{port}",
            "--advertise-client-urls", f"http://127.0.0.1:{port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"bench=http://127.0.0.1:{peer}",
            "--max-request-bytes", str(32 * MIB), "--quota-backend-bytes", str(8 << 30),
            "--log-level", "error"], port, self.logs,
            cleanup=lambda: shutil.rmtree(data, ignore_errors=True))
        # The port opens before the member has elected itself: wait for a write to pass.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            probe = subprocess.run(["etcdctl", "--endpoints", server.address, "put",
                                    "bench/ready", "1"], capture_output=True, timeout=30,
                                   env={**os.environ, "ETCDCTL_API": "3"})
            if probe.returncode == 0:
                return server
            time.sleep(0.1)
        server.__exit__()
        raise RuntimeError("etcd accepted no write within 30 s")

    def cohort_torch(self, tasks):
        """cohort's TCPStore protocol. The job has N tasks, as a job of N ranks would, so the
        coordinator's limit on waits that name no task (64 per task) is a real job's."""
        port = free_port()
        return Server("cohort-torch", [
            str(self.bin / "cohort-coordinator"), "--listen", f"127.0.0.1:{free_port()}",
            "--http-listen", "", "--job", f"worker={max(1, tasks)}", "--register-timeout", "10m",
            "--torch-store-listen", f"127.0.0.1:{port}", "--log-level", "warn"], port, self.logs)

    def cohort_torch_sidecar(self, tasks):
        """cohort's TCPStore protocol as a pod's processes reach it: a cohort-sidecar's
        --torch-store-proxy-listen, which carries each command to the coordinator over its
        gRPC port (the path of `framework: pytorch` on the cluster). One sidecar for every
        client, as in a pod whose ranks all talk through it."""
        coordinator_port, proxy_port, port = free_port(), free_port(), free_port()
        coordinator = Server("cohort-torch-sidecar-coordinator", [
            str(self.bin / "cohort-coordinator"), "--listen", f"127.0.0.1:{coordinator_port}",
            "--http-listen", "", "--job", f"worker={max(1, tasks)}",
            "--auxiliary-job", "sidecar=1", "--register-timeout", "10m",
            "--log-level", "warn"], coordinator_port, self.logs)
        try:
            sidecar = Server("cohort-torch-sidecar", [
                str(self.bin / "cohort-sidecar"), "--coordinator", coordinator.address,
                "--proxy-listen", f"127.0.0.1:{proxy_port}",
                "--http-listen", f"127.0.0.1:{free_port()}",
                "--job", "sidecar", "--task", "0", "--num-tasks", "1",
                "--torch-store-proxy-listen", f"127.0.0.1:{port}", "--log-level", "warn"],
                port, self.logs, cleanup=coordinator.__exit__)
        except BaseException:
            coordinator.__exit__()
            raise
        return sidecar

    def tcpstore(self):
        port = free_port()
        return Server("tcpstore", [
            self.python, str(REPO / "bench" / "tcpstore_driver.py"), "serve",
            "--port", str(port)], port, self.logs)

    def server(self, system, tasks, **kw):
        return {"cohort": self.cohort, "cohort-tensorflow": self.cohort, "jaxlib": self.jaxlib,
                "cohort-durable": lambda t, **k: self.cohort(t, sync="0", **k),
                "cohort-durable-fast": lambda t, **k: self.cohort(t, sync="1s", **k),
                "etcd": lambda t, **k: self.etcd(), "tcpstore": lambda t, **k: self.tcpstore(),
                "etcd-disk": lambda t, **k: self.etcd(disk=True),
                "cohort-torch": lambda t, **k: self.cohort_torch(t),
                "cohort-torch-sidecar": lambda t, **k: self.cohort_torch_sidecar(t),
                }[TCPSTORE_CPP.get(system, system)](tasks, **kw)

    # ------------------------------------------------------------ drivers

    def run_json(self, argv, what):
        """Runs one driver; returns its JSON, or {"error": ...}."""
        try:
            out = subprocess.run(argv, capture_output=True, text=True,
                                 timeout=self.p["timeout"], stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            log(f"{what}: timed out after {self.p['timeout']} s")
            return {"error": f"timed out after {self.p['timeout']} s"}
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if not lines:
            err = out.stderr.strip().splitlines()[-3:]
            log(f"{what}: exit {out.returncode}: {err}")
            return {"error": f"exit {out.returncode}: {' '.join(err)[:300]}"}
        return json.loads(lines[-1])

    def loadgen(self, server, scenario, protocol="xla", **params):
        if "tasks" in params and "channels" not in params:
            params["channels"] = connections(params["tasks"])
        argv = [str(self.bin / "cohort-loadgen"), scenario, "--coordinator", server.address,
                "--protocol", protocol, "--pid", str(server.pid)]
        for k, v in params.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        return self.run_json(argv, f"{server.kind} {scenario} {params}")

    def tcpstore_driver(self, server, scenario, **params):
        argv = [self.python, str(REPO / "bench" / "tcpstore_driver.py"), scenario,
                "--port", str(server.port)]
        for k, v in params.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        return self.run_json(argv, f"{server.kind} {scenario} {params}")

    def measure(self, system, scenario, tasks, **params):
        """One record: a fresh server for `system`, one driver run against it."""
        kw = {}
        if scenario == "failure":
            hb = self.p["failure_heartbeat_timeout"]
            kw = {"heartbeat_timeout": f"{hb}s"} if system.startswith("cohort") else \
                {"heartbeat_timeout": hb}
        started = time.monotonic()
        load = os.getloadavg()[0]  # other work on the machine skews every figure
        try:
            with self.server(system, tasks, **kw) as server:
                if system in TCPSTORE_CPP:
                    params = {"tasks": tasks, **params}
                    result = self.loadgen(server, scenario, "tcpstore", **params)
                elif system in TCPSTORE_PROTOCOL:
                    if scenario != "kv":
                        params = {"tasks": tasks, **params}
                    result = self.tcpstore_driver(server, scenario, **params)
                else:
                    protocol = {"cohort-tensorflow": "tensorflow", "etcd": "etcd",
                                "etcd-disk": "etcd"}.get(system, "xla")
                    if scenario != "kv" or not system.startswith("etcd"):
                        params = {"tasks": tasks, **params}
                    result = self.loadgen(server, scenario, protocol, **params)
        except RuntimeError as e:
            result = {"error": str(e)}
        if result.get("register_stalled"):
            result.setdefault("error", result["register_stalled"])
        if result.get("told_before_fault") or (result.get("first_told_seconds") or 0) < 0:
            result.setdefault("error", f"{result.get('told_before_fault')} parked polls ended "
                              f"before the fault (first answer: {result.get('first_answer')})")
        for key, value in params.items():  # a failed run still says what it measured
            result.setdefault(key, value)
        if system in TCPSTORE_CPP:
            result.pop("channels", None)
        if system not in ("etcd", "etcd-disk", *TCPSTORE_PROTOCOL) or scenario != "kv":
            result.setdefault("tasks", tasks)
        result["system"] = system
        result["loadavg_1m_before"] = load
        result["wall_seconds"] = round(time.monotonic() - started, 2)
        log(f"{scenario} {system} {tasks} {params}: "
            + (result.get("error") or "ok") + f" ({result['wall_seconds']} s)")
        return result

    def systems_for(self, candidates):
        return [s for s in candidates if s not in self.skipped
                and (s.split("-")[0] in self.systems or s in self.systems)]

    # ------------------------------------------------------------ scenarios

    def scenario_register(self):
        records = []
        for n in self.p["register_tasks"]:
            for system in self.systems_for(["cohort", "cohort-tensorflow", "jaxlib",
                                            "cohort-torch", "cohort-torch-sidecar",
                                            "tcpstore", "cohort-torch-cpp",
                                            "cohort-torch-sidecar-cpp", "tcpstore-cpp"]):
                # torch's client is driven by a Python thread per task; torch's server takes
                # 5 s for every 50th connection (seen with torch 2.15 on this machine), so
                # 4,000 ranks take minutes to connect to it even from C++.
                if ((system in TCPSTORE_PROTOCOL or system in TCPSTORE_CPP)
                        and n > self.p["tcpstore_max_tasks"]):
                    continue
                rounds = self.p["barrier_rounds"][n]
                records.append(self.measure(system, "barrier", n, rounds=rounds))
        return records

    def scenario_heartbeat(self):
        records = []
        for n in self.p["heartbeat_tasks"]:
            for system in self.systems_for(["cohort", "jaxlib"]):
                records.append(self.measure(system, "heartbeat", n,
                                            interval=self.p["heartbeat_interval"],
                                            seconds=self.p["heartbeat_seconds"]))
        return records

    def scenario_kv(self):
        records = []
        for value in self.p["kv_values"]:
            for clients in self.p["kv_clients"]:
                if value * clients > 2 << 30:
                    log(f"kv: {clients} clients x {value} B skipped (over 2 GiB in flight)")
                    continue
                for system in self.systems_for(["cohort", "jaxlib", "etcd", "cohort-torch",
                                                "cohort-torch-sidecar", "tcpstore"]):
                    params = {"clients": clients, "value_bytes": value,
                              "seconds": self.p["kv_seconds"]}
                    records.append(self.measure(system, "kv", self.p["kv_tasks"], **params))
        return records

    def scenario_durable(self):
        """What nothing acknowledged lost costs: the kv loops against cohort with its state in
        memory, with --state-dir on this machine's disk (the default: every answer after the
        fdatasync that covers it, shared by the answers waiting together), in the opt-in
        faster mode (--state-sync-interval 1s), and etcd with its data on the same disk.
        Each point runs durable_runs times, the systems taking turns, and keeps each phase's
        median: one server's rate moves by a fifth from run to run on this machine, more than
        the differences this scenario is about."""
        records = []
        systems = self.systems_for(["cohort", "cohort-durable", "cohort-durable-fast",
                                    "etcd-disk"])
        for value in self.p["durable_values"]:
            for clients in self.p["kv_clients"]:
                params = {"clients": clients, "value_bytes": value,
                          "seconds": self.p["kv_seconds"]}
                runs = {system: [] for system in systems}
                for _ in range(self.p["durable_runs"]):
                    for system in systems:
                        runs[system].append(
                            self.measure(system, "kv", self.p["kv_tasks"], **params))
                records += [median_of_runs(r) for r in runs.values()]
        return records

    def scenario_memory(self):
        records = []
        # Memory per connected rank of the TCPStore protocol: torch's server, the coordinator's
        # port, a sidecar's (whose process the ranks of a pod connect to).
        for n in self.p["tcpstore_memory_tasks"]:
            for system in self.systems_for(["tcpstore-cpp", "cohort-torch-cpp",
                                            "cohort-torch-sidecar-cpp"]):
                if system == "tcpstore-cpp" and n > self.p["tcpstore_memory_torch_max"]:
                    continue  # connecting 4,000 ranks to torch's server takes minutes here
                records.append(self.measure(system, "memory", n))
        for n in self.p["memory_tasks"]:
            for system in self.systems_for(["cohort", "jaxlib"]):
                records.append(self.measure(system, "memory", n))
                # One connection per task as in a real job, where the file limit allows.
                if n <= self.p["memory_connection_per_task_max"]:
                    records.append(self.measure(system, "memory", n, channels=n))
        return records

    def scenario_failure(self):
        records = []
        hb = self.p["failure_heartbeat_timeout"]
        for n in self.p["failure_tasks"]:
            for system in self.systems_for(["cohort", "jaxlib"]):
                records.append(self.measure(system, "failure", n, heartbeat_timeout=hb,
                                            interval=hb / 2))
        records += self.sidecar_failures()
        return records

    def sidecar_failures(self):
        """The sidecar path: real processes (coordinator, victim, its sidecar) and N-1
        simulated observers, through cohort-failure-bench."""
        fake_nvml = Path(self.args.fake_nvml).resolve() if self.args.fake_nvml else None
        if not fake_nvml or not fake_nvml.exists():
            if self.args.strict:
                raise SystemExit(f"bench: --strict: the sidecar failure path needs the fake NVML "
                                 f"library, and {fake_nvml or 'no --fake-nvml'} is not there "
                                 f"(build it: ninja fake_nvml)")
            log("sidecar failure path skipped: no fake NVML library (--fake-nvml)")
            self.skipped["sidecar"] = "the fake NVML library was not built"
            return []
        records = []
        for n in self.p["sidecar_tasks"]:
            argv = [str(self.bin / "cohort-failure-bench"), "--bin-dir", str(self.bin),
                    "--fake-nvml", str(fake_nvml),
                    "--gpu-config", str(REPO / "tests/sidecar/gpu/testdata/eight_gpus.json"),
                    "--rounds", str(self.p["sidecar_rounds"]), "--tasks", str(n),
                    "--work-dir", str(self.logs / "failure-bench"),
                    "--seconds", str(self.p["resource_seconds"]), "exit", "xid", "hang"]
            if n == self.p["sidecar_tasks"][0]:
                argv += self.p["sidecar_first_n_extra"]
            started = time.monotonic()
            load = os.getloadavg()[0]
            try:
                out = subprocess.run(argv, capture_output=True, text=True,
                                     timeout=self.p["timeout"] * 2, stdin=subprocess.DEVNULL)
                lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
            except subprocess.TimeoutExpired:
                lines = [{"error": "timed out"}]
            for r in lines:
                r["system"] = "cohort"
                r["loadavg_1m_before"] = load
                r.setdefault("tasks", n)
                records.append(r)
            log(f"failure-bench {n} tasks: {len(lines)} records "
                f"({time.monotonic() - started:.1f} s)")
        return records

    def scenario_restart(self):
        """A coordinator crash behind sidecars (cohort-restart-bench): kill to every task
        served again, the sidecar's added latency, coordinator memory per task."""
        records = []
        for n in self.p["restart_tasks"]:
            scenarios = ["restart", "memory"] + (["latency"] if n == self.p["restart_tasks"][0]
                                                 else [])
            argv = [str(self.bin / "cohort-restart-bench"), "--bin-dir", str(self.bin),
                    "--tasks", str(n), "--sidecars", str(min(n, self.p["restart_sidecars"])),
                    "--rounds", str(self.p["restart_rounds"]),
                    "--work-dir", str(self.logs / "restart-bench"), *scenarios]
            started = time.monotonic()
            load = os.getloadavg()[0]
            try:
                out = subprocess.run(argv, capture_output=True, text=True,
                                     timeout=self.p["timeout"] * 3, stdin=subprocess.DEVNULL)
                lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
                if not lines or out.returncode != 0:
                    # A scenario that printed nothing (a crash part way) is recorded with why.
                    lines.append({"scenario": scenarios[len(lines)] if len(lines) < len(scenarios)
                                  else "restart",
                                  "error": f"cohort-restart-bench exited {out.returncode}: "
                                           f"{out.stderr.strip()[-2000:]}"})
            except subprocess.TimeoutExpired:
                lines = [{"error": "timed out"}]
            for r in lines:
                r["system"] = "cohort"
                r["loadavg_1m_before"] = load
                r.setdefault("tasks", n)
                records.append(r)
            log(f"restart-bench {n} tasks: {len(lines)} records "
                f"({time.monotonic() - started:.1f} s)")
        # Real pods hold 1 to 8 processes: memory and CPU per task at those sizes.
        n = self.p["pod_tasks"]
        for k in self.p["tasks_per_sidecar"]:
            argv = [str(self.bin / "cohort-restart-bench"), "--bin-dir", str(self.bin),
                    "--tasks", str(n), "--sidecars", str(max(1, n // k)),
                    "--cpu-window", str(self.p["cpu_window"]),
                    "--work-dir", str(self.logs / "restart-bench"), "pods"]
            started = time.monotonic()
            try:
                out = subprocess.run(argv, capture_output=True, text=True,
                                     timeout=self.p["timeout"] * 3, stdin=subprocess.DEVNULL)
                lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
                if not lines or out.returncode != 0:
                    lines = [{"scenario": "memory_by_tasks_per_sidecar",
                              "error": f"cohort-restart-bench exited {out.returncode}: "
                                       f"{out.stderr.strip()[-2000:]}"}]
            except subprocess.TimeoutExpired:
                lines = [{"scenario": "memory_by_tasks_per_sidecar", "error": "timed out"}]
            for r in lines:
                r["system"] = "cohort"
                r["tasks"] = n
                r["tasks_per_sidecar"] = k
                records.append(r)
            log(f"restart-bench pods of {k}: {len(lines)} records "
                f"({time.monotonic() - started:.1f} s)")
        return records

    # ------------------------------------------------------------ machine

    @staticmethod
    def machine_cpu():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
        return ""

    def machine(self):
        cpu = self.machine_cpu()
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
        etcd_version = cmd(["etcd", "--version"]).splitlines()[:1] if shutil.which("etcd") else []
        return {
            "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / (1 << 20), 1),
            "kernel": platform.release(), "os": cmd(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
            "commit": cmd(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
            "profile": self.args.profile, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "loadavg_1m_at_end": os.getloadavg()[0],
            "network_namespace": os.environ.get("COHORT_BENCH_NETNS", "host"),
            "versions": {"jaxlib": self.py_version("jaxlib"), "torch": self.py_version("torch"),
                         "etcd": etcd_version[0] if etcd_version else None,
                         "grpc (cohort)": cmd(["sh", "-c", "dpkg-query -W -f='${Version}' libgrpc++-dev"]),
                         },
            "skipped": self.skipped,
        }

    def write(self, name, records):
        path = self.out / f"{name}.json"
        if self.args.merge and path.exists() and isinstance(records, list):
            # Keep the other systems' records of an earlier run of this scenario.
            mine = set(self.args.systems.split(","))
            if "cohort" in mine:
                mine.update(("cohort-tensorflow", "cohort-durable", "cohort-durable-fast"))
            if "etcd" in mine:
                mine.add("etcd-disk")
            kept = [r for r in json.loads(path.read_text())["records"]
                    if r.get("system") not in mine]
            records = kept + records
        # Which run wrote it: a scenario run alone (--scenarios) is reported as such.
        run = {"commit": cmd(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
               "date": time.strftime("%Y-%m-%d %H:%M %Z"),
               "network_namespace": os.environ.get("COHORT_BENCH_NETNS", "host"),
               "cpu": self.machine_cpu()}
        path.write_text(json.dumps({"scenario": name, "run": run, "records": records},
                                   indent=1) + "\n")
        log(f"wrote {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(PROFILES), default="full")
    p.add_argument("--bin-dir", default=str(REPO / "build-bench" / "bin"))
    p.add_argument("--fake-nvml", default="")
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--python", default=str(REPO / ".venv-bench" / "bin" / "python"),
                   help="interpreter with jaxlib and torch (the anchors)")
    p.add_argument("--systems", default="cohort,jaxlib,etcd,tcpstore")
    p.add_argument("--scenarios", default="register,heartbeat,kv,durable,memory,failure,restart")
    p.add_argument("--strict", action="store_true",
                   help="fail instead of skipping an anchor or path that cannot run (make test)")
    p.add_argument("--merge", action="store_true",
                   help="keep the records of systems not run now from the existing results")
    args = p.parse_args()
    bench = Bench(args)
    try:
        for name in args.scenarios.split(","):
            bench.write(name, getattr(bench, f"scenario_{name}")())
        bench.write("machine", bench.machine())
    finally:
        shutil.rmtree(bench.logs, ignore_errors=True)


if __name__ == "__main__":
    main()
