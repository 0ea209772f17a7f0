"""Step cost from the model: time a workload's forward and backward on this
machine and fit ``time = fixed_s + per_sample_s · batch`` to it.

A scenario with ``per_sample_s: measured`` (or ``fixed_s: measured``) asks the
simulator to charge the workload's real step cost instead of a number from
the file. :func:`resolve_measured` times ``Workload.gradient`` on real shard
batches at a few batch sizes around the scenario's (b/2, b, 2b) with one
torch thread, as the simulator runs, fits the line with non-negative
coefficients (:func:`fit_step_cost`) and returns the scenario charged the
fitted figures (a :class:`~hetsync.scenario.StepCost` in its timing, which
names the keys measured and keeps the table). Whoever loads a scenario for a
simulation calls it (hetsync.runner.compare, hetsync.simulate, advise, the
benches); the simulator's constructor times nothing. The scenario's slowdowns,
noise, stragglers, load and delays then apply on top, as to any base cost.

Measurements are cached per workload, its arguments and the batch sizes for
the life of the process, so every policy of one comparison is charged the
same figures. Drivers use this module, and so can a profiling tool: it sits
beside them, not inside one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

from hetsync.algos.stepfit import fit_step_cost as fit_step_cost  # (also this module's API)
from hetsync.scenario import Scenario, StepCost, Table
from hetsync.workloads import Workload, make_workload

BUDGET_S = 1.0  # timed repetitions stop after this long (at least MIN_REPS each)
MIN_REPS = 5
MAX_REPS = 400
WARMUP = 3  # untimed calls per batch size first (allocator, caches, lazy init)
BATCHES_PER_SIZE = 4  # distinct real batches cycled through per size


def describe_step_cost(fixed_s: float, per_sample_s: float) -> str:
    """``fixed 0.41 ms + 0.012 ms/sample``"""
    return f"fixed {fixed_s * 1e3:.3g} ms + {per_sample_s * 1e3:.3g} ms/sample"


def batch_sizes_for(batch_size: int) -> tuple[int, ...]:
    """The batch sizes timed for a scenario batch b: b/2, b and 2b (distinct)."""
    return tuple(sorted({max(1, batch_size // 2), batch_size, 2 * batch_size}))


def measure_step_times(
    workload: Workload,
    batch_sizes: Sequence[int],
    *,
    seed: int = 0,
    budget_s: float | None = None,
) -> Table:
    """Median seconds of ``workload.gradient`` (forward and backward) at each
    batch size, on real batches of a training shard, with one torch thread.
    Calls are interleaved over the sizes so slow drift of the machine hits all
    of them alike. The global torch RNG and thread count are left as found."""
    budget_s = BUDGET_S if budget_s is None else budget_s
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.random.fork_rng(devices=[]):  # dropout and the like draw from it
            params = workload.init_params(seed)
            shard = workload.make_shards(1, seed)[0]
            batches = {b: [shard.next_batch(b) for _ in range(BATCHES_PER_SIZE)] for b in batch_sizes}
            for b in batch_sizes:
                for k in range(WARMUP):
                    workload.gradient(params, *batches[b][k % BATCHES_PER_SIZE])
            samples: dict[int, list[float]] = {b: [] for b in batch_sizes}
            start = time.perf_counter()
            for rep in range(MAX_REPS):
                if rep >= MIN_REPS and time.perf_counter() - start > budget_s:
                    break
                for b in batch_sizes:
                    x, y = batches[b][rep % BATCHES_PER_SIZE]
                    t0 = time.perf_counter()
                    workload.gradient(params, x, y)
                    samples[b].append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return tuple((b, statistics.median(samples[b])) for b in batch_sizes)


_CACHE: dict[tuple[Any, ...], Table] = {}


def _cache_key(scenario: Scenario, workload: Workload, batch_sizes: tuple[int, ...]) -> tuple[Any, ...]:
    job = scenario.job
    args = tuple(sorted((k, repr(v)) for k, v in job.workload_args.items()))
    return (job.workload, args, workload.name, workload.n_params, batch_sizes)


def measured_table(scenario: Scenario, workload: Workload) -> Table:
    """The step times of the scenario's workload around its batch size,
    measured once per process (per workload, arguments and batch sizes)."""
    sizes = batch_sizes_for(scenario.job.batch_size)
    key = _cache_key(scenario, workload, sizes)
    table = _CACHE.get(key)
    if table is None:
        table = _CACHE[key] = measure_step_times(workload, sizes)
    return table


def resolve_measured(scenario: Scenario, workload: Workload | None = None) -> Scenario:
    """The scenario charged figures measured on this machine where its step
    cost is ``measured`` (its ``timing.step`` a :class:`StepCost` recording
    the coefficients timed and the table); the scenario itself when it
    measures nothing. A coefficient given as a number keeps its value and
    only the other is fitted. ``workload``: the scenario's, built here if
    not given. Call it where a scenario is loaded for a simulation: the
    simulator times nothing."""
    step = scenario.timing.step
    if isinstance(step, StepCost):
        return scenario
    if workload is None:
        workload = make_workload(scenario.job.workload, **scenario.job.workload_args)
    table = measured_table(scenario, workload)
    fixed_s, per_sample_s = fit_step_cost(table, fixed_s=step.fixed_s, per_sample_s=step.per_sample_s)
    cost = StepCost(fixed_s=fixed_s, per_sample_s=per_sample_s, measured=step.to_measure, table=table)
    return scenario.with_step_cost(cost)


def clear_cache() -> None:
    """Forget the measurements of this process (the next run measures again)."""
    _CACHE.clear()


def describe_measured(measured: dict[str, Any], workload: str) -> str:
    """One line for the terminal from a summary's ``measured_step``, with a
    hint when a given coefficient alone costs more than the measured steps
    (the fitted one is then 0, and the model's own cost is lost)."""
    fixed_s, per_sample_s = measured["fixed_s"], measured["per_sample_s"]
    times = "; ".join(f"{b}: {s * 1e3:.3g} ms" for b, s in measured["table"])
    line = (
        f"measured step cost on this machine ({workload}): {describe_step_cost(fixed_s, per_sample_s)} "
        f"(median per step at batch {times})"
    )
    fitted = measured.get("fitted", ["fixed_s", "per_sample_s"])
    given = [k for k in ("fixed_s", "per_sample_s") if k not in fitted]
    if len(given) == 1 and measured[fitted[0]] == 0:
        key = given[0]
        if all((fixed_s if key == "fixed_s" else per_sample_s * b) >= s for b, s in measured["table"]):
            line += (
                f"\n  note: {key} alone costs more than a measured step, so {fitted[0]} fits to 0"
                f" (--set {key}=0 or {key}=measured charges the model's own cost)"
            )
    return line
