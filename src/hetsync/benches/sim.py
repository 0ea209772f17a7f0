"""``hetsync bench sim``: how fast the simulator is, what batching the gradient
math buys, what its bookkeeping costs, and whether 10,240 workers fit.

First, the floor of the gradient math of the main scenario's workload: its
FLOPs per step (``torch.utils.flop_counter``), and in CPU time per model one
gradient call per model, one vmapped call of up to ``MAX_GROUP`` models, and
that call's matrix multiplies alone (``torch.profiler``); one call per model
over the matrix multiplies alone bounds what batching can give the math.

For the main scenario (``large-1024``) and each policy (ASP, BSP) it runs,
each in a fresh process so that peak memory is that run's own:

- the real math batched (steps in flight evaluated together, the default),
- the real math one gradient call per step (``batch_math=False``),
- the math switched off (the event loop, the protocol and the trace alone),

and prints steps/s of both and their ratio, run time / math time, math,
evaluation and other bookkeeping per step, events/s and steps/s with the
math off (an event: a step's end, a network delivery, a timer, an
evaluation, a capacity change), and the peak resident memory of each
process. One more math-off run times every
call into the fluid network (:class:`hetsync.sim.network.Network`) and
prints the network's share of that run's time: how much of the bookkeeping
the flow sharing is (a separate run, so that the timers' own cost does not
count against events/s). And what events/s could be at most without the
flow sharing: a math-off run records every answer of the network, and the
same run over a network that only replays those answers (it must write the
same trace, sha256 compared) costs everything but the sharing; with and
without the trace, and the real run without the trace. Each of the three runs
``--repeat`` times (default 2), batched and unbatched alternating so that
both see the same (possibly busy) machine, and the fastest of each counts:
their ratio is measured side by side. Then it runs the large scenario
(``large-10k``) once with batched math and prints its wall time (process
start to end, setup included) and peak memory. Every run writes its trace,
as in normal use.

``--before DIR`` measures an older version of hetsync side by side with this
one: ``DIR`` is the ``src`` folder of that version (for instance
``git archive <commit> src | tar -x -C /tmp/old`` and ``--before
/tmp/old/src``). Its batched, unbatched and math-off runs alternate with
this version's, in fresh processes that import hetsync from ``DIR`` (timed
by this module's code, so both alike; that version's ``Simulation`` must
take ``math`` and ``batch_math``), and the rows give both figures and their
ratio (after / before) in steps per second, the same work on both sides,
so that a speed-up is measured on the same (possibly busy) machine at the
same time. Events per second are given as each version counts events; when
both runs wrote the same trace (sha256) and the counts differ, also this
version's time over the older version's count.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib
import math
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hetsync.benches.common import Row, split_list
from hetsync.errors import BadInput
from hetsync.forkserver import fresh_process_context

NAME = "sim"

_MiB = 1024 * 1024
# The network's public calls; none calls another, so their times add up.
_NETWORK_CALLS = ("start_flow", "next_event_s", "advance", "set_capacity")
# torch.profiler's names of the matrix multiplies a vmapped gradient runs
_MATMULS = frozenset({"aten::bmm", "aten::mm", "aten::addmm", "aten::baddbmm", "aten::addbmm"})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="large-1024", help="main scenario (default: %(default)s)")
    p.add_argument(
        "--policies", "--policy", dest="policies", default="asp,bsp", help="policies on it (default: %(default)s)"
    )
    p.add_argument("--max-steps", type=int, default=None, help="override max_steps (per worker) of the main scenario")
    p.add_argument(
        "--large",
        default="large-10k",
        help="scenario for the scale run, or 'none' to skip it (default: %(default)s)",
    )
    p.add_argument("--large-policy", default="asp", help="policy of the scale run (default: %(default)s)")
    p.add_argument("--large-max-steps", type=int, default=None, help="override max_steps of the scale run")
    p.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="batched and unbatched runs per policy, alternating; the fastest of each counts (default: %(default)s)",
    )
    p.add_argument(
        "--before",
        default=None,
        metavar="DIR",
        help="the src folder of an older hetsync, measured side by side with this one (after / before ratios)",
    )


def run(args: argparse.Namespace) -> list[Row]:
    large = None if args.large == "none" else args.large
    return bench_sim(
        args.scenario,
        split_list(args.policies, "--policies"),
        max_steps=args.max_steps,
        large=large,
        large_policy=args.large_policy,
        large_max_steps=args.large_max_steps,
        repeat=args.repeat,
        before=args.before,
    )


def _overrides(max_steps: int | None, flag: str) -> dict[str, Any]:
    if max_steps is None:
        return {}
    if max_steps < 1:
        raise BadInput(f"{flag} must be >= 1, got {max_steps}")
    return {"max_steps": max_steps}


@contextlib.contextmanager
def _timed_network(spent_s: list[float]) -> Iterator[None]:
    """Add the time of every call into the network to ``spent_s[0]`` while open."""
    from hetsync.sim.network import Network

    def timed(call: Any) -> Any:
        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                spent_s[0] += time.perf_counter() - t0

        return wrapper

    saved = {name: getattr(Network, name) for name in _NETWORK_CALLS}
    try:
        for name, call in saved.items():
            setattr(Network, name, timed(call))
        yield
    finally:
        for name, call in saved.items():
            setattr(Network, name, call)


def _measure(
    scenario_name: str,
    overrides: dict[str, Any],
    policy: str,
    math: bool,
    batch_math: bool,
    warm_up: bool,
    time_network: bool = False,
) -> dict[str, Any]:
    """One run in this (fresh) process: its summary's timings and the process's peak memory.

    ``warm_up`` first runs one step per worker untimed, so one-off costs
    (imports on the first vmapped call, first-touch allocations) do not
    count against the timed run. ``time_network``: also time every call
    into the network during the timed run (``network_s``).
    """
    from hetsync.scenario import load_scenario
    from hetsync.sim.engine import Simulation
    from hetsync.steptime import resolve_measured

    start = time.perf_counter()
    scenario = resolve_measured(load_scenario(scenario_name, **overrides))
    network_s = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        if warm_up:
            small = resolve_measured(load_scenario(scenario_name, **{**overrides, "max_steps": 1}))
            Simulation(small, policy, math=math, batch_math=batch_math).run()
        trace = Path(tmp) / "trace.jsonl"
        s = Simulation(scenario, policy, trace_path=trace, math=math, batch_math=batch_math)
        cpu_t0 = time.process_time()
        with _timed_network(network_s) if time_network else contextlib.nullcontext():
            summary = s.run().summary
        cpu_s = time.process_time() - cpu_t0
        trace_sha256 = hashlib.sha256(trace.read_bytes()).hexdigest()
    keys = ("steps", "events", "host_time_s", "math_time_s", "eval_time_s", "batched_calls", "workers", "scenario")
    out = {k: summary[k] for k in keys}
    out["network_s"] = network_s[0] if time_network else None
    out["trace_sha256"] = trace_sha256
    out["cpu_s"] = cpu_s  # the run's CPU time: less sensitive than host_time_s to other processes' load
    out["process_s"] = time.perf_counter() - start
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return out


class _RecordedNetwork:
    """A network that passes every call to ``net`` and records its answers
    (tokens as start order), for :class:`_ReplayedNetwork`."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self.order: dict[int, int] = {}  # id(token) -> start order
        self.tokens: list[object] = []  # (kept alive, so that ids stay unique)
        self.next_s: list[float] = []
        self.delivered: list[list[int]] = []

    def start_flow(self, now_s: float, src: int, dst: int, nbytes: int | float, token: object) -> None:
        self.order[id(token)] = len(self.tokens)
        self.tokens.append(token)
        self.net.start_flow(now_s, src, dst, nbytes, token)

    def next_event_s(self) -> float:
        t: float = self.net.next_event_s()
        self.next_s.append(t)
        return t

    def advance(self, now_s: float) -> list[object]:
        out: list[object] = self.net.advance(now_s)
        self.delivered.append([self.order[id(token)] for token in out])
        return out

    def set_capacity(self, now_s: float, node: int, **capacities: float | None) -> None:
        self.net.set_capacity(now_s, node, **capacities)


class _ReplayedNetwork:
    """A network that shares nothing: each call answers what the recorded
    run's network answered to the same call (the same run calls it alike),
    so a run over it costs everything but the flow sharing."""

    def __init__(self, recorded: _RecordedNetwork) -> None:
        self.tokens: list[object] = []
        self._next_s = iter(recorded.next_s).__next__
        self._delivered = iter(recorded.delivered).__next__

    def start_flow(self, now_s: float, src: int, dst: int, nbytes: int | float, token: object) -> None:
        self.tokens.append(token)

    def next_event_s(self) -> float:
        return self._next_s()

    def advance(self, now_s: float) -> list[object]:
        tokens = self.tokens
        return [tokens[i] for i in self._delivered()]

    def set_capacity(self, now_s: float, node: int, **capacities: float | None) -> None:
        pass


def _measure_floor(scenario_name: str, overrides: dict[str, Any], policy: str, repeat: int) -> dict[str, Any]:
    """Math-off runs in this (fresh) process: one with the network's answers
    recorded, then, alternating ``repeat`` times, the same run over the
    replayed answers (no flow sharing), with and without the trace, and the
    real run without the trace. The fastest of each, and whether the
    replayed run wrote the recorded run's trace (it must)."""
    from hetsync.scenario import load_scenario
    from hetsync.sim.engine import Simulation
    from hetsync.steptime import resolve_measured

    scenario = resolve_measured(load_scenario(scenario_name, **overrides))
    Simulation(
        resolve_measured(load_scenario(scenario_name, **{**overrides, "max_steps": 1})), policy, math=False
    ).run()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        sim = Simulation(scenario, policy, trace_path=trace, math=False)
        recorded = sim.net = _RecordedNetwork(sim.net)  # type: ignore[assignment]
        summary = sim.run().summary
        out["events"], out["steps"] = summary["events"], summary["steps"]
        recorded_sha = hashlib.sha256(trace.read_bytes()).hexdigest()
        for _ in range(repeat):
            for mode in ("replayed", "replayed, no trace", "no trace"):
                path = None if "no trace" in mode else trace
                sim = Simulation(scenario, policy, trace_path=path, math=False)
                if mode.startswith("replayed"):
                    sim.net = _ReplayedNetwork(recorded)  # type: ignore[assignment]
                run = sim.run().summary
                if run["events"] != out["events"] or run["steps"] != out["steps"]:
                    raise RuntimeError(f"{policy}: the {mode} run differs from the recorded one")
                out[mode] = min(out.get(mode, math.inf), run["host_time_s"])
                if path is not None:
                    out["same_trace"] = hashlib.sha256(trace.read_bytes()).hexdigest() == recorded_sha
    return out


def _floor_of_events_rows(where: str, floor: dict[str, Any], repeat: int) -> list[Row]:
    """What events/s with the math off could be without the flow sharing, and without the trace too."""
    events, steps = floor["events"], floor["steps"]
    same = "the same trace, sha256 equal" if floor.get("same_trace") else "NOT the same trace: figures invalid"
    rows: list[Row] = []
    for mode, what in (
        ("no trace", "no trace written"),
        ("replayed", f"the network's answers replayed from a recorded run ({same}): no flow sharing"),
        ("replayed, no trace", "the network's answers replayed and no trace written"),
    ):
        rows += [
            {
                "metric": f"events per second, math off, {mode}",
                "value": events / floor[mode],
                "unit": "events/s",
                "setting": f"{where}, fastest of {repeat}: {what}",
            },
            {
                "metric": f"bookkeeping per step, math off, {mode}",
                "value": 1e6 * floor[mode] / max(1, steps),
                "unit": "us",
                "setting": f"{where}, same runs",
            },
        ]
    return rows


def _measure_from(source: str, *args: Any) -> dict[str, Any]:
    """:func:`_measure` (this one: both versions are measured alike) of the
    simulator of the hetsync whose ``src`` folder is ``source``, in a fresh
    process: the hetsync imported so far is forgotten, and ``_measure``'s
    imports, made as it runs, find that one."""
    for name in [m for m in sys.modules if m == "hetsync" or m.startswith("hetsync.")]:
        del sys.modules[name]
    sys.path.insert(0, source)
    importlib.invalidate_caches()
    out = _measure(*args)
    out["source"] = str(Path(importlib.import_module("hetsync").__file__ or "").parent.parent)
    return out


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null while open (what C++ libraries print there too)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _math_floor(scenario_name: str, overrides: dict[str, Any], models: int, repeat: int = 5) -> dict[str, Any]:
    """What the gradient math of the scenario's workload costs per model, in
    CPU time on one thread (fastest of ``repeat``): one :meth:`gradient` call
    per model, one vmapped :meth:`gradients` call of ``models`` models, and
    the part of that call spent in matrix multiplies (``torch.profiler``:
    ``aten::bmm`` and friends); with its FLOPs (``torch.utils.flop_counter``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    from hetsync.scenario import load_scenario
    from hetsync.workloads import make_workload

    sc = load_scenario(scenario_name, **overrides)
    wl = make_workload(sc.job.workload, **sc.job.workload_args)
    shards = wl.make_shards(max(models, sc.cluster.workers), sc.job.seed, sc.job.label_skew)
    base = wl.init_params(sc.job.seed)
    params = torch.stack([base + 1e-3 * i for i in range(models)])  # models that differ, as in ASP
    batches = [shards[i].next_batch(sc.job.batch_size) for i in range(models)]
    x, y = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
    torch.set_num_threads(1)
    with FlopCounterMode(display=False) as counter:
        wl.gradient(params[0], x[0], y[0])
    singles = min(models, 64)

    def fastest(call: Any) -> float:
        call()  # warm up
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            call()
            best = min(best, time.process_time() - t0)
        return best

    one_s = fastest(lambda: [wl.gradient(params[i], x[i], y[i]) for i in range(singles)]) / singles
    vmap_s = fastest(lambda: wl.gradients(params, x, y)) / models
    matmul_s = float("inf")
    for _ in range(3):
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:  # (kineto's start/stop lines)
            wl.gradients(params, x, y)
        spent_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in _MATMULS)
        matmul_s = min(matmul_s, spent_us * 1e-6 / models)
    return {
        "flops": counter.get_total_flops(),
        "one_s": one_s,
        "vmap_s": vmap_s,
        "matmul_s": matmul_s,
        "models": models,
        "workload": wl.name,
    }


def _floor_rows(where: str, floor: dict[str, Any]) -> list[Row]:
    """The math's floor: FLOPs, each way's cost per model, and the best ratio batching can give."""
    flops = floor["flops"]
    k = floor["models"]
    rows: list[Row] = [
        {
            "metric": "gradient FLOPs per step",
            "value": flops / 1e6,
            "unit": "MFLOP",
            "setting": f"{where}, torch.utils.flop_counter",
        },
    ]
    for metric, key, how in (
        ("gradient math per model, one call per model", "one_s", "unbatched"),
        ("gradient math per model, vmapped", "vmap_s", f"{k} models in one call"),
        ("matrix multiplies per model, vmapped", "matmul_s", f"{k} models in one call, aten::bmm/mm (torch.profiler)"),
    ):
        rows.append({"metric": metric, "value": floor[key] * 1e6, "unit": "us", "setting": f"{where}, {how}, CPU time"})
        rows.append(
            {
                "metric": f"{metric}, rate",
                "value": flops / floor[key] / 1e9,
                "unit": "GFLOP/s",
                "setting": f"{where}, {how}",
            }
        )
    rows.append(
        {
            "metric": "bound on batched / unbatched math",
            "value": _ratio(floor["one_s"], floor["matmul_s"]),
            "unit": "ratio",
            "setting": f"{where}: one call per model / the vmapped call's matrix multiplies alone (no bookkeeping, "
            "no other op): what batching could give at most",
        }
    )
    return rows


def _in_fresh_process_call(call: Any, *args: Any) -> dict[str, Any]:
    """``call(*args)`` in a new process (torch's state, threads and caches its own)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=fresh_process_context()) as pool:
        result: dict[str, Any] = pool.submit(call, *args).result()
        return result


def _in_fresh_process(*args: Any, source: str | None = None) -> dict[str, Any]:
    """:func:`_measure` in a new interpreter, so its peak memory is its own;
    ``source``: of the hetsync in that ``src`` folder (``--before``)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=fresh_process_context()) as pool:
        if source is None:
            return pool.submit(_measure, *args).result()
        return pool.submit(_measure_from, source, *args).result()


def _source_dir(before: str | Path | None) -> str | None:
    """``--before``'s folder, checked: it must hold a hetsync package."""
    if before is None:
        return None
    path = Path(before).expanduser().resolve()
    if not (path / "hetsync" / "__init__.py").is_file():
        raise BadInput(
            f"--before {before}: not the src folder of a hetsync checkout (no hetsync/__init__.py in it); "
            "make one with `git archive <commit> src | tar -x -C DIR` and pass DIR/src"
        )
    return str(path)


def bench_sim(
    scenario_name: str = "large-1024",
    policies: list[str] | None = None,
    *,
    max_steps: int | None = None,
    large: str | None = "large-10k",
    large_policy: str = "asp",
    large_max_steps: int | None = None,
    repeat: int = 2,
    before: str | Path | None = None,
) -> list[Row]:
    from hetsync.driver import policy_context
    from hetsync.policies import make_policy
    from hetsync.scenario import load_scenario
    from hetsync.sim.batch import MAX_GROUP

    overrides = _overrides(max_steps, "--max-steps")
    large_overrides = _overrides(large_max_steps, "--large-max-steps")
    policies = policies or ["asp", "bsp"]
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise BadInput(f"--repeat must be an integer >= 1, got {repeat!r}")
    scenario = load_scenario(scenario_name, **overrides)  # bad names and values: exit 2 before the long runs
    for policy in [*policies, *([large_policy] if large else [])]:
        make_policy(policy, policy_context(scenario))  # unknown names fail here, before any run
    if large is not None:
        load_scenario(large, **large_overrides)
    source = _source_dir(before)
    versions = [None] if source is None else [None, source]

    rows: list[Row] = []
    floor = _in_fresh_process_call(_math_floor, scenario_name, overrides, min(MAX_GROUP, scenario.cluster.workers))
    rows += _floor_rows(f"{scenario.name}, {floor['workload']}", floor)
    for policy in policies:
        where = f"{scenario.name}, {policy}, {scenario.cluster.workers} workers"
        # (version, mode) -> runs; mode True / False: batched / unbatched math, None: math off
        runs: dict[tuple[str | None, bool | None], list[dict[str, Any]]] = {}
        for _ in range(repeat):  # alternating, so every mode and version sees the same (busy) machine
            for mode in (True, False, None):
                for version in versions:
                    args = (scenario_name, overrides, policy, mode is not None, bool(mode), True)
                    runs.setdefault((version, mode), []).append(_in_fresh_process(*args, source=version))
        best = {key: min(found, key=lambda r: r["host_time_s"]) for key, found in runs.items()}
        timed = _in_fresh_process(scenario_name, overrides, policy, False, False, True, True)
        floor_runs = _in_fresh_process_call(_measure_floor, scenario_name, overrides, policy, repeat)
        rows += _policy_rows(where, best[None, True], best[None, False], best[None, None], repeat)
        rows += _network_rows(where, timed)
        rows += _floor_of_events_rows(where, floor_runs, repeat)
        if source is not None:
            rows += _before_rows(where, runs, source, repeat)
    if large is not None:
        big = _in_fresh_process(large, large_overrides, large_policy, True, True, False)
        where = f"{big['scenario']}, {large_policy}, {big['workers']} workers, batched math"
        rows += [
            {
                "metric": "wall time, setup included",
                "value": big["process_s"],
                "unit": "s",
                "setting": f"{where} (target < 600)",
            },
            {
                "metric": "peak memory (process RSS)",
                "value": big["peak_rss_bytes"] / _MiB,
                "unit": "MiB",
                "setting": f"{where} (target < 4096)",
            },
            {"metric": "steps simulated", "value": big["steps"], "unit": "steps", "setting": where},
            {
                "metric": "gradient steps simulated per second",
                "value": big["steps"] / big["host_time_s"],
                "unit": "steps/s",
                "setting": where,
            },
            {
                "metric": "run time / gradient-math time",
                "value": _ratio(big["host_time_s"], big["math_time_s"]),
                "unit": "ratio",
                "setting": where,
            },
        ]
    return rows


def _before_rows(
    where: str, runs: dict[tuple[str | None, bool | None], list[dict[str, Any]]], source: str, repeat: int
) -> list[Row]:
    """This version against ``--before``'s, run for run: both figures and after / before
    (of the fastest runs, and of the least CPU time)."""
    best = {key: min(found, key=lambda r: r["host_time_s"]) for key, found in runs.items()}
    rows: list[Row] = []
    for mode, label in ((True, "batched math"), (False, "unbatched math"), (None, "math off")):
        # steps per second: the same work on both sides (events are not: what counts as one may differ)
        metric, unit = "gradient steps simulated per second", "steps/s"
        before, after = (best[v, mode]["steps"] / best[v, mode]["host_time_s"] for v in (source, None))
        setting = f"{where}, {label}, fastest of {repeat}"
        old_cpu, new_cpu = (min(r["cpu_s"] for r in runs[v, mode]) for v in (source, None))
        rows += [
            {"metric": f"{metric}, before", "value": before, "unit": unit, "setting": f"{setting}, {source}"},
            {"metric": f"{metric}, after", "value": after, "unit": unit, "setting": setting},
            {
                "metric": f"{metric}, after / before",
                "value": _ratio(after, before),
                "unit": "ratio",
                "setting": f"{setting}, measured alternately",
            },
            {
                "metric": f"{metric}, after / before, CPU time",
                "value": _ratio(old_cpu, new_cpu),
                "unit": "ratio",
                "setting": f"{where}, {label}, the least CPU time of {repeat} each (the same steps): "
                "less sensitive than the wall time to other processes on the machine",
            },
        ]
    old, new = best[source, None], best[None, None]
    setting = f"{where}, math off, fastest of {repeat}"
    rows += [
        {
            "metric": "events per second, math off, before",
            "value": old["events"] / old["host_time_s"],
            "unit": "events/s",
            "setting": f"{setting}, {source}: {old['events']:,} events, as that version counts them",
        },
        {
            "metric": "events per second, math off, after",
            "value": new["events"] / new["host_time_s"],
            "unit": "events/s",
            "setting": f"{setting}: {new['events']:,} events, as this version counts them",
        },
    ]
    if old["trace_sha256"] == new["trace_sha256"] and old["events"] != new["events"]:
        rows.append(
            {
                "metric": "events per second, math off, after, counted as before",
                "value": old["events"] / new["host_time_s"],
                "unit": "events/s",
                "setting": f"{setting}: the same run (sha256 of both traces equal), {old['events']:,} events "
                "as the before version counts them, over this version's time",
            }
        )
    return rows


def _network_rows(where: str, timed: dict[str, Any]) -> list[Row]:
    """The network's share of a math-off run's time, every call into it timed."""
    return [
        {
            "metric": "network share of run time, math off",
            "value": 100.0 * _ratio(timed["network_s"], timed["host_time_s"]),
            "unit": "%",
            "setting": f"{where}: flow sharing, every network call timed (a separate run)",
        },
        {
            "metric": "network time per event, math off",
            "value": 1e6 * timed["network_s"] / max(1, timed["events"]),
            "unit": "us",
            "setting": f"{where}, same run",
        },
    ]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def _policy_rows(
    where: str, batched: dict[str, Any], single: dict[str, Any], bare: dict[str, Any], repeat: int
) -> list[Row]:
    def per_step_us(run: dict[str, Any], seconds: float) -> float:
        return 1e6 * seconds / max(1, run["steps"])

    rows: list[Row] = []
    for label, run in (("batched", batched), ("unbatched", single)):
        rows += [
            {
                "metric": "gradient steps simulated per second",
                "value": run["steps"] / run["host_time_s"],
                "unit": "steps/s",
                "setting": f"{where}, {label} math, fastest of {repeat}",
            },
            {
                "metric": "run time / gradient-math time",
                "value": _ratio(run["host_time_s"], run["math_time_s"]),
                "unit": "ratio",
                "setting": f"{where}, {label} math",
            },
            {
                "metric": "gradient math per step",
                "value": per_step_us(run, run["math_time_s"]),
                "unit": "us",
                "setting": f"{where}, {label} math",
            },
        ]
    rows += [
        {
            "metric": "batched / unbatched steps per second",
            "value": (batched["steps"] / batched["host_time_s"]) / (single["steps"] / single["host_time_s"]),
            "unit": "ratio",
            "setting": f"{where} (target >= 5)",
        },
        {
            "metric": "gradient calls, batched",
            "value": batched["batched_calls"],
            "unit": "calls",
            "setting": f"{where}, for {batched['steps']:,} steps",
        },
        {
            "metric": "evaluation per step",
            "value": per_step_us(batched, batched["eval_time_s"]),
            "unit": "us",
            "setting": f"{where}, batched math run",
        },
        {
            "metric": "other bookkeeping per step",
            "value": per_step_us(batched, batched["host_time_s"] - batched["math_time_s"] - batched["eval_time_s"]),
            "unit": "us",
            "setting": f"{where}, batched math run: events, policy, network, trace",
        },
        {
            "metric": "events per second, math off",
            "value": bare["events"] / bare["host_time_s"],
            "unit": "events/s",
            "setting": f"{where}: {bare['events']:,} events (step ends, network deliveries, timers, "
            "evaluations) (target >= 100,000)",
        },
        {
            "metric": "gradient steps simulated per second, math off",
            "value": bare["steps"] / bare["host_time_s"],
            "unit": "steps/s",
            "setting": f"{where}, fastest of {repeat}",
        },
        {
            "metric": "bookkeeping per step, math off",
            "value": per_step_us(bare, bare["host_time_s"]),
            "unit": "us",
            "setting": f"{where}: events, policy, network, trace",
        },
        {
            "metric": "peak memory (process RSS)",
            "value": batched["peak_rss_bytes"] / _MiB,
            "unit": "MiB",
            "setting": f"{where}, batched math",
        },
        {
            "metric": "peak memory (process RSS)",
            "value": single["peak_rss_bytes"] / _MiB,
            "unit": "MiB",
            "setting": f"{where}, unbatched math",
        },
        {"metric": "steps simulated", "value": batched["steps"], "unit": "steps", "setting": where},
    ]
    return rows
