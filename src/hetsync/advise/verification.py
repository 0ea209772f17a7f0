"""``hetsync advise --verify``: the shortlist on real processes, predicted against measured.

:func:`verify` runs :meth:`~hetsync.advise.advice.Advice.shortlist` (the
winner, the runner-up and BSP) on the real runtime, as ``hetsync run``
does (:func:`verify_args` is its run config; on a profiled script's
cluster, the user's own script as ``hetsync launch`` does, on the cluster
the profile emulated: :mod:`hetsync.advise.verify_script`), and sets
predicted against measured time to target and throughput
(:class:`Verification`, in ``advice.json`` and the page). With more than
one seed the shortlist runs once per seed and the measured figures are
medians, as the predicted ones are over the simulated seeds.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hetsync.advise.advice import Advice, _finite_or_none, _number, split_choice
from hetsync.errors import BadInput
from hetsync.runtime.config import RunConfig
from hetsync.scenario import Scenario

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
    script: str | None = None  # the user's script that ran (hetsync.advise.verify_script); None: the built-in workload
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
    policies = tuple(dict.fromkeys(split_choice(spec)[0] for spec in specs))  # (each path's runs: _verify_runs)
    return RunConfig(scenario=scenario_arg, overrides=given, policies=policies, process=process, plots=False)


def check_verifiable(scenario: Scenario) -> None:
    """``--verify`` starts one process per worker and a server on this machine: refuse what it cannot start
    (and, for a profiled script's cluster, a script, folder or emulated cluster that is gone)."""
    from hetsync import limits

    n = scenario.cluster.workers
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
    if scenario.job.script is not None:  # a profiled script's cluster: --verify launches that script (verify_script)
        from hetsync.advise.verify_script import check

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
    (:func:`hetsync.advise.verify_script.run_shortlist`; ``forwarded`` unused).
    RuntimeError if the runs failed."""
    from hetsync.outdir import begin

    if seeds < 1:
        raise BadInput(f"verify seeds must be >= 1, got {seeds}")
    t0 = time.perf_counter()
    folder = out / VERIFY_DIR
    specs = advice.shortlist()
    replacing = begin(folder)  # (an earlier verification: set aside until this one finishes)
    try:
        if advice.scenario.job.script is not None:
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
    """:func:`verify`'s real runs and their comparison with the prediction:
    one ``hetsync run`` per path (the collective path's in ``collective/``,
    S sharded servers' in ``servers-S/``)."""
    from hetsync.runtime import launch
    from hetsync.summary import read_summary

    sc = advice.scenario
    per_run_s = sc.stop.max_time_s if sc.stop.max_time_s is not None else 300.0
    seed_list = tuple(sc.job.seed + k for k in range(seeds)) if seeds > 1 else ()
    configs = [forwarded] if not seed_list else [_seeded(forwarded, seed) for seed in seed_list]
    by_path: dict[tuple[str, int], list[str]] = {}
    for choice in specs:
        _, path, servers = split_choice(choice)
        by_path.setdefault((path, servers), []).append(choice)
    summaries: list[Mapping[str, Mapping[str, Any]]] = []
    for config in configs:
        measured: dict[str, Mapping[str, Any]] = {}
        for (path, servers), choices in by_path.items():
            sub = path_folder(path, servers)
            where = config.process.out if sub is None else config.process.out / sub
            process = replace(config.process, out=where, path=path, servers=servers)
            group = replace(config, policies=tuple(split_choice(c)[0] for c in choices), process=process)
            shown = {_run_label_of(advice, c): _label_of(advice, c) for c in choices}  # (progress by advise's labels)
            tick = None if on_progress is None else _relabelled(on_progress, shown)
            code = launch.launch_run(
                group, sc.cluster.workers, host=host, on_progress=tick, timeout_s=3 * per_run_s * len(choices) + 300
            )
            if code != 0:
                why = launch.launcher_reason(where) or launch.server_log_tail(where)
                raise RuntimeError(f"the real runs of --verify failed (status {code}): {why}")
            by_label = {r["label"]: r for r in read_summary(where / "summary.json")}
            measured.update({c: by_label.get(_run_label_of(advice, c), {}) for c in choices})
        if len(by_path) > 1:
            _gather(advice, config.process.out, specs, measured)
        summaries.append(measured)
    rows = verified_rows(advice, specs, summaries)
    return Verification(rows=rows, folder=VERIFY_DIR, elapsed_s=time.perf_counter() - t0, seeds=seed_list)


def path_folder(path: str, servers: int) -> str | None:
    """The subfolder of ``verify/`` (of a seed's) holding one path's runs: None
    for rank 0 alone, ``collective``, ``servers-S``."""
    if path != "ps":
        return path
    return None if servers == 1 else f"servers-{servers}"


def _gather(advice: Advice, folder: Path, choices: Sequence[str], measured: Mapping[str, Mapping[str, Any]]) -> None:
    """One ``summary.json`` in ``folder`` for the runs of every path (those of
    the other paths under advise's labels, their traces linked beside it), so
    that ``hetsync report`` shows them side by side."""
    from hetsync.advise.verify_script import gathered_run
    from hetsync.outdir import write_json_atomic

    runs = []
    for choice in choices:
        run = measured.get(choice)
        if not run:
            continue
        sub = path_folder(*split_choice(choice)[1:])
        runs.append(dict(run) if sub is None else gathered_run(run, folder / sub, folder, _label_of(advice, choice)))
    write_json_atomic(folder / "summary.json", runs)


def _label_of(advice: Advice, choice: str) -> str:
    """The label advise shows for a shortlisted candidate (:meth:`Advice.shortlist`'s name of it)."""
    return next(r.label for r in advice.ranked if r.candidate.choice == choice)


def _run_label_of(advice: Advice, choice: str) -> str:
    """The label its real run has (the policy's: a run does not name its path)."""
    c = next(r.candidate for r in advice.ranked if r.candidate.choice == choice)
    return c.run_label or c.label


def _relabelled(
    on_progress: Callable[[str, float, str], None], labels: Mapping[str, str]
) -> Callable[[str, float, str], None]:
    return lambda label, fraction, status="": on_progress(labels.get(label, label), fraction, status)


def verified_rows(
    advice: Advice, specs: Sequence[str], summaries: Sequence[Mapping[str, Mapping[str, Any]]]
) -> tuple[Verified, ...]:
    """The prediction against the real runs, one row per spec: ``summaries``
    holds one mapping per real seed, from spec to that run's summary."""
    by_spec = {r.candidate.choice: r for r in advice.ranked}
    rec = advice.recommendation.label
    metric = advice.scenario.stop.target.metric
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
    from hetsync.advise.verify_script import run_shortlist

    sc = advice.scenario
    seed_list = [sc.job.seed + k for k in range(seeds)]
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
