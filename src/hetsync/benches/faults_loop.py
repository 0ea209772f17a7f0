"""The user's own training loop that ``hetsync bench faults`` starts under
``hetsync launch``: a small MLP on generated data, SGD with momentum, a
DataLoader over the worker's shard, trained until the run's time is up
(``sync.done``), with an ``evaluate`` and checkpoints when asked.

    python faults_loop.py POLICY RUN_S WORKER_TIMEOUT_S [CHECKPOINT_DIR]
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset


def main() -> None:
    import hetsync

    policy, run_s, timeout_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    checkpoint_dir = sys.argv[4] if len(sys.argv) > 4 else None
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    train, test = TensorDataset(x[:1600], y[:1600]), (x[1600:], y[1600:])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def evaluate(m: nn.Module) -> dict[str, float]:
        with torch.no_grad():
            return {"accuracy": float((m(test[0]).argmax(1) == test[1]).float().mean())}

    sync = hetsync.init(
        policy,
        scenario="hetero-4",
        evaluate=evaluate,
        max_time_s=run_s,
        eval_every_s=0.5,
        worker_timeout_s=timeout_s,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_s=1.0,
        plots=False,
    )
    opt = sync.optimizer(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    loader = sync.loader(train)
    while not sync.done:
        for xb, yb in loader:
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            opt.zero_grad()
            if sync.done:
                break
    sync.finish()


if __name__ == "__main__":
    main()
