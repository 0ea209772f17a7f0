"""Plain PyTorch DDP on a hetsync workload: the reference BSP is held to.

Run under torchrun with one process per worker (no server)::

    torchrun --nproc-per-node=4 -m hetsync.runtime.ddp --scenario homogeneous-8 --steps 50 --out runs/ddp

Every rank trains a copy of the workload's model with
``DistributedDataParallel`` (gloo on CPU), starting from
``workload.init_params(seed)`` and drawing batches from shard ``rank`` of
``workload.make_shards(world, seed)`` — the same model, shards and batch
order that hetsync's BSP gives its workers — and SGD at the scenario's
learning rate. Rank 0 writes ``ddp-model.pt`` (flat parameters) and
``ddp.json`` (time per step, and the share of it spent computing, measured
with a communication-free replay of the same steps).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hetsync.scenario import load_scenario, parse_override
from hetsync.workloads import make_workload


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetsync.runtime.ddp", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="homogeneous-8")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (not in the model)")
    p.add_argument("--out", default="runs/ddp")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sc = load_scenario(args.scenario, **dict(parse_override(o) for o in args.overrides)).with_workers(world)
    wl = make_workload(sc.workload, **sc.workload_args)

    def fresh_model() -> torch.nn.Module:
        model = copy.deepcopy(wl.model)
        vector_to_parameters(wl.init_params(sc.seed), model.parameters())
        return model

    # time a communication-free replay first: the compute part of a step
    solo = fresh_model()
    solo_opt = torch.optim.SGD(solo.parameters(), lr=sc.lr)
    shard = wl.make_shards(world, sc.seed, sc.label_skew)[rank]
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x, y = shard.next_batch(sc.batch_size)
        solo_opt.zero_grad()
        wl.loss_fn(solo(x), y).backward()
        solo_opt.step()
    compute_s = (time.perf_counter() - t0) / args.steps

    model = DistributedDataParallel(fresh_model())
    opt = torch.optim.SGD(model.parameters(), lr=sc.lr)
    shard = wl.make_shards(world, sc.seed, sc.label_skew)[rank]
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x, y = shard.next_batch(sc.batch_size)
        opt.zero_grad()
        wl.loss_fn(model(x), y).backward()
        opt.step()
    dist.barrier()
    step_s = (time.perf_counter() - t0) / args.steps
    times = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(times, torch.tensor([step_s, compute_s], dtype=torch.float64))
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(parameters_to_vector(model.module.parameters()).detach(), out / "ddp-model.pt")
        step = max(float(t[0]) for t in times)
        compute = sum(float(t[1]) for t in times) / world
        accuracy, _ = wl.evaluate(parameters_to_vector(model.module.parameters()).detach())
        stats = {
            "workers": world,
            "steps": args.steps,
            "step_s": step,
            "compute_share": min(1.0, compute / step),
            "final_accuracy": accuracy,
        }
        (out / "ddp.json").write_text(json.dumps(stats, indent=1) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
