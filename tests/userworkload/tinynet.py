"""A user's own workload: a small MLP on generated data (two noisy rings), as
``hetsync.workloads.from_module`` wraps it — what a scenario names as
``workload: module:function`` (or ``path/to/tinynet.py:workload``) — and a
training loop under ``hetsync.init`` that trains the same model and evaluates
it (``--no-evaluate``: not), for ``hetsync profile --script tinynet.py
--workload tinynet:workload`` and ``hetsync advise --verify`` on its cluster.yaml."""

from __future__ import annotations

import math

import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def rings(n: int = 600, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two noisy concentric rings: class 0 inside (radius 1), class 1 outside (radius 2)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    angle = torch.rand(n, generator=g) * 2 * math.pi
    radius = 1.0 + y.float() + 0.25 * torch.randn(n, generator=g)
    return torch.stack([radius * angle.cos(), radius * angle.sin()], 1), y


def workload(hidden: int = 16):  # type: ignore[no-untyped-def]
    from hetsync.workloads import from_module

    torch.manual_seed(0)
    x, y = rings()
    return from_module("tinynet", TinyNet(hidden), train=(x[:500], y[:500]), test=(x[500:], y[500:]))


def evaluate(model: nn.Module) -> dict[str, float]:
    """The test rings' accuracy (what the script passes to ``hetsync.init(evaluate=...)``)."""
    x, y = rings()
    with torch.no_grad():
        return {"accuracy": (model(x[500:]).argmax(1) == y[500:]).float().mean().item()}


def main(argv: list[str] | None = None) -> None:
    """The loop: ``--no-evaluate`` passes no ``evaluate`` (the run then has no metric)."""
    import argparse

    import hetsync

    parser = argparse.ArgumentParser()
    parser.add_argument("--no-evaluate", action="store_true")
    args = parser.parse_args(argv)
    x, y = rings()
    sync = hetsync.init(
        "bsp",
        scenario="hetero-4",
        batch_size=32,
        target={"metric": "accuracy", "value": 0.9},
        evaluate=None if args.no_evaluate else evaluate,
    )
    torch.manual_seed(0)
    model = TinyNet()
    opt = sync.optimizer(model, torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.001))
    train = torch.utils.data.TensorDataset(x[:500], y[:500])
    for _ in range(1000):
        for xb, yb in sync.loader(train):
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            opt.zero_grad()
            if sync.done:
                break
        if sync.done:
            break
    sync.finish()


if __name__ == "__main__":
    main()
