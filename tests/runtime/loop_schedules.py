"""A user's training script with an LR scheduler, for
tests/runtime/test_loop_schedules.py: loop_train.py's model and data order
with one scheduler family (``SCHEDULES``), under plain DDP or under BSP
through the wrapper.

    torchrun --nproc-per-node=2 loop_schedules.py ddp OUT STEPS        (every family, one after another)
    hetsync launch --nproc 2 --out OUT loop_schedules.py FAMILY OUT STEPS

Under hetsync each rank builds the scheduler on its own side of
``sync.optimizer``: before it on the ranks whose parity is the family's
``BEFORE_PARITY``, after it on the others. Rank 0 runs the server and never
returns from ``sync.optimizer``, so with parity 1 it never sees the
scheduler (its copy of the optimizer keeps the lr it was built with), and
with parity 0 the scheduler's construction has changed its copy (OneCycleLR
and CyclicLR set ``lr``, ``initial_lr`` and the momentum). One run thus has
one worker of each order. The model has two parameter groups at different
rates, as a decay/no-decay split has.
"""

from __future__ import annotations

import gc
import math
import os
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import lr_scheduler as S
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loop_train import Net, data  # noqa: E402  (the same model and data as the other loop tests)

BATCH = 16


def _groups(model: nn.Module, lrs: tuple[float, float]) -> list[dict]:
    """Two parameter groups: the head's at ``lrs[1]``, the rest at ``lrs[0]``."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for n, p in trainable if not n.startswith("head.")], "lr": lrs[0]},
        {"params": [p for n, p in trainable if n.startswith("head.")], "lr": lrs[1]},
    ]


def onecycle(model: nn.Module, steps: int) -> tuple[torch.optim.Optimizer, Callable]:
    """SGD with Nesterov momentum; OneCycleLR cycles the lr and the momentum, per group."""
    opt = torch.optim.SGD(_groups(model, (0.05, 0.02)), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    return opt, lambda o: S.OneCycleLR(o, max_lr=[0.2, 0.1], total_steps=steps, pct_start=0.3, base_momentum=0.8)


def cyclic(model: nn.Module, steps: int) -> tuple[torch.optim.Optimizer, Callable]:
    """AdamW; CyclicLR (triangular2) cycles the lr and Adam's beta1."""
    opt = torch.optim.AdamW(_groups(model, (0.01, 0.005)), lr=0.01, weight_decay=0.01)
    return opt, lambda o: S.CyclicLR(
        o, base_lr=[1e-3, 5e-4], max_lr=[2e-2, 1e-2], step_size_up=3, mode="triangular2", base_momentum=0.8
    )


def lambdas(model: nn.Module, steps: int) -> tuple[torch.optim.Optimizer, Callable]:
    """AdamW; LambdaLR with one lambda per group (a warm-up for the body, a decay for the head)."""
    opt = torch.optim.AdamW(_groups(model, (0.01, 0.02)), lr=0.01, weight_decay=0.01)
    return opt, lambda o: S.LambdaLR(o, [lambda s: min(1.0, (s + 1) / 6), lambda s: 0.8**s])


def sequential(model: nn.Module, steps: int) -> tuple[torch.optim.Optimizer, Callable]:
    """SGD with momentum; a ChainedScheduler of a SequentialLR (linear warm-up, then a cosine
    decay to eta_min, whose factor differs per group) and a step decay."""
    opt = torch.optim.SGD(_groups(model, (0.1, 0.03)), lr=0.1, momentum=0.9)

    def build(o: torch.optim.Optimizer) -> S.LRScheduler:
        warm = S.LinearLR(o, start_factor=0.2, total_iters=5)
        cosine = S.CosineAnnealingLR(o, T_max=steps - 5, eta_min=0.01)
        return S.ChainedScheduler([S.SequentialLR(o, [warm, cosine], milestones=[5]), S.StepLR(o, 4, gamma=0.7)])

    return opt, build


SCHEDULES = {"onecycle": onecycle, "cyclic": cyclic, "lambda": lambdas, "sequential": sequential}
BEFORE_PARITY = {"onecycle": 1, "cyclic": 0, "lambda": 1, "sequential": 0}  # ranks building it before


def ddp(out: str, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    train, _, _ = data()
    for family, make in SCHEDULES.items():
        torch.manual_seed(0)
        model = Net()
        wrapped = nn.parallel.DistributedDataParallel(model)
        opt, schedule = make(wrapped.module, steps)
        sched = schedule(opt)
        sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=False)
        for i, (x, y) in enumerate(DataLoader(train, batch_size=BATCH, sampler=sampler)):
            if i == steps:
                break
            nn.functional.cross_entropy(wrapped(x), y).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
        if rank == 0:
            torch.save(model.state_dict(), os.path.join(out, f"ddp-{family}.pt"))
        del wrapped, opt, sched  # before the group goes (pytorch#56297)
        gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def wrapped(family: str, steps: int) -> None:
    import hetsync

    train, _, _ = data()
    sync = hetsync.init("bsp", batch_size=BATCH, max_time_s=120, plots=False)
    torch.manual_seed(0)
    model = Net()
    opt, schedule = SCHEDULES[family](model, steps)
    before = sync.rank % 2 == BEFORE_PARITY[family]
    sched = schedule(opt) if before else None
    opt = sync.optimizer(model, opt)
    if sched is None:
        sched = schedule(opt)
    loader = sync.loader(train, shuffle=False)  # the order DDP's DistributedSampler(shuffle=False) gives
    for taken, (x, y) in enumerate(loader, start=1):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        if taken == steps or sync.done:
            break
    assert math.isfinite(opt.param_groups[0]["lr"])
    sync.finish()


if __name__ == "__main__":
    mode, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "ddp":
        ddp(out, steps)
    else:
        wrapped(mode, steps)
