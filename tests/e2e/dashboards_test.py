#!/usr/bin/env python3
"""Every PromQL expression of every cohort dashboard, run against a real Prometheus.

Prometheus (Debian's) scrapes, over loopback:
  - two coordinators, standing for two CoordinatedJobs of one namespace: "train" (two
    workload tasks of cohort-agent-example passing a barrier per step and using the
    key-value store, two sidecars, and a `checkpoint` barrier that task 1 never reaches)
    and "broken" (one task and one sidecar, whose GPU raises XID 79, so the sidecar reports
    the error and the coordinator propagates it). Each agent writes its step to the progress
    file of its pod's hand-off directory ($COHORT_PROGRESS_FILE), which its sidecar watches
    (--progress-file): the sidecars' cohort_task_step and cohort_task_seconds_since_progress;
  - under train's coordinator, the task runtime: two object stores with a C++ worker each
    and a short Python driver (tasks that succeed and fail, gets across stores), for the
    Task runtime row;
  - train-worker-0's sidecar also serves PyTorch's TCPStore protocol (--torch-store-proxy-listen,
    as a framework: pytorch worker's does), which a client speaking that protocol over a socket
    uses as torch's does: keys set, read, added to, a WAIT left parked, and an ADD to a value
    that is no number, which the coordinator refuses and which ends that connection;
  - the three sidecars, on eight fake GPUs each (the fake libnvidia-ml.so.1 of
    tests/sidecar/gpu, loaded through the real dlopen path); train's GPU 2 also raises the
    application XID 13, which is counted and leaves the GPU healthy;
  - the operator: at $OPERATOR_METRICS if set, else build/bin/cohort-operator started here
    against the local cluster, which reconciles a CoordinatedJob "train" in a namespace of
    this test's own: three workers of cohort-agent-example that report their steps, so their
    sidecars send a step pace to the job's coordinator and the operator scores them
    (cohort_task_straggler_score). Once its gang has registered, the test deletes pod
    train-worker-1: the operator restarts the gang (maxRestarts 1), and once the next gang
    has registered, status.lastFailure has its timeline (cohort_cjob_failure_detection_seconds,
    cohort_cjob_restart_downtime_seconds) beside status.goodput (cohort_cjob_startup_seconds).
    The test waits for the scores of all three workers of the new gang and the downtime in
    Prometheus before it makes the other events, so that the rates see those.

The scrape configs carry the labels Kubernetes service discovery and the Prometheus
Operator would give each target, and the chart's own relabelling rules
(charts/cohort/monitoring/relabelings.json), so series get the labels they get on a
cluster. Then each panel target is evaluated twice through /api/v1/query: with every
dashboard variable at its "All" value (.*), and with concrete values (this test's namespace,
its jobs and pods, the operator's namespace and pod) formatted as Grafana formats a
multi-value selection. Each variable's own label_values() query must list those concrete
values. An expression passes when it returns at least one sample that is a number.

Exit status 0 only when every expression returned data in both passes; otherwise the
list of expressions without data is printed.
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "build", "bin")
CHART = os.path.join(ROOT, "charts", "cohort")
FAKE_NVML = os.path.join(ROOT, "build", "tests", "sidecar", "gpu", "fake_nvml",
                         "libnvidia-ml.so.1")
GPUS = os.path.join(ROOT, "tests", "sidecar", "gpu", "testdata", "eight_gpus.json")
KUBECTL = os.path.join(ROOT, "build", "tools", "bin", "kubectl")
KUBECONFIG = os.environ.get("KUBECONFIG",
                            os.path.join(ROOT, "build", "local-cluster", "kubeconfig"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from free_port import free_port  # noqa: E402  (shared with the compat suite)

PROMETHEUS = os.environ.get("PROMETHEUS", shutil.which("prometheus") or "/usr/bin/prometheus")

NAMESPACE = f"dash-test-{os.getpid()}"
OPERATOR_NAMESPACE = "cohort-system"
OPERATOR_POD = "cohort-operator-dashboards-test"
NODE = "local"
SCRAPE = "1s"
# What Grafana's $__rate_interval and friends stand for here: long enough to span the
# scenario, so rates and quantiles see its events.
GRAFANA_INTERVALS = {"__rate_interval": "2m", "__interval": "15s", "__range": "10m",
                     "__range_s": "600", "__interval_ms": "15000"}


def log(msg):
    print(msg, flush=True)



def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Processes:
    """Children of this test, stopped by PID (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []

    def start(self, name, argv, env=None):
        logfile = os.path.join(self.workdir, name + ".log")
        full_env = dict(os.environ)
        full_env.update(env or {})
        out = open(logfile, "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                             stdin=subprocess.DEVNULL)
        out.close()
        self.procs.append((name, p, logfile))
        return p

    def log_of(self, name):
        for n, _, f in self.procs:
            if n == name:
                with open(f, errors="replace") as fh:
                    return fh.read()
        return ""

    def stop_all(self):
        for _, p, _ in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for _, p, _ in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def eventually(what, condition, timeout=60, interval=0.25):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if condition():
                return True
        except Exception:  # a server not answering yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def kubectl(*args, stdin=None, check=True):
    r = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True,
                       env=dict(os.environ, KUBECONFIG=KUBECONFIG))
    if check and r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


# ---- Prometheus configuration from the chart's relabelling ------------------------------

def prometheus_relabel(rules):
    """The Prometheus Operator's RelabelConfig (camelCase) as Prometheus config."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label",
             "separator": "separator", "regex": "regex", "replacement": "replacement",
             "modulus": "modulus", "action": "action"}
    out = []
    for rule in rules:
        unknown = set(rule) - set(names)
        if unknown:
            raise ValueError(f"relabelings.json: unknown keys {sorted(unknown)}")
        out.append({names[k]: (v.lower() if k == "action" else v) for k, v in rule.items()})
    return out


def scrape_config(name, kind, targets, relabel):
    """targets: [(address, labels)]; labels include the __meta_* ones the rules read."""
    return {
        "job_name": name,
        "scrape_interval": SCRAPE,
        "scrape_timeout": SCRAPE,
        "static_configs": [{"targets": [addr], "labels": labels} for addr, labels in targets],
        "relabel_configs": prometheus_relabel(relabel[kind]["relabelings"]),
        "metric_relabel_configs": prometheus_relabel(relabel[kind]["metricRelabelings"]),
    }


def coordinator_labels(job):
    # A ServiceMonitor's target: namespace, service, pod, container, endpoint, and job = the
    # Service's name; plus the Kubernetes SD meta labels of the pod behind the endpoint.
    return {"job": f"{job}-coordinator", "namespace": NAMESPACE,
            "service": f"{job}-coordinator", "pod": f"{job}-coordinator",
            "container": "cohort-coordinator", "endpoint": "http",
            "__meta_kubernetes_namespace": NAMESPACE,
            "__meta_kubernetes_pod_name": f"{job}-coordinator",
            "__meta_kubernetes_pod_label_cohort_dev_role": "coordinator",
            "__meta_kubernetes_pod_label_cohort_dev_job": job,
            "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by": "cohort-operator",
            "__meta_kubernetes_pod_node_name": NODE,
            "__meta_kubernetes_pod_container_name": "cohort-coordinator"}


def sidecar_labels(job, pod):
    # A PodMonitor's target: namespace, pod, container, endpoint, job = <ns>/<podmonitor>.
    return {"job": f"{OPERATOR_NAMESPACE}/cohort-sidecars", "namespace": NAMESPACE,
            "pod": pod, "container": "cohort-sidecar", "endpoint": "metrics",
            "__meta_kubernetes_namespace": NAMESPACE,
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_label_cohort_dev_role": "worker",
            "__meta_kubernetes_pod_label_cohort_dev_job": job,
            "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by": "cohort-operator",
            "__meta_kubernetes_pod_node_name": NODE,
            "__meta_kubernetes_pod_container_name": "cohort-sidecar",
            "__meta_kubernetes_pod_container_init": "true"}


def operator_labels():
    return {"job": "cohort-operator-metrics", "namespace": OPERATOR_NAMESPACE,
            "service": "cohort-operator-metrics", "pod": OPERATOR_POD,
            "container": "cohort-operator", "endpoint": "http-metrics",
            "__meta_kubernetes_namespace": OPERATOR_NAMESPACE,
            "__meta_kubernetes_pod_name": OPERATOR_POD,
            "__meta_kubernetes_pod_node_name": NODE}


# ---- Dashboards -------------------------------------------------------------------------

def load_dashboards():
    boards = {}
    for name in sorted(os.listdir(os.path.join(CHART, "dashboards"))):
        if name.endswith(".json"):
            with open(os.path.join(CHART, "dashboards", name)) as f:
                boards[name] = json.load(f)
    return boards


def all_panels(board):
    for p in board.get("panels", []):
        yield p
        for inner in p.get("panels", []):  # collapsed rows keep their panels inside
            yield inner


def static_checks(boards):
    problems = []
    uids = set()
    for name, board in boards.items():
        if board.get("uid") in uids:
            problems.append(f"{name}: uid {board.get('uid')} used twice")
        uids.add(board.get("uid"))
        names = [v["name"] for v in board["templating"]["list"]]
        for required in ("datasource", "namespace"):
            if required not in names:
                problems.append(f"{name}: no ${required} variable")
        ids = set()
        for p in all_panels(board):
            if p["id"] in ids:
                problems.append(f"{name}: panel id {p['id']} used twice")
            ids.add(p["id"])
            if p["type"] == "row":
                continue
            title = p.get("title", "?")
            if not p.get("description", "").strip():
                problems.append(f"{name}: panel '{title}' has no description")
            if p.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{name}: panel '{title}' does not use the $datasource variable")
            if not p.get("targets"):
                problems.append(f"{name}: panel '{title}' has no query")
            for t in p.get("targets", []):
                if not t.get("expr", "").strip():
                    problems.append(f"{name}: panel '{title}' target {t.get('refId')} has no expr")
    return problems


VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(expr, values):
    def repl(m):
        name = m.group(1) or m.group(2)
        if name in GRAFANA_INTERVALS:
            return GRAFANA_INTERVALS[name]
        if name not in values:
            raise KeyError(f"unknown variable ${name} in: {expr}")
        return values[name]
    return VAR.sub(repl, expr)


def grafana_multi(values):
    """A multi-value selection as Grafana writes it into a Prometheus regex."""
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path, params):
        body = http_get(self.base + path + "?" + urllib.parse.urlencode(params, doseq=True))
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body[:300]}")
        return answer["data"]

    def query(self, expr):
        return self.api("/api/v1/query", {"query": expr})

    def label_values(self, label, selector):
        return self.api(f"/api/v1/label/{label}/values", {"match[]": selector})


def has_data(data):
    if data["resultType"] in ("scalar", "string"):
        return data["result"][1] not in ("NaN", "+Inf", "-Inf")
    for series in data["result"]:
        values = [series["value"]] if "value" in series else series.get("values", [])
        if any(v[1] not in ("NaN", "+Inf", "-Inf") for v in values):
            return True
    return False


LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.S)


# ---- The scenario -----------------------------------------------------------------------

def write_fifo(path, line, timeout=10):
    """One fault line for the fake NVML inside a sidecar (it reads the FIFO)."""
    end = time.time() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.1)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


# PyTorch's TCPStore protocol (../shared/docs/tcpstore-protocol.md): what torch's client sends,
# without torch (this test runs on the system Python).
def tcpstore_str(data):
    return len(data).to_bytes(8, "little") + data


def tcpstore_connect(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"\x00" + (0x3C85F7CE).to_bytes(4, "little"))  # VALIDATE
    return sock


def tcpstore_read(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the store closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return data


def tcpstore_set_get(sock):
    sock.sendall(b"\x01" + tcpstore_str(b"/dashboards/text") + tcpstore_str(b"text"))  # SET
    sock.sendall(b"\x03" + tcpstore_str(b"/dashboards/text"))  # GET
    length = int.from_bytes(tcpstore_read(sock, 8), "little")
    if tcpstore_read(sock, length) != b"text":
        raise AssertionError("GET did not read back the SET")


def tcpstore_traffic(port):
    """Sets, gets and adds on one connection, then a WAIT that stays parked (the open socket
    is returned, to keep it so); on another, an ADD to text, which ends it."""
    sock = tcpstore_connect(port)
    tcpstore_set_get(sock)
    sock.sendall(b"\x04" + tcpstore_str(b"/dashboards/count") + (1).to_bytes(8, "little"))  # ADD
    if int.from_bytes(tcpstore_read(sock, 8), "little") != 1:
        raise AssertionError("ADD did not answer 1")
    sock.sendall(b"\x06" + (1).to_bytes(8, "little") + tcpstore_str(b"/dashboards/never"))  # WAIT
    bad = tcpstore_connect(port)
    bad.sendall(b"\x04" + tcpstore_str(b"/dashboards/text") + (1).to_bytes(8, "little"))
    bad.settimeout(30)
    if bad.recv(1) != b"":
        raise AssertionError("an ADD to text did not end its connection")
    bad.close()
    return sock


def all_connected(coordinator):
    out = subprocess.run([BIN + "/cohortctl", "--coordinator", coordinator, "-o", "json",
                          "status"], capture_output=True, text=True).stdout
    tasks = json.loads(out)["tasks"] if out else []
    return bool(tasks) and all(t["state"] == "CONNECTED" for t in tasks)


# The task runtime's Python package, installed by tests/python/run.sh (make test runs it first).
RUNTIME_PYTHON = os.path.join(ROOT, ".venv", "runtime", "bin", "python")
TASK_DRIVER = """
import sys
import cohort
cohort.init(sys.argv[1], sys.argv[2])
add = cohort.function("cohort.add")
sleep = cohort.function("cohort.sleep_ms")
fail = cohort.function("cohort.fail")
sums = [add.remote(i, i) for i in range(200)]
naps = [sleep.remote(20) for _ in range(20)]
failed = [fail.remote("on purpose") for _ in range(3)]
assert cohort.get(sums) == [2 * i for i in range(200)]
cohort.get(naps)
for ref in failed:
    try:
        cohort.get(ref)
    except cohort.TaskError:
        pass
print(f"{len(sums) + len(naps)} tasks succeeded, {len(failed)} failed on purpose")
cohort.shutdown()
"""


def main():
    for path, what in ((BIN + "/cohort-coordinator", "make build"),
                       (BIN + "/cohort-sidecar", "make build"),
                       (BIN + "/cohort-agent-example", "make build"),
                       (BIN + "/cohortctl", "make build"),
                       (BIN + "/cohort-objstore", "make build"),
                       (BIN + "/cohort-worker", "make build"),
                       (RUNTIME_PYTHON, "tests/python/run.sh (make python-test)"),
                       (FAKE_NVML, "make build (the fake NVML of tests/sidecar/gpu)"),
                       (PROMETHEUS, "apt-get install prometheus (tools/deps.sh does)")):
        if not os.access(path, os.X_OK if not path.endswith(".so.1") else os.R_OK):
            log(f"dashboards test: {path} is missing; run {what}")
            return 1
    operator_address = os.environ.get("OPERATOR_METRICS", "")
    operator_bin = os.path.join(BIN, "cohort-operator")
    if not operator_address and not os.access(operator_bin, os.X_OK):
        log(f"dashboards test: FAIL: {operator_bin} is not built and OPERATOR_METRICS is not "
            "set, so no operator metrics can be scraped. Build the operator (make build), or "
            "point OPERATOR_METRICS at a running operator's HOST:PORT.")
        return 1

    boards = load_dashboards()
    problems = static_checks(boards)
    for p in problems:
        log(f"FAIL {p}")
    log(f"dashboards: {len(boards)} files, static checks: "
        f"{'ok' if not problems else str(len(problems)) + ' problems'}")

    with open(os.path.join(CHART, "monitoring", "relabelings.json")) as f:
        relabel = json.load(f)

    workdir = tempfile.mkdtemp(prefix="cohort-dashboards-test-")
    procs = Processes(workdir)
    created_namespace = False
    ok = False
    try:
        # -- The operator, and a CoordinatedJob for it to reconcile.
        kubectl("get", "--raw", "/readyz")  # the cluster is up
        kubectl("apply", "--server-side", "--force-conflicts", "-f", os.path.join(CHART, "crds"))
        kubectl("create", "namespace", NAMESPACE)
        created_namespace = True
        job = {"apiVersion": "cohort.dev/v1alpha1", "kind": "CoordinatedJob",
               "metadata": {"name": "train", "namespace": NAMESPACE},
               "spec": {"replicas": 3, "failurePolicy": {"maxRestarts": 1},
                        "template": {"spec": {"containers": [{
                            "name": "worker", "image": "ghcr.io/cohort/cohort-agent-example:0.1.0",
                            # Running through the test; it reports each step (the operator
                            # sets $COHORT_PROGRESS_FILE), so the sidecars send a pace.
                            "args": ["--steps", "100000", "--step-seconds", "1"]}]}}}}
        if not operator_address:
            port = free_port()
            operator_address = f"127.0.0.1:{port}"
            procs.start("operator", [operator_bin, "--kubeconfig", KUBECONFIG,
                                     "--http-listen", operator_address, "--leader-elect=false",
                                     "--namespace", NAMESPACE],
                        {"POD_NAMESPACE": OPERATOR_NAMESPACE, "POD_NAME": OPERATOR_POD})
            log(f"operator: started {operator_bin} on {operator_address}")
        else:
            log(f"operator: OPERATOR_METRICS={operator_address}")
        eventually("the operator's /metrics",
                   lambda: "cohort_operator_" in http_get(f"http://{operator_address}/metrics"))

        # -- Two coordinators, their sidecars on fake GPUs, and the workload tasks.
        ports = {}
        for name, workers in (("train", 2), ("broken", 1)):
            grpc, http = free_port(), free_port()
            ports[name] = (grpc, http)
            procs.start(f"{name}-coordinator", [
                BIN + "/cohort-coordinator", "--listen", f"127.0.0.1:{grpc}",
                "--http-listen", f"127.0.0.1:{http}", "--job", f"worker={workers}",
                "--auxiliary-job", f"sidecar={workers}", "--heartbeat-timeout", "30s",
                "--shutdown-barrier-timeout", "5s"])
        sidecars = []  # (job, pod, port, fifo)
        torch_store_port = free_port()
        for name, workers in (("train", 2), ("broken", 1)):
            for task in range(workers):
                pod = f"{name}-worker-{task}"
                port = free_port()
                fifo = os.path.join(workdir, pod + ".nvml-fifo")
                handoff = os.path.join(workdir, pod + "-handoff")
                os.mkdir(handoff)
                torch_store = []
                if pod == "train-worker-0":  # a PyTorch pod's: its store forwarded
                    torch_store = ["--proxy-listen", f"127.0.0.1:{free_port()}",
                                   "--torch-store-proxy-listen", f"127.0.0.1:{torch_store_port}"]
                # The workload's steps, as in a pod (there the operator sets the variable).
                progress = os.path.join(handoff, "progress")
                procs.start(pod + "-sidecar", [
                    BIN + "/cohort-sidecar", "--http-listen", f"127.0.0.1:{port}",
                    "--handoff-dir", handoff, "--sample-interval", "1s",
                    "--heartbeat-interval", "1s", "--progress-file", progress, *torch_store], {
                    "COHORT_COORDINATOR_ADDRESS": f"127.0.0.1:{ports[name][0]}",
                    "COHORT_JOB_NAME": "worker", "COHORT_TASK_ID": str(task),
                    "COHORT_NUM_TASKS": str(workers), "POD_NAME": pod,
                    "POD_NAMESPACE": NAMESPACE, "POD_IP": "127.0.0.1",
                    "COHORT_NVML_LIBRARY": FAKE_NVML, "FAKE_NVML_CONFIG": GPUS,
                    "FAKE_NVML_CONTROL_FIFO": fifo})
                sidecars.append((name, pod, port, fifo))
                procs.start(pod, [
                    BIN + "/cohort-agent-example", "--coordinator", f"127.0.0.1:{ports[name][0]}",
                    "--task", str(task), "--num-tasks", str(workers), "--steps", "100000",
                    "--step-seconds", "1"], {"COHORT_PROGRESS_FILE": progress})

        # -- The task runtime under train's coordinator: two object stores with a C++ worker
        # each, and a short Python driver (tasks that succeed and fail, puts, gets across
        # stores), so that the Task runtime row has data.
        train_grpc = f"127.0.0.1:{ports['train'][0]}"
        stores = []
        for i in range(2):
            store = f"127.0.0.1:{free_port()}"
            stores.append(store)
            procs.start(f"train-objstore-{i}", [
                BIN + "/cohort-objstore", "--listen", store, "--scheduler", train_grpc,
                "--shm-dir", "", "--capacity", "64MiB"])
            eventually(f"object store {i} registered",
                       lambda i=i: "registered with" in procs.log_of(f"train-objstore-{i}"), 30)
            procs.start(f"train-task-worker-{i}", [
                BIN + "/cohort-worker", "--scheduler", train_grpc, "--objstore", store])

        # -- Prometheus.
        targets = {"coordinators": [], "sidecars": []}
        for name in ("train", "broken"):
            targets["coordinators"].append((f"127.0.0.1:{ports[name][1]}", coordinator_labels(name)))
        for name, pod, port, _ in sidecars:
            targets["sidecars"].append((f"127.0.0.1:{port}", sidecar_labels(name, pod)))
        config = {"global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
                  "scrape_configs": [
                      scrape_config("coordinators", "coordinator", targets["coordinators"], relabel),
                      scrape_config("sidecars", "sidecar", targets["sidecars"], relabel),
                      scrape_config("operator", "operator", [(operator_address, operator_labels())],
                                    relabel)]}
        config_path = os.path.join(workdir, "prometheus.yml")
        with open(config_path, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        prom_port = free_port()
        procs.start("prometheus", [PROMETHEUS, f"--config.file={config_path}",
                                   f"--storage.tsdb.path={workdir}/tsdb",
                                   f"--web.listen-address=127.0.0.1:{prom_port}",
                                   "--storage.tsdb.retention.time=1h", "--log.level=warn"])
        prom = Prometheus(prom_port)
        n_targets = 2 + len(sidecars) + 1
        eventually(f"Prometheus scraping all {n_targets} targets",
                   lambda: prom.query("sum(up)")["result"][0]["value"][1] == str(n_targets), 60)
        log(f"prometheus: 127.0.0.1:{prom_port} scrapes {n_targets} targets every {SCRAPE}")
        # The job goes in once the operator is being scraped, so that its reconciles fall
        # inside the window the rate panels look at.
        kubectl("apply", "-f", "-", stdin=json.dumps(job))
        eventually("the operator to report CoordinatedJob train",
                   lambda: prom.query(f'cohort_operator_job_phase{{namespace="{NAMESPACE}", '
                                      f'cjob="train"}} == 1')["result"], 60)

        # -- A gang failure of the CoordinatedJob: one of its pods deleted once its gang has
        # registered. This comes before the other events: it takes a while, and the rates
        # and quantiles below look back $__rate_interval from the end.
        def train_status():
            return json.loads(kubectl("get", "cjob", "train", "-n", NAMESPACE, "-o",
                                      "json")).get("status", {})
        eventually("CoordinatedJob train Running with its gang registered",
                   lambda: (lambda st: st.get("phase") == "Running" and
                            st.get("goodput", {}).get("gangRegisteredTime"))(train_status()),
                   180)
        kubectl("delete", "pod", "train-worker-1", "-n", NAMESPACE, "--wait=false")
        log("gang failure: deleted pod train-worker-1 of CoordinatedJob train")
        eventually("train's next gang registered (status.lastFailure.recoveredAt)",
                   lambda: (lambda st: st.get("phase") == "Failed" or
                            st.get("lastFailure", {}).get("recoveredAt"))(train_status()), 180)
        st = train_status()
        if st.get("phase") == "Failed":  # not restarted: say why at once
            why = [c.get("message") for c in st.get("conditions", []) if c.get("type") == "Failed"]
            raise RuntimeError(f"CoordinatedJob train failed instead of restarting its gang: "
                               f"{why or st.get('lastFailure')}")
        log(f"status.lastFailure: {json.dumps(st.get('lastFailure'))}")
        operator_series = f'{{namespace="{NAMESPACE}", cjob="train"}}'
        eventually("Prometheus to have the operator's straggler scores of train's 3 workers",
                   lambda: len(prom.query(f"cohort_task_straggler_score{operator_series}")
                               ["result"]) == 3, 120)
        eventually("Prometheus to have train's restart downtime",
                   lambda: prom.query(f"cohort_cjob_restart_downtime_seconds{operator_series}")
                   ["result"], 30)
        scores = prom.query(f"cohort_task_straggler_score{operator_series}")["result"]
        log("straggler scores: " + ", ".join(
            f"worker {r['metric'].get('worker')} {float(r['value'][1]):.2f}" for r in scores))

        # -- Events: series that exist only after something happened.
        train_grpc = f"127.0.0.1:{ports['train'][0]}"
        eventually("train's tasks and sidecars connected",
                   lambda: all_connected(train_grpc), 60)
        # The task runtime's driver, once Prometheus scrapes: rates over the window see its
        # tasks.
        driver = subprocess.run([RUNTIME_PYTHON, "-c", TASK_DRIVER, train_grpc, stores[0]],
                                capture_output=True, text=True, timeout=120)
        if driver.returncode != 0:
            raise RuntimeError(f"the task runtime driver failed: {driver.stderr[-2000:]}")
        log(f"task runtime: {driver.stdout.strip()}")
        # A barrier that task 1 never reaches: "tasks still missing at open barriers".
        procs.start("checkpoint-barrier", [
            BIN + "/cohortctl", "--coordinator", train_grpc, "barrier", "wait", "checkpoint",
            "--task", "worker/0", "--participants", "worker/0", "worker/1", "--timeout", "10m"])
        # A key of some size, through cohortctl.
        subprocess.run([BIN + "/cohortctl", "--coordinator", train_grpc, "kv", "put",
                        "dashboards-test/blob", "x" * 4096], check=True, capture_output=True)
        train_http = f"http://127.0.0.1:{ports['train'][1]}/metrics"
        eventually("worker/0 waiting at barrier 'checkpoint' on train's coordinator",
                   lambda: re.search(r'^cohort_coordinator_barrier_missing_tasks\{[^}]*'
                                     r'barrier="checkpoint"[^}]*\} 1\b', http_get(train_http),
                                     re.M), 30)
        _, _, train_port, train_fifo = next(s for s in sidecars if s[0] == "train")
        broken_fifo = next(f for n, _, _, f in sidecars if n == "broken")
        write_fifo(train_fifo, "xid 2 13")  # application XID: counted, GPU stays healthy
        eventually("train-worker-0's sidecar to count XID 13 on GPU 2",
                   lambda: re.search(r'^cohort_gpu_xid_errors_total\{(?=[^}]*\bgpu="2")'
                                     r'(?=[^}]*\bxid="13")[^}]*\} 1\b',
                                     http_get(f"http://127.0.0.1:{train_port}/metrics"), re.M),
                   30)
        eventually("train-worker-0's sidecar to serve the TCPStore protocol",
                   lambda: "proxy serving PyTorch's TCPStore protocol" in
                   procs.log_of("train-worker-0-sidecar"), 30)
        # A first SET and GET make the coordinator's series of forwarded commands; once
        # Prometheus has them, the traffic below is a rise that rates and quantiles see.
        with tcpstore_connect(torch_store_port) as first:
            tcpstore_set_get(first)
        eventually("Prometheus to have the forwarded TCPStore commands' series",
                   lambda: prom.query('cohort_coordinator_rpc_duration_seconds_count'
                                      '{method="TorchStore"}')["result"], 30)
        torch_client = tcpstore_traffic(torch_store_port)  # open until the end: its WAIT parked
        eventually("the TCPStore WAIT parked in train's coordinator",
                   lambda: re.search(r'^cohort_coordinator_parked_calls\{[^}]*'
                                     r'kind="torch_store_wait"[^}]*\} 1\b', http_get(train_http),
                                     re.M), 30)
        write_fifo(broken_fifo, "xid 3 79")  # fell off the bus: reported and propagated
        broken_http = f"http://127.0.0.1:{ports['broken'][1]}/metrics"
        eventually("broken's coordinator to propagate the sidecar's error",
                   lambda: re.search(r"^cohort_coordinator_errors_propagated_total\{[^}]*\} 1",
                                     http_get(broken_http), re.M), 30)
        last_event = time.time()
        log("events: XID 13 on train-worker-0 GPU 2, XID 79 on broken-worker-0 GPU 3 "
            "(propagated), barrier 'checkpoint' waiting for worker/1, a 4 KiB key, TCPStore "
            "commands through train-worker-0's sidecar (a WAIT parked, an ADD refused), "
            "tasks of the task runtime, and before them a gang restart of CoordinatedJob "
            "train (pod train-worker-1 deleted)")

        # Rates and increases over the window see an event once Prometheus has two samples
        # after it: wait until it has scraped every target that often since the last one.
        def scraped_twice_since_last_event():
            window = max(1, math.ceil(time.time() - last_event))
            got = prom.query(f"min(count_over_time(up[{window}s]))")["result"]
            # The window may start up to a second before the event: three samples in it
            # hold two after it.
            return bool(got) and float(got[0]["value"][1]) >= 3
        eventually("Prometheus to scrape every target twice after the last event",
                   scraped_twice_since_last_event, 60)

        # -- Every expression, twice.
        concrete_by_board = {
            "jobs.json": {"namespace": [NAMESPACE], "job": ["train", "broken"]},
            "gpus.json": {"namespace": [NAMESPACE], "job": ["train", "broken"],
                          "pod": [pod for _, pod, _, _ in sidecars]},
            "operator.json": {"namespace": [OPERATOR_NAMESPACE], "pod": [OPERATOR_POD]},
        }
        empty = []
        checked = 0
        for name, board in boards.items():
            variables = [v for v in board["templating"]["list"] if v["type"] == "query"]
            concrete = concrete_by_board.get(name)
            if concrete is None:
                empty.append(f"{name}: no concrete values known to this test; add them")
                continue
            all_values = {v["name"]: v.get("allValue") or ".*" for v in variables}
            chosen = {k: grafana_multi(vals) for k, vals in concrete.items()}
            # Each variable's query lists the values the concrete pass uses.
            for v in variables:
                q = v["query"] if isinstance(v["query"], str) else v["query"].get("query", "")
                m = LABEL_VALUES.match(q)
                if not m:
                    empty.append(f"{name}: variable ${v['name']}: not a label_values() query: {q}")
                    continue
                selector = substitute(m.group(1), chosen)
                got = set(prom.label_values(m.group(2), selector))
                missing = set(concrete[v["name"]]) - got
                status = "ok" if not missing else f"missing {sorted(missing)}"
                log(f"{'PASS' if not missing else 'FAIL'} {name} variable ${v['name']}: "
                    f"{sorted(got)} {'' if not missing else status}")
                if missing:
                    empty.append(f"{name}: variable ${v['name']} ({q}) lacks {sorted(missing)}")
            for panel in all_panels(board):
                for target in panel.get("targets", []):
                    expr = target.get("expr", "")
                    if not expr:
                        continue
                    for pass_name, values in (("all", all_values), ("concrete", chosen)):
                        checked += 1
                        query = substitute(expr, values)
                        try:
                            data = prom.query(query)
                            good = has_data(data)
                            why = "" if good else "no data"
                        except Exception as e:  # a PromQL error is a failure too
                            good, why = False, f"error: {e}"
                        title = f"{name} / {panel.get('title')} / {target.get('refId')} ({pass_name})"
                        log(f"{'PASS' if good else 'FAIL'} {title}")
                        if not good:
                            empty.append(f"{title}: {why}\n      {query}")
        log(f"\ndashboards test: {checked} evaluations of "
            f"{sum(len(p.get('targets', [])) for b in boards.values() for p in all_panels(b))} "
            f"expressions in {len(boards)} dashboards")
        if empty:
            log(f"{len(empty)} without data:")
            for e in empty:
                log(f"  - {e}")
        torch_client.close()
        ok = not empty and not problems
        log(f"dashboards test: {checked - len(empty)} passed, {len(empty) + len(problems)} failed")
    except Exception as e:
        log(f"dashboards test: FAIL: {e}")
    finally:
        if not ok:
            for name in ("operator", "prometheus", "broken-worker-0-sidecar"):
                text = procs.log_of(name)
                if text:
                    log(f"--- last lines of {name}'s log ---\n" + "\n".join(text.splitlines()[-30:]))
            if created_namespace:  # what the operator made of CoordinatedJob train
                status = kubectl("get", "cjob", "train", "-n", NAMESPACE, "-o",
                                 "jsonpath={.status}", check=False)
                events = kubectl("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp",
                                 check=False)
                log(f"--- CoordinatedJob train's status ---\n{status}\n"
                    f"--- events in {NAMESPACE} ---\n{events}")
        procs.stop_all()
        if created_namespace:
            kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"logs and Prometheus data kept in {workdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
