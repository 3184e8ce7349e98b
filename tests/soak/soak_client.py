"""One task of the soak (tests/soak/soak.py): jaxlib's or TensorFlow's own client, unmodified,
talking to the coordinator through its pod's sidecar.

Every round R: write soak/KIND/TASK/R (insert, no overwrite) with a value made from its key;
once acknowledged, append the key to the ack file; read the next task's key of the round with
a blocking get and compare it with the value it must hold; then wait at the round's barrier,
which every task of every kind (jaxlib, TensorFlow, the agent library) passes together.

A write refused because the coordinator's state volume is full (RESOURCE_EXHAUSTED, "state
volume is full") is the documented answer while the soak fills the disk: it is counted and
sent again until accepted. Anything else that fails is a client error: it is recorded and
ends the task with status 1.

The run ends at the round named in the stop file (written by the soak); the summary (rounds,
writes, refusals, values checked, wrong values, errors) goes to --summary as JSON.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak_values import key_of, value_of  # noqa: E402

WAIT_MS = 300_000  # only so that nothing hangs for ever: a kill, a full disk and a sidecar
                   # restart may all fall into one round
FULL_RETRY_S = 0.2
FULL_GIVE_UP_S = 600


class Task:
    def __init__(self, args):
        self.args = args
        self.summary = {"kind": args.kind, "task": args.task, "rounds": 0, "writes": 0,
                        "refused_full": 0, "values_checked": 0, "wrong": [], "errors": []}
        self.ack = open(args.ack, "a", buffering=1)

    def last_round(self):
        try:
            return int(Path(self.args.stop).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def put(self, key, value, set_fn):
        refused_since = None
        while True:
            try:
                set_fn(key, value)
                return
            except Exception as e:  # jaxlib and TensorFlow raise their own types
                if "state volume is full" not in str(e):
                    raise
                self.summary["refused_full"] += 1
                refused_since = refused_since or time.monotonic()
                if time.monotonic() - refused_since > FULL_GIVE_UP_S:
                    raise
                time.sleep(FULL_RETRY_S)

    def run(self, set_fn, get_fn, barrier_fn):
        a = self.args
        r = 0
        step = "start"
        try:
            while True:
                last = self.last_round()
                if last is not None and r > last:
                    break
                key = key_of(a.kind, a.task, r)
                step = f"round {r}: write {key}"
                self.put(key, value_of(key), set_fn)
                self.summary["writes"] += 1
                self.ack.write(key + "\n")
                peer = key_of(a.kind, (a.task + 1) % a.tasks, r)
                step = f"round {r}: blocking get {peer}"
                got = get_fn(peer, WAIT_MS)
                self.summary["values_checked"] += 1
                if got != value_of(peer):
                    self.summary["wrong"].append({"key": peer, "got": got[:200]})
                step = f"round {r}: barrier soak/round/{r}"
                barrier_fn(f"soak/round/{r}", WAIT_MS)
                r += 1
                self.summary["rounds"] = r
                time.sleep(a.round_pause)  # the pace of a workload's steps, not an ordering
        except Exception as e:
            self.summary["errors"].append(f"{step}: {type(e).__name__}: {e}"[:2000])
        self.ack.close()
        tmp = a.summary + ".tmp"
        Path(tmp).write_text(json.dumps(self.summary))
        os.replace(tmp, a.summary)
        print(f"{a.kind} task {a.task}: {json.dumps(self.summary)[:1000]}", flush=True)
        return 0 if not self.summary["errors"] and not self.summary["wrong"] else 1


def run_jax(args, task):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
    import worker
    jx = worker.load_jaxlib()
    args.task_id, args.legacy = args.task, False
    args.heartbeat_timeout, args.init_timeout, args.shutdown_timeout, args.rpc_timeout = \
        10, 120, 30, 300
    client = worker.make_client(jx, args)
    client.connect()
    print(f"jax task {args.task}: connected", flush=True)
    return task.run(client.key_value_set, client.blocking_key_value_get,
                    lambda barrier, ms: client.wait_at_barrier(barrier, ms))


def run_tf(args, task):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.core.protobuf import cluster_pb2, tensorflow_server_pb2
    from tensorflow.python.eager import context

    # TensorFlow's agent connects to the cluster's service_leader: a job "coordinator" whose
    # one task is the sidecar's endpoint. The workers are job "tf" of the coordinator.
    cluster = cluster_pb2.ClusterDef()
    job = cluster.job.add(name=args.kind)
    for i, address in enumerate(args.tf_workers.split(",")):
        job.tasks[i] = address
    cluster.job.add(name="coordinator").tasks[0] = args.address
    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone", service_leader="/job:coordinator/replica:0/task:0",
        heartbeat_timeout_in_ms=10_000, shutdown_barrier_timeout_in_ms=30_000,
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name=args.kind,
                                                                 num_tasks=args.tasks)])
    session_config = ctx.config
    session_config.experimental.collective_group_leader = f"/job:{args.kind}/replica:0/task:0"
    ctx.enable_collective_ops(tensorflow_server_pb2.ServerDef(
        cluster=cluster, job_name=args.kind, task_index=args.task, protocol="grpc",
        default_session_config=session_config))
    context.ensure_initialized()
    print(f"tf task {args.task}: connected", flush=True)
    return task.run(ctx.set_config_key_value, ctx.get_config_key_value, ctx.wait_at_barrier)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", required=True, choices=["jax", "tf"])
    p.add_argument("--address", required=True, help="the pod's sidecar endpoint")
    p.add_argument("--task", type=int, required=True)
    p.add_argument("--tasks", type=int, required=True, help="tasks of this kind")
    p.add_argument("--ack", required=True, help="acknowledged keys are appended here")
    p.add_argument("--stop", required=True, help="holds the last round, once the soak ends")
    p.add_argument("--summary", required=True)
    p.add_argument("--round-pause", type=float, default=0.05, help="seconds between rounds")
    p.add_argument("--tf-workers", default="", help="tf: the tasks' own server addresses")
    args = p.parse_args()
    task = Task(args)
    status = (run_jax if args.kind == "jax" else run_tf)(args, task)
    sys.stdout.flush()
    # Neither client is shut down: the soak's clients stop together, and jaxlib's and
    # TensorFlow's destructors wait for a shutdown barrier the others may have left.
    os._exit(status)


if __name__ == "__main__":
    main()
