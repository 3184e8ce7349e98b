#!/usr/bin/env python3
"""examples/tasks-python.yaml's map-reduce, the same program, on Ray from PyPI on this
machine (ray.init(num_cpus=W)): the figure bench/tasks_k8s_bench.sh sets beside cohort's
task runtime on the local cluster. Prints one JSON line: {"workers", "shards", "seconds",
"right"}. Needs .venv-bench-tasks (bench/setup_tasks.sh).

  .venv-bench-tasks/bin/python bench/tasks_mapreduce_ray.py --workers 2 --shards 2000
"""
import argparse
import json
import time

SHARD = 1000  # numbers per map task, as in the example


def sum_of_squares(shard):
    start = shard * SHARD
    return sum(i * i for i in range(start, start + SHARD))


def add(*parts):
    return sum(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--shards", type=int, default=2000)
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    square, plus = ray.remote(sum_of_squares), ray.remote(add)
    ray.get([square.remote(0) for _ in range(args.workers * 4)])  # workers up, functions known
    started = time.monotonic()
    level = [square.remote(s) for s in range(args.shards)]
    pending = list(level)
    while pending:  # as the example's driver waits, 500 at a time
        _, pending = ray.wait(pending, num_returns=min(len(pending), 500), timeout=600)
    while len(level) > 1:
        level = [plus.remote(*level[i:i + 16]) for i in range(0, len(level), 16)]
    total = ray.get(level[0])
    seconds = time.monotonic() - started
    n = args.shards * SHARD
    ray.shutdown()
    print(json.dumps({"workers": args.workers, "shards": args.shards, "seconds": seconds,
                      "right": total == (n - 1) * n * (2 * n - 1) // 6}))


if __name__ == "__main__":
    main()
