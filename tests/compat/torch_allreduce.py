"""A training step's collective, knowing nothing of cohort: init_process_group from the
environment (init_method="env://", gloo), an all-reduce, and the result printed. Run as a plain
script or by torchrun, with the variables cohort-operator gives a framework: pytorch worker."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t
print(f"rank {rank} of {world}: all-reduce {t.item():g}", flush=True)
dist.destroy_process_group()
