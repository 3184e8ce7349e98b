"""One TensorFlow task whose coordination agent talks to an external coordination service.

Usage: tf_task.py LEADER_ADDRESS TASK_ID WORKER_ADDRESSES(comma-separated) OUT_JSON [ROUNDS]

With ROUNDS, the task runs that many rounds of a key write, blocking reads of the other
tasks' keys and a barrier instead of the fixed scenario (test_coordinator_restart.py kills
the coordinator meanwhile), then reads every key back.

TensorFlow's agent connects to the task named service_leader in the cluster. The
cluster therefore gets a job "coordinator" with one task at LEADER_ADDRESS (cohort, or
a TensorFlow task that hosts the service when LEADER_ADDRESS is "self"); no worker is
the leader, so no worker starts a service of its own.
"""

import json
import os
import sys
import time


def main():
    leader, tid, workers, out = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.core.protobuf import cluster_pb2
    from tensorflow.core.protobuf import tensorflow_server_pb2
    from tensorflow.python.eager import context

    steps = {}

    def run(name, fn):
        start = time.monotonic()
        try:
            steps[name] = {"ok": True, "value": fn()}
        except Exception as e:  # the error text is what the test compares
            steps[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        steps[name]["seconds"] = round(time.monotonic() - start, 3)
        print(f"task {tid}: {name} -> {json.dumps(steps[name])[:300]}", flush=True)
        with open(out, "w") as f:
            json.dump(steps, f)

    cluster = cluster_pb2.ClusterDef()
    job = cluster.job.add(name="worker")
    for i, address in enumerate(workers):
        job.tasks[i] = address
    if leader == "self":
        leader_task = "/job:worker/replica:0/task:0"
    else:
        cluster.job.add(name="coordinator").tasks[0] = leader
        leader_task = "/job:coordinator/replica:0/task:0"
    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone", service_leader=leader_task,
        heartbeat_timeout_in_ms=10_000, shutdown_barrier_timeout_in_ms=30_000,
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name="worker",
                                                                 num_tasks=len(workers))])
    # The agent reads its configuration from the server's default session config.
    session_config = ctx.config
    session_config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=cluster, job_name="worker", task_index=tid, protocol="grpc",
        default_session_config=session_config)
    ctx.enable_collective_ops(server_def)
    run("connect", context.ensure_initialized)
    n = len(workers)
    if len(sys.argv) > 5:
        rounds = int(sys.argv[5])
        for r in range(rounds):
            print(f"task {tid}: round {r} begins", flush=True)
            run(f"round {r}", lambda r=r: (
                ctx.set_config_key_value(f"restart/{r}/{tid}", f"value-{r}-{tid}"),
                {str(o): ctx.get_config_key_value(f"restart/{r}/{o}", 30_000)
                 for o in range(n) if o != tid},
                ctx.wait_at_barrier(f"restart/round-{r}", 30_000),
                None)[-1])
            time.sleep(0.25)
        run("read_back", lambda: sum(
            ctx.get_config_key_value(f"restart/{r}/{o}", 30_000) == f"value-{r}-{o}"
            for r in range(rounds) for o in range(n)))
        run("done", lambda: True)
        sys.stdout.flush()
        os._exit(0)
    run("set", lambda: ctx.set_config_key_value(f"tf/str/{tid}", f"value-{tid}"))
    run("barrier", lambda: ctx.wait_at_barrier("tf/after_set", 30_000))
    run("get_others", lambda: {str(o): ctx.get_config_key_value(f"tf/str/{o}", 30_000)
                               for o in range(n) if o != tid})
    run("get_missing_with_timeout", lambda: ctx.get_config_key_value("tf/never", 500))
    run("barrier_before_delete", lambda: ctx.wait_at_barrier("tf/before_delete", 30_000))
    if tid == 0:
        run("delete", lambda: ctx.delete_config_key_value("tf/str/1"))
    run("barrier_after_delete", lambda: ctx.wait_at_barrier("tf/after_delete", 30_000))
    if tid != n - 1:
        run("barrier_timeout", lambda: ctx.wait_at_barrier("tf/without_last", 1500))
    run("barrier_after_timeout", lambda: ctx.wait_at_barrier("tf/after_timeout", 30_000))
    run("deleted_gone", lambda: ctx.get_config_key_value("tf/str/1", 300))

    import tensorflow as tf
    from tensorflow.python.ops import collective_ops

    @tf.function
    def all_reduce():
        with tf.device(f"/job:worker/replica:0/task:{tid}/device:CPU:0"):
            return collective_ops.all_reduce_v2(
                tf.constant([float(tid + 1)]), group_size=n, group_key=1, instance_key=1,
                merge_op="Add", final_op="Id")

    run("all_reduce", lambda: [float(v) for v in all_reduce().numpy()])
    run("done", lambda: True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
