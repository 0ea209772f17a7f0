"""A user's training script, for tests/runtime/test_loop.py: the same model,
data order and AdamW (+ a step schedule) under plain DDP (``ddp``) or under a
hetsync policy through the wrapper (any other first argument: the policy).

    torchrun --nproc-per-node=2 loop_train.py ddp OUT STEPS
    hetsync launch --nproc 2 --out OUT loop_train.py bsp OUT STEPS [KILL_WORKER|-] [CKPT_DIR [resume]]
    hetsync launch --nproc 2 --out OUT loop_train.py asp OUT STEPS bn   (a BatchNorm layer; each worker
        saves its running statistics as OUT/buffers-<worker>.pt when its loop ends)
    hetsync launch --nproc 2 --out OUT loop_train.py bsp OUT STEPS cuda  (the model and its batches on the
        GPU, every rank on cuda:0; the transports stay on the CPU)
    hetsync launch --nproc 2 --out OUT loop_train.py POLICY OUT STEPS uneven  (worker w's loop ends 4·w
        steps early)
    hetsync launch --nproc 2 --out OUT loop_train.py bsp OUT STEPS accumulate  (two backward passes per step)
    hetsync launch --nproc 2 --out OUT loop_train.py bsp OUT STEPS slow-eval  (evaluate every 0.2 s, each
        taking 1 s; the run's first one also waits until worker 0 has made 6 steps, and fails if it
        waits SLOW_EVAL_WAIT_S: the server must go on serving while it evaluates)

STEPS counts from the run's start: a resumed loop goes on at ``sync.first_step``.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SLOW_EVAL_WAIT_S = 30.0


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 24), nn.Tanh())
        self.frozen = nn.Linear(24, 24)
        self.frozen.requires_grad_(False)  # frozen parameters stay out of the flat model
        self.head = nn.Linear(24, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.frozen(self.body(x))))


class NormNet(Net):
    """Net with a BatchNorm layer: running statistics that only the workers' forward passes move."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.norm(self.frozen(self.body(x)))))


def data() -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2400, 10, generator=g)
    y = (x @ torch.randn(10, 3, generator=g)).argmax(1)
    return TensorDataset(x[:2000], y[:2000]), x[2000:], y[2000:]


def build(bn: bool = False) -> tuple[Net, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(0)
    model = NormNet() if bn else Net()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01, weight_decay=0.01)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)


def ddp(out: str, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    train, _, _ = data()
    model, opt, _ = build()
    wrapped = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad], lr=0.01, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=False)
    for i, (x, y) in enumerate(DataLoader(train, batch_size=16, sampler=sampler)):
        if i == steps:
            break
        nn.functional.cross_entropy(wrapped(x), y).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(out, "ddp.pt"))
    del wrapped, opt, sched  # before the group goes (pytorch#56297)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def wrapped(
    policy: str,
    out: str,
    steps: int,
    kill_worker: int | None,
    ckpt: str | None,
    resume: bool,
    bn: bool = False,
    cuda: bool = False,
    slow_eval: bool = False,
    uneven: bool = False,
    accumulate: bool = False,
) -> None:
    import hetsync

    train, xt, yt = data()
    device = torch.device("cuda" if cuda else "cpu")
    xt, yt = xt.to(device), yt.to(device)
    stepped = Path(out, "worker-0-stepped")
    calls = []

    def evaluate(model: nn.Module) -> dict[str, float]:
        calls.append(1)
        if slow_eval and len(calls) > 1:  # (the first call, before the run, learns the metrics' names)
            deadline = time.monotonic() + SLOW_EVAL_WAIT_S
            while not stepped.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("no worker stepped while evaluate ran: it held up the server")
                time.sleep(0.01)
            time.sleep(1.0)
        out = model(xt)
        return {
            "accuracy": (out.argmax(1) == yt).float().mean().item(),
            "loss": nn.functional.cross_entropy(out, yt).item(),
        }

    sync = hetsync.init(
        policy,
        evaluate=evaluate,
        batch_size=16,
        max_time_s=120,
        plots=False,
        checkpoint_dir=ckpt,
        resume=resume,
        **({"eval_every_s": 0.2} if slow_eval else {}),
    )
    model, opt, _ = build(bn)
    model.to(device)  # (before the optimizer's first step: its state follows the parameters)
    opt = sync.optimizer(model, opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    sync.fast_forward(sched)  # a resumed loop: the schedule goes on where it was
    taken = sync.first_step
    if uneven:
        steps -= 4 * sync.worker
    loader = sync.loader(train, shuffle=False)  # the order DDP's DistributedSampler(shuffle=False) gives
    while taken < steps and not sync.done:
        for x, y in loader:
            assert len(x) == sync.batch_size or len(x) < 16
            if sync.worker == kill_worker and taken == 3:
                os.kill(os.getpid(), signal.SIGKILL)  # a worker dies mid-run
            x, y = x.to(device), y.to(device)
            nn.functional.cross_entropy(model(x), y).backward()
            if accumulate:  # (a second micro-batch into the same step)
                nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            taken += 1
            if slow_eval and sync.worker == 0 and taken == 6:
                stepped.touch()
            if cuda:
                assert all(p.is_cuda for p in model.parameters()), "the module left the GPU"
            if taken == steps or sync.done:
                break
    if bn:
        stats = {k: v for k, v in model.state_dict().items() if k.startswith("norm.")}
        torch.save(stats, os.path.join(out, f"buffers-{sync.worker}.pt"))
    sync.finish()


if __name__ == "__main__":
    mode, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "ddp":
        ddp(out, steps)
    else:
        flags = {"bn", "cuda", "slow-eval", "uneven", "accumulate"} & set(sys.argv[4:])
        extra = [a for a in sys.argv[4:] if a not in flags] + [""] * 3
        kill = None if extra[0] in ("", "-") else int(extra[0])
        wrapped(
            mode,
            out,
            steps,
            kill,
            extra[1] or None,
            extra[2] == "resume",
            "bn" in flags,
            "cuda" in flags,
            "slow-eval" in flags,
            "uneven" in flags,
            "accumulate" in flags,
        )
