"""``hetsync bench sim``: how fast the simulator is, what batching the gradient
math buys, what its bookkeeping costs, and whether 10,240 workers fit.

For the main scenario (``large-1024``) and each policy (ASP, BSP) it runs,
each in a fresh process so that peak memory is that run's own:

- the real math batched (steps in flight evaluated together, the default),
- the real math one gradient call per step (``batch_math=False``),
- the math switched off (the event loop, the protocol and the trace alone),

and prints steps/s of both and their ratio, run time / math time, math,
evaluation and other bookkeeping per step, events/s with the math off, and
the peak resident memory of each process. One more math-off run times every
call into the fluid network (:class:`hetsync.sim.network.Network`) and
prints the network's share of that run's time: how much of the bookkeeping
the flow sharing is (a separate run, so that the timers' own cost does not
count against events/s). Each of the three runs
``--repeat`` times (default 2), batched and unbatched alternating so that
both see the same (possibly busy) machine, and the fastest of each counts:
their ratio is measured side by side. Then it runs the large scenario
(``large-10k``) once with batched math and prints its wall time (process
start to end, setup included) and peak memory. Every run writes its trace,
as in normal use.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import resource
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hetsync.benches.common import Row, split_list
from hetsync.errors import BadInput

NAME = "sim"

_MiB = 1024 * 1024
# The network's public calls; none calls another, so their times add up.
_NETWORK_CALLS = ("start_flow", "next_event_s", "advance", "set_capacity")


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

    start = time.perf_counter()
    scenario = load_scenario(scenario_name, **overrides)
    network_s = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        if warm_up:
            small = load_scenario(scenario_name, **{**overrides, "max_steps": 1})
            Simulation(small, policy, math=math, batch_math=batch_math).run()
        s = Simulation(scenario, policy, trace_path=Path(tmp) / "trace.jsonl", math=math, batch_math=batch_math)
        with _timed_network(network_s) if time_network else contextlib.nullcontext():
            summary = s.run().summary
    keys = ("steps", "events", "host_time_s", "math_time_s", "eval_time_s", "batched_calls", "workers", "scenario")
    out = {k: summary[k] for k in keys}
    out["network_s"] = network_s[0] if time_network else None
    out["process_s"] = time.perf_counter() - start
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return out


def _in_fresh_process(*args: Any) -> dict[str, Any]:
    """:func:`_measure` in a new interpreter, so its peak memory is its own."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measure, *args).result()


def bench_sim(
    scenario_name: str = "large-1024",
    policies: list[str] | None = None,
    *,
    max_steps: int | None = None,
    large: str | None = "large-10k",
    large_policy: str = "asp",
    large_max_steps: int | None = None,
    repeat: int = 2,
) -> list[Row]:
    from hetsync.driver import policy_context
    from hetsync.policies import make_policy
    from hetsync.scenario import load_scenario

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

    rows: list[Row] = []
    for policy in policies:
        where = f"{scenario.name}, {policy}, {scenario.workers} workers"
        runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for _ in range(repeat):  # alternating, so both modes see the same (busy) machine
            for batch_math in (True, False):
                runs[batch_math].append(_in_fresh_process(scenario_name, overrides, policy, True, batch_math, True))
        batched, single = (min(runs[mode], key=lambda r: r["host_time_s"]) for mode in (True, False))
        bare = min(
            (_in_fresh_process(scenario_name, overrides, policy, False, False, True) for _ in range(repeat)),
            key=lambda r: r["host_time_s"],
        )
        timed = _in_fresh_process(scenario_name, overrides, policy, False, False, True, True)
        rows += _policy_rows(where, batched, single, bare, repeat)
        rows += _network_rows(where, timed)
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
            "setting": f"{where} (target >= 100,000)",
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
