"""The training script ``hetsync bench startup`` starts: a small CNN on
generated data with AdamW and a DataLoader, as a plain DDP script (``ddp``,
under torchrun) or converted to hetsync as the README shows (``hetsync``,
``hetsync.init("bsp", evaluate=...)``, under ``hetsync launch``).

    python startup_loop.py ddp|hetsync MARKS_DIR STEPS

Each training rank writes ``MARKS_DIR/rank-<i>.json``: the wall-clock time
(``time.time()``) at which its first ``opt.step()`` returned, and at which
its loop ended. Nothing else differs between the two forms.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, channels: int = 24) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(channels * 5, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def data() -> tuple[TensorDataset, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4000, 1, 40, generator=g), torch.randint(0, 10, (4000,), generator=g)
    return TensorDataset(x[:3000], y[:3000]), (x[3000:], y[3000:])


def write_marks(marks_dir: Path, rank: int, first_step: float) -> None:
    marks = {"first_step": first_step, "end": time.time()}
    (marks_dir / f"rank-{rank}.json").write_text(json.dumps(marks) + "\n")


def ddp(marks_dir: Path, steps: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler

    train, _ = data()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for taken, (x, y) in enumerate(DataLoader(train, batch_size=32, sampler=DistributedSampler(train)), 1):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        first = first or time.time()
        if taken == steps:
            break
    assert first is not None
    write_marks(marks_dir, dist.get_rank(), first)
    del model, opt  # (DDP's reducer before the group: torch aborted now and then at exit otherwise)
    dist.barrier()
    dist.destroy_process_group()


def with_hetsync(marks_dir: Path, steps: int) -> None:
    import hetsync

    train, (test_x, test_y) = data()

    def evaluate(model: nn.Module) -> dict[str, float]:
        return {"accuracy": (model(test_x).argmax(1) == test_y).float().mean().item()}

    sync = hetsync.init("bsp", evaluate=evaluate, batch_size=32)
    torch.manual_seed(0)
    model = Net()
    opt = sync.optimizer(model, torch.optim.AdamW(model.parameters(), lr=3e-3))  # (rank 0 serves here)
    first = None
    for taken, (x, y) in enumerate(sync.loader(train), 1):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        first = first or time.time()
        if taken == steps or sync.done:
            break
    assert first is not None
    write_marks(marks_dir, sync.rank, first)
    sync.finish()


if __name__ == "__main__":
    form, folder, n_steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    (ddp if form == "ddp" else with_hetsync)(folder, n_steps)
