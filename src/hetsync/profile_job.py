"""The processes of ``hetsync profile``: ``torchrun ... -m hetsync.profile_job``.

Rank 0 plays the server, ranks 1..N the workers (as in ``hetsync run``).
Two phases, each started together after a barrier:

1. **Compute.** Every worker times real steps (``Workload.gradient`` on real
   batches of its shard) at a few batch sizes, interleaved, for
   ``--compute-s`` seconds, all workers at once as in training. Each record
   is (start since the phase began, batch, seconds). With ``--emulate``
   every step then sleeps the extra the emulated scenario gives this worker
   (:meth:`hetsync.driver.timing.TimingModel.extra_sleep_s`, exactly as the
   runtime's workers do), so one machine can play a heterogeneous cluster.
   A batch size that runs out of memory is dropped and recorded.
2. **Links.** One pair of ranks at a time (every worker with the server,
   then every two workers), the lower rank sends a tensor of each size and
   waits for a one-element acknowledgement, a few times per size. With
   ``--emulate`` a round trip lasts at least ``bytes / bandwidth`` of the
   emulated link (the slower end's, as the runtime's ``--throttle`` does)
   plus the smallest size's round trip (the link's own two latencies).

Rank 0 gathers everything and writes ``raw.json`` in ``--out``;
:mod:`hetsync.profile` fits the scenario to it. The same module runs under
a plain ``torchrun --nnodes ... -m hetsync.profile_job`` on a real cluster.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

RAW_JSON = "raw.json"
ACK_ELEMENTS = 1
WARMUP_STEPS = 2  # untimed steps per batch size first


def link_sizes(model_bytes: int) -> list[int]:
    """Transfer sizes: one element (the latency), a quarter model, the model, two models."""
    nb = max(16, model_bytes - model_bytes % 4)
    return sorted({4, max(8, (nb // 4) - (nb // 4) % 4), nb, 2 * nb})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hetsync.profile_job", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, help="the job: workload, batch size (built-in name or YAML)")
    p.add_argument("--emulate", default=None, help="a scenario whose slowdowns, noise and links to apply for real")
    p.add_argument("--batch-sizes", required=True, help="comma-separated batch sizes to time")
    p.add_argument("--compute-s", type=float, required=True, help="seconds of timed steps per worker")
    p.add_argument("--link-bytes", required=True, help="comma-separated transfer sizes in bytes")
    p.add_argument("--link-reps", type=int, default=5, help="transfers per size and link")
    p.add_argument("--out", required=True)
    p.add_argument("--timeout-s", type=float, default=120.0, help="gloo's timeout for every collective")
    return p


def main(argv: list[str] | None = None) -> int:
    from hetsync.runtime.agent import die_with_parent

    die_with_parent()
    args = build_parser().parse_args(argv)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    n = world - 1
    job, emulated = _scenarios(args.scenario, args.emulate, n)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    link_bytes = [int(b) for b in args.link_bytes.split(",")]
    dist.barrier()
    compute = _compute_phase(rank - 1, job, emulated, sizes, args.compute_s) if rank > 0 else {}
    gathered = links_and_gather(rank, n, emulated, link_bytes, args.link_reps, compute)
    if rank == 0:
        out = Path(args.out)
        raw = raw_record(n, sizes, link_bytes, args.compute_s, args.emulate, gathered)
        tmp = out / (RAW_JSON + ".tmp")
        tmp.write_text(json.dumps(raw) + "\n")
        os.replace(tmp, out / RAW_JSON)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def links_and_gather(
    rank: int, n: int, emulated: Any, link_bytes: list[int], reps: int, compute: dict[str, Any]
) -> list[Any]:
    """Every rank, once its timed steps are over: time the links (after a
    barrier), then send its steps and transfers to rank 0, which gets them
    all (one dict per rank); the other ranks get an empty list."""
    import torch.distributed as dist

    dist.barrier()
    links = _link_phase(rank, n, emulated, link_bytes, reps)
    gathered: list[Any] = [None] * (n + 1) if rank == 0 else []
    dist.gather_object({"rank": rank, "compute": compute, "links": links}, gathered if rank == 0 else None, dst=0)
    return gathered


def raw_record(
    n: int, sizes: list[int], link_bytes: list[int], compute_s: float, emulate: str | None, gathered: list[Any]
) -> dict[str, Any]:
    """``raw.json``'s common fields (what :func:`hetsync.profile.fit_profile` reads)."""
    return {
        "workers": n,
        "host": os.uname().nodename,
        "batch_sizes": sizes,
        "link_bytes": link_bytes,
        "compute_s": compute_s,
        "emulate": emulate,
        "per_rank": sorted(gathered, key=lambda g: g["rank"]),
    }


def _scenarios(job_name: str, emulate: str | None, n: int) -> tuple[Any, Any]:
    from hetsync.scenario import load_scenario

    job = load_scenario(job_name).with_workers(n)
    emulated = load_scenario(emulate).with_workers(n) if emulate else None
    return job, emulated


def _compute_phase(w: int, job: Any, emulated: Any, sizes: list[int], compute_s: float) -> dict[str, Any]:
    """Timed steps of worker ``w``: ``steps`` as [start_s, batch, seconds, measured_s] rows."""
    import torch

    from hetsync.driver.timing import TimingModel
    from hetsync.workloads import make_workload

    workload = make_workload(job.workload, **job.workload_args)
    params = workload.init_params(job.seed)
    shard = workload.make_shards(job.workers, job.seed, job.label_skew)[w]
    timing = TimingModel(emulated) if emulated is not None else None
    failed: dict[int, str] = {}
    alive = list(sizes)
    for b in sizes:  # warm-up; a size that does not fit in memory is dropped here
        try:
            for _ in range(WARMUP_STEPS):
                workload.gradient(params, *shard.next_batch(b))
        except (RuntimeError, MemoryError) as e:
            if "out of memory" not in str(e).lower() and not isinstance(e, MemoryError):
                raise
            failed[b] = str(e).splitlines()[0][:200]
            alive.remove(b)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    steps: list[list[float]] = []
    t0 = time.perf_counter()
    k = 0
    while alive and time.perf_counter() - t0 < compute_s:
        b = alive[k % len(alive)]
        k += 1
        x, y = shard.next_batch(b)
        start = time.perf_counter()
        workload.gradient(params, x, y)
        measured = time.perf_counter() - start
        if timing is not None:
            extra = timing.extra_sleep_s(w, measured, start - t0)
            if extra > 0:
                time.sleep(extra)
        steps.append([start - t0, b, time.perf_counter() - start, measured])
    return {"steps": steps, "failed_batches": {str(b): why for b, why in failed.items()}}


def _pairs(n: int) -> list[tuple[int, int]]:
    """Every worker with the server (rank 0), then every two workers."""
    return [(0, r) for r in range(1, n + 1)] + [(a, b) for a in range(1, n + 1) for b in range(a + 1, n + 1)]


def _link_floor_Bps(emulated: Any, a: int, b: int, now_s: float) -> float:
    """The emulated bandwidth of the link between ranks a and b (the slower
    worker end's, as ``--throttle`` gives the runtime); inf without one."""
    if emulated is None:
        return math.inf
    from hetsync.runtime.p2p import link_Bps

    ends = [link_Bps(emulated, r - 1, now_s, True) for r in (a, b) if r > 0]
    return min(ends) if ends else math.inf


def _link_phase(rank: int, n: int, emulated: Any, link_bytes: list[int], reps: int) -> list[dict[str, Any]]:
    """Timed transfers; the initiator of each pair records [bytes, seconds] rows."""
    import torch
    import torch.distributed as dist

    ack = torch.zeros(ACK_ELEMENTS, dtype=torch.float32)
    payloads = {nb: torch.zeros(max(1, nb // 4), dtype=torch.float32) for nb in link_bytes}
    t0 = time.perf_counter()
    out = []
    for a, b in _pairs(n):
        if rank == a:
            rows = []
            smallest = min(payloads)
            tiny_s = math.inf  # the fastest round trip of the smallest size: two latencies
            for nb, t in payloads.items():  # untimed: the first transfer of a pair sets up its connection
                start = time.perf_counter()
                dist.send(t, dst=b)
                dist.recv(ack, src=b)
                if nb == smallest:
                    tiny_s = time.perf_counter() - start
            for _ in range(reps):
                for nb, t in payloads.items():
                    start = time.perf_counter()
                    dist.send(t, dst=b)
                    dist.recv(ack, src=b)
                    if nb == smallest:
                        tiny_s = min(tiny_s, time.perf_counter() - start)
                    # an emulated link: latency (this one's) + bytes / bandwidth there, latency back
                    floor_s = nb / _link_floor_Bps(emulated, a, b, start - t0) + (tiny_s if nb > smallest else 0.0)
                    left = floor_s - (time.perf_counter() - start)
                    if left > 0:
                        time.sleep(left)
                    rows.append([t.numel() * 4, time.perf_counter() - start])
            out.append({"a": a, "b": b, "transfers": rows})
        elif rank == b:
            for _ in range(reps + 1):
                for t in payloads.values():
                    buf = torch.empty_like(t)
                    dist.recv(buf, src=a)
                    dist.send(ack, dst=a)
        dist.barrier()
    return out


if __name__ == "__main__":
    sys.exit(main())
