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

:func:`advise` chains the stages into an :class:`Advice`. :meth:`Advice.shortlist`
is what ``--verify`` runs: the winner, the runner-up and BSP
(:mod:`hetsync.advise.verification`); :mod:`hetsync.advise.pages` shows the
ranking and writes ``advice.json`` and ``advice.html``.
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
from typing import TYPE_CHECKING, Any

from hetsync.errors import BadInput
from hetsync.scenario import Scenario

if TYPE_CHECKING:  # (an Advice holds its verification; verification imports this module)
    from hetsync.advise.verification import Verification

BASELINE = "bsp"
DEFAULT_SEEDS = 3

# The parameter grid of each policy: spec suffixes (":k=v"), "" for the
# defaults. Chosen from the policies' parameter docs: a tight, the default
# and a loose setting where the parameter trades waiting for staleness or
# communication for drift. A policy missing here (a user's own) runs with
# its defaults.
GRID: dict[str, tuple[str, ...]] = {
    "bsp": ("",),
    "asp": ("", ":lr_scale=inverse", ":compensate=0.04"),
    "ssp": (":s=1", ":s=3", ":s=8", ":s=3:lr_scale=inverse"),
    "local-sgd": (":H=2", ":H=4", ":H=8"),
    "diloco": (":H=5", ":H=10"),
    "async-local-sgd": (":H=10",),
    "backup": (":b=1", ":b=2"),
    "wbsp": ("",),
    "wbsp-overlap": ("",),
    "dssp": (":s_L=1:r_max=6", ":s_L=3:r_max=12"),
    "elastic-bsp": (":R=5", ":R=15", ":R=15:within=local"),
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
    n = sc.cluster.workers
    step_s = tuple(sc.nominal_step_s(w, sc.job.batch_size) for w in range(n))
    bw = sorted(sc.cluster.bandwidth_Bps)
    median_bw = statistics.median(bw)
    # a BSP push: every worker's model over its own uplink, all of them into the server's
    # (and the server handles the round's n pushes, then its n models, one at a time: server_s_per_message)
    one_way = (
        max(_seconds(model_bytes, median_bw), _seconds(n * model_bytes, sc.cluster.server_Bps))
        + sc.cluster.latency_s
        + n * sc.cluster.server_s_per_message
    )
    load, link = sc.cluster.background_load, sc.cluster.link_load
    # noise, stragglers and load scale the base part of a step, not the injected delay (docs/architecture.md §5): on
    # the whole step they weigh by the base's share (a profiled cluster is often mostly delay)
    share = statistics.median((s - d) / s if s > 0 else 1.0 for s, d in zip(step_s, sc.cluster.delay_s, strict=True))
    return Features(
        workers=n,
        step_s=step_s,
        jitter=sc.timing.jitter * share,
        straggler_prob=sc.timing.straggler_prob,
        straggler_factor=1 + (sc.timing.straggler_factor - 1) * share,
        load_workers=len(load.workers) if load is not None and load.factor > 1 else 0,
        load_factor=1 + (load.factor - 1) * share if load is not None else 1.0,
        load_duty=load.on_s / load.period_s if load is not None else 0.0,
        model_bytes=model_bytes,
        transfer_s=2 * one_way,
        link_Bps=tuple(sc.cluster.bandwidth_Bps),
        link_load_workers=len(link.workers) if link is not None and link.factor > 1 else 0,
        link_load_factor=link.factor if link is not None else 1.0,
    )


def _seconds(nbytes: float, Bps: float) -> float:
    return 0.0 if nbytes == 0 or math.isinf(Bps) else nbytes / Bps


# -------------------------------------------------------------- candidates
# the data-plane paths advise weighs: hetsync.driver.paths.PATHS (not imported here, with torch behind it,
# until a command asks: test_advise checks they are the same)
PATHS = ("ps", "collective")


def choice_name(spec: str, path: str, servers: int = 1) -> str:
    """A candidate's name in a shortlist: its spec, with ``@collective`` on
    that path or ``@servers=S`` with the model on S sharded servers."""
    if path != "ps":
        return f"{spec}@{path}"
    return spec if servers == 1 else f"{spec}@servers={servers}"


def split_choice(choice: str) -> tuple[str, str, int]:
    """(spec, path, servers) of :func:`choice_name`'s name."""
    spec, _, where = choice.partition("@")
    if where.startswith("servers="):
        return spec, "ps", int(where.removeprefix("servers="))
    return spec, where or "ps", 1


def parse_servers(given: str) -> tuple[int, ...]:
    """``--servers``: the sharded-server counts to weigh (1: rank 0 alone, always)."""
    from hetsync.driver.shards import parse_server_counts

    counts = parse_server_counts(given, "--servers")
    return counts if 1 in counts else (1, *counts)


def parse_paths(given: str) -> tuple[str, ...]:
    """``--paths``: known paths, comma-separated; ps is always among them (BSP there is the reference)."""
    from hetsync.driver.paths import parse_paths as parse

    paths = parse(given, "--paths")
    return paths if "ps" in paths else ("ps", *paths)


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    spec: str  # as a policy spec: "ssp:s=3"
    label: str  # as advise shows it: "ssp(s=3)", "bsp@collective"
    policy: str
    params: dict[str, Any] = field(default_factory=dict)
    path: str = "ps"  # the data plane it runs on (a round's gradients through rank 0, or all-reduced)
    servers: int = 1  # path ps: the model on this many sharded servers (rank 0 and S − 1 more)
    run_label: str = ""  # as a run names it (the policy's label; the label when empty)

    @property
    def choice(self) -> str:
        return choice_name(self.spec, self.path, self.servers)

    @property
    def is_reference(self) -> bool:
        """BSP with its defaults through rank 0 alone: what the others' speed-ups are against."""
        return self.policy == BASELINE and not self.params and self.path == "ps" and self.servers == 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "label": self.label,
            "policy": self.policy,
            "params": dict(self.params),
            "path": self.path,
            "servers": self.servers,
            "choice": self.choice,
        }


def grid_specs(scenario: Scenario, names: Sequence[str]) -> list[str]:
    """The grid's specs of these policies, in order, adapted to the scenario
    (DiLoCo's and asynchronous local SGD's inner AdamW gets a small lr when
    the scenario's lr is tuned for SGD)."""
    specs = []
    for name in names:
        for suffix in GRID.get(name, ("",)):
            spec = name + suffix
            if name in INNER_ADAMW and scenario.job.optimizer.name == "sgd":
                spec += f":inner_lr={DILOCO_SGD_INNER_LR:g}"
            specs.append(spec)
    return specs


def not_applicable(scenario: Scenario, policy: str, params: Mapping[str, Any]) -> str | None:
    """Why a candidate that builds fine still makes no sense on this cluster (None: it does)."""
    from hetsync.policies import policy_class

    n = scenario.cluster.workers
    if n < 2 and policy != BASELINE:
        return "one worker: there is nothing to synchronize"
    if getattr(policy_class(policy), "simulator_only", False):
        return "simulator only for now: real processes cannot run it on this cluster yet"
    if policy == "backup" and params.get("b", 0) > n // 2:
        return f"b={params['b']} would drop more than half of the {n} workers' gradients"
    if policy in ("p2p-random", "selmcast") and params.get("p", 0) >= n:
        return f"p={params['p']} needs more than {params['p']} workers"
    if policy == "lb-bsp" and params.get("variant") == "gpu" and scenario.timing.device != "gpu":
        return "variant=gpu fits GPU step curves; this cluster's workers are CPU-like (device: cpu)"
    if policy == "lb-bsp" and params.get("predictor") == "ewma" and scenario.timing.device == "gpu":
        return "the ewma predictor is for CPU-like workers"
    return None


def candidates(
    scenario: Scenario,
    only: Sequence[str] | None = None,
    *,
    model_bytes: int = 0,
    paths: Sequence[str] = PATHS,
    servers: Sequence[int] = (1,),
) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """The candidates (BSP first: it is the reference) and the skipped specs
    with the reason. ``only`` restricts the list: a bare policy name brings
    its grid, a spec with parameters (``ssp:s=5``) is taken as it is. BSP
    always runs. An unknown name, or an explicit spec that does not build,
    is bad input; a grid entry that does not apply is skipped. With
    ``collective`` in ``paths`` every policy whose exchanges are rounds
    (:func:`~hetsync.driver.paths.uses_collective`) is a candidate on that
    path too, right after itself on the parameter-server path (``ps``,
    always weighed: BSP there is the reference); and with S > 1 in
    ``servers``, every one the shards can carry
    (:func:`~hetsync.driver.shards.check_servers`) with its model on S
    sharded servers (not a profiled script's: a user's own loop keeps its
    optimizer in the module)."""
    from hetsync.driver import policy_context
    from hetsync.driver.paths import check_path
    from hetsync.driver.shards import check_servers
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
    for path in paths:
        check_path(path)
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
        base = Candidate(spec=spec, label=policy.label, policy=policy.name, params=params)
        out.append(base)
        elsewhere = []  # (path, servers) it also runs on
        # (a user's own loop reduces gradient rounds only: hetsync.loop)
        if "collective" in paths and getattr(policy, "collective", False) and _collective_here(scenario, policy):
            elsewhere.append(("collective", 1))
        for k in (k for k in servers if k > 1 and scenario.job.script is None):
            try:
                check_servers(k, scenario, [policy], path="ps")
            except BadInput:
                continue  # (clipping by the global norm, p2p, delay compensation: one server only)
            elsewhere.append(("ps", k))
        for path, k in elsewhere:
            label = policy.label + choice_name(spec, path, k).removeprefix(spec)  # "bsp@collective", "asp@servers=4"
            out.append(replace(base, label=label, path=path, servers=k, run_label=policy.label))
    out.sort(key=lambda c: c.policy != BASELINE)  # stable: BSP first, the rest in registry order
    return out, skipped


def paths_clause(cands: Sequence[Candidate]) -> str:
    """`` (10 on the collective path, 4 on sharded servers)`` for a candidate
    list, to say what its count holds; empty when all go through rank 0 alone."""
    parts = []
    on_ring = sum(c.path == "collective" for c in cands)
    sharded = sum(c.servers > 1 for c in cands)
    if on_ring:
        parts.append(f"{on_ring} on the collective path")
    if sharded:
        parts.append(f"{sharded} on sharded servers")
    return f" ({', '.join(parts)})" if parts else ""


def _collective_here(scenario: Scenario, policy: Any) -> bool:
    """Whether the collective path can carry this policy on this cluster: a
    profiled script's (its own training loop) reduces gradient rounds only;
    one worker has nobody to reduce with."""
    return scenario.cluster.workers >= 2 and (scenario.job.script is None or policy.collective_kind == "grad")


# -------------------------------------------------------------- simulation
@dataclass(frozen=True, slots=True, kw_only=True)
class _Task:
    index: int  # candidate
    seed_index: int
    scenario: Scenario  # with the run's seed
    spec: str
    trace: Path | None
    path: str = "ps"
    servers: int = 1
    label: str = ""  # the candidate's, for its summary (a run on the collective path is "<policy>@collective")


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
    key = (sc.job.workload, repr(sorted(sc.job.workload_args.items())))
    if key not in _WORKLOADS:
        _WORKLOADS[key] = make_workload(sc.job.workload, **sc.job.workload_args)
    try:
        simulation = Simulation(
            sc, task.spec, trace_path=task.trace, workload=_WORKLOADS[key], path=task.path, servers=task.servers
        )
        summary = simulation.run().summary
        if task.label:
            summary["label"] = task.label
    except BaseException as e:  # the partial trace is not a run
        if task.trace is not None and task.trace.exists():
            task.trace.replace(partial_name(task.trace))
        if not isinstance(e, Exception):
            raise
        return {"spec": task.spec, "path": task.path, "seed": sc.job.seed, "error": f"{type(e).__name__}: {e}"}
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
            scenario=replace(scenario, job=replace(scenario.job, seed=seed)),
            spec=c.spec,
            trace=out / f"trace-{safe_name(c.label)}.jsonl" if k == 0 else None,
            path=c.path,
            servers=c.servers,
            label=c.label if c.choice != c.spec else "",
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
    from hetsync.forkserver import fresh_process_context

    # not fork: the parent holds torch's thread pools and rich's refresh thread, which fork would copy half-made
    pool = ProcessPoolExecutor(jobs, mp_context=fresh_process_context(), initializer=_init_worker)
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
    path: str = "ps"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "label": self.label,
            "spec": self.spec,
            "path": self.path,
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
    base = next((r for r in ranked if r.candidate.is_reference), None)
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
            path=top.candidate.path,
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
        path=top.candidate.path,
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
    """What the policy does about it, with its parameters (and its path, on the collective one)."""
    what = _policy_mechanism(c, f)
    if c.path == "collective":
        what += ", its rounds all-reduced among the workers (a ring: no server link for every model to queue on)"
    if c.servers > 1:
        what += f", the model on {c.servers} sharded servers (each push and pull split {c.servers} ways)"
    return what


def _policy_mechanism(c: Candidate, f: Features) -> str:
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
        picks = [r.candidate.choice for r in self.ranked if r.median_tta_s is not None][:k]
        if BASELINE not in picks:
            picks.append(BASELINE)
        return picks

    def to_dict(self) -> dict[str, Any]:
        sc = self.scenario
        return {
            "scenario": sc.name,
            "workers": sc.cluster.workers,
            "seeds": list(self.seeds),
            "target": self.target,
            "target_metric": sc.stop.target.metric,
            "target_value": sc.stop.target.value,
            "max_time_s": sc.stop.max_time_s,
            "max_steps": sc.stop.max_steps,
            "features": self.features.to_dict(),
            "recommendation": self.recommendation.to_dict(),
            "ranking": [{**r.to_dict(), **_speedup_dict(r, self.baseline)} for r in self.ranked],
            "skipped": [{"spec": s, "why": why} for s, why in self.skipped],
            "shortlist": self.shortlist(),
            "elapsed_s": self.elapsed_s,
            "jobs": self.jobs,
            "measured_step": self.measured,
            "verification": self.verification.to_dict() if self.verification is not None else None,
            "workload": sc.job.workload,
            "workload_note": self.workload_note,
        }

    @property
    def baseline(self) -> Ranked | None:
        return next((r for r in self.ranked if r.candidate.is_reference), None)


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
        f"{sc.name} names no workload: the simulator learns the built-in {sc.job.workload} in place of your model, so "
        f"this ranking weighs your cluster's costs with {sc.job.workload}'s convergence, not your model's; to simulate "
        "your model, name it in the file: workload: module:function (returning hetsync.workloads.from_module(...))"
    )


def target_text(sc: Scenario, direction: str) -> str:
    return f"{sc.stop.target.metric} {'≥' if direction == 'max' else '≤'} {sc.stop.target.value:g}"


def advise(
    scenario: Scenario,
    out: Path,
    *,
    seeds: int = DEFAULT_SEEDS,
    only: Sequence[str] | None = None,
    jobs: int | None = None,
    on_start: Callable[[list[Candidate], list[tuple[str, str]], int], None] | None = None,
    on_run: OnRun | None = None,
    paths: Sequence[str] = PATHS,
    servers: Sequence[int] = (1,),
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
    workload = make_workload(scenario.job.workload, **scenario.job.workload_args)
    direction = scenario.stop.target.direction_for(workload.name, workload.metrics)
    # `measured` step costs: timed once, here, so every run of every process is charged the same figures
    scenario = resolve_measured(scenario, workload)
    measured = scenario.step_cost if scenario.step_cost.measured else None
    nbytes = scenario.job.model_bytes if scenario.job.model_bytes is not None else workload.model_nbytes
    feats = features(scenario, nbytes)
    cands, skipped = candidates(scenario, only, model_bytes=nbytes, paths=paths, servers=servers)
    seed_list = tuple(scenario.job.seed + k for k in range(seeds))
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
    rec = recommend(ranked, feats, target=target, limit_s=scenario.stop.max_time_s)
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


# -------------------------------------------------------------- formatting
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
