"""A user's training script for tests/runtime/test_loop_auto.py, written as a
user would bring it: a small classifier, SGD with a cosine schedule, the
loader hetsync.init gives; and a machine with a noisy neighbour: the last
worker's every step takes 40 ms more from its 6th on (a fixed cost, not one
that grows with the batch).

    hetsync launch --nproc 3 --out OUT loop_auto.py SPEC STEPS
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

import hetsync

NEIGHBOUR_S = 0.04


def main(spec: str, steps: int) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3000, 8, generator=g)
    y = (x @ torch.randn(8, 4, generator=g)).argmax(1)
    train, xt, yt = TensorDataset(x[:2400], y[:2400]), x[2400:], y[2400:]

    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"accuracy": (model(xt).argmax(1) == yt).float().mean().item()}

    sync = hetsync.init(spec, evaluate=evaluate, batch_size=16, max_time_s=60, plots=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = sync.optimizer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    slow = sync.worker == sync.workers - 1
    taken = 0
    while taken < steps and not sync.done:
        for xb, yb in sync.loader(train):
            if slow and taken >= 5:
                time.sleep(NEIGHBOUR_S)
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            taken += 1
            if taken == steps or sync.done:
                break
    sync.finish()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
