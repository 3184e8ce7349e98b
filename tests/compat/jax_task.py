"""One process of a four-process JAX program started with jax.distributed.initialize.

Usage: jax_task.py ADDRESS PROCESS_ID NUM_PROCESSES OUT_JSON [BIND_ADDRESS]

Process 0 of jax.distributed always starts jaxlib's own coordination service on its
coordinator_bind_address. To use an external coordinator, process 0 gets a bind
address on an unused local port (BIND_ADDRESS) while every process, process 0
included, connects its client to ADDRESS. Without BIND_ADDRESS process 0 binds
ADDRESS's port itself, which is JAX's usual arrangement.

The program runs cross-process collectives on CPU through gloo, whose rendezvous uses
the coordination service's key-value store, and writes what it computed to OUT_JSON.
"""

import json
import os
import sys
import time


def main():
    address, pid, nproc, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    bind = sys.argv[5] if len(sys.argv) > 5 else None

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    start = time.monotonic()
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=nproc,
        process_id=pid,
        coordinator_bind_address=bind,
        cluster_detection_method="deactivate",
        initialization_timeout=60,
        heartbeat_timeout_seconds=10,
        shutdown_timeout_seconds=30,
    )
    result = {"initialize_seconds": round(time.monotonic() - start, 3)}
    result["process_index"] = jax.process_index()
    result["process_count"] = jax.process_count()
    result["device_count"] = jax.device_count()
    result["local_device_count"] = jax.local_device_count()

    mesh = jax.make_mesh((jax.device_count(),), ("i",))
    local = np.array([float(pid + 1)], dtype=np.float32)
    sharded = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), local)

    # psum across processes inside shard_map: every shard holds the global sum.
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
        from jax.experimental.shard_map import shard_map
    summed = jax.jit(shard_map(lambda x: jax.lax.psum(x, "i"), mesh=mesh,
                               in_specs=P("i"), out_specs=P("i")))(sharded)
    result["psum_local_shard"] = [float(v) for s in summed.addressable_shards
                                  for v in np.asarray(s.data)]

    # An all-gather of every process's value, in process order.
    gathered = multihost_utils.process_allgather(np.array([pid * 10 + 7], dtype=np.int32))
    result["allgather"] = [int(v) for v in np.asarray(gathered).reshape(-1)]

    # A reduction to a replicated result.
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(sharded)
    result["sum_replicated"] = float(np.asarray(total.addressable_data(0)))

    multihost_utils.sync_global_devices("compat-done")
    # What the rendezvous left in the coordination service's key-value store.
    from jax._src import distributed
    client = distributed.global_state.client
    gloo = sorted(k for k, _ in client.key_value_dir_get_bytes("cpu:gloo"))
    result["gloo_keys"] = gloo
    result["gloo_ranks"] = sorted(k.rsplit("/", 1)[1] for k in gloo)
    result["topology_keys"] = sorted(
        k for k, _ in client.key_value_dir_get_bytes("cpu:local_topology/cpu"))
    jax.distributed.shutdown()
    result["ok"] = True
    with open(out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
