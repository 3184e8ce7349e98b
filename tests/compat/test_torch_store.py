"""PyTorch's TCPStore protocol on the coordinator (--torch-store-listen).

torch's own client (torch.distributed.TCPStore, is_master=False) runs each scenario of torch_store_client.py against a real
coordinator; raw sockets check the commands torch's Python API does not send (BARRIER) and
what bad input gets (the connection closed, nothing stored); and the keys survive a restart
with --state-dir and are the coordinator's keys (cohortctl kv ls torch).

The same scenarios run through a cohort-sidecar's --torch-store-proxy-listen, which forwards
each command to the coordinator over gRPC; ranks behind two sidecars run rounds of sets, adds,
blocking waits and blocking queue pops while the coordinator is killed and started again twice,
and every ADD counts once.
"""

import os
import re
import signal
import socket
import struct
import subprocess
import time

import pytest

from harness import (COMPAT_DIR, DurableCoordinator, ProcessGroup, cohort_binary, free_port,
                     kill_during_rounds, log_text, start_cohort, start_proxy, tail, torch_clients,
                     wait_all, wait_for_log, wait_for_parked)

# Every test that runs torch runs once per torch release the suite claims (docs/pytorch.md):
# the benchmarks' torch (bench/requirements-torch.txt) and each of clients/torch-*.txt.
TORCH_CLIENTS = torch_clients()
CLIENT = COMPAT_DIR / "torch_store_client.py"
MAGIC = 0x3C85F7CE


@pytest.fixture(params=TORCH_CLIENTS, ids=[c.name for c in TORCH_CLIENTS])
def torch(request):
    """One torch release: .python runs it, .version names it."""
    assert not request.param.skip_reason, request.param.skip_reason
    return request.param


def start_store(group, name="cohort", listen="127.0.0.1:0", extra=()):
    server = start_cohort(group, "worker", 1, 30, http=True, name=name, listen=listen,
                          extra=["--torch-store-listen", "127.0.0.1:0", *extra])
    port = wait_for_log(server.proc, r"serving PyTorch's TCPStore protocol on \S+ \(port (\d+)\)",
                        15).group(1)
    return server, int(port)


def run_client(torch, port, scenario, metrics_url):
    done = subprocess.run([torch.python, str(CLIENT), "127.0.0.1", str(port), scenario,
                           metrics_url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"ok {scenario}" in done.stdout, \
        f"torch {torch.version}, {scenario}:\n{done.stdout}\n{done.stderr}"


SCENARIOS = ["basics", "compare_set", "waits", "queues"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_torchs_own_client(group, torch, scenario):
    server, port = start_store(group)
    run_client(torch, port, scenario, server.metrics_url)


def start_sidecar_store(group, coordinator, index=0, sidecars=1):
    """A cohort-sidecar with --torch-store-proxy-listen in front of `coordinator` (whose
    auxiliary job is sidecar=`sidecars`); returns its process and TCPStore port."""
    proc, _ = start_proxy(group, coordinator.address, index, sidecars,
                          extra=["--torch-store-proxy-listen", "127.0.0.1:0"])
    port = wait_for_log(proc, r"proxy serving PyTorch's TCPStore protocol on \S+ \(port (\d+)\)",
                        15).group(1)
    return proc, int(port)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_torchs_own_client_through_a_sidecar(group, torch, scenario):
    coordinator = start_cohort(group, "worker", 1, 30, http=True,
                               extra=["--auxiliary-job", "sidecar=1"])
    _, port = start_sidecar_store(group, coordinator)
    # The waits park in the coordinator, whose metrics the scenarios watch.
    run_client(torch, port, scenario, coordinator.metrics_url)


RANKS = 4
SIDECARS = 2
ROUNDS = 30


def test_ranks_behind_sidecars_ride_out_two_coordinator_restarts(group, torch, tmp_path):
    coordinator = DurableCoordinator(group, "worker", RANKS, SIDECARS, tmp_path / "state")
    ports = [start_sidecar_store(group, coordinator.server, i, SIDECARS)[1]
             for i in range(SIDECARS)]
    ranks = [group.start(f"rank-{r}", [torch.python, str(CLIENT), "127.0.0.1",
                                       str(ports[r % SIDECARS]), "rounds", "", str(r), str(RANKS),
                                       str(ROUNDS)])
             for r in range(RANKS)]
    kill_during_rounds(coordinator, ranks, at_rounds=(6, 18))
    assert wait_all(ranks, timeout=240) == [], "a rank did not finish in time"
    for proc in ranks:
        log = log_text(proc)
        assert proc.returncode == 0 and "ok rounds" in log, f"torch {torch.version}:\n{tail(log)}"
    assert coordinator.starts == 3


# ------------------------------------------------ init_process_group and torchrun, unmodified

ALLREDUCE = COMPAT_DIR / "torch_allreduce.py"


def operator_env(port, node, nodes, run_id, restart_worker=False):
    """What cohort-operator gives a framework: pytorch worker with one process per pod
    (operator/plan/children_workers.cc, PytorchEnv), its sidecar's store at `port` (29500
    in a pod, where every sidecar has the pod's loopback to itself); `restart_worker`: for a
    job with a RestartWorker rule."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nodes),
           "RANK": str(node), "LOCAL_RANK": "0", "NODE_RANK": str(node),
           "TORCHELASTIC_USE_AGENT_STORE": "True", "PET_NNODES": str(nodes),
           "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(node), "PET_MASTER_ADDR": "127.0.0.1",
           "PET_MASTER_PORT": str(port), "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
           "PET_RDZV_CONF": "is_host=false", "PET_RDZV_ID": run_id,
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "PET_LOCAL_ADDR": "127.0.0.1"}  # the pod's IP
    if restart_worker:
        env.update({"PET_RDZV_BACKEND": "c10d", "PET_MAX_RESTARTS": "3"})
    return env


@pytest.mark.parametrize("launch", ["plain", "torchrun-static", "torchrun-c10d"])
def test_two_pods_all_reduce_through_their_sidecars(group, torch, launch):
    """Two "pods", each a sidecar and a workload that knows nothing of cohort: a plain
    init_process_group script, or torchrun (nnodes=2) with its default static rendezvous or
    with c10d (PET_RDZV_BACKEND=c10d, the user's one change); every agent and rank is a client
    of its pod's sidecar store."""
    coordinator = start_cohort(group, "worker", 2, 30, extra=["--auxiliary-job", "sidecar=2"])
    ports = [start_sidecar_store(group, coordinator, i, 2)[1] for i in range(2)]
    procs = []
    for node in range(2):
        env = dict(os.environ, **operator_env(ports[node], node, 2, f"job-{launch}"))
        argv = [torch.python, str(ALLREDUCE)]
        if launch != "plain":
            argv = [torch.python, "-m", "torch.distributed.run", str(ALLREDUCE)]
        if launch == "torchrun-c10d":
            env["PET_RDZV_BACKEND"] = "c10d"
        procs.append(group.start(f"{launch}-{node}", argv, env=env))
    assert wait_all(procs, timeout=120) == [], f"{launch}: a pod did not finish in time"
    ranks = []
    for proc in procs:
        log = log_text(proc)
        assert proc.returncode == 0, f"torch {torch.version}, {launch}:\n{tail(log)}"
        ranks += re.findall(r"rank (\d) of 2: all-reduce 3\b", log)
    # c10d numbers the nodes in the order they join; static and plain as NODE_RANK says.
    assert sorted(ranks) == ["0", "1"], (launch, ranks)
    if launch != "torchrun-c10d":
        assert "rank 0 of 2" in log_text(procs[0]), tail(log_text(procs[0]))


STEPS = COMPAT_DIR / "torch_steps.py"


def test_a_lost_node_rejoins_its_job_in_a_new_c10d_round(group, torch):
    """Three "pods" run torchrun as cohort-operator sets it up for a job with a RestartWorker
    rule (c10d over each pod's sidecar store, PET_MAX_RESTARTS=3,
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1). Mid-training the node whose process is rank 0 (the
    one whose address the workers' store had) is killed with its process, as a deleted pod
    is, and started again: the others' agents restart their processes, all three meet in a new
    rendezvous round, and every process runs the training to its end. With torch's shared
    store instead, the agents that were not rank 0 keep the lost one's address and no new round
    starts (seen with torch 2.15)."""
    nodes = 3
    coordinator = start_cohort(group, "worker", nodes, 30,
                               extra=["--auxiliary-job", f"sidecar={nodes}"])
    ports = [start_sidecar_store(group, coordinator, i, nodes)[1] for i in range(nodes)]

    def agent(node, name):
        env = dict(os.environ, **operator_env(ports[node], node, nodes, "job-rejoin",
                                              restart_worker=True))
        return group.start(name, [torch.python, "-m", "torch.distributed.run", str(STEPS), "150"],
                           env=env)

    agents = [agent(node, f"node-{node}") for node in range(nodes)]
    deadline = time.monotonic() + 120
    lost = None
    while lost is None and time.monotonic() < deadline:
        lost = next((n for n in range(nodes) if "step 10\n" in log_text(agents[n])), None)
        if lost is None:
            assert all(a.poll() is None for a in agents), \
                "\n".join(tail(log_text(a)) for a in agents)
            time.sleep(0.2)
    assert lost is not None, "no step 10 within 120 s:\n" + tail(log_text(agents[0]))
    worker = int(re.search(r"^pid (\d+) rank 0 of 3", log_text(agents[lost]), re.M).group(1))
    group.stop(agents[lost], sig=signal.SIGKILL)
    os.kill(worker, signal.SIGKILL)  # torchrun starts its processes in sessions of their own
    agents[lost] = agent(lost, f"node-{lost}-again")
    assert wait_all(agents, timeout=180) == [], "an agent did not finish in time"
    done = []
    for proc in agents:
        log = log_text(proc)
        assert proc.returncode == 0, f"torch {torch.version}, {proc.name}:\n{tail(log)}"
        done += re.findall(r"^rank (\d) of 3: 150 steps done", log, re.M)
    assert sorted(done) == ["0", "1", "2"], done
    # The survivors' agents started their processes twice, the new node's once.
    for n in range(nodes):
        starts = re.findall(r"^pid \d+ rank \d of 3 restart", log_text(agents[n]), re.M)
        assert len(starts) == (1 if n == lost else 2), (n, tail(log_text(agents[n])))
    # Only the agents' rendezvous went through the sidecars' store: each round's processes had a
    # store of the round's own (its rank 0's, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), so no key
    # of a round's process groups (default_pg, init/) is left for the next round to meet.
    listed = subprocess.run([str(cohort_binary("cohortctl")), "--coordinator", coordinator.address,
                             "kv", "ls", "torch"], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0, listed.stderr
    keys = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert keys and all(k.startswith("torch/%2Ftorch.rendezvous.job-rejoin") for k in keys), \
        [k for k in keys if not k.startswith("torch/%2Ftorch.rendezvous.job-rejoin")] or keys


def test_the_sidecars_store_is_loopback_only(group):
    argv = [str(cohort_binary("cohort-sidecar")), "--coordinator", "127.0.0.1:1",
            "--proxy-listen", "127.0.0.1:0", "--torch-store-proxy-listen", "0.0.0.0:29500",
            "--job", "worker", "--task", "0", "--num-tasks", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "loopback only" in done.stderr + done.stdout, done.stderr
    argv[argv.index("--proxy-listen"):argv.index("--proxy-listen") + 2] = []
    argv[argv.index("0.0.0.0:29500")] = "127.0.0.1:0"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "needs --proxy-listen" in done.stderr + done.stdout, done.stderr


# ---------------------------------------------------------------- raw protocol


def key(k):
    return struct.pack("<Q", len(k)) + k


class Raw:
    """A TCPStore connection speaking bytes, validated."""

    def __init__(self, port, validate=True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if validate:
            self.sock.sendall(b"\x00" + struct.pack("<I", MAGIC))

    def send(self, data):
        self.sock.sendall(data)

    def read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def closed(self):
        """Whether the server closed the connection (reads nothing more)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def test_a_barrier_releases_every_arrival_once_the_last_arrives(group):
    server, port = start_store(group)
    first, second, third = Raw(port), Raw(port), Raw(port)
    barrier = b"\x12" + key(b"/b") + struct.pack("<q", 3)
    first.send(barrier)
    second.send(barrier)
    wait_for_parked(server, "torch_store_wait", 2, 30)
    for conn in (first, second):
        conn.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            conn.sock.recv(1)  # nothing to read: not released, one arrival is missing
        conn.sock.settimeout(30)
    third.send(barrier)
    for conn in (third, first, second):
        assert conn.read(1) == b"\x00"


def test_the_first_command_must_be_validate(group):
    server, port = start_store(group)
    conn = Raw(port, validate=False)
    conn.send(b"\x01" + key(b"/k") + key(b"v"))  # SET without VALIDATE first
    assert conn.closed()
    wait_for_log(server.proc, r"not VALIDATE", 15)
    check = Raw(port)
    check.send(b"\x05" + struct.pack("<Q", 1) + key(b"/k"))  # CHECK
    assert check.read(1) == b"\x01", "NOT_READY: nothing was stored"


def test_bad_input_closes_the_connection_and_stores_nothing(group):
    server, port = start_store(group)
    # A value past the codec's limit (8 MiB), announced before its bytes.
    conn = Raw(port)
    conn.send(b"\x01" + key(b"/big") + struct.pack("<Q", (8 << 20) + 1))
    assert conn.closed()
    # ADD on a value that is not a number.
    conn = Raw(port)
    conn.send(b"\x01" + key(b"/word") + key(b"abc") + b"\x04" + key(b"/word") +
              struct.pack("<q", 1))
    assert conn.closed()
    # An unknown command.
    conn = Raw(port)
    conn.send(b"\x13")
    assert conn.closed()
    wait_for_log(server.proc, r"unknown TCPStore command 19", 15)
    check = Raw(port)
    check.send(b"\x0a" + struct.pack("<Q", 2) + key(b"/word") + key(b"/big"))  # MULTI_GET
    assert check.read(8 + 3 + 8) == key(b"abc") + key(b"")


def test_a_token_keeps_the_store_on_loopback(group, tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    argv = [str(cohort_binary("cohort-coordinator")), "--job", "worker=1", "--listen",
            "127.0.0.1:0", "--auth-token-file", str(token), "--torch-store-listen",
            f"0.0.0.0:{free_port()}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "not a loopback address" in done.stderr + done.stdout, done.stderr


# ---------------------------------------------------------------- state


def test_keys_survive_a_restart_and_are_the_coordinators(group, tmp_path):
    listen = f"127.0.0.1:{free_port()}"
    extra = ["--state-dir", str(tmp_path / "state")]
    server, port = start_store(group, name="cohort-1", listen=listen, extra=extra)
    conn = Raw(port)
    conn.send(b"\x01" + key(b"/default_pg/0//cuda//k") + key(b"\x00v") +
              b"\x04" + key(b"init/") + struct.pack("<q", 2) +
              b"\x0e" + key(b"q") + key(b"first") + b"\x0e" + key(b"q") + key(b"second") +
              b"\x10" + key(b"q"))
    assert conn.read(8) == struct.pack("<q", 2)
    assert conn.read(8) == struct.pack("<q", 2), "QUEUE_LEN: both pushes were carried out"

    def ls(directory):
        done = subprocess.run([str(cohort_binary("cohortctl")), "--coordinator", server.address,
                               "kv", "ls", directory], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    keys = ls("torch")
    assert "torch/%2Fdefault_pg%2F0%2F%2Fcuda%2F%2Fk" in keys, keys
    assert "torch/init%2F" in keys, keys
    assert "torch-queue/q/00000000000000000002" in ls("torch-queue")
    ProcessGroup.stop(server.proc, sig=signal.SIGKILL)
    server, port = start_store(group, name="cohort-2", listen=listen, extra=extra)
    wait_for_log(server.proc, r"restored the saved state", 15)
    conn = Raw(port)
    conn.send(b"\x03" + key(b"/default_pg/0//cuda//k") + b"\x04" + key(b"init/") +
              struct.pack("<q", 1) + b"\x0f" + key(b"q"))
    assert conn.read(8 + 2) == key(b"\x00v")
    assert conn.read(8) == struct.pack("<q", 3)
    assert conn.read(8 + 8 + 5) == struct.pack("<q", 2) + key(b"first"), "the queue, in order"
