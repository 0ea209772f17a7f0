"""The training script ``hetsync bench scale`` starts: a model of a given
size on generated data with SGD (momentum), as a plain DDP script (``ddp``,
under torchrun) or converted to hetsync as the README shows
(``hetsync.init(policy, path=...)`` under ``hetsync launch``; the policy and
path of each form: :data:`POLICY_PATH`).

    python scale_loop.py ddp|ps|collective|lb-bsp|local-sgd MODEL MARKS_DIR STEPS BATCH

``MODEL``: ``mlp-<millions>`` (an MLP of about that many parameters: 784
inputs, three hidden layers of equal width, 10 outputs) or
``transformer-<millions>`` (a small encoder on token sequences, about that
many parameters). Each training rank writes ``MARKS_DIR/rank-<i>.json``: the
wall-clock end of each of its steps (``time.time()`` after ``opt.step()``
returned) and its CPU time; the bench takes the median step from them,
leaving out the first steps (start-up). Nothing else differs between the forms.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn

INPUTS, CLASSES, HIDDEN_LAYERS = 784, 10, 3
VOCAB, SEQ = 1000, 32
LOCAL_SGD_H = 4
POLICY_PATH = {  # the hetsync forms: (policy, data path)
    "ps": ("bsp", "ps"),
    "collective": ("bsp", "collective"),
    "lb-bsp": ("lb-bsp", "collective"),  # (equal workers: equal batches, the script's own)
    "local-sgd": (f"local-sgd:H={LOCAL_SGD_H}", "collective"),  # a round of model deltas every H steps
}


def mlp_width(params: float) -> int:
    """The hidden width h of the MLP with about ``params`` parameters:
    (784+1)h + (L−1)(h+1)h + (h+1)·10 = params, solved for h."""
    a = HIDDEN_LAYERS - 1
    b = INPUTS + 1 + (HIDDEN_LAYERS - 1) + CLASSES
    return max(1, round((-b + math.sqrt(b * b + 4 * a * (params - CLASSES))) / (2 * a)))


def build(model: str) -> tuple[nn.Module, tuple[int, ...], bool]:
    """The model, one input's shape and whether inputs are token ids."""
    kind, _, size = model.partition("-")
    params = float(size) * 1e6
    if kind == "mlp":
        h = mlp_width(params)
        layers: list[nn.Module] = [nn.Linear(INPUTS, h), nn.ReLU()]
        for _ in range(HIDDEN_LAYERS - 1):
            layers += [nn.Linear(h, h), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(h, CLASSES)), (INPUTS,), False
    if kind == "transformer":
        d = 256 if params < 30e6 else 384
        per_layer = 12 * d * d  # attention 4d², feed-forward 8d² (d_ff = 4d)
        layers_n = max(1, round((params - VOCAB * d) / per_layer))
        return _Encoder(d, layers_n), (SEQ,), True
    raise SystemExit(f"unknown model {model!r}: mlp-<millions> or transformer-<millions>")


class _Encoder(nn.Module):
    def __init__(self, d: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True, dropout=0.0)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(x)).mean(1))


def batches(shape: tuple[int, ...], tokens: bool, batch: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, VOCAB, (batch, *shape), generator=g) if tokens else torch.randn(batch, *shape, generator=g)
    return x, torch.randint(0, CLASSES, (batch,), generator=g)


def train(form: str, model_name: str, marks_dir: Path, steps: int, batch: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, shape, tokens = build(model_name)
    if form == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        net: nn.Module = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        sync = None
    else:
        import hetsync

        policy, path = POLICY_PATH[form]
        sync = hetsync.init(policy, path=path, batch_size=batch, plots=False)
        rank = sync.rank
        net = model
        opt = sync.optimizer(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    x, y = batches(shape, tokens, batch, rank)
    ends, cpu0 = [], time.process_time()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        ends.append(time.time())
        if sync is not None and sync.done:
            break
    marks = {"ends": ends, "cpu_s": time.process_time() - cpu0, "params": sum(p.numel() for p in model.parameters())}
    (marks_dir / f"rank-{rank}.json").write_text(json.dumps(marks) + "\n")
    if sync is not None:
        sync.finish()
    else:
        import torch.distributed as dist

        del net
        dist.destroy_process_group()


if __name__ == "__main__":
    form, model_name, marks, steps, batch = sys.argv[1:6]
    train(form, model_name, Path(marks), int(steps), int(batch))
