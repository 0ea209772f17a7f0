"""The processes of ``hetsync profile``: ``torchrun ... -m hetsync.advise.profile_job``.

Rank 0 plays the server, ranks 1..N the workers (as in ``hetsync run``).
Two phases, each started together after a barrier:

1. **Compute.** Every worker times real steps (``Workload.gradient`` on real
   batches of its shard) at a few batch sizes, interleaved, for
   ``--compute-s`` seconds, all workers at once as in training. Each record
   is (start since the phase began, batch, seconds). With ``--emulate``
   every step then sleeps the extra the emulated scenario gives this worker
   (:meth:`hetsync.driver.timing.TimingModel.extra_sleep_s`, exactly as the
   runtime's workers do), so one machine can play a heterogeneous cluster.
   An emulated cluster whose ``runtime_timing`` is ``modelled`` is *paced*
   instead (as ``hetsync run --pace``): every step lasts the cluster's
   modelled step (``fixed_s + per_sample_s · b``, slowdown, noise,
   stragglers, delay), and that whole step is recorded as the measured one
   (:func:`emulated_step`): the emulated cluster's step is what it is, as a
   real cluster's, with no real gradient underneath to tell apart.
   A batch size that runs out of memory is dropped and recorded. After
   each step a worker sends a model-sized message to the server and waits
   for one back (``--exchange-bytes``: the model's size), as a push and a pull do in
   training; the server applies each one to its model (one ``add_``) and
   answers in arrival order. The round trips, taken while every worker
   steps and the server works, hold what a model transfer costs in a run
   beyond bytes / bandwidth: the processes' scheduling on a busy machine,
   the server's turn, copies. With ``--emulate`` each direction lasts at
   least bytes / the worker's emulated bandwidth, as ``--throttle`` makes
   the runtime's pushes and pulls last. Before it answers, the server does
   the runtime server's own work for a push and its reply
   (:class:`ServerWork`: the driver core, an ASP policy, the ledger's apply
   with the job's optimizer, a trace record, the reply encoded) and times
   it: what each message costs the server (the scenario's
   ``server_s_per_message``).
2. **Links.** One pair of ranks at a time (every worker with the server,
   then every two workers), the lower rank sends a tensor of each size and
   waits for a one-element acknowledgement, a few times per size (each
   repetition goes round all pairs). With
   ``--emulate`` a round trip lasts at least ``bytes / bandwidth`` of the
   emulated link (the slower end's, as the runtime's ``--throttle`` does)
   plus the smallest size's round trip (the link's own two latencies).
   Then the server's own link: every worker sends two models to the
   server at once (the incast of a BSP round), a few times; the server
   times how long it takes until all have arrived. With ``--emulate`` each
   worker's copy lasts at least bytes / its emulated bandwidth and the
   server's link is not throttled (the runtime's ``--throttle`` shapes the
   workers' links only).

Rank 0 gathers everything and writes ``raw.json`` in ``--out``;
:mod:`hetsync.advise.profile` fits the scenario to it. The same module runs under
a plain ``torchrun --nnodes ... -m hetsync.advise.profile_job`` on a real cluster.
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
SERVER_TRACE = "server-trace.jsonl"  # the trace records of the server's timed work (ServerWork)
ACK_ELEMENTS = 1
WARMUP_STEPS = 2  # untimed steps per batch size first


LARGE_LINK_BYTES = 1 << 20  # a small model's links are also timed with a transfer up to this size (8 models at most)


def link_sizes(model_bytes: int) -> list[int]:
    """Transfer sizes: one element (the latency), a quarter model, the model,
    two models, and for a small model one of up to 8 models (at most
    :data:`LARGE_LINK_BYTES`): a transfer of a fraction of a millisecond
    tells a link's bandwidth poorly on a busy machine, where a sleep or a
    wake-up is late by tens of microseconds."""
    nb = max(16, model_bytes - model_bytes % 4)
    large = min(8 * nb, max(2 * nb, LARGE_LINK_BYTES))
    return sorted({4, max(8, (nb // 4) - (nb // 4) % 4), nb, 2 * nb, large - large % 4})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hetsync.advise.profile_job", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, help="the job: workload, batch size (built-in name or YAML)")
    p.add_argument("--emulate", default=None, help="a scenario whose slowdowns, noise and links to apply for real")
    p.add_argument("--batch-sizes", required=True, help="comma-separated batch sizes to time")
    p.add_argument("--compute-s", type=float, required=True, help="seconds of timed steps per worker")
    p.add_argument("--link-bytes", required=True, help="comma-separated transfer sizes in bytes")
    p.add_argument("--link-reps", type=int, default=5, help="transfers per size and link")
    p.add_argument(
        "--exchange-bytes",
        type=int,
        default=0,
        help="size of the message sent to the server (and back) after every timed step: the model's (default 0: none)",
    )
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
    exchange_bytes = args.exchange_bytes
    # the server's work is set up before the phase starts: the workers' first messages do not wait for it
    work = ServerWork(job, n, Path(args.out) / SERVER_TRACE) if rank == 0 and exchange_bytes > 0 else None
    dist.barrier()
    if rank > 0:
        compute = _compute_phase(rank - 1, job, emulated, sizes, args.compute_s, exchange_bytes)
    else:
        compute = _serve_exchanges(n, exchange_bytes, work)
    gathered = links_and_gather(rank, n, emulated, link_bytes, args.link_reps, compute)
    if rank == 0:
        out = Path(args.out)
        raw = raw_record(n, sizes, link_bytes, args.compute_s, args.emulate, gathered, paced_emulation=paced(emulated))
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
    incast = _incast_phase(rank, n, emulated, max(link_bytes), reps)
    gathered: list[Any] = [None] * (n + 1) if rank == 0 else []
    record = {"rank": rank, "compute": compute, "links": links} | ({"incast": incast} if rank == 0 else {})
    dist.gather_object(record, gathered if rank == 0 else None, dst=0)
    return gathered


def raw_record(
    n: int,
    sizes: list[int],
    link_bytes: list[int],
    compute_s: float,
    emulate: str | None,
    gathered: list[Any],
    *,
    paced_emulation: bool = False,
) -> dict[str, Any]:
    """``raw.json``'s common fields (what :func:`hetsync.advise.profile.fit_profile` reads);
    ``paced``: the emulated cluster's steps lasted its modelled step time."""
    return {
        "workers": n,
        "host": os.uname().nodename,
        "batch_sizes": sizes,
        "link_bytes": link_bytes,
        "compute_s": compute_s,
        "emulate": emulate,
        "paced": paced_emulation,
        "per_rank": sorted(gathered, key=lambda g: g["rank"]),
    }


def paced(emulated: Any) -> bool:
    """Whether an emulated cluster's steps last its modelled step time
    (``runtime_timing: modelled``, as ``hetsync run --pace`` makes them)
    rather than the real step stretched by its slowdown."""
    return emulated is not None and bool(emulated.timing.modelled)


def emulated_step(
    timing: Any, w: int, started_at: float, measured_s: float, now_s: float, batch: int, pace: bool
) -> float:
    """Sleep what the emulated cluster adds to a step of worker ``w`` that
    started at ``started_at`` (``time.perf_counter()``) and really took
    ``measured_s``; returns what the record's measured column holds: the
    real step, or (paced) the whole paced step, which on the emulated
    cluster is the step itself."""
    extra = timing.extra_sleep_s(w, measured_s, now_s, paced_batch=batch if pace else None)
    if extra > 0:
        time.sleep(extra)
    return time.perf_counter() - started_at if pace else measured_s


def _scenarios(job_name: str, emulate: str | None, n: int) -> tuple[Any, Any]:
    from hetsync.scenario import load_scenario

    job = load_scenario(job_name).with_workers(n)
    emulated = load_scenario(emulate).with_workers(n) if emulate else None
    return job, emulated


def _exchange_tensor(nbytes: int) -> Any:
    import torch

    return torch.zeros(max(2, nbytes // 4), dtype=torch.float32)


EXCHANGE_DONE = -1.0  # a worker's last message of the compute phase (first element)


class ServerWork:
    """The runtime server's own work for one push and its reply, on the
    job's real model: the step's and the push's facts through the driver
    core (trace records), the policy's answer (ASP: apply the gradient with
    the job's optimizer, pull and step again), the pull's command encoded
    with the model as the runtime's protocol sends it. What the runtime
    server adds to each message beyond the wire, timed where it runs."""

    def __init__(self, sc: Any, n: int, trace_path: Path | None) -> None:
        import torch

        from hetsync.driver import DriverCore, policy_context
        from hetsync.ledger import Ledger
        from hetsync.optim import gradient_stepper, outer_stepper
        from hetsync.policies import make_policy
        from hetsync.runtime import protocol as P
        from hetsync.trace import TraceWriter
        from hetsync.workloads import make_workload

        workload = make_workload(sc.job.workload, **sc.job.workload_args)
        theta = workload.init_params(sc.job.seed)
        self.nbytes = sc.job.model_bytes if sc.job.model_bytes is not None else workload.model_nbytes
        policy = make_policy("asp", policy_context(sc, self.nbytes))
        self.trace = TraceWriter(trace_path)
        ledger = Ledger(
            policy,
            workload,
            theta,
            self.trace,
            stepper=gradient_stepper(sc),
            outer=outer_stepper(sc, policy),
            global_batch=n * sc.job.batch_size,
        )
        self.core = DriverCore(policy, ledger, sc)
        self.policy = policy
        self.batch_size = sc.job.batch_size
        self.grad = torch.full_like(theta, 1e-6)  # a gradient small enough to leave the model usable
        self.channel = P.Channel(workload.n_params)
        self.steps = [0] * n
        for cmd in policy.start(0.0):
            self.core.start_step(cmd)  # type: ignore[arg-type]

    def handle(self, w: int, now_s: float) -> None:
        from hetsync.ledger import HeldPush
        from hetsync.policies.base import Apply, Pull
        from hetsync.runtime import protocol as P

        core, b = self.core, self.batch_size
        step = self.steps[w]
        self.steps[w] += 1
        version = core.ledger.version
        self.policy.on_event(
            core.computed(w, start_s=now_s, end_s=now_s, now_s=now_s, step=step, batch_size=b, base_version=version)
        )
        push_id = core.ledger.hold(HeldPush(w, "grad", self.grad, version, 1, b))
        for cmd in self.policy.on_event(core.push_arrived(push_id, start_s=now_s, now_s=now_s, nbytes=self.nbytes)):
            core.check(cmd)
            if isinstance(cmd, Apply):
                core.ledger.apply(cmd, now_s)
            elif isinstance(cmd, Pull) and cmd.then is not None and core.start_step(cmd.then):
                order = P.StepOrder(batch_size=b, push_after=cmd.then.push)
                work = P.WorkCmd(pull=P.PullOrder(version=core.ledger.version, sent_s=now_s), step=order)
                self.channel.pack_message(work, core.ledger.theta)

    def close(self) -> None:
        """The trace was written for its cost only: it goes."""
        self.trace.close()
        if self.trace.path is not None:
            self.trace.path.unlink(missing_ok=True)


def _serve_exchanges(n: int, nbytes: int, work: ServerWork | None = None) -> dict[str, Any]:
    """Rank 0 during the compute phase: answer every worker's message with
    the model, in arrival order, after applying it (one ``add_``), until
    every worker has said it is done. With ``work``, each message first gets
    the runtime server's work for a push (:class:`ServerWork`), and the time
    from its arrival to the reply's send is recorded per message
    (``handled``: [worker, seconds] rows, in arrival order). Returns how
    many it answered, and those rows."""
    import torch.distributed as dist

    if nbytes <= 0:
        return {}
    model, buf = _exchange_tensor(nbytes), _exchange_tensor(nbytes)
    done, answered = 0, 0
    handled: list[list[float]] = []
    t0 = time.perf_counter()
    while done < n:
        src = dist.recv(buf)
        start = time.perf_counter()
        if float(buf[0]) == EXCHANGE_DONE:
            done += 1
            continue
        if work is not None:
            work.handle(src - 1, start - t0)
        model.add_(buf, alpha=-0.01)
        dist.send(model, dst=src)
        handled.append([src - 1, time.perf_counter() - start])
        answered += 1
    if work is not None:
        work.close()
    return {"exchanges_answered": answered, "handled": handled}


def _exchange(payload: Any, reply: Any, Bps: float) -> tuple[float, float]:
    """One push and pull with the server: each direction lasts at least
    ``bytes / Bps`` (the push sleeps before it is sent, the pull after it
    arrived, as the runtime's throttled worker does). Returns (seconds,
    the throttle's floor for both directions)."""
    import torch.distributed as dist

    one_way_s = payload.numel() * 4 / Bps if math.isfinite(Bps) else 0.0
    start = time.perf_counter()
    if one_way_s > 0:
        time.sleep(one_way_s)
    payload[0] = 1.0
    dist.send(payload, dst=0)
    dist.recv(reply, src=0)
    if one_way_s > 0:
        time.sleep(one_way_s)
    return time.perf_counter() - start, 2 * one_way_s


def _compute_phase(
    w: int, sc: Any, emulated: Any, sizes: list[int], compute_s: float, exchange_bytes: int = 0
) -> dict[str, Any]:
    """Timed steps of worker ``w``: ``steps`` as [start_s, batch, seconds, measured_s] rows,
    and (``exchange_bytes`` > 0) after each a round trip with the server: ``exchanges`` as
    [start_s, seconds, throttle floor s] rows."""
    import torch
    import torch.distributed as dist

    from hetsync.driver.timing import TimingModel
    from hetsync.workloads import make_workload

    workload = make_workload(sc.job.workload, **sc.job.workload_args)
    params = workload.init_params(sc.job.seed)
    shard = workload.make_shards(sc.cluster.workers, sc.job.seed, sc.job.label_skew)[w]
    timing = TimingModel(emulated) if emulated is not None else None
    pace = paced(emulated)
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
    exchanges: list[list[float]] = []
    payload = reply = None
    if exchange_bytes > 0:
        payload, reply = _exchange_tensor(exchange_bytes), _exchange_tensor(exchange_bytes)
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
            measured = emulated_step(timing, w, start, measured, start - t0, b, pace)
        steps.append([start - t0, b, time.perf_counter() - start, measured])
        if payload is not None:
            at = time.perf_counter() - t0
            seconds, floor_s = _exchange(payload, reply, _link_floor_Bps(emulated, 0, w + 1, at))
            exchanges.append([at, seconds, floor_s])
    if payload is not None:
        payload[0] = EXCHANGE_DONE
        dist.send(payload, dst=0)
    out = {"steps": steps, "failed_batches": {str(b): why for b, why in failed.items()}}
    if payload is not None:
        out |= {"exchanges": exchanges, "exchange_bytes": payload.numel() * 4}
    return out


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
    """Timed transfers, one pair at a time; the initiator of each pair
    records [bytes, seconds] rows. Each repetition goes round every pair
    (the first round untimed: a pair's first transfer sets up its
    connection), so that a stall of a busy machine costs one repetition of
    a few pairs, not every repetition of one."""
    import torch
    import torch.distributed as dist

    ack = torch.zeros(ACK_ELEMENTS, dtype=torch.float32)
    payloads = {nb: torch.zeros(max(1, nb // 4), dtype=torch.float32) for nb in link_bytes}
    smallest = min(payloads)
    pairs = _pairs(n)
    tiny_s = dict.fromkeys(pairs, math.inf)  # per pair, the fastest round trip of the smallest size: two latencies
    rows: dict[tuple[int, int], list[list[float]]] = {pair: [] for pair in pairs}
    t0 = time.perf_counter()
    for rep in range(reps + 1):
        for a, b in pairs:
            if rank == a:
                for nb, t in payloads.items():
                    start = time.perf_counter()
                    dist.send(t, dst=b)
                    dist.recv(ack, src=b)
                    if nb == smallest:
                        tiny_s[(a, b)] = min(tiny_s[(a, b)], time.perf_counter() - start)
                    if rep == 0:
                        continue
                    # an emulated link: latency (this one's) + bytes / bandwidth there, latency back
                    extra_s = tiny_s[(a, b)] if nb > smallest else 0.0
                    floor_s = nb / _link_floor_Bps(emulated, a, b, start - t0) + extra_s
                    left = floor_s - (time.perf_counter() - start)
                    if left > 0:
                        time.sleep(left)
                    rows[(a, b)].append([t.numel() * 4, time.perf_counter() - start])
            elif rank == b:
                for t in payloads.values():
                    buf = torch.empty_like(t)
                    dist.recv(buf, src=a)
                    dist.send(ack, dst=a)
            dist.barrier()
    return [{"a": a, "b": b, "transfers": rows[(a, b)]} for a, b in pairs if rank == a]


def _incast_phase(rank: int, n: int, emulated: Any, nbytes: int, reps: int) -> list[list[float]]:
    """Every worker sends ``nbytes`` to the server at once, ``reps`` times
    (after a barrier each); rank 0 records [bytes per worker, seconds until
    the last arrived] rows, the other ranks nothing."""
    import torch
    import torch.distributed as dist

    rows: list[list[float]] = []
    if n < 2:
        return rows
    bufs = [torch.zeros(max(1, nbytes // 4), dtype=torch.float32) for _ in range(n if rank == 0 else 1)]
    t0 = time.perf_counter()
    for _ in range(reps + 1):  # the first is untimed
        dist.barrier()
        start = time.perf_counter()
        if rank == 0:
            works = [dist.irecv(bufs[r - 1], src=r) for r in range(1, n + 1)]
            for work in works:
                work.wait()
            rows.append([bufs[0].numel() * 4, time.perf_counter() - start])
        else:
            Bps = _link_floor_Bps(emulated, 0, rank, start - t0)
            if math.isfinite(Bps):
                time.sleep(bufs[0].numel() * 4 / Bps)
            dist.send(bufs[0], dst=0)
    dist.barrier()
    return rows[1:]


if __name__ == "__main__":
    sys.exit(main())
