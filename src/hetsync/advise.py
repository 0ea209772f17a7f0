"""``hetsync advise``: simulate every applicable policy on a cluster, rank them, recommend one.

The pipeline, one function per stage, so that ``advise --verify`` (running
the shortlist for real) can reuse every stage:

1. :func:`features` measures the scenario: per-worker step times, transient
   stragglers, background load, noise, and how long moving the model takes
   next to a step.
2. :func:`candidates` builds the candidate list: every registered policy
   with a small parameter grid each (:data:`GRID`), minus what does not
   apply to this cluster (each candidate is built against the scenario's
   policy context, as a run would build it, and a few rules skip the
   meaningless ones: ``backup`` dropping more than half the gradients,
   ``p2p-random`` with more receivers than peers, ...).
3. :func:`simulate` runs every candidate over several seeds, across a pool
   of processes (one torch thread each). The seed changes what is random in
   a run (noise, stragglers, initial model, batch order) but not the
   cluster: per-worker values drawn from the scenario's seed are kept, so
   every seed simulates the same machines. Only seed 0's traces are kept.
   Results are keyed by (candidate, seed), never by completion order, so
   the ranking does not depend on how the pool schedules them.
4. :func:`rank` orders candidates by median time to target over the
   seeds (a seed that never reached it counts as infinitely slow). Ties go
   to the smaller worst case, then the better final metric, then the
   candidate order, which lists simpler policies first. Candidates whose
   median never reached the target come after, by final metric.
5. :func:`recommend` names the top candidate, its speed-up over BSP (the
   ratio of median times, with the range of per-seed ratios) and the
   reason in one sentence built from the features and the measured BSP
   wait. The gain is *significant* only when every seed of the winner beat
   every seed of BSP (with 3 seeds each: a one-sided rank test at p = 0.05).

A cluster file that names no workload (a profiled script's, without
``--workload``) is learned with the built-in digits-mlp in place of the
user's model; :func:`workload_note` says so, under the ranking and in
``advice.json``.

:func:`advise` chains the stages; :func:`write_outputs` writes
``advice.json``, ``summary.json`` (the seed-0 runs, as ``hetsync compare``
writes it, so ``hetsync report DIR`` works) and ``advice.html``.
:meth:`Advice.shortlist` is what ``--verify`` runs: the winner, the
runner-up and BSP; :func:`verify` runs them on the real runtime (as
``hetsync run`` does; on a profiled script's cluster, the user's own script
as ``hetsync launch`` does, on the cluster the profile emulated:
:mod:`hetsync.verify_script`) and sets predicted against measured time to
target and throughput (:class:`Verification`, in ``advice.json`` and the page).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hetsync.errors import BadInput
from hetsync.runtime.config import RunConfig
from hetsync.scenario import Scenario

BASELINE = "bsp"
DEFAULT_SEEDS = 3
ADVICE_JSON = "advice.json"
ADVICE_HTML = "advice.html"
TTA_PLOT = "advice-tta.png"
"""What advise writes besides a comparison folder's files (removed before a new advice)."""
PLOTTED_RUNS = 4
"""The comparison part of the page plots the seed-0 curves and timelines of this many top candidates (and BSP)."""

# The parameter grid of each policy: spec suffixes (":k=v"), "" for the
# defaults. Chosen from the policies' parameter docs: a tight, the default
# and a loose setting where the parameter trades waiting for staleness or
# communication for drift. A policy missing here (a user's own) runs with
# its defaults.
GRID: dict[str, tuple[str, ...]] = {
    "bsp": ("",),
    "asp": ("",),
    "ssp": (":s=1", ":s=3", ":s=8"),
    "local-sgd": (":H=2", ":H=4", ":H=8"),
    "diloco": (":H=5", ":H=10"),
    "async-local-sgd": (":H=10",),
    "backup": (":b=1", ":b=2"),
    "wbsp": ("",),
    "wbsp-overlap": ("",),
    "dssp": (":s_L=1:r_max=6", ":s_L=3:r_max=12"),
    "elastic-bsp": (":R=5", ":R=15"),
    "lb-bsp": (":variant=cpu", ":variant=cpu:predictor=ewma", ":variant=gpu"),
    "lb-bsp-static": ("",),
    "p2p-allreduce": ("",),
    "p2p-random": (":p=2", ":p=4"),
    "selmcast": (":p=2",),
}
POOL_MIN_WORK_S = 12.0
"""Below this much estimated simulation (one process), runs stay in this process: a worker process takes seconds to start."""
DILOCO_SGD_INNER_LR = 0.01  # DiLoCo's inner AdamW next to an SGD-tuned lr (policies/diloco.py)
INNER_ADAMW = ("diloco", "streaming-diloco", "async-local-sgd")  # workers step with AdamW, whatever the scenario's


# ---------------------------------------------------------------- features
@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """What makes a cluster hard for BSP, measured from its scenario."""

    workers: int
    step_s: tuple[float, ...]  # per worker, nominal (no noise, stragglers or load), at the scenario's batch
    jitter: float = 0.0  # log-sd of the per-step noise (on the whole step: the base's noise times its share)
    straggler_prob: float = 0.0
    straggler_factor: float = 1.0
    load_workers: int = 0  # workers under a switching background load
    load_factor: float = 1.0
    load_duty: float = 0.0  # fraction of the time the load is on
    model_bytes: int = 0
    transfer_s: float = 0.0  # push + pull of the model in a BSP round (the median link, or the server's if slower)
    link_Bps: tuple[float, ...] = ()  # per worker
    link_load_workers: int = 0
    link_load_factor: float = 1.0

    @property
    def median_step_s(self) -> float:
        return statistics.median(self.step_s)

    @property
    def spread(self) -> float:
        """Slowest over fastest nominal step."""
        return max(self.step_s) / min(self.step_s) if min(self.step_s) > 0 else math.inf

    @property
    def slow_workers(self) -> tuple[int, ...]:
        """Workers at least 1.2× slower than the median worker."""
        m = self.median_step_s
        return tuple(i for i, s in enumerate(self.step_s) if s >= 1.2 * m)

    @property
    def round_hit(self) -> float:
        """Probability that a BSP round has at least one transient straggler."""
        return 1 - (1 - self.straggler_prob) ** self.workers if self.straggler_factor > 1 else 0.0

    @property
    def comm_ratio(self) -> float:
        """A BSP round's transfers over the median step."""
        m = self.median_step_s
        return self.transfer_s / m if m > 0 else math.inf

    @property
    def link_spread(self) -> float:
        finite = [b for b in self.link_Bps if math.isfinite(b)]
        return max(finite) / min(finite) if len(finite) >= 2 else 1.0

    def scores(self) -> dict[str, float]:
        """Each compute cause's rough cost to a BSP round, as a fraction of a
        step: the expected extra wait for the slowest worker."""
        steps, n = self.step_s, self.workers
        mean = statistics.fmean(steps)
        out = {"static": max(steps) / mean - 1 if mean > 0 else 0.0}
        out["transient"] = self.round_hit * (self.straggler_factor - 1)
        out["load"] = (1 - (1 - self.load_duty) ** self.load_workers) * (self.load_factor - 1)
        out["noise"] = math.exp(self.jitter * math.sqrt(2 * math.log(n))) - 1 if n >= 2 else 0.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "step_s": list(self.step_s),
            "median_step_s": self.median_step_s,
            "spread": _finite_or_none(self.spread),
            "slow_workers": list(self.slow_workers),
            "jitter": self.jitter,
            "straggler_prob": self.straggler_prob,
            "straggler_factor": self.straggler_factor,
            "round_hit": self.round_hit,
            "load_workers": self.load_workers,
            "load_factor": self.load_factor,
            "load_duty": self.load_duty,
            "model_bytes": self.model_bytes,
            "transfer_s": _finite_or_none(self.transfer_s),
            "comm_ratio": _finite_or_none(self.comm_ratio),
            "link_Bps": [_finite_or_none(b) for b in self.link_Bps],
            "link_spread": _finite_or_none(self.link_spread),
            "link_load_workers": self.link_load_workers,
            "link_load_factor": self.link_load_factor,
            "scores": {k: _finite_or_none(v) for k, v in self.scores().items()},
        }


def features(scenario: Scenario, model_bytes: int) -> Features:
    """The scenario's features (its step cost must be numbers: resolve ``measured`` first)."""
    sc = scenario
    n = sc.workers
    step_s = tuple(sc.nominal_step_s(w, sc.batch_size) for w in range(n))
    bw = sorted(sc.bandwidth_Bps)
    median_bw = statistics.median(bw)
    # a BSP push: every worker's model over its own uplink, all of them into the server's
    # (and the server handles the round's n pushes, then its n models, one at a time: server_s_per_message)
    one_way = (
        max(_seconds(model_bytes, median_bw), _seconds(n * model_bytes, sc.server_Bps))
        + sc.latency_s
        + n * sc.server_s_per_message
    )
    load, link = sc.background_load, sc.link_load
    # noise, stragglers and load scale the base part of a step, not the injected delay (docs/architecture.md §5): on
    # the whole step they weigh by the base's share (a profiled cluster is often mostly delay)
    share = statistics.median((s - d) / s if s > 0 else 1.0 for s, d in zip(step_s, sc.delay_s, strict=True))
    return Features(
        workers=n,
        step_s=step_s,
        jitter=sc.jitter * share,
        straggler_prob=sc.straggler_prob,
        straggler_factor=1 + (sc.straggler_factor - 1) * share,
        load_workers=len(load.workers) if load is not None and load.factor > 1 else 0,
        load_factor=1 + (load.factor - 1) * share if load is not None else 1.0,
        load_duty=load.on_s / load.period_s if load is not None else 0.0,
        model_bytes=model_bytes,
        transfer_s=2 * one_way,
        link_Bps=tuple(sc.bandwidth_Bps),
        link_load_workers=len(link.workers) if link is not None and link.factor > 1 else 0,
        link_load_factor=link.factor if link is not None else 1.0,
    )


def _seconds(nbytes: float, Bps: float) -> float:
    return 0.0 if nbytes == 0 or math.isinf(Bps) else nbytes / Bps


# -------------------------------------------------------------- candidates
@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    spec: str  # as a policy spec: "ssp:s=3"
    label: str  # as runs name it: "ssp(s=3)"
    policy: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "label": self.label, "policy": self.policy, "params": dict(self.params)}


def grid_specs(scenario: Scenario, names: Sequence[str]) -> list[str]:
    """The grid's specs of these policies, in order, adapted to the scenario
    (DiLoCo's and asynchronous local SGD's inner AdamW gets a small lr when
    the scenario's lr is tuned for SGD)."""
    specs = []
    for name in names:
        for suffix in GRID.get(name, ("",)):
            spec = name + suffix
            if name in INNER_ADAMW and scenario.optimizer.name == "sgd":
                spec += f":inner_lr={DILOCO_SGD_INNER_LR:g}"
            specs.append(spec)
    return specs


def not_applicable(scenario: Scenario, policy: str, params: Mapping[str, Any]) -> str | None:
    """Why a candidate that builds fine still makes no sense on this cluster (None: it does)."""
    from hetsync.policies import policy_class

    n = scenario.workers
    if n < 2 and policy != BASELINE:
        return "one worker: there is nothing to synchronize"
    if getattr(policy_class(policy), "simulator_only", False):
        return "simulator only for now: real processes cannot run it on this cluster yet"
    if policy == "backup" and params.get("b", 0) > n // 2:
        return f"b={params['b']} would drop more than half of the {n} workers' gradients"
    if policy in ("p2p-random", "selmcast") and params.get("p", 0) >= n:
        return f"p={params['p']} needs more than {params['p']} workers"
    if policy == "lb-bsp" and params.get("variant") == "gpu" and scenario.device != "gpu":
        return "variant=gpu fits GPU step curves; this cluster's workers are CPU-like (device: cpu)"
    if policy == "lb-bsp" and params.get("predictor") == "ewma" and scenario.device == "gpu":
        return "the ewma predictor is for CPU-like workers"
    return None


def candidates(
    scenario: Scenario, only: Sequence[str] | None = None, *, model_bytes: int = 0
) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """The candidates (BSP first: it is the reference) and the skipped specs
    with the reason. ``only`` restricts the list: a bare policy name brings
    its grid, a spec with parameters (``ssp:s=5``) is taken as it is. BSP
    always runs. An unknown name, or an explicit spec that does not build,
    is bad input; a grid entry that does not apply is skipped."""
    from hetsync.driver import policy_context
    from hetsync.policies import REGISTRY, make_policy, parse_policy_spec, policy_class
    from hetsync.policies.config import config_values

    if only is None:
        specs = grid_specs(scenario, list(REGISTRY))
        explicit: set[str] = set()
    else:
        specs, explicit = [], set()
        for item in only:
            name, params = parse_policy_spec(item)
            policy_class(name)  # BadInput for an unknown policy
            if params:
                specs.append(item.strip())
                explicit.add(item.strip())
            else:
                specs += grid_specs(scenario, [name])
        if not any(parse_policy_spec(s)[0] == BASELINE for s in specs):
            specs.insert(0, BASELINE)
    ctx = policy_context(scenario, model_bytes)
    out: list[Candidate] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for spec in specs:
        try:
            policy = make_policy(spec, ctx)
        except BadInput as e:
            if spec in explicit:
                raise
            skipped.append((spec, str(e)))
            continue
        params = config_values(policy.config)
        why = not_applicable(scenario, policy.name, params)
        if why is not None and spec not in explicit:
            skipped.append((spec, why))
            continue
        if policy.label in seen:  # e.g. ssp and ssp:s=3
            continue
        seen.add(policy.label)
        out.append(Candidate(spec=spec, label=policy.label, policy=policy.name, params=params))
    out.sort(key=lambda c: c.policy != BASELINE)  # stable: BSP first, the rest in registry order
    return out, skipped


# -------------------------------------------------------------- simulation
@dataclass(frozen=True, slots=True, kw_only=True)
class _Task:
    index: int  # candidate
    seed_index: int
    scenario: Scenario  # with the run's seed
    spec: str
    trace: Path | None


_SLIM_KEYS = (
    "policy",
    "label",
    "seed",
    "time_to_target_s",
    "final_metric",
    "wall_time_s",
    "wait_share",
    "comm_share",
    "compute_share",
    "samples_per_s",
    "steps",
    "updates",
    "stop_reason",
    "host_time_s",
)
_WORKLOADS: dict[tuple[str, str], Any] = {}  # per process: one workload object serves every run


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def _run_one(task: _Task) -> dict[str, Any]:
    """One simulation; the full summary for seed 0, the figures ranking needs otherwise.
    A run that fails is reported (``error``), not raised: one broken candidate does not sink the advice."""
    from hetsync.outdir import partial_name
    from hetsync.sim.engine import Simulation
    from hetsync.workloads import make_workload

    sc = task.scenario
    key = (sc.workload, repr(sorted(sc.workload_args.items())))
    if key not in _WORKLOADS:
        _WORKLOADS[key] = make_workload(sc.workload, **sc.workload_args)
    try:
        summary = Simulation(sc, task.spec, trace_path=task.trace, workload=_WORKLOADS[key]).run().summary
    except BaseException as e:  # the partial trace is not a run
        if task.trace is not None and task.trace.exists():
            task.trace.replace(partial_name(task.trace))
        if not isinstance(e, Exception):
            raise
        return {"spec": task.spec, "seed": sc.seed, "error": f"{type(e).__name__}: {e}"}
    return summary if task.seed_index == 0 else {k: summary.get(k) for k in _SLIM_KEYS}


OnRun = Callable[[int, int, str], None]  # (runs done, runs in all, label of the one that finished)


def simulate(
    scenario: Scenario,
    cands: Sequence[Candidate],
    seeds: Sequence[int],
    out: Path,
    *,
    jobs: int = 1,
    on_run: OnRun | None = None,
    on_seed0: Callable[[list[dict[str, Any]]], None] | None = None,
    pool_min_work_s: float = POOL_MIN_WORK_S,
    on_pool: Callable[[int], None] | None = None,
) -> dict[tuple[int, int], dict[str, Any]]:
    """Run every candidate over every seed; results keyed by (candidate
    index, seed index). Seed 0's traces go to ``out/trace-<label>.jsonl``.
    ``on_seed0`` gets the seed-0 summaries finished so far, in candidate
    order, after each one (to keep ``summary.json`` current).

    The first run goes in this process and times the rest: if they would
    take less than ``pool_min_work_s`` one after the other, they stay here
    (starting a worker process costs seconds: it imports torch); otherwise
    they go to ``jobs`` processes (``on_pool`` is told how many). Those are
    spawned, not forked, so a script that calls this with ``jobs > 1``
    needs the ``if __name__ == "__main__":`` guard."""
    from hetsync.outdir import partial_name
    from hetsync.report import safe_name

    tasks = [
        _Task(
            index=i,
            seed_index=k,
            scenario=replace(scenario, seed=seed),
            spec=c.spec,
            trace=out / f"trace-{safe_name(c.label)}.jsonl" if k == 0 else None,
        )
        for i, c in enumerate(cands)
        for k, seed in enumerate(seeds)
    ]
    results: dict[tuple[int, int], dict[str, Any]] = {}
    if not tasks:
        return results

    def record(task: _Task, summary: dict[str, Any]) -> None:
        results[(task.index, task.seed_index)] = summary
        if on_run is not None:
            on_run(len(results), len(tasks), cands[task.index].label)
        if task.seed_index == 0 and on_seed0 is not None:
            done = [results[(i, 0)] for i in range(len(cands)) if (i, 0) in results]
            on_seed0([r for r in done if "error" not in r])

    threads = _torch_threads(1)
    try:
        t0 = time.perf_counter()
        record(tasks[0], _run_one(tasks[0]))
        rest = tasks[1:]
        jobs = max(1, min(jobs, len(rest)))
        if jobs == 1 or (time.perf_counter() - t0) * len(rest) < pool_min_work_s:
            for task in rest:
                record(task, _run_one(task))
            return results
    finally:
        _torch_threads(threads)
    import multiprocessing

    # spawn: the parent holds torch's thread pools and rich's refresh thread, which fork would copy half-made
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker)
    if on_pool is not None:
        on_pool(jobs)
    try:
        pending: dict[Future[dict[str, Any]], _Task] = {pool.submit(_run_one, t): t for t in rest}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: (pending[f].index, pending[f].seed_index)):
                record(pending.pop(fut), fut.result())
    except BaseException:  # Ctrl-C: stop, and set aside the traces of seed-0 runs that did not come back
        # the runs already handed to a process end first (on a Ctrl-C they were interrupted too)
        pool.shutdown(wait=True, cancel_futures=True)
        for task in rest:
            if task.trace is not None and (task.index, 0) not in results and task.trace.exists():
                task.trace.replace(partial_name(task.trace))
        raise
    pool.shutdown()
    return results


def _torch_threads(n: int) -> int:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    return before


# ----------------------------------------------------------------- ranking
@dataclass(frozen=True, slots=True, kw_only=True)
class Ranked:
    """One candidate's figures over the seeds."""

    rank: int
    candidate: Candidate
    seeds: tuple[int, ...]
    tta_s: tuple[float | None, ...]  # per seed; None: not reached
    final: tuple[float | None, ...]  # the target metric at the end, per seed
    limit_s: tuple[float | None, ...] = ()  # per seed: how long the run lasted (for "> limit")
    wait_share: tuple[float | None, ...] = ()
    comm_share: tuple[float | None, ...] = ()
    samples_per_s: tuple[float | None, ...] = ()
    errors: tuple[str | None, ...] = ()

    @property
    def label(self) -> str:
        return self.candidate.label

    @property
    def reached(self) -> int:
        return sum(t is not None for t in self.tta_s)

    @property
    def failed(self) -> bool:
        return bool(self.errors) and all(e is not None for e in self.errors)

    @property
    def median_tta_s(self) -> float | None:
        """Median over the seeds, an unreached seed counting as infinitely slow; None if that is infinite."""
        if not self.tta_s:
            return None
        m = statistics.median(math.inf if t is None else t for t in self.tta_s)
        return m if math.isfinite(m) else None

    @property
    def min_tta_s(self) -> float | None:
        return min((t for t in self.tta_s if t is not None), default=None)

    @property
    def max_tta_s(self) -> float:
        """The slowest seed (inf if one never reached the target)."""
        return max((math.inf if t is None else t for t in self.tta_s), default=math.inf)

    @property
    def median_final(self) -> float | None:
        values = [v for v in self.final if v is not None and math.isfinite(v)]
        return statistics.median(values) if values else None

    def median_of(self, values: Sequence[float | None]) -> float | None:
        vs = [v for v in values if v is not None and math.isfinite(v)]
        return statistics.median(vs) if vs else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            **self.candidate.to_dict(),
            "seeds": list(self.seeds),
            "reached": self.reached,
            "time_to_target_s": list(self.tta_s),
            "median_time_to_target_s": self.median_tta_s,
            "min_time_to_target_s": self.min_tta_s,
            "max_time_to_target_s": _finite_or_none(self.max_tta_s),
            "final_metric": [_finite_or_none(v) for v in self.final],
            "median_final_metric": self.median_final,
            "wall_time_s": list(self.limit_s),
            "wait_share": [_finite_or_none(v) for v in self.wait_share],
            "comm_share": [_finite_or_none(v) for v in self.comm_share],
            "samples_per_s": [_finite_or_none(v) for v in self.samples_per_s],
            "errors": list(self.errors),
        }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def rank(entries: Sequence[tuple[Candidate, Sequence[Mapping[str, Any]]]], *, direction: str = "max") -> list[Ranked]:
    """Rank candidates from their per-seed summaries (``time_to_target_s``,
    ``final_metric``, optionally ``error``), best first; see the module doc."""
    sign = -1.0 if direction == "max" else 1.0
    rows = []
    for index, (cand, runs) in enumerate(entries):
        rows.append(
            (
                index,
                Ranked(
                    rank=0,
                    candidate=cand,
                    seeds=tuple(int(r.get("seed", k)) for k, r in enumerate(runs)),
                    tta_s=tuple(None if r.get("error") else _number(r.get("time_to_target_s")) for r in runs),
                    final=tuple(None if r.get("error") else _number(r.get("final_metric")) for r in runs),
                    limit_s=tuple(_number(r.get("wall_time_s")) for r in runs),
                    wait_share=tuple(_number(r.get("wait_share")) for r in runs),
                    comm_share=tuple(_number(r.get("comm_share")) for r in runs),
                    samples_per_s=tuple(_number(r.get("samples_per_s")) for r in runs),
                    errors=tuple(r.get("error") for r in runs),
                ),
            )
        )

    def key(item: tuple[int, Ranked]) -> tuple[Any, ...]:
        index, r = item
        final = r.median_final
        final_key = math.inf if final is None else sign * final
        if r.failed:
            return (3, index)
        median = r.median_tta_s
        if median is not None:
            return (0, median, r.max_tta_s, final_key, index)
        return (1, final_key, -r.reached, index)

    ordered = sorted(rows, key=key)
    return [replace(r, rank=i + 1) for i, (_index, r) in enumerate(ordered)]


# ---------------------------------------------------------- recommendation
@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    verdict: str  # "switch", "not-significant", "bsp" (BSP is best), "none" (nothing reached the target)
    label: str  # the top candidate
    spec: str
    speedup: float | None  # median BSP time / median winner time
    speedup_range: tuple[float, float] | None  # of the per-seed ratios where both reached the target
    headline: str
    reason: str  # one sentence

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "label": self.label,
            "spec": self.spec,
            "speedup_vs_bsp": self.speedup,
            "speedup_range": list(self.speedup_range) if self.speedup_range else None,
            "headline": self.headline,
            "reason": self.reason,
        }


def speedup(r: Ranked, base: Ranked | None) -> tuple[float | None, tuple[float, float] | None]:
    """(median BSP time / median time, min–max of the ratios seed by seed)."""
    if base is None or r.median_tta_s is None or base.median_tta_s is None:
        return None, None
    ratios = [b / t for t, b in zip(r.tta_s, base.tta_s, strict=False) if t and b is not None and t > 0]
    span = (min(ratios), max(ratios)) if ratios else None
    return base.median_tta_s / r.median_tta_s, span


def significant(r: Ranked, base: Ranked) -> bool:
    """Every seed of ``r`` reached the target before every seed of ``base`` did."""
    slowest = r.max_tta_s
    fastest_base = min((math.inf if t is None else t for t in base.tta_s), default=math.inf)
    return slowest < fastest_base


def recommend(
    ranked: Sequence[Ranked], feats: Features, *, target: str, limit_s: float | None = None
) -> Recommendation:
    """The verdict, headline and one-sentence reason for a ranking."""
    if not ranked:
        raise BadInput("no candidate to rank: every policy was skipped for this scenario")
    top = ranked[0]
    base = next((r for r in ranked if r.candidate.policy == BASELINE and not r.candidate.params), None)
    bsp_wait = base.median_of(base.wait_share) if base is not None else None
    bsp_comm = base.median_of(base.comm_share) if base is not None else None
    gain, span = speedup(top, base)
    seeds = len(top.seeds)
    within = f" within {_fmt_s(limit_s)} s" if limit_s is not None else ""
    if top.median_tta_s is None:
        best = top.median_final
        shown = "—" if best is None else f"{best:.3g}"
        headline = (
            f"no candidate reached {target}{within} on most of the {seeds} seeds; the closest was "
            f"{top.label} (median final {shown}): train longer (--set max_time_s=...) or lower the target"
        )
        return Recommendation(
            verdict="none",
            label=top.label,
            spec=top.candidate.spec,
            speedup=None,
            speedup_range=None,
            headline=headline,
            reason=reason(feats, top.candidate, bsp_wait=bsp_wait, bsp_comm=bsp_comm, verdict="none"),
        )
    if base is None or top is base:
        verdict = "bsp"
        headline = f"keep BSP (DDP): it reaches {target} fastest of the {len(ranked)} candidates"
        if base is None:
            headline = f"use {top.label}: BSP was not simulated, so there is no speed-up to report"
            verdict = "switch"
    elif base.median_tta_s is None:
        verdict = "switch"
        headline = (
            f"use {top.label}: it reaches {target} in {_fmt_s(top.median_tta_s)} s; BSP does not reach it{within}"
        )
    else:
        verdict = "switch" if significant(top, base) else "not-significant"
        assert gain is not None
        ratio = f"{gain:.2f}× faster to {target} than BSP" + (
            f" ({_fmt_range(span)} over {seeds} seeds)" if span else ""
        )
        if verdict == "switch":
            headline = f"use {top.label}: predicted {ratio}"
        else:
            headline = (
                f"{top.label} ranks first, {ratio}, but the seeds overlap with BSP's: "
                "the difference is not significant, BSP is as good a choice"
            )
    return Recommendation(
        verdict=verdict,
        label=top.label,
        spec=top.candidate.spec,
        speedup=gain,
        speedup_range=span,
        headline=headline,
        reason=reason(feats, top.candidate, bsp_wait=bsp_wait, bsp_comm=bsp_comm, verdict=verdict),
    )


def _fmt_range(span: tuple[float, float] | None) -> str:
    return "—" if span is None else f"{span[0]:.2f}–{span[1]:.2f}×"


def compute_clause(f: Features) -> str:
    """What slows the workers down, largest cause first (one or two of them)."""
    n = f.workers
    scores = f.scores()
    texts: dict[str, str] = {}
    if f.spread >= 1.1:
        slow = f.slow_workers
        others = [s for i, s in enumerate(f.step_s) if i not in slow]
        if len(slow) == 1 and max(others) <= 1.15 * min(others):  # the others alike: one straggler
            ratio = f.step_s[slow[0]] / statistics.median(others)
            texts["static"] = f"one worker is {ratio:.1f}× slower than the others"
        else:
            lo, hi = min(f.step_s), max(f.step_s)
            texts["static"] = f"step times range from {_fmt_ms(lo)} to {_fmt_ms(hi)} across the {n} workers"
    if f.straggler_prob > 0 and f.straggler_factor > 1:
        texts["transient"] = (
            f"{_fmt_pct(f.straggler_prob)} of steps are {f.straggler_factor:.3g}× slower, "
            f"which stalls {_fmt_pct(f.round_hit)} of BSP rounds of {n} workers"
        )
    if f.load_workers:
        texts["load"] = (
            f"a background load makes {f.load_workers} of {n} workers {f.load_factor:g}× slower "
            f"{_fmt_pct(f.load_duty)} of the time"
        )
    if f.jitter > 0:
        texts["noise"] = f"per-step noise is about {_fmt_pct(f.jitter)}"
    causes = sorted((k for k in texts if scores[k] >= 0.1), key=lambda k: -scores[k])
    if not causes or causes == ["noise"] and "static" not in texts:
        alike = (
            f"the {n} workers are equally fast" if f.spread < 1.02 else f"the {n} workers are within {f.spread:.2f}×"
        )
        return alike + (f" with about {_fmt_pct(f.jitter)} per-step noise" if f.jitter > 0 else "")
    if len(causes) >= 2 and scores[causes[1]] >= 0.5 * scores[causes[0]]:
        return f"{texts[causes[0]]} and {texts[causes[1]]}"
    return texts[causes[0]]


def network_clause(f: Features) -> str:
    r = f.comm_ratio
    if not math.isfinite(r):
        cost = "moving the model dwarfs a step"
    elif r < 0.1:
        cost = f"communication is only {_fmt_pct(r)} of a step"
    elif r < 0.5:
        cost = f"communication is {_fmt_pct(r)} of a step"
    else:
        cost = f"moving the model takes {r:.1f}× as long as a step"
    links = ""
    finite = [b for b in f.link_Bps if math.isfinite(b)]
    if f.link_spread >= 2:
        links = f"links range from {_fmt_bps(min(finite))} to {_fmt_bps(max(finite))}"
    if f.link_load_workers:
        traffic = f"traffic cuts {f.link_load_workers} links {f.link_load_factor:g}×"
        links = f"{links} ({traffic})" if links else traffic
    return f"{links}, {cost}" if links else cost


def mechanism(c: Candidate, f: Features) -> str:
    """What the policy does about it, with its parameters."""
    p, n = c.params, f.workers
    name = c.policy
    if name == "asp":
        return "applies every gradient as it arrives, so no worker waits"
    if name == "ssp":
        return f"lets the fast workers run up to {p.get('s')} steps ahead of the slowest"
    if name == "dssp":
        lo = int(p.get("s_L", 0))
        return f"lets the fast workers run {lo} to {lo + int(p.get('r_max', 0))} steps ahead, bound set as it runs"
    if name == "local-sgd":
        return f"averages the models once every {p.get('H')} local steps, {p.get('H')}× fewer barriers and transfers"
    if name == "diloco":
        return f"averages every {p.get('H')} inner steps through an outer Nesterov step, {p.get('H')}× fewer transfers"
    if name == "async-local-sgd":
        return (
            f"applies each worker's model delta as it arrives, every {p.get('H')} steps of the fastest worker "
            "and proportionally fewer of the slower, so no worker waits for another"
        )
    if name == "backup":
        b = int(p.get("b", 1))
        slowest = "slowest worker never holds" if b == 1 else f"{b} slowest never hold"
        return f"closes each round with the first {n - b} gradients, so the {slowest} it"
    if name == "wbsp":
        return "keeps the fast workers stepping until the slowest has pushed"
    if name == "wbsp-overlap":
        return "keeps the fast workers stepping until the slowest has pushed and overlaps transfers with compute"
    if name == "elastic-bsp":
        return f"puts barriers where pushes bunch up (look-ahead R={p.get('R')}) and runs asynchronously between them"
    if name == "lb-bsp":
        resize = " and re-sizes them as the load moves" if f.load_workers else ""
        return f"gives the slower workers smaller batches so every round ends together{resize}"
    if name == "lb-bsp-static":
        return "gives the slower workers smaller batches, fixed from the first rounds' speeds"
    if name == "p2p-allreduce":
        return "averages the models by ring all-reduce, with no server link to queue on"
    if name == "p2p-random":
        return f"sends each model to {p.get('p')} random peers instead of through one server"
    if name == "selmcast":
        return f"sends each model to at least {p.get('p')} peers picked by free bandwidth"
    if name == BASELINE:
        return "averages every gradient of every round exactly"
    return "synchronizes its own way"


def reason(
    f: Features, winner: Candidate, *, bsp_wait: float | None, verdict: str, bsp_comm: float | None = None
) -> str:
    """One sentence: the cluster's features, what BSP's runs measured
    (waiting, and communicating where that is 10% or more), then what the winner does about it."""
    situation = f"{compute_clause(f)}; {network_clause(f)}"
    comm = f" and communicating {_fmt_pct(bsp_comm)}" if bsp_comm is not None and bsp_comm >= 0.1 else ""
    if bsp_wait is not None and bsp_wait >= 0.05:
        situation += f", so BSP leaves workers waiting {_fmt_pct(bsp_wait)}{comm} of the time"
    elif bsp_wait is not None:
        situation += (
            f", and BSP waits only {_fmt_pct(bsp_wait)}"
            + (f" but communicates {_fmt_pct(bsp_comm)}" if comm else "")
            + " of the time"
        )
    if verdict == "bsp":
        tail = "no alternative beats BSP, which averages every gradient of every round exactly"
    elif verdict == "none":
        tail = f"no policy reached the target in the time given, {winner.label} came closest"
    else:
        tail = f"{winner.label} {mechanism(winner, f)}"
    sentence = f"{situation}: {tail}."
    return sentence[0].upper() + sentence[1:]


# ----------------------------------------------------------------- advise
@dataclass(frozen=True, slots=True, kw_only=True)
class Advice:
    scenario: Scenario
    features: Features
    seeds: tuple[int, ...]
    candidates: tuple[Candidate, ...]
    skipped: tuple[tuple[str, str], ...]
    ranked: tuple[Ranked, ...]
    recommendation: Recommendation
    runs: tuple[dict[str, Any], ...]  # seed-0 summaries, in ranked order
    target: str
    elapsed_s: float
    jobs: int  # processes the runs went to (1: all in this one)
    measured: dict[str, Any] | None = None
    verification: Verification | None = None  # advise --verify: the shortlist run for real
    workload_note: str | None = None  # the simulator learned a built-in in place of the user's model (workload_note())

    def shortlist(self, k: int = 2) -> list[str]:
        """What ``--verify`` runs for real: the top k candidates that reached the target, and BSP."""
        picks = [r.candidate.spec for r in self.ranked if r.median_tta_s is not None][:k]
        if BASELINE not in picks:
            picks.append(BASELINE)
        return picks

    def to_dict(self) -> dict[str, Any]:
        sc = self.scenario
        return {
            "scenario": sc.name,
            "workers": sc.workers,
            "seeds": list(self.seeds),
            "target": self.target,
            "target_metric": sc.target_metric,
            "target_value": sc.target_value,
            "max_time_s": sc.max_time_s,
            "max_steps": sc.max_steps,
            "features": self.features.to_dict(),
            "recommendation": self.recommendation.to_dict(),
            "ranking": [{**r.to_dict(), **_speedup_dict(r, self.baseline)} for r in self.ranked],
            "skipped": [{"spec": s, "why": why} for s, why in self.skipped],
            "shortlist": self.shortlist(),
            "elapsed_s": self.elapsed_s,
            "jobs": self.jobs,
            "measured_step": self.measured,
            "verification": self.verification.to_dict() if self.verification is not None else None,
            "workload": sc.workload,
            "workload_note": self.workload_note,
        }

    @property
    def baseline(self) -> Ranked | None:
        return next((r for r in self.ranked if r.candidate.policy == BASELINE and not r.candidate.params), None)


def _speedup_dict(r: Ranked, base: Ranked | None) -> dict[str, Any]:
    gain, span = speedup(r, base)
    return {"speedup_vs_bsp": gain, "speedup_range": list(span) if span else None}


def workload_note(sc: Scenario) -> str | None:
    """One line where the simulator learns a built-in workload in place of
    the user's model: the cluster file names no workload (a profiled
    script's ``cluster.yaml`` without ``--workload``); None otherwise."""
    if sc.source is None or "workload" in sc.source:
        return None
    return (
        f"{sc.name} names no workload: the simulator learns the built-in {sc.workload} in place of your model, so "
        f"this ranking weighs your cluster's costs with {sc.workload}'s convergence, not your model's; to simulate "
        "your model, name it in the file: workload: module:function (returning hetsync.workloads.from_module(...))"
    )


def target_text(sc: Scenario, direction: str) -> str:
    return f"{sc.target_metric} {'≥' if direction == 'max' else '≤'} {sc.target_value:g}"


def advise(
    scenario: Scenario,
    out: Path,
    *,
    seeds: int = DEFAULT_SEEDS,
    only: Sequence[str] | None = None,
    jobs: int | None = None,
    on_start: Callable[[list[Candidate], list[tuple[str, str]], int], None] | None = None,
    on_run: OnRun | None = None,
) -> Advice:
    """Simulate the candidates over ``seeds`` seeds (the scenario's seed and
    the next ones) and rank them. ``out`` must exist; seed 0's summaries
    are kept current in ``out/summary.json`` while the runs go."""
    from hetsync.outdir import SUMMARY, write_json_atomic
    from hetsync.steptime import resolve_measured
    from hetsync.workloads import make_workload

    if seeds < 1:
        raise BadInput(f"--seeds must be >= 1, got {seeds}")
    t0 = time.perf_counter()
    workload = make_workload(scenario.workload, **scenario.workload_args)
    direction = scenario.target_direction_for(workload.name, workload.metrics)
    # `measured` step costs: timed once, here, so every run of every process is charged the same figures
    scenario, measured = resolve_measured(scenario, workload)
    nbytes = scenario.model_bytes if scenario.model_bytes is not None else workload.model_nbytes
    feats = features(scenario, nbytes)
    cands, skipped = candidates(scenario, only, model_bytes=nbytes)
    seed_list = tuple(scenario.seed + k for k in range(seeds))
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {jobs}")
    if on_start is not None:
        on_start(cands, skipped, len(cands) * len(seed_list))
    processes = [1]
    results = simulate(
        scenario,
        cands,
        seed_list,
        out,
        jobs=jobs,
        on_run=on_run,
        on_seed0=lambda runs: write_json_atomic(out / SUMMARY, runs),
        on_pool=lambda k: processes.append(k),
    )
    entries = [(c, [results[(i, k)] for k in range(len(seed_list))]) for i, c in enumerate(cands)]
    ranked = rank(entries, direction=direction)
    target = target_text(scenario, direction)
    rec = recommend(ranked, feats, target=target, limit_s=scenario.max_time_s)
    by_label = {c.label: results[(i, 0)] for i, c in enumerate(cands)}
    runs = tuple(by_label[r.label] for r in ranked if "error" not in by_label[r.label])
    write_json_atomic(out / SUMMARY, list(runs))  # ranked order
    return Advice(
        scenario=scenario,
        features=feats,
        seeds=seed_list,
        candidates=tuple(cands),
        skipped=tuple(skipped),
        ranked=tuple(ranked),
        recommendation=rec,
        runs=runs,
        target=target,
        elapsed_s=time.perf_counter() - t0,
        jobs=processes[-1],
        measured=measured.to_dict() if measured is not None else None,
        workload_note=workload_note(scenario),
    )


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# ------------------------------------------------------------------ verify
VERIFY_DIR = "verify"
HELD_WITHIN = 0.10
"""The recommendation holds when its measured time to target is the best of the verified or within this of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verified:
    """One shortlisted candidate: the simulator's prediction and the real run."""

    label: str
    spec: str
    recommended: bool
    predicted_tta_s: float | None  # median over the seeds
    predicted_tta_range: tuple[float | None, float]  # min, max over the seeds (max inf: a seed missed)
    measured_tta_s: float | None  # the median over the real seeds (a seed that missed counts as infinitely slow)
    predicted_samples_per_s: float | None
    measured_samples_per_s: float | None  # median over the real seeds
    measured_wall_s: float | None
    measured_tta_seeds_s: tuple[float | None, ...] = ()  # per real seed (None: missed the target)
    measured_note: str | None = None  # why no time to target was measured (the script evaluates no such metric)

    @staticmethod
    def _error(predicted: float | None, measured: float | None) -> float | None:
        if predicted is None or measured is None or predicted <= 0:
            return None
        return measured / predicted - 1

    @property
    def tta_error(self) -> float | None:
        """measured / predicted − 1 of the time to target."""
        return self._error(self.predicted_tta_s, self.measured_tta_s)

    @property
    def rate_error(self) -> float | None:
        return self._error(self.predicted_samples_per_s, self.measured_samples_per_s)

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.predicted_tta_range
        return {
            "label": self.label,
            "spec": self.spec,
            "recommended": self.recommended,
            "predicted_time_to_target_s": self.predicted_tta_s,
            "predicted_time_to_target_range_s": [lo, _finite_or_none(hi)],
            "measured_time_to_target_s": self.measured_tta_s,
            "time_to_target_error": self.tta_error,
            "predicted_samples_per_s": self.predicted_samples_per_s,
            "measured_samples_per_s": self.measured_samples_per_s,
            "samples_per_s_error": self.rate_error,
            "measured_wall_time_s": self.measured_wall_s,
            "measured_time_to_target_per_seed_s": list(self.measured_tta_seeds_s),
            "measured_note": self.measured_note,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    rows: tuple[Verified, ...]
    folder: str  # the real runs' folder, relative to the advice's
    elapsed_s: float
    seeds: tuple[int, ...] = ()  # the real runs' seeds, one run of each candidate per seed (empty: the run config's)
    script: str | None = None  # the user's script that ran (hetsync.verify_script); None: the built-in workload
    emulated: str | None = None  # the cluster the script's runs played (its name), None: none

    @property
    def run_folders(self) -> list[str]:
        """The real runs' folders (each with its ``summary.json``), relative to the advice's."""
        if len(self.seeds) <= 1:
            return [self.folder]
        return [f"{self.folder}/{seed_folder(seed)}" for seed in self.seeds]

    @property
    def fastest(self) -> Verified | None:
        """The verified candidate that reached the target first for real (None: none reached it)."""
        reached = [r for r in self.rows if r.measured_tta_s is not None]
        return min(reached, key=lambda r: r.measured_tta_s or 0.0) if reached else None

    @property
    def held(self) -> bool | None:
        """Whether the recommended candidate was the fastest for real, or within
        :data:`HELD_WITHIN` of it; None when nothing reached the target."""
        best = self.fastest
        rec = next((r for r in self.rows if r.recommended), None)
        if best is None or rec is None:
            return None
        if rec.measured_tta_s is None:
            return False
        return rec.measured_tta_s <= (1 + HELD_WITHIN) * (best.measured_tta_s or 0.0)

    def verdict(self) -> str:
        """One line: did the recommendation hold on the real runtime?"""
        rec = next((r for r in self.rows if r.recommended), None)
        best = self.fastest
        if rec is None:
            return "verify: nothing was recommended, so nothing to check"
        if best is None and all(r.measured_note for r in self.rows):
            note = self.rows[0].measured_note or ""
            why = (
                "the script passes no evaluate= to hetsync.init"
                if note == NO_EVALUATE
                else f"the script's evaluate returns no {note.removeprefix('no ')}"
            )
            return (
                f"verify: no time to target was measured ({why}), so whether the recommendation held is not known; "
                "samples/s are compared. To measure it, pass evaluate=fn returning that metric to hetsync.init"
            )
        if best is None:
            return f"verify: no verified policy reached the target on the real runtime; {rec.label} did not either"
        if best is rec:
            return f"verify: the recommendation held: {rec.label} was the fastest of the {len(self.rows)} for real"
        if rec.measured_tta_s is None:
            return f"verify: the recommendation did not hold: {rec.label} missed the target, {best.label} reached it"
        gap = rec.measured_tta_s / (best.measured_tta_s or 1.0) - 1
        held = "held" if self.held else "did not hold"
        return (
            f"verify: the recommendation {held}: {best.label} was fastest for real, "
            f"{rec.label} {gap:.0%} slower (a recommendation holds within {HELD_WITHIN:.0%} of the fastest)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.to_dict() for r in self.rows],
            "folder": self.folder,
            "fastest": self.fastest.label if self.fastest is not None else None,
            "held": self.held,
            "held_within": HELD_WITHIN,
            "verdict": self.verdict(),
            "elapsed_s": self.elapsed_s,
            "seeds": list(self.seeds),
            "script": self.script,
            "emulated": self.emulated,
        }


def verify_args(
    scenario_arg: str, overrides: Sequence[str], seed: int | None, specs: Sequence[str], out: Path
) -> RunConfig:
    """The runtime's run config, as ``hetsync run`` writes it; ``throttle``
    so that transfers last at least the scenario's bytes / bandwidth. An
    emulated cluster played with its modelled timing (``runtime_timing:
    modelled``, which ``hetsync profile --emulate`` writes for such a
    cluster) is also paced, by the runtime itself
    (:meth:`~hetsync.runtime.config.ProcessOptions.emulation`): its steps
    then last the profiled step time, as in the simulator. A real cluster's
    steps are what they are."""
    from hetsync.runtime.config import ProcessOptions
    from hetsync.scenario import parse_override

    given = dict(parse_override(o) for o in overrides) | ({} if seed is None else {"seed": seed})
    process = ProcessOptions(out=out, throttle=True)
    return RunConfig(scenario=scenario_arg, overrides=given, policies=tuple(specs), process=process, plots=False)


def check_verifiable(scenario: Scenario) -> None:
    """``--verify`` starts one process per worker and a server on this machine: refuse what it cannot start
    (and, for a profiled script's cluster, a script, folder or emulated cluster that is gone)."""
    from hetsync import limits

    n = scenario.workers
    if n < 2:
        raise BadInput(
            f"--verify needs at least 2 worker processes to compare policies; scenario {scenario.name!r} has {n} "
            "(--set workers=N)"
        )
    if n > limits.MAX_NPROC:
        raise BadInput(
            f"--verify runs the scenario's {n} workers as processes on this machine, at most {limits.MAX_NPROC}: "
            "advise a smaller cluster with --set workers=N, or run the shortlist with torchrun"
        )
    if scenario.script is not None:  # a profiled script's cluster: --verify launches that script (verify_script)
        from hetsync.verify_script import check

        check(scenario)


def seed_folder(seed: int) -> str:
    """The subfolder of ``verify/`` holding one real seed's runs (with more than one seed)."""
    return f"seed-{seed}"


def verify(
    advice: Advice,
    out: Path,
    forwarded: RunConfig | None,
    *,
    host: str = "127.0.0.1",
    on_progress: Callable[[str, float, str], None] | None = None,
    seeds: int = 1,
) -> Verification:
    """Run the shortlist (winner, runner-up, BSP) on the real runtime, as
    ``hetsync run`` does, in ``out/verify``; ``forwarded`` is the runtime's
    run config (:func:`verify_args`, whose ``--out`` must be ``out/verify``).
    With ``seeds`` > 1 the shortlist runs once per seed, the first
    ``seeds`` of the ones advise simulated (``verify/seed-N/`` each), and
    the measured figures are the medians over them, as the predicted ones
    are over the simulated seeds. A profiled script's cluster (its
    ``script`` key) runs the user's script instead, once per policy
    (:func:`hetsync.verify_script.run_shortlist`; ``forwarded`` unused).
    RuntimeError if the runs failed."""
    from hetsync.outdir import begin

    if seeds < 1:
        raise BadInput(f"verify seeds must be >= 1, got {seeds}")
    t0 = time.perf_counter()
    folder = out / VERIFY_DIR
    specs = advice.shortlist()
    replacing = begin(folder)  # (an earlier verification: set aside until this one finishes)
    try:
        if advice.scenario.script is not None:
            verified = _verify_script(advice, folder, specs, host=host, on_progress=on_progress, seeds=seeds, t0=t0)
        else:
            assert forwarded is not None, "the built-in workload's verification needs the run config"
            verified = _verify_runs(advice, forwarded, specs, host=host, on_progress=on_progress, seeds=seeds, t0=t0)
    except BaseException:
        replacing.finish(False)
        raise
    replacing.finish(True)
    return verified


def _verify_runs(
    advice: Advice,
    forwarded: RunConfig,
    specs: list[str],
    *,
    host: str,
    on_progress: Callable[[str, float, str], None] | None,
    seeds: int,
    t0: float,
) -> Verification:
    """:func:`verify`'s real runs and their comparison with the prediction."""
    from hetsync.runtime import launch
    from hetsync.summary import read_summary

    sc = advice.scenario
    per_run_s = sc.max_time_s if sc.max_time_s is not None else 300.0
    seed_list = tuple(sc.seed + k for k in range(seeds)) if seeds > 1 else ()
    configs = [forwarded] if not seed_list else [_seeded(forwarded, seed) for seed in seed_list]
    summaries: list[Mapping[str, Mapping[str, Any]]] = []
    for config in configs:
        where = config.process.out
        code = launch.launch_run(
            config,
            sc.workers,
            host=host,
            on_progress=on_progress,
            timeout_s=3 * per_run_s * len(specs) + 300,
        )
        if code != 0:
            why = launch.launcher_reason(where) or launch.server_log_tail(where)
            raise RuntimeError(f"the real runs of --verify failed (status {code}): {why}")
        by_label = {r["label"]: r for r in read_summary(where / "summary.json")}
        summaries.append({spec: by_label.get(_label_of(advice, spec), {}) for spec in specs})
    rows = verified_rows(advice, specs, summaries)
    return Verification(rows=rows, folder=VERIFY_DIR, elapsed_s=time.perf_counter() - t0, seeds=seed_list)


def _label_of(advice: Advice, spec: str) -> str:
    return next(r.label for r in advice.ranked if r.candidate.spec == spec)


def verified_rows(
    advice: Advice, specs: Sequence[str], summaries: Sequence[Mapping[str, Mapping[str, Any]]]
) -> tuple[Verified, ...]:
    """The prediction against the real runs, one row per spec: ``summaries``
    holds one mapping per real seed, from spec to that run's summary."""
    by_spec = {r.candidate.spec: r for r in advice.ranked}
    rec = advice.recommendation.label
    metric = advice.scenario.target_metric
    rows = []
    for spec in specs:
        r = by_spec[spec]
        per_seed = [real.get(spec, {}) for real in summaries]
        ttas = tuple(_number(m.get("time_to_target_s")) for m in per_seed)
        rows.append(
            Verified(
                label=r.label,
                spec=spec,
                recommended=r.label == rec,
                predicted_tta_s=r.median_tta_s,
                predicted_tta_range=(r.min_tta_s, r.max_tta_s),
                measured_tta_s=median_reached(ttas),
                predicted_samples_per_s=r.median_of(r.samples_per_s),
                measured_samples_per_s=_median_known(_number(m.get("samples_per_s")) for m in per_seed),
                measured_wall_s=_median_known(_number(m.get("wall_time_s")) for m in per_seed),
                measured_tta_seeds_s=ttas,
                measured_note=next((n for n in (missing_metric(m, metric) for m in per_seed) if n), None),
            )
        )
    return tuple(rows)


def missing_metric(run: Mapping[str, Any], metric: str) -> str | None:
    """Why a real run has no time to target however it went, in a table
    cell's words: it evaluated nothing (a script that passes no
    ``evaluate=``: :data:`NO_EVALUATE`), or not the target's metric (``no
    METRIC``); None when it reported the metric (or is no run)."""
    if not run:
        return None
    metrics = run.get("final_metrics")
    if not metrics and not run.get("metric_curve"):
        return NO_EVALUATE
    if isinstance(metrics, Mapping) and metric not in metrics:
        return f"no {metric}"
    return None


NO_EVALUATE = "no evaluate="
"""The measured time to target's cell where the script evaluates nothing (:func:`missing_metric`)."""


def _verify_script(
    advice: Advice,
    folder: Path,
    specs: list[str],
    *,
    host: str,
    on_progress: Callable[[str, float, str], None] | None,
    seeds: int,
    t0: float,
) -> Verification:
    """:func:`verify` on a profiled script's cluster: the user's script, once per spec and seed."""
    from hetsync.verify_script import run_shortlist

    sc = advice.scenario
    seed_list = [sc.seed + k for k in range(seeds)]
    bases = [(seed, folder if seeds == 1 else folder / seed_folder(seed)) for seed in seed_list]
    labels = {spec: _label_of(advice, spec) for spec in specs}
    ran = run_shortlist(sc, specs, labels, folder, bases, host=host, on_progress=on_progress)
    return Verification(
        rows=verified_rows(advice, specs, ran["summaries"]),
        folder=VERIFY_DIR,
        elapsed_s=time.perf_counter() - t0,
        seeds=tuple(seed_list) if seeds > 1 else (),
        script=ran["script"],
        emulated=ran["emulated"],
    )


def _seeded(config: RunConfig, seed: int) -> RunConfig:
    """``config`` for one real seed: that seed, its runs in ``verify/seed-N``."""
    process = replace(config.process, out=config.process.out / seed_folder(seed))
    return replace(config, overrides={**config.overrides, "seed": seed}, process=process)


def median_reached(values: Sequence[float | None]) -> float | None:
    """The median time to target over seeds, a seed that missed (None)
    counting as infinitely slow; None when the median itself missed."""
    if not values:
        return None
    med = statistics.median(math.inf if v is None else v for v in values)
    return med if math.isfinite(med) else None


def _median_known(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def verification_rows(v: Verification) -> tuple[list[str], list[list[str]]]:
    headers = [
        "candidate",
        "TTA predicted (s)",
        "TTA measured (s)",
        "error",
        "samples/s predicted",
        "samples/s measured",
        "error",
    ]

    def err(e: float | None) -> str:
        return "—" if e is None else f"{e:+.0%}"

    def rate(x: float | None) -> str:
        return "—" if x is None else f"{x:,.0f}"

    rows = []
    for r in v.rows:
        lo, hi = r.predicted_tta_range
        span = f" ({_fmt_s(lo)}–{_fmt_s(hi) if math.isfinite(hi) else '>'})" if lo is not None and lo != hi else ""
        rows.append(
            [
                r.label + (" ★" if r.recommended else ""),
                _fmt_s(r.predicted_tta_s) + span,
                (_fmt_s(r.measured_tta_s) if r.measured_tta_s is not None else r.measured_note or "not reached")
                + _seed_span(r),
                err(r.tta_error),
                rate(r.predicted_samples_per_s),
                rate(r.measured_samples_per_s),
                err(r.rate_error),
            ]
        )
    return headers, rows


def _seed_span(r: Verified) -> str:
    """`` (lo–hi)`` of the real seeds' times to target (``>``: a seed missed), or nothing for one seed."""
    ttas = r.measured_tta_seeds_s
    if len(ttas) < 2:
        return ""
    reached = [t for t in ttas if t is not None]
    if not reached:
        return ""
    hi = _fmt_s(max(reached)) if len(reached) == len(ttas) else ">"
    return f" ({_fmt_s(min(reached))}–{hi})"


def verification_table(v: Verification, advice: Advice) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(
            f"verify · predicted (simulator, median over {len(advice.seeds)} seeds) vs measured (real processes"
            + (f", median over {len(v.seeds)} seeds)" if len(v.seeds) > 1 else ")")
        ),
        caption=f"★ recommended; error: measured / predicted − 1; real runs in {v.folder}/"
        + (
            f": your script {v.script} under hetsync launch, on {v.emulated or 'no emulated cluster'}"
            if v.script
            else ""
        ),
        header_style="bold",
    )
    headers, rows = verification_rows(v)
    for j, h in enumerate(headers):
        table.add_column(Text(h), justify="left" if j == 0 else "right", no_wrap=True)
    fastest = v.fastest
    for r, cells in zip(v.rows, rows, strict=True):
        table.add_row(*(Text(c) for c in cells), style="bold green" if r is fastest else "")
    return table


# ------------------------------------------------------------------ output
def _finite_or_none(v: Any) -> Any:
    return v if not isinstance(v, float) or math.isfinite(v) else None


def _fmt_s(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:  # 2 decimals where they say something: 3.25, 3.0, 12.5
        text = f"{v:.2f}"
        return text[:-1] if text.endswith("0") else text
    return f"{v:.3g}"


def _fmt_ms(v: float) -> str:
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s"


def _fmt_pct(v: float) -> str:
    return f"{v:.0%}" if v >= 0.01 or v == 0 else f"{v:.1%}"


def _fmt_bps(Bps: float) -> str:
    bits = Bps * 8
    for unit, scale in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:.3g} b/s"


def seed_range(r: Ranked) -> str:
    """min–max of the time to target over the seeds; an unreached seed shows as > its run's length."""
    if r.failed:
        return "failed"
    if not r.tta_s:
        return "—"
    lo = r.min_tta_s
    hi = r.max_tta_s
    limits = [t for t, tta in zip(r.limit_s, r.tta_s, strict=False) if tta is None and t is not None]
    hi_text = _fmt_s(hi) if math.isfinite(hi) else (f">{_fmt_s(max(limits))}" if limits else "—")
    if lo is None:
        return "not reached"
    return _fmt_s(lo) if len(r.tta_s) == 1 else f"{_fmt_s(lo)}–{hi_text}"


def table_rows(advice: Advice) -> tuple[list[str], list[list[str]]]:
    """The ranking's headers and cells, shared by the terminal and the HTML page."""
    n = len(advice.seeds)
    metric = advice.scenario.target_metric
    headers = [
        "#",
        "candidate",
        "TTA median (s)",
        f"TTA range over {n} seeds",
        "reached",
        "vs BSP",
        f"final {metric}",
        "wait",
        "samples/s",
    ]
    base = advice.baseline
    rows = []
    for r in advice.ranked:
        gain, span = speedup(r, base)
        if r is base:
            vs = "reference"
        elif gain is None:
            vs = "—"
        else:
            vs = f"{gain:.2f}×" + (f" ({_fmt_range(span)})" if span and n > 1 else "")
        final = r.median_final
        wait_s = r.median_of(r.wait_share)
        rate = r.median_of(r.samples_per_s)
        rows.append(
            [
                str(r.rank),
                r.label,
                _fmt_s(r.median_tta_s),
                seed_range(r),
                f"{r.reached}/{len(r.tta_s)}",
                vs,
                "—" if final is None else f"{final:.3g}",
                "—" if wait_s is None else f"{wait_s:.0%}",
                "—" if rate is None else f"{rate:,.0f}",
            ]
        )
    return headers, rows


def ranking_table(advice: Advice) -> Any:
    """The ranking as a rich table; every cell is literal text (labels come from users)."""
    from rich.table import Table
    from rich.text import Text

    sc = advice.scenario
    limit = f", {_fmt_s(sc.max_time_s)} s each" if sc.max_time_s is not None else ""
    table = Table(
        title=Text(f"{sc.name} · {sc.workers} workers · target {advice.target} · {len(advice.seeds)} seeds{limit}"),
        caption="TTA: time to target (virtual s); wait, samples/s: medians; vs BSP: median speed-up (seed range)",
        header_style="bold",
    )
    headers, rows = table_rows(advice)
    for j, h in enumerate(headers):
        table.add_column(Text(h), justify="left" if j == 1 else "right", no_wrap=True)
    top = advice.recommendation
    for r, cells in zip(advice.ranked, rows, strict=True):
        style = ""
        if r.rank == 1 and top.verdict in ("switch", "bsp"):
            style = "bold green"
        elif r.candidate.policy == BASELINE and not r.candidate.params:
            style = "bold"
        table.add_row(*(Text(c) for c in cells), style=style)
    return table


def plot_tta(advice: Advice, path: Path) -> Path:
    """Time to target per candidate: the median as a dot, the seed range as a bar;
    candidates that did not reach the target at the run's end, hollow."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from hetsync.report import DPI

    ranked = list(advice.ranked)
    n = len(ranked)
    fig = Figure(figsize=(8.5, 1.6 + 0.34 * n), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    limits = [t for r in ranked for t in r.limit_s if t is not None]
    limit = advice.scenario.max_time_s or (max(limits) if limits else 1.0)
    base = advice.baseline
    winner_color, base_color, other_color, miss_color = "#009E73", "#333333", "#0072B2", "#BBBBBB"
    for y, r in enumerate(ranked):
        is_base = r is base
        color = base_color if is_base else other_color
        if r.rank == 1 and advice.recommendation.verdict in ("switch", "not-significant"):
            color = winner_color
        reached = [t for t in r.tta_s if t is not None]
        lo = min(reached) if reached else None
        hi = r.max_tta_s if math.isfinite(r.max_tta_s) else limit
        if lo is not None:
            ax.plot([lo, hi], [y, y], color=color, lw=2.2, solid_capstyle="butt")
            ax.plot([lo, lo], [y - 0.18, y + 0.18], color=color, lw=1.2)
            if math.isfinite(r.max_tta_s):
                ax.plot([hi, hi], [y - 0.18, y + 0.18], color=color, lw=1.2)
            else:  # some seed never reached: the bar runs on to the end
                ax.plot([limit], [y], ">", color=color, ms=6)
        median = r.median_tta_s
        if median is not None:
            ax.plot([median], [y], "o", color=color, ms=7, zorder=3)
        else:
            ax.plot([limit], [y], "o", mfc="white", mec=miss_color, ms=7, zorder=3)
            final = r.median_final
            note = "not reached" + (f" (final {final:.3g})" if final is not None else "")
            ax.text(
                limit * 0.985,
                y,
                note,
                va="center",
                ha="right",
                fontsize=8,
                color="#666666",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
            )
    if base is not None and base.median_tta_s is not None:
        ax.axvline(base.median_tta_s, color=base_color, ls="--", lw=1)
    ax.set_yticks(range(n), [_literal(f"{r.rank}. {r.label}") for r in ranked], fontsize=8.5)
    ax.invert_yaxis()
    missing = any(r.median_tta_s is None or not math.isfinite(r.max_tta_s) for r in ranked)
    if missing:
        ax.axvline(limit, color="#999999", lw=0.8, ls=":")
    highest = max((r.max_tta_s for r in ranked if math.isfinite(r.max_tta_s)), default=limit)
    ax.set_xlim(0, limit * 1.05 if missing else min(limit, highest) * 1.08)
    ax.set_ylim(n - 0.4, -0.6)
    ax.set_xlabel(f"time to {advice.target} (virtual seconds)")
    ax.grid(axis="x", color="#E5E5E5")
    ax.set_axisbelow(True)
    ax.set_title(
        _literal(f"{advice.scenario.name}: time to target over {len(advice.seeds)} seeds"),
        fontsize=11,
        loc="left",
    )
    handles = [
        Line2D([], [], color=other_color, marker="o", lw=2.2, label="median, min–max over seeds"),
        Line2D([], [], color=winner_color, marker="o", lw=2.2, label="recommended"),
        Line2D([], [], color=base_color, ls="--", lw=1, label="BSP median"),
    ]
    if missing:
        handles.append(Line2D([], [], color=miss_color, marker="o", mfc="white", lw=0, label="median not reached"))
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _literal(text: str) -> str:
    """Text matplotlib draws as it is (a ``$`` would start mathtext)."""
    return text.replace("$", r"\$")


def feature_rows(f: Features) -> list[tuple[str, str]]:
    """The features as (name, value) lines for the page."""
    steps = f.step_s
    rows = [
        ("workers", str(f.workers)),
        (
            "nominal step (fastest / median / slowest)",
            f"{_fmt_ms(min(steps))} / {_fmt_ms(f.median_step_s)} / {_fmt_ms(max(steps))}",
        ),
        ("slowest ÷ fastest", f"{f.spread:.2f}×"),
        ("workers ≥ 1.2× the median", ", ".join(map(str, f.slow_workers)) or "none"),
        ("per-step noise (log-sd)", f"{f.jitter:g}"),
        (
            "transient stragglers",
            f"{_fmt_pct(f.straggler_prob)} of steps × {f.straggler_factor:.3g} "
            f"({_fmt_pct(f.round_hit)} of BSP rounds hit)"
            if f.straggler_prob > 0
            else "none",
        ),
        (
            "background load",
            f"{f.load_workers} workers × {f.load_factor:g}, on {_fmt_pct(f.load_duty)} of the time"
            if f.load_workers
            else "none",
        ),
        (
            "model transfer",
            f"{f.model_bytes / 1e6:.3g} MB; push + pull {_fmt_ms(f.transfer_s)} = {f.comm_ratio:.2f}× the median step",
        ),
        (
            "links (slowest ÷ fastest)",
            f"{f.link_spread:.3g}×"
            + (f"; traffic on {f.link_load_workers} links × {f.link_load_factor:g}" if f.link_load_workers else ""),
        ),
    ]
    return rows


def write_outputs(advice: Advice, out: Path, *, plots: bool = True, command: str = "hetsync advise") -> list[Path]:
    """Write ``advice.json`` (and, with plots, the PNGs and ``advice.html``);
    ``summary.json`` is already there. Returns the files written."""
    from hetsync.outdir import SUMMARY, write_json_atomic

    write_json_atomic(out / ADVICE_JSON, advice.to_dict())
    written = [out / ADVICE_JSON, out / SUMMARY]
    written += [out / r["trace"] for r in advice.runs if r.get("trace") and (out / r["trace"]).is_file()]
    if plots:
        written.append(plot_tta(advice, out / TTA_PLOT))
        written.append(write_html(advice, out, command=command))
    return written


def _shown_runs(advice: Advice) -> list[dict[str, Any]]:
    """The seed-0 runs the comparison's plots show: the top few and BSP."""
    shown = list(advice.runs[:PLOTTED_RUNS])
    for r in advice.runs:
        if r.get("policy") == BASELINE and not r.get("params") and r not in shown:
            shown.append(r)
    return shown


def write_html(advice: Advice, out: Path, *, command: str) -> Path:
    """``advice.html``: the recommendation, the features, the ranking and the
    time-to-target plot, then the seed-0 comparison as :func:`hetsync.report.write_html`
    writes it (every run in the table; curves and timelines of the top few and BSP)."""
    import base64
    import html
    import re

    from hetsync import report

    esc = html.escape
    sc = advice.scenario
    rec = advice.recommendation
    report.write_report(_shown_runs(advice), out)
    tmp = out / (ADVICE_HTML + ".tmp")
    report.write_html(list(advice.runs), out, tmp, command=command)
    compared = tmp.read_text(encoding="utf-8")
    tmp.unlink()
    style = re.search(r"<style>(.*?)</style>", compared, re.S)
    body = re.search(r"<body>(.*)</body>", compared, re.S)
    headers, rows = table_rows(advice)
    verdict_color = {"switch": "#007a3d", "bsp": "#007a3d", "not-significant": "#8a5a00", "none": "#b00020"}
    limit = f", {_fmt_s(sc.max_time_s)} s of virtual time per run" if sc.max_time_s is not None else ""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hetsync advise · {esc(sc.name)}</title>",
        f"<style>{style.group(1) if style else ''}\n.rec {{ font-size: 1.2em; }}\n"
        "td.l { text-align: left; }</style></head><body>",
        f"<h1>hetsync advise · {esc(sc.name)}</h1>",
        f"<p>Generated by <code>{esc(command)}</code> on {time.strftime('%Y-%m-%d')}, in the simulator: "
        f"{sc.workers} workers, target {esc(advice.target)}, {len(advice.candidates)} candidates × "
        f"{len(advice.seeds)} seeds ({', '.join(map(str, advice.seeds))}){esc(limit)}; "
        f"{advice.elapsed_s:.0f} s on {advice.jobs} processes.</p>",
        f'<p class="rec" style="color:{verdict_color.get(rec.verdict, "#222")}"><b>Recommendation:</b> '
        f"{esc(rec.headline)}.</p>",
        f"<p><b>Why:</b> {esc(rec.reason)}</p>",
        "<h2>Ranking</h2>",
        "<table><caption>"
        + esc(
            "TTA: time to target (virtual s); wait, samples/s: medians over seeds; vs BSP: median speed-up "
            "(range of the per-seed ratios)"
        )
        + "</caption>",
        "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>",
    ]
    for r, cells in zip(advice.ranked, rows, strict=True):
        best = r.rank == 1 and rec.verdict in ("switch", "bsp")
        classes = {1: ' class="l"', 2: ' class="best"' if best else ""}
        tds = [f"<td{classes.get(j, '')}>{esc(c)}</td>" for j, c in enumerate(cells)]
        parts.append("<tr>" + "".join(tds) + "</tr>")
    parts.append("</table>")
    png = out / TTA_PLOT
    if png.exists():
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f'<img alt="time to target per candidate" src="data:image/png;base64,{data}">')
    if advice.verification is not None:
        v = advice.verification
        vh, vr = verification_rows(v)
        parts += [
            "<h2>Verified on real processes</h2>",
            f"<p><b>{esc(v.verdict())}</b></p>",
            "<table><caption>"
            + esc(
                "predicted: the simulator (median over seeds, range); measured: "
                + (
                    f"your script {v.script} under hetsync launch, on {v.emulated or 'no emulated cluster'}, "
                    if v.script
                    else "hetsync run "
                )
                + f"in {v.folder}/; error: measured / predicted − 1; ★ recommended"
            )
            + "</caption>",
            "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in vh) + "</tr>",
        ]
        parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>" for cells in vr]
        parts.append("</table>")
    parts += ["<h2>The cluster</h2>", "<table>"]
    parts += [f'<tr><td class="l">{esc(k)}</td><td>{esc(v)}</td></tr>' for k, v in feature_rows(advice.features)]
    parts.append("</table>")
    if advice.skipped:
        parts.append("<p>Not applicable here:</p><ul>")
        parts += [f"<li><code>{esc(s)}</code>: {esc(why)}</li>" for s, why in advice.skipped]
        parts.append("</ul>")
    failed = [r for r in advice.ranked if any(r.errors)]
    if failed:
        parts.append("<ul>")
        parts += [
            f'<li class="note">{esc(r.label)} seed {s}: {esc(str(e))}</li>'
            for r in failed
            for s, e in zip(r.seeds, r.errors, strict=False)
            if e
        ]
        parts.append("</ul>")
    parts.append(f"<h2>Seed {advice.seeds[0]}: every candidate's run</h2>")
    if body:
        parts.append(re.sub(r"<h1>.*?</h1>", "", body.group(1), count=1, flags=re.S))
    parts.append("</body></html>")
    page = out / ADVICE_HTML
    page.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return page
