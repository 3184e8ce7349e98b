"""A training loop's collectives, knowing nothing of cohort: init_process_group from the
environment (gloo), then STEPS all-reduces, rank 0 printing each step. Prints its pid and its
torchrun restart count first, so that a test can kill it as a lost pod would lose it."""

import os
import sys
import time

import torch
import torch.distributed as dist

steps = int(sys.argv[1])
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "-")
print(f"pid {os.getpid()} rank {rank} of {world} restart {restart}", flush=True)
for step in range(steps):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t
    if rank == 0:
        print(f"step {step}", flush=True)
    time.sleep(0.05)
print(f"rank {rank} of {world}: {steps} steps done", flush=True)
dist.destroy_process_group()
