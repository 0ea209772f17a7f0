"""A job nobody tuned hetsync for: a GRU classifying token sequences, trained
with SGD + Nesterov momentum, OneCycleLR, label smoothing and gradient
clipping — written as a plain DDP script first (``--ddp``), then converted
to hetsync (the lines marked ``# hetsync``). docs/own-job.md has what it
measured.

    torchrun --nproc-per-node=3 examples/own_job_gru.py --ddp --out runs/gru-ddp    # plain DDP, 3 ranks
    hetsync launch --nproc 3 --out runs/gru-bsp examples/own_job_gru.py --policy bsp   # hetsync, 3 workers + rank 0
    hetsync launch --nproc 3 --out runs/gru-h4 examples/own_job_gru.py --policy bsp --scenario hetero-4
    hetsync profile --script examples/own_job_gru.py --nproc 3 --workload examples/own_job_gru.py:workload \\
        -o runs/gru-profile -- --scenario hetero-4

The task: sequences of 24 tokens over 16 symbols; the class is which of four
bigrams ((0,1), (2,3), (4,5), (6,7)) occurs most often (ties to the lowest),
with the rest of the tokens uniform noise. Each rank writes the median of
its step times (the time between two ``opt.step()`` returns: loading,
forward, backward, clipping, the step) to ``OUT/steps-rank-R.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SEQ_LEN = 24
VOCAB = 16
BIGRAMS = ((0, 1), (2, 3), (4, 5), (6, 7))


class GRUClassifier(nn.Module):
    def __init__(self, vocab: int = VOCAB, embed: int = 32, hidden: int = 64, classes: int = len(BIGRAMS)) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(x))
        return self.head(out.mean(1))


def make_data(n: int, seed: int) -> TensorDataset:
    """``n`` sequences with planted bigrams; the label is the most frequent one."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=g)
    plants = torch.randint(0, len(BIGRAMS), (n, 4), generator=g)  # four bigrams per sequence, at random places
    where = torch.randint(0, SEQ_LEN - 1, (n, 4), generator=g)
    for k in range(4):
        a = torch.tensor([BIGRAMS[i][0] for i in plants[:, k].tolist()])
        b = torch.tensor([BIGRAMS[i][1] for i in plants[:, k].tolist()])
        x[torch.arange(n), where[:, k]] = a
        x[torch.arange(n), where[:, k] + 1] = b
    counts = torch.stack([((x[:, :-1] == a) & (x[:, 1:] == b)).sum(1) for a, b in BIGRAMS], 1)
    return TensorDataset(x, counts.argmax(1))


def datasets() -> tuple[TensorDataset, TensorDataset]:
    return make_data(9000, seed=0), make_data(2000, seed=1)


def evaluate(model: nn.Module) -> dict[str, float]:
    x, y = _TEST.tensors
    with torch.no_grad():
        out = model(x)
    return {
        "accuracy": (out.argmax(1) == y).float().mean().item(),
        "loss": nn.functional.cross_entropy(out, y).item(),
    }


_TRAIN, _TEST = datasets()


def workload():  # type: ignore[no-untyped-def]
    """This job as a hetsync workload, for the simulator (``workload: examples/own_job_gru.py:workload``)."""
    from hetsync.workloads import from_module

    torch.manual_seed(0)
    return from_module("gru-bigrams", GRUClassifier(), train=_TRAIN.tensors, test=_TEST.tensors)


def run_ddp(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(GRUClassifier())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    sampler = DistributedSampler(_TRAIN, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(_TRAIN, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * len(loader))
    times = _loop(args, model, opt, sched, loader, epochs=args.epochs, set_epoch=sampler.set_epoch)
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ddp.json").write_text(json.dumps({**evaluate(model.module), "ranks": world}) + "\n")
    _write_steps(Path(args.out), rank, times)
    dist.destroy_process_group()


def run_hetsync(args: argparse.Namespace) -> None:
    import hetsync  # hetsync

    sync = hetsync.init(  # hetsync: rank 0 runs the policy, the others are workers
        args.policy,
        scenario=None if args.scenario == "none" else args.scenario,
        evaluate=evaluate,
        target={"metric": "accuracy", "value": args.target},
        batch_size=args.batch_size,
    )
    torch.manual_seed(0)
    model = GRUClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    opt = sync.optimizer(model, opt)  # hetsync (rank 0 serves the run here and exits)
    loader = sync.loader(_TRAIN, drop_last=True)  # hetsync: this worker's shard
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * len(loader))
    times = _loop(args, model, opt, sched, loader, epochs=args.epochs, done=lambda: sync.done)
    _write_steps(Path(os.environ.get("HETSYNC_OUT", args.out)), int(os.environ["RANK"]), times)
    sync.finish()  # hetsync: leave the run; rank 0 writes the summary, trace and model


def _loop(args, model, opt, sched, loader, *, epochs, set_epoch=None, done=lambda: False) -> list[float]:  # type: ignore[no-untyped-def]
    smooth = nn.CrossEntropyLoss(label_smoothing=0.1)
    times: list[float] = []
    last = time.perf_counter()
    for epoch in range(epochs):
        if set_epoch is not None:
            set_epoch(epoch)
        for x, y in loader:
            loss = smooth(model(x), y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            now = time.perf_counter()
            times.append(now - last)
            last = now
            if done():
                return times
    return times


def _write_steps(out: Path, rank: int, times: list[float]) -> None:
    if not times:
        return
    out.mkdir(parents=True, exist_ok=True)
    record = {"rank": rank, "steps": len(times), "median_step_s": statistics.median(times[2:] or times)}
    (out / f"steps-rank-{rank}.json").write_text(json.dumps(record) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddp", action="store_true", help="plain DDP under torchrun (no hetsync)")
    parser.add_argument("--policy", default="bsp")
    parser.add_argument("--scenario", default="none", help="a cluster to emulate, e.g. hetero-4 (default: none)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.1, help="OneCycleLR's max_lr")
    parser.add_argument("--target", type=float, default=0.8, help="target test accuracy")
    parser.add_argument("--out", default="runs/gru-ddp")
    args = parser.parse_args()
    torch.set_num_threads(1)
    (run_ddp if args.ddp else run_hetsync)(args)


if __name__ == "__main__":
    main()
