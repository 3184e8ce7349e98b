"""Starting and stopping the servers and client processes of the compatibility suite.

Every process is started in its own session, tracked by a ProcessGroup and stopped by
PID when the group closes, also when a test fails. Every wait has a deadline.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

COMPAT_DIR = Path(__file__).resolve().parent
REPO_ROOT = COMPAT_DIR.parents[1]
VENV_DIR = Path(os.environ.get("COMPAT_VENV_DIR", REPO_ROOT / ".venv"))
CLIENTS_DIR = VENV_DIR / "clients"
WORKER = COMPAT_DIR / "worker.py"

sys.path.insert(0, str(REPO_ROOT / "tests" / "support"))
from free_port import free_port  # noqa: E402  (shared with the e2e tests)


def cohort_binary(name):
    bin_dir = Path(os.environ.get("COHORT_BIN_DIR", "build/bin"))
    if not bin_dir.is_absolute():
        bin_dir = (REPO_ROOT / bin_dir).resolve()
    return bin_dir / name


def coordinator_binary():
    return cohort_binary("cohort-coordinator")



def version_tuple(text):
    return tuple(int(p) for p in re.findall(r"\d+", text))


# ---------------------------------------------------------------- clients


@dataclass(frozen=True)
class Client:
    """A client installation (jaxlib, or torch for its TCPStore): the interpreter that imports
    it, and (for jaxlib) what it speaks."""

    name: str
    python: str
    version: str
    skip_reason: str = ""

    @property
    def protocol(self):
        if version_tuple(self.version) >= (0, 10):
            return "xla.coordination.CoordinationService"
        return "tensorflow.CoordinationService"

    @property
    def cohort_job(self):
        # jaxlib up to 0.9.0 names its job jax_worker; later versions name none, and
        # cohort maps them to its default job.
        return "jax_worker" if version_tuple(self.version) < (0, 9, 1) else "worker"

    def job_path(self, task):
        """How cohort's messages name a task of this client."""
        return f"/job:{self.cohort_job}/task:{task}"


def installed_version(python, dist):
    """The installed version of a distribution in another interpreter, or None."""
    try:
        out = subprocess.run(
            [python, "-c",
             f"import importlib.metadata as m; print(m.version({dist!r}))"],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def jaxlib_clients():
    """Every jaxlib the suite drives: the main venv's, then one per clients/jaxlib-*.txt."""
    clients = []
    main_version = installed_version(sys.executable, "jaxlib")
    reason = ""
    if main_version is None:
        reason = f"jaxlib is not installed in {sys.executable} (run tests/compat/run.sh)"
    clients.append(Client(f"jaxlib-{main_version or 'main'}", sys.executable,
                          main_version or "0", reason))
    for req in sorted((COMPAT_DIR / "clients").glob("jaxlib-*.txt")):
        name = req.stem
        python = CLIENTS_DIR / name / "bin" / "python"
        reason = ""
        version = installed_version(str(python), "jaxlib") if python.exists() else None
        if version is None:
            reason = f"{name} is not installed in {CLIENTS_DIR / name} (run tests/compat/run.sh)"
        clients.append(Client(name, str(python), version or name.split("-", 1)[1], reason))
    return clients


# ---------------------------------------------------------------- processes


class ProcessGroup:
    """Processes of one test or fixture; close() stops each one by its PID."""

    def __init__(self, log_dir):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs = []

    def start(self, name, argv, env=None):
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "w")
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        proc.log_path = log_path
        proc.name = name
        self.procs.append(proc)
        return proc

    @staticmethod
    def stop(proc, sig=signal.SIGTERM, grace=5.0):
        """Stops one process by PID; returns its exit status."""
        if proc.poll() is None:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        return proc.returncode

    def close(self):
        # Last started first: clients and sidecars before the servers they talk to, which
        # they would otherwise wait for while stopping.
        for proc in reversed(self.procs):
            self.stop(proc, grace=3.0)


def log_text(proc):
    try:
        return Path(proc.log_path).read_text(errors="replace")
    except OSError:
        return ""


def tail(text, lines=40):
    return "\n".join(text.splitlines()[-lines:])


def wait_for_log(proc, pattern, timeout):
    """Waits until the process's log matches pattern; returns the match."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log_text(proc))
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(
        f"{proc.name} did not log {pattern!r} within {timeout}s "
        f"(exit status {proc.poll()}):\n{tail(log_text(proc))}")


def wait_all(procs, timeout):
    """Waits for every process; kills the ones still running at the deadline."""
    deadline = time.monotonic() + timeout
    late = []
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            late.append(proc.name)
            ProcessGroup.stop(proc, sig=signal.SIGKILL)
    return late


# ---------------------------------------------------------------- servers


@dataclass
class Server:
    kind: str  # "cohort" or "jaxlib"
    address: str
    proc: subprocess.Popen
    metrics_url: str = ""

    def log(self):
        return log_text(self.proc)

    def metrics(self):
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """The value of one series of a scrape, or None when it is absent."""
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if got == {k: str(v) for k, v in labels.items()}:
                return float(m.group(3))
        return None


def start_cohort(group, job, tasks, heartbeat_s, shutdown_s=30, http=False, name="cohort",
                 extra=(), listen="127.0.0.1:0", wrapper=()):
    """`wrapper`: a command that execs the coordinator (nsenter into a mount namespace)."""
    binary = coordinator_binary()
    if not os.access(binary, os.X_OK):
        raise AssertionError(
            f"{binary} not found: build it first or set COHORT_BIN_DIR")
    argv = [*wrapper, str(binary), "--job", f"{job}={tasks}", "--listen", listen,
            "--http-listen", "127.0.0.1:0" if http else "",
            "--heartbeat-timeout", f"{heartbeat_s}s", "--register-timeout", "60s",
            "--shutdown-barrier-timeout", f"{shutdown_s}s", *extra]
    proc = group.start(name, argv)
    port = wait_for_log(proc, r"serving gRPC on \S+ \(port (\d+)\)", 15).group(1)
    metrics_url = ""
    if http:
        hport = wait_for_log(proc, r"serving /metrics \S+ \S+ on \S+ \(port (\d+)\)", 15).group(1)
        metrics_url = f"http://127.0.0.1:{hport}/metrics"
    return Server("cohort", f"127.0.0.1:{port}", proc, metrics_url)


def wait_accepting(address, timeout, proc=None):
    """Waits until something accepts TCP connections at address."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    detail = f" ({proc.name} exit status {proc.poll()}):\n{tail(log_text(proc))}" if proc else ""
    raise AssertionError(f"nothing accepts connections at {address} after {timeout}s{detail}")


def start_proxy(group, coordinator, index, sidecars, job="worker", tolerance="60s", extra=()):
    """A cohort-sidecar as a pod's coordinator endpoint (--proxy-listen) in front of
    `coordinator`: sidecar `index` of `sidecars` (the coordinator's auxiliary job
    sidecar=`sidecars`). Returns (process, its proxy address)."""
    binary = cohort_binary("cohort-sidecar")
    if not os.access(binary, os.X_OK):
        raise AssertionError(f"{binary} not found: build it first or set COHORT_BIN_DIR")
    address = f"127.0.0.1:{free_port()}"
    proc = group.start(f"sidecar-{index}", [
        str(binary), "--coordinator", coordinator, "--proxy-listen", address,
        "--outage-tolerance", tolerance, "--http-listen", f"127.0.0.1:{free_port()}",
        "--job", job, "--task", str(index), "--num-tasks", str(sidecars), *extra])
    wait_accepting(address, 30, proc)
    return proc, address


def namespace_commands():
    """(unshare argv that mounts and holds, nsenter argv prefix) for this user."""
    if os.geteuid() == 0:
        return ["unshare", "--mount", "--propagation", "private"], ["-m"]
    return (["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"],
            ["-U", "-m", "--preserve-credentials"])


class Volume:
    """A tmpfs of `size` (mount's size=, such as 8m) at `path`, mounted in a private mount
    namespace held by a `sleep` (nothing changes in the machine's own mounts). `enter` is
    the nsenter prefix that runs a command inside it."""

    def __init__(self, group, path, size):
        self.path = path
        path.mkdir()
        unshare, enter = namespace_commands()
        self.holder = group.start("volume", [
            *unshare, "sh", "-c",
            f"mount -t tmpfs -o size={size} cohort-state-test {path} && echo mounted "
            "&& exec sleep infinity"])
        wait_for_log(self.holder, r"mounted", 10)
        self.enter = ["nsenter", "-t", str(self.holder.pid), *enter, "--"]

    def run(self, *argv):
        return subprocess.run([*self.enter, *argv], capture_output=True, text=True, timeout=60)

    def fill(self, exact=True):
        """Writes a file until no space is left. exact: and asserts that none is (false when
        a coordinator may free its reserve meanwhile)."""
        # dd stops at ENOSPC; its failure is the point.
        self.run("dd", "if=/dev/zero", f"of={self.path}/filler", "bs=64k")
        if not exact:
            return
        free = int(self.run("stat", "-f", "-c", "%a*%S", str(self.path)).stdout.split("*")[0])
        assert free == 0, f"{free} blocks still free after filling the volume"

    def empty(self):
        assert self.run("rm", f"{self.path}/filler").returncode == 0

    def files(self):
        return sorted(self.run("ls", f"{self.path}/state").stdout.split())


class DurableCoordinator:
    """A cohort coordinator with --state-dir on a fixed port, killed and started again."""

    def __init__(self, group, job, tasks, sidecars, state_dir):
        self.group = group
        self.listen = f"127.0.0.1:{free_port()}"
        self.args = dict(job=job, tasks=tasks, heartbeat_s=10, listen=self.listen,
                         extra=["--state-dir", str(state_dir),
                                "--auxiliary-job", f"sidecar={sidecars}"])
        self.starts = 0
        self.server = self.start()

    def start(self):
        self.starts += 1
        self.server = start_cohort(self.group, name=f"cohort-{self.starts}", **self.args)
        return self.server

    def kill_and_restart(self):
        ProcessGroup.stop(self.server.proc, sig=signal.SIGKILL)
        self.start()
        wait_for_log(self.server.proc, r"restored the saved state", 15)


KILL_AT_ROUNDS = (8, 24)


def kill_during_rounds(coordinator, logs_of_tasks, at_rounds=KILL_AT_ROUNDS):
    """Kills and restarts the coordinator once every task has begun each round of
    `at_rounds` (each task prints "round R begins")."""
    for r in at_rounds:
        for proc in logs_of_tasks:
            wait_for_log(proc, rf"round {r} begins", 120)
        coordinator.kill_and_restart()


def start_jaxlib_service(group, client, tasks, heartbeat_s, shutdown_s=30, name="jaxlib",
                         legacy=False):
    """jaxlib's own service, hosted by worker.py in the client's interpreter."""
    address = f"127.0.0.1:{free_port()}"
    proc = group.start(name, [client.python, str(WORKER), "--scenario", "serve",
                              "--address", address, "--num-tasks", str(tasks),
                              "--heartbeat-timeout", str(heartbeat_s),
                              "--shutdown-timeout", str(shutdown_s)]
                       + (["--legacy"] if legacy else []))
    wait_for_log(proc, r"serving on ", 30)
    return Server("jaxlib", address, proc)


def start_server(kind, group, client, tasks, heartbeat_s, shutdown_s=30, http=False):
    """http: cohort serves /metrics (Server.metrics_url), which start_tasks hands to the
    tasks; jaxlib's service has nothing of the kind."""
    if kind == "cohort":
        return start_cohort(group, client.cohort_job, tasks, heartbeat_s, shutdown_s, http=http)
    return start_jaxlib_service(group, client, tasks, heartbeat_s, shutdown_s)


def wait_for_parked(server, kind, count, timeout):
    """Waits until cohort holds at least count parked calls of kind (the gauge
    cohort_coordinator_parked_calls): they reached it and wait there."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = server.metric("cohort_coordinator_parked_calls", kind=kind)
        if got is not None and got >= count:
            return
        if server.proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"cohort did not hold {count} parked {kind} calls within {timeout}s "
                         f"(last seen: {got}):\n{tail(server.log())}")


# ---------------------------------------------------------------- scenarios


@dataclass
class TaskRun:
    task_id: int
    proc: subprocess.Popen
    out: Path

    def steps(self):
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return {}

    def log(self):
        return log_text(self.proc)


def start_tasks(group, client, server, scenario, tasks, heartbeat_s, extra=(), late=None,
                address_of=None):
    """Starts one worker per task. late maps a task id to (step, parked kind): that task
    starts only once every other task has begun that step (its log says so) and, against a
    cohort that serves /metrics, once cohort holds their calls parked (that kind, e.g.
    "register"). address_of(task) is where a task connects (default: the server's address).
    A server's metrics_url goes to the tasks as --metrics-url."""
    runs = []
    late = late or {}
    metrics = ["--metrics-url", server.metrics_url] if server.metrics_url else []

    def start(t):
        out = group.log_dir / f"{scenario}-task-{t}.json"
        address = address_of(t) if address_of else server.address
        proc = group.start(
            f"{scenario}-task-{t}",
            [client.python, str(WORKER), "--scenario", scenario, "--address", address,
             "--task-id", str(t), "--num-tasks", str(tasks), "--out", str(out),
             "--heartbeat-timeout", str(heartbeat_s), *metrics, *extra])
        runs.append(TaskRun(t, proc, out))

    for t in range(tasks):
        if t not in late:
            start(t)
    for t, (step, parked_kind) in sorted(late.items()):
        for r in runs:
            wait_for_log(r.proc, rf"task {r.task_id}: {re.escape(step)} begins", 120)
        if server.metrics_url and parked_kind:
            wait_for_parked(server, parked_kind, len(runs), 60)
        start(t)
    return sorted(runs, key=lambda r: r.task_id)


def legacy_client():
    """jaxlib 0.4.13 of clients/legacy-jaxlib-0.4.13.txt (xla.DistributedRuntimeService)."""
    name = "legacy-jaxlib-0.4.13"
    python = CLIENTS_DIR / name / "bin" / "python"
    reason = ""
    version = installed_version(str(python), "jaxlib") if python.exists() else None
    if version is None:
        reason = f"{name} is not installed in {CLIENTS_DIR / name} (run tests/compat/run.sh)"
    return Client(f"jaxlib-{version or '0.4.13'}", str(python), version or "0.4.13", reason)


def tensorflow_client():
    """The TensorFlow venv of clients/tensorflow-cpu.txt: (python, version, skip reason)."""
    name = "tensorflow-cpu"
    python = CLIENTS_DIR / name / "bin" / "python"
    reason = ""
    version = installed_version(str(python), name) if python.exists() else None
    if version is None:
        reason = f"{name} is not installed in {CLIENTS_DIR / name} (run tests/compat/run.sh)"
    return str(python), version or "", reason


def torch_clients():
    """Every torch whose TCPStore client the suite drives: the benchmarks' (bench/requirements-
    torch.txt, in the venv bench/setup.sh makes, .venv-bench), then one per clients/torch-*.txt
    (older releases), newest first. Each a Client whose skip_reason says what is missing."""
    venvs = [("bench", REPO_ROOT / ".venv-bench", "run bash bench/setup.sh")]
    venvs += [(req.stem, CLIENTS_DIR / req.stem, "run tests/compat/run.sh")
              for req in (COMPAT_DIR / "clients").glob("torch-*.txt")]
    clients = []
    for label, venv, hint in venvs:
        python = venv / "bin" / "python"
        version = installed_version(str(python), "torch") if python.exists() else None
        reason = "" if version else f"torch is not installed in {venv} ({hint})"
        clients.append(Client(f"torch-{version or label}", str(python), version or "0", reason))
    return sorted(clients, key=lambda c: version_tuple(c.version), reverse=True)


# How long a test waits for the survivors of a kill to end: only so that it cannot hang.
# Why they ended is what the tests assert (their logs); how fast is measured in bench/
# (cohort-failure-bench), not here.
SURVIVORS_DEADLINE_S = 90


def kill_and_wait_for_the_survivors(group, runs, victim, timeout=SURVIVORS_DEADLINE_S):
    """SIGKILLs runs[victim]; returns the sorted task ids of the others that have ended
    by the time all of them did, or timeout seconds passed."""
    deadline = time.monotonic() + timeout
    group.stop(runs[victim].proc, sig=signal.SIGKILL)
    survivors = [r for r in runs if r.task_id != victim]
    while time.monotonic() < deadline and any(r.proc.poll() is None for r in survivors):
        time.sleep(0.05)
    return sorted(r.task_id for r in survivors if r.proc.poll() is not None)
