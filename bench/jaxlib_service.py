"""jaxlib's own coordination service (the anchor), hosted until SIGTERM.

This is the service that `jax.distributed.initialize()` starts inside process 0; here it
runs alone so that cohort-loadgen can drive it over xla.coordination exactly as it drives
cohort. Only the standard library and jaxlib are imported.
"""

import argparse
import importlib
import signal
import sys
import threading


def load_jaxlib():
    for name in ("jaxlib._jax", "jaxlib.xla_extension"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "get_distributed_runtime_service"):
            return module
    raise ImportError("no jaxlib with get_distributed_runtime_service")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--address", required=True)
    p.add_argument("--num-tasks", type=int, required=True)
    p.add_argument("--heartbeat-timeout", type=int, default=600, help="seconds")
    p.add_argument("--register-timeout", type=int, default=600, help="seconds")
    p.add_argument("--shutdown-timeout", type=int, default=60, help="seconds")
    args = p.parse_args()
    jx = load_jaxlib()
    import jaxlib
    service = jx.get_distributed_runtime_service(
        args.address, args.num_tasks, heartbeat_timeout=args.heartbeat_timeout,
        cluster_register_timeout=args.register_timeout,
        shutdown_timeout=args.shutdown_timeout)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"jaxlib {jaxlib.__version__} serving on {args.address}", flush=True)
    while not stop.wait(0.2):
        pass
    service.shutdown()
    print("service stopped", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
