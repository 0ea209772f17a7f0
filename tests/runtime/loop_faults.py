"""A user's training script that goes wrong on every worker, for
tests/runtime/test_loop.py (issue 26, item 3: loud failures):

- worker 0 steps a OneCycleLR past its end (as an LB-BSP worker given
  smaller batches than its schedule planned for does): ValueError;
- worker 1 never calls ``sync.finish()``;
- worker 2 calls ``dist.all_gather_object`` in its loop, as a DDP script
  gathering its metrics would (rank 0 joins no collective: it would hang);
- every worker builds a ``DistributedSampler`` with default arguments and
  calls ``opt.step()`` twice at its first batch.

    hetsync launch --nproc 3 --out OUT loop_faults.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hetsync

SAMPLES = 600
STEPS = 8


def main() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 10, generator=g)
    y = (x @ torch.randn(10, 3, generator=g)).argmax(1)
    train = TensorDataset(x, y)
    sync = hetsync.init("asp", batch_size=10, max_time_s=60, plots=False)
    torch.manual_seed(0)
    model = nn.Linear(10, 3)
    opt = sync.optimizer(model, torch.optim.SGD(model.parameters(), lr=0.1))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=STEPS // 2)
    sampler = DistributedSampler(train)  # a DDP script's: over the workers under hetsync
    print(f"worker {sync.worker}: sampler {sampler.rank} of {sampler.num_replicas}, {len(sampler)} samples", flush=True)
    for step, (xb, yb) in enumerate(DataLoader(train, batch_size=10, sampler=sampler)):
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        if step == 0:
            opt.step()  # a second step without a backward: warned about, once
        opt.zero_grad()
        if sync.worker == 0:
            sched.step()  # past its end at step STEPS // 2
        if sync.worker == 2 and step == 2:
            gathered: list[object] = [None] * sync.workers
            dist.all_gather_object(gathered, step)
        if step + 1 == STEPS or sync.done:
            break
    if sync.worker != 1:
        sync.finish()


if __name__ == "__main__":
    main()
