"""Plain PyTorch DDP on a hetsync workload: the reference BSP is held to.

Run under torchrun with one process per worker (no server)::

    torchrun --nproc-per-node=4 -m hetsync.runtime.ddp --scenario homogeneous-8 --steps 50 --out runs/ddp

Every rank trains a copy of the workload's model with
``DistributedDataParallel`` (gloo on CPU), starting from
``workload.init_params(seed)`` and drawing batches from shard ``rank`` of
``workload.make_shards(world, seed)`` — the same model, shards and batch
order that hetsync's BSP gives its workers — and the scenario's recipe
(optimizer, learning rate and schedule, gradient clipping). Rank 0 writes ``ddp-model.pt`` (the module's state_dict) and
``ddp.json`` (time per step, and the share of it spent computing, measured
with a communication-free replay of the same steps; the scenario's target
metric at the end as ``final_metric``, every workload metric as
``final_metrics``, and ``final_accuracy`` when the workload reports accuracy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parameters_to_vector

from hetsync.optim import build_optimizer
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
    wl = make_workload(sc.job.workload, **sc.job.workload_args)
    direction = sc.stop.target.direction_for(wl.name, wl.metrics)  # BadInput: a metric the workload lacks

    def fresh_model() -> torch.nn.Module:
        return wl.module_with(wl.init_params(sc.job.seed))

    def flat(model: torch.nn.Module) -> torch.Tensor:
        """The trainable parameters as the workload's flat vector."""
        return parameters_to_vector(p for p in model.parameters() if p.requires_grad).detach()

    # time a communication-free replay first: the compute part of a step
    def train(model: torch.nn.Module, steps: int) -> None:
        """The scenario's recipe as a plain loop: its optimizer (torch.optim),
        schedule on the step count (the global version under BSP) and clipping
        of the all-reduced gradient."""
        opt = build_optimizer(sc.job.optimizer, [p for p in model.parameters() if p.requires_grad])
        shard = wl.make_shards(world, sc.job.seed, sc.job.label_skew)[rank]
        for step in range(steps):
            x, y = shard.next_batch(sc.job.batch_size)
            opt.zero_grad()
            wl.loss_fn(model(x), y).backward()
            if sc.job.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), sc.job.clip_norm)
            for group in opt.param_groups:
                group["lr"] = sc.job.lr * sc.job.schedule.factor(step)
            opt.step()

    train(fresh_model(), 1)  # (untimed: an optimizer's first step imports torch's compiler, a second or two)
    t0 = time.perf_counter()
    train(fresh_model(), args.steps)
    compute_s = (time.perf_counter() - t0) / args.steps

    model = DistributedDataParallel(fresh_model())
    dist.barrier()
    t0 = time.perf_counter()
    train(model, args.steps)
    dist.barrier()
    step_s = (time.perf_counter() - t0) / args.steps
    times = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(times, torch.tensor([step_s, compute_s], dtype=torch.float64))
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), out / "ddp-model.pt")
        step = max(float(t[0]) for t in times)
        compute = sum(float(t[1]) for t in times) / world
        metrics = wl.evaluate_metrics(flat(model.module))
        stats = {
            "workers": world,
            "steps": args.steps,
            "step_s": step,
            "compute_share": min(1.0, compute / step),
            "target_metric": sc.stop.target.metric,
            "target_value": sc.stop.target.value,
            "target_direction": direction,
            "final_metric": metrics[sc.stop.target.metric],
            "final_metrics": {name: metrics[name] for name in wl.metrics},
            **({"final_accuracy": metrics["accuracy"]} if "accuracy" in metrics else {}),
        }
        (out / "ddp.json").write_text(json.dumps(stats, indent=1) + "\n")
    dist.barrier()  # leave together, once rank 0 has written its files
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # no destroy_process_group / interpreter teardown: gloo's threads then
    # abort a rank now and again ("terminate called without an active
    # exception", about 1 run in 4 here), failing a run whose work is done
    os._exit(code)
