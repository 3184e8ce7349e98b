"""A task-runtime cluster of real processes on loopback for the Python package's tests:
cohort-coordinator (the scheduler), object stores, C++ and Python workers. Every process is
stopped by its PID when the test ends, also when it fails; its log is printed on failure.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

REPO = Path(__file__).resolve().parents[2]
# The cohort package comes from the venv it was pip-installed into (tests/python/run.sh).
sys.path.insert(0, str(REPO / "tests" / "support"))
from free_port import free_port  # noqa: E402

import cohort  # noqa: E402
from cohort.runtime.v1 import messages_pb2, services_pb2_grpc  # noqa: E402

BIN = Path(os.environ.get("COHORT_BIN_DIR", REPO / "build" / "bin")).resolve()


class Cluster:
    def __init__(self, tmp, token=None):
        """`token`: the job's token, which every program is given (--auth-token-file)."""
        self.tmp = tmp
        self.procs = []
        self.token = token
        self.auth = []
        if token:
            (tmp / "token").write_text(token + "\n")
            self.auth = ["--auth-token-file", tmp / "token"]
        self.scheduler = f"127.0.0.1:{free_port()}"
        self.coordinators = 0
        self.coordinator = self.start_coordinator([])
        self.stores = []

    def start_coordinator(self, extra):
        self.coordinators += 1
        return self.start(f"coordinator-{self.coordinators}", [
            BIN / "cohort-coordinator", "--listen", self.scheduler, "--http-listen", "",
            "--job", "driver=1", "--task-liveness-timeout", "3s", *self.auth, *extra])

    def restart_coordinator(self, extra, kill=True):
        """The coordinator killed (SIGKILL) and started again on the same port with `extra`."""
        if kill:
            os.kill(self.coordinator.pid, signal.SIGKILL)
            self.coordinator.wait()
        self.coordinator = self.start_coordinator(extra)

    def start(self, name, argv, env=None):
        log = open(self.tmp / f"{name}.log", "w")
        proc = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        self.procs.append((name, proc, log))
        return proc

    def add_store(self, host):
        address = f"{host}:{free_port()}"
        name = f"store-{len(self.stores)}"
        self.start(name, [BIN / "cohort-objstore", "--listen", address, "--scheduler",
                          self.scheduler, "--capacity", "1GiB", *self.auth])
        deadline = time.monotonic() + 30
        while "registered with" not in (self.tmp / f"{name}.log").read_text():
            assert time.monotonic() < deadline, (self.tmp / f"{name}.log").read_text()
            time.sleep(0.02)
        self.stores.append(address)
        return address

    def add_cpp_workers(self, store, count):
        host = store.rsplit(":", 1)[0]
        return self.start(f"cpp-workers-{store}", [
            BIN / "cohort-worker", "--scheduler", self.scheduler, "--objstore", store,
            "--workers", count, "--listen-host", host, *self.auth])

    def add_python_worker(self, store, index, extra=()):
        host = store.rsplit(":", 1)[0]
        return self.start(f"py-worker-{index}", [
            sys.executable, "-m", "cohort.worker", "--scheduler", self.scheduler,
            "--objstore", store, "--listen-host", host, *self.auth, *extra],
            env={"PYTHONPATH": str(Path(__file__).parent)})

    def worker_address(self, name):
        """The HOST:PORT a Python worker serves on, from its log."""
        match = re.search(r"serving on (\S+) with store", (self.tmp / f"{name}.log").read_text())
        assert match, (self.tmp / f"{name}.log").read_text()
        return match.group(1)

    def metadata(self):
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def scheduler_info(self):
        stub = services_pb2_grpc.SchedulerStub(grpc.insecure_channel(self.scheduler))
        return stub.SchedulerInfo(messages_pb2.SchedulerInfoRequest(), timeout=10,
                                  metadata=self.metadata())

    def store_ids(self, store):
        stub = services_pb2_grpc.ObjStoreStub(grpc.insecure_channel(store))
        return list(stub.ObjStoreInfo(messages_pb2.ObjStoreInfoRequest(), timeout=10,
                                      metadata=self.metadata()).objectid)

    def wait_for_workers(self, count):
        deadline = time.monotonic() + 30
        while len(self.scheduler_info().avail_worker) < count:
            assert time.monotonic() < deadline, f"fewer than {count} workers idle: {self.scheduler_info()}"
            time.sleep(0.05)

    def stop(self):
        # Newest first, each before the next: workers drain on SIGTERM and tell the scheduler
        # they leave, which their coordinator, stopped last, is still there to hear.
        for name, proc, log in reversed(self.procs):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()

    def logs(self):
        return "\n".join(f"---- {name}\n{(self.tmp / f'{name}.log').read_text()}"
                         for name, _, _ in self.procs)


def _cluster(tmp_path, request, token=None):
    c = Cluster(tmp_path, token)
    yield c
    cohort.shutdown()
    c.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(c.logs())


@pytest.fixture
def cluster(tmp_path, request):
    yield from _cluster(tmp_path, request)


@pytest.fixture
def token_cluster(tmp_path, request):
    """A cluster whose every program holds the job's token (Cluster.token)."""
    yield from _cluster(tmp_path, request, token="python-tests-token-0123456789")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


# --no-skips (tests/python/run.sh, make test), as in tests/compat: a skipped test fails the
# run. Nothing here skips on purpose; a skip would mean something the suite needs is missing.
_SKIPPED = []


def pytest_addoption(parser):
    parser.addoption("--no-skips", action="store_true",
                     help="a skipped test fails the run (tests/python/run.sh, make test)")


def _note_skip(report):
    # An xfail is reported apart (report.wasxfail) and is not a skip.
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_runtest_logreport(report):
    _note_skip(report)  # a skip mark, pytest.skip in a fixture or in the test


def pytest_collectreport(report):
    _note_skip(report)  # a whole module skipped (pytest.importorskip, allow_module_level)


def pytest_sessionfinish(session, exitstatus):
    if session.config.getoption("--no-skips") and _SKIPPED and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.getoption("--no-skips") and _SKIPPED:
        terminalreporter.write_line(
            f"python-test: --no-skips: {len(_SKIPPED)} tests skipped, which fails the run:",
            red=True)
        for line in _SKIPPED:
            terminalreporter.write_line(f"  {line}", red=True)
