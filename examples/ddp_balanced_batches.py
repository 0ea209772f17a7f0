"""Plain PyTorch DDP with LB-BSP's balanced batches: the slow rank gets fewer samples.

Every process runs this same script; torchrun starts them::

    GLOO_SOCKET_IFNAME=lo .venv/bin/torchrun --nproc-per-node=3 examples/ddp_balanced_batches.py

All ranks train one MLP on scikit-learn's digits with DDP (gloo, CPU) and a
global batch of 192 samples per step. Each step costs 0.3 ms per sample
(a sleep standing in for a heavier model) and the last rank is made 3x
slower. With ``hetsync.ddp_balance`` the ranks exchange their step times
after every step and re-size their batches so that they finish together;
the weighted all-reduce hook keeps the update the mean gradient of all 192
samples. ``--equal`` runs plain DDP with 64 samples per rank for
comparison. Rank 0 prints the batch sizes as they adapt and the time per
step.
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hetsync.ddp_balance import BalancedBatches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--global-batch", type=int, default=192)
    parser.add_argument("--per-sample-ms", type=float, default=0.3, help="injected cost per sample, every rank")
    parser.add_argument("--slowdown", type=float, default=3.0, help="the last rank is this many times slower")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--equal", action="store_true", help="plain DDP: equal batches, no balancing")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]

    torch.manual_seed(0)  # the same initial model on every rank (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()  # the mean over the local batch, as the hook expects
    bal = None
    if not args.equal:
        bal = BalancedBatches(args.global_batch)
        bal.register(model)
    slow = args.slowdown if rank == world - 1 else 1.0
    gen = torch.Generator().manual_seed(1000 + rank)

    step_times = []
    for step in range(args.steps):
        b = bal.batch_size if bal is not None else args.global_batch // world
        idx = torch.randint(0, len(x_train), (b,), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        if bal is not None:
            bal.start()
        logits = model(x_train[idx])
        time.sleep(args.per_sample_ms / 1000 * b * slow)  # the injected cost, inside forward/backward
        loss_fn(logits, y_train[idx]).backward()
        opt.step()
        opt.zero_grad()
        sizes = bal.step_done() if bal is not None else [args.global_batch // world] * world
        step_times.append(time.perf_counter() - t0)
        if rank == 0 and (step < 5 or step % 10 == 9):
            print(f"step {step + 1:3d}  next batches {sizes}  step {1000 * step_times[-1]:.1f} ms", flush=True)

    if rank == 0:
        with torch.no_grad():
            accuracy = (model.module(x_test).argmax(1) == y_test).float().mean().item()
        first, last = step_times[:5], step_times[-10:]
        print(
            f"{'plain DDP, equal batches' if bal is None else 'balanced batches'}: "
            f"{1000 * sum(first) / len(first):.1f} ms per step over the first 5 steps, "
            f"{1000 * sum(last) / len(last):.1f} ms over the last 10; test accuracy {accuracy:.3f}",
            flush=True,
        )
    # free every DDP model before the group: a model freed after
    # destroy_process_group can deadlock in gloo's teardown (pytorch#56297)
    del model, bal, opt
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
