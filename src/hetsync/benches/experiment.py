"""An experiment: scenarios × policies × seeds × overrides, against a baseline.

The paper benches are declarations on top of this module. A bench names its
cases (a scenario with overrides, written under a folder of ``--out``), the
policies, the seeds and the baseline, and declares the options it shares
with the other benches once (:class:`Options`: ``--scenarios``,
``--policies``, ``--seeds``, ``--set``, ``--quick``, ``--out``...; the page's
command is derived from them, :func:`command_line`); this module

- **runs** every policy on every case and seed in the simulator
  (:meth:`Experiment.run_case`), with one progress line per run, and adds a
  bench's own figures of each run from its trace (:data:`Figures`;
  :func:`batch_stats`: how the batches moved);
- **aggregates** over the seeds (:func:`tta_stats`, :func:`final_stats`,
  :func:`means`: mean, min, max, median, sd; :func:`paired_ratios` and
  :func:`speedup_stats`: a policy's time to target against the baseline's,
  or against a figure of the same seed's runs such as the fastest
  baseline's, *on the same seed*, so the timing noise both saw cancels);
- **diagnoses** (:meth:`Experiment.calm_runs`): the same runs once more
  without step-time noise (``jitter: 0``), which tells how much of a
  barrier's wait is noise no policy can foresee;
- **prints** one table shape (rows of ``policy × metric`` per setting, shares
  in %: :mod:`hetsync.benches.common`); a bench declares a table's columns
  once (:class:`Col`, :func:`case_columns`; its alignment on the page too)
  for the page and the terminal (:func:`aggregate_table`, :func:`col_rows`);
- **runs for real** (:func:`run_real`): a scenario as real processes, with
  the launch ``hetsync run`` uses, and the same :data:`Figures`;
- **fills a page template** (:func:`fill_page`, Jinja2): the prose and the
  paper's claims live in a ``.md.in`` file next to the bench; the bench passes
  its results record, and the template picks the paragraphs that hold with
  ``{% if %}`` and formats the figures with a few filters (:data:`PAGES`).

Nothing here knows a paper: the claims and the plots stay in the benches.
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import jinja2

from hetsync import report
from hetsync.benches.common import (
    Row,
    docs_dir,
    fmt_metric,
    mean_or_none,
    pct,
    seeds_setting,
    setup_cell,
    setup_markdown,
    short_metric,
    spread,
    target_text,
    with_sd,
)
from hetsync.errors import BadInput
from hetsync.scenario import Scenario, load_scenario, parse_override
from hetsync.summary import as_dicts, read_summary

Run = dict[str, Any]
"""One run's summary record (``hetsync compare``'s ``summary.json`` entry)."""
RunsBySeed = dict[int, list[Run]]
Figures = Callable[[Run, Path, Scenario], Mapping[str, Any]]
"""A bench's own figures of a run, added to its summary: ``figures(run, folder, scenario)``
(the run's trace is ``folder / run["trace"]``)."""


# ------------------------------------------------------------------ declaring
@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One scenario to run every policy on: written under ``out/key`` (``key``
    empty: under ``out`` itself); ``sweep`` marks a point of a parameter sweep."""

    key: str
    scenario: str  # built-in name or YAML path
    overrides: Mapping[str, Any] = field(default_factory=dict)
    sweep: bool = False


def override_cases(
    scenario: str, key: str, values: Iterable[Any], *, name: Callable[[Any], str], sweep: bool = False
) -> list[Case]:
    """A sweep over one override: a case per value of ``key`` on the scenario,
    written under ``<scenario stem>-<name(value)>``."""
    stem = Path(scenario).stem
    return [Case(key=f"{stem}-{name(v)}", scenario=scenario, overrides={key: v}, sweep=sweep) for v in values]


@dataclass(frozen=True, slots=True, kw_only=True)
class Experiment:
    """Cases × policies × seeds, with the overrides of ``--set`` applied to every case.

    ``policies`` None runs each scenario's own list. ``baseline`` is the policy
    (name, not label) the paired speed-ups are measured against. Runs of a case
    go to ``out/key/seed-<s>``, or to ``out/key`` when there is one seed and
    ``seed_dirs`` is false."""

    cases: tuple[Case, ...]
    seeds: tuple[int, ...]
    policies: tuple[str, ...] | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    seed_dirs: bool = True

    def __post_init__(self) -> None:
        if not self.cases:
            raise BadInput("an experiment needs at least one scenario (--scenarios)")
        if not self.seeds:
            raise BadInput("--seeds must name at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise BadInput(f"--seeds repeats a seed: {','.join(map(str, self.seeds))}")
        if self.policies is not None and not self.policies:
            raise BadInput("--policies must name at least one policy")

    def scenario(self, case: Case, seed: int | None = None, **extra: Any) -> Scenario:
        """The case's scenario with the overrides (``--set``, the case's, then ``extra``)."""
        seeded = {} if seed is None else {"seed": seed}
        return load_scenario(case.scenario, **{**self.overrides, **case.overrides, **seeded, **extra})

    def validate(self) -> None:
        """Load every case once: a bad name or key fails before the first run."""
        for case in self.cases:
            self.scenario(case)

    def folder(self, out: Path, case: Case, seed: int) -> Path:
        where = out / case.key if case.key else out
        return where / f"seed-{seed}" if self.seed_dirs or len(self.seeds) > 1 else where

    def specs(self, sc: Scenario) -> list[str]:
        return list(self.policies) if self.policies is not None else list(sc.job.policies)

    def run_case(
        self,
        case: Case,
        out: Path,
        *,
        progress: Callable[[Run], str] | None = None,
        figures: Figures | None = None,
        after: Callable[[list[Run], Path, Scenario], None] | None = None,
    ) -> tuple[Scenario, RunsBySeed]:
        """Every policy on the case, for every seed (simulator). ``progress``
        gives a run's figures for its progress line; ``figures`` adds a run's
        own figures (from its trace: :data:`Figures`); ``after`` then sees each
        seed's runs, folder and scenario (to draw plots). Returns the last
        seed's scenario and the runs by seed."""
        return run_cases([(self, case)], out, progress=progress, figures=figures, after=after)[0]

    def calm_runs(self, case: Case, out: Path, families: Iterable[str]) -> list[Run]:
        """The diagnosis: the policies of ``families`` (policy names) once more on
        the first seed without step-time noise (``jitter: 0``), under ``out``.
        None when the scenario has no noise or runs none of them."""
        from hetsync.runner import compare

        sc = self.scenario(case, self.seeds[0])
        wanted = set(families)
        specs = [spec for spec in self.specs(sc) if spec.split(":")[0] in wanted]
        if sc.timing.jitter <= 0 or not specs:
            return []
        report.terminal_console().print(
            f"  {case.key or sc.name} diagnosis: seed {self.seeds[0]} without step-time noise (jitter 0)"
        )
        return compare(self.scenario(case, self.seeds[0], jitter=0.0), specs, out)


def run_cases(
    cases: Sequence[tuple[Experiment, Case]],
    out: Path,
    *,
    jobs: int = 1,
    resume: bool = False,
    order: Callable[[Case, int], Any] | None = None,
    progress: Callable[[Run], str] | None = None,
    figures: Figures | None = None,
    after: Callable[[list[Run], Path, Scenario], None] | None = None,
) -> list[tuple[Scenario, RunsBySeed]]:
    """:meth:`Experiment.run_case` of each ``(experiment, case)``, its seeds
    run by up to ``jobs`` processes at once (:func:`hetsync.forkserver.fresh_process_context`;
    every seed of every case goes to one pool, in this order: the longest
    first balances best; ``order``: a sort key of ``(case, seed)`` that
    reorders them); ``progress`` must then be a module's function. A
    seed's runs are one ``compare`` as with one job, so its policies share the
    seed's timing noise. ``resume``: a seed's runs already in its folder's
    ``summary.json`` (an interrupted bench's) are kept and only the others
    run. ``figures`` and ``after`` run here, in seed order.
    Returns per case its last seed's scenario and its runs by seed."""
    from concurrent.futures import Future, ProcessPoolExecutor

    tasks = [
        (i, seed, exp.scenario(case, seed), exp.folder(out, case, seed))
        for i, (exp, case) in enumerate(cases)
        for seed in exp.seeds
    ]
    given: dict[tuple[int, int], list[Run] | Future[list[Run]]] = {}
    if jobs <= 1 or len(tasks) <= 1:
        for i, seed, sc, where in tasks:
            given[i, seed] = _run_seed(sc, cases[i][0].specs(sc), where, progress, resume)
    else:
        from hetsync.forkserver import fresh_process_context

        ordered = sorted(tasks, key=lambda t: order(cases[t[0]][1], t[1])) if order is not None else tasks
        with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=fresh_process_context()) as pool:
            for i, seed, sc, where in ordered:
                given[i, seed] = pool.submit(_run_seed, sc, cases[i][0].specs(sc), where, progress, resume)
            given = {k: v if isinstance(v, list) else v.result() for k, v in given.items()}
    results: list[tuple[Scenario, RunsBySeed]] = []
    for i, (exp, case) in enumerate(cases):
        per_seed: RunsBySeed = {}
        for j, seed, sc, where in tasks:
            if j == i:
                runs = given[i, seed]
                assert isinstance(runs, list)
                add_figures(runs, where, sc, figures)
                if after is not None:
                    after(runs, where, sc)
                per_seed[seed] = runs
        results.append((exp.scenario(case, exp.seeds[-1]), per_seed))
    return results


def _run_seed(
    sc: Scenario, specs: list[str], where: Path, progress: Callable[[Run], str] | None, resume: bool = False
) -> list[Run]:
    """One seed of a case: every policy (``compare``), a progress line per run;
    ``resume``: those in the folder's ``summary.json`` are not run again."""
    from hetsync.driver import policy_labels
    from hetsync.outdir import write_json_atomic
    from hetsync.runner import compare

    con = report.terminal_console()
    clock = [time.perf_counter()]

    def done(s: Run) -> None:
        now = time.perf_counter()
        figures = progress(s) if progress is not None else default_progress(s)
        con.print(f"  {s['scenario']} seed {s['seed']} · {s['label']}: {figures} ({now - clock[0]:.1f} s real)")
        clock[0] = now

    labels = policy_labels(sc, specs)
    kept: dict[str, Run] = {}
    if resume and (where / "summary.json").is_file():
        kept = {r["label"]: r for r in as_dicts(read_summary(where / "summary.json")) if r["label"] in labels}
    if not kept:
        return compare(sc, specs, where, on_result=done)
    con.print(f"  {sc.name} seed {sc.job.seed}: {len(kept)} runs kept from {where / 'summary.json'}")

    def merged(s: Run) -> None:
        # compare writes only its own runs: the summary keeps the kept ones beside them, after every run
        kept[s["label"]] = s
        write_json_atomic(where / "summary.json", [kept[label] for label in labels if label in kept])
        done(s)

    todo = [spec for spec, label in zip(specs, labels, strict=True) if label not in kept]
    if todo:
        compare(sc, todo, where, on_result=merged)
    write_json_atomic(where / "summary.json", [kept[label] for label in labels])
    return [kept[label] for label in labels]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """The command line a paper bench shares with the others, declared once:
    ``--out``/``--docs``/``--no-docs`` (the page ``page``), ``--quick`` (with
    ``quick_max_time_s``: that many virtual seconds per run, and ``quick_more``
    in its help), ``--scenarios``, ``--policies`` (None: each scenario's own
    list), ``--seeds``, ``--set`` (``set_example`` in its help) and, with
    ``diagnosis``, ``--no-diagnosis``. :meth:`experiment` turns the parsed
    options into the :class:`Experiment`."""

    bench: str
    page: str
    scenarios: tuple[str, ...]
    policies: tuple[str, ...] | None = None
    seeds: str = "0"
    set_example: str = "workers=4"
    quick_max_time_s: float | None = None
    quick_more: str = ""
    diagnosis: bool = False

    def add_arguments(self, p: Any) -> None:
        from hetsync.benches.common import add_output_arguments
        from hetsync.scenario import add_override_argument

        add_output_arguments(p, self.bench, self.page)
        if self.quick_max_time_s is not None:
            add_quick_argument(p, self.quick_max_time_s, self.quick_more)
        p.add_argument("--scenarios", default=",".join(self.scenarios), help="comma-separated (default: %(default)s)")
        policies = None if self.policies is None else ",".join(self.policies)
        p.add_argument("--policies", default=policies, help="comma-separated specs (default: %(default)s)")
        p.add_argument("--seeds", default=self.seeds, help="comma-separated seeds (default: %(default)s)")
        add_override_argument(p, self.set_example)
        if self.diagnosis:
            p.add_argument("--no-diagnosis", action="store_true", help="skip the runs without step-time noise")

    def experiment(self, args: Any, **more: Any) -> Experiment:
        """The experiment of the parsed options: a case per scenario (its key the
        name's stem), with ``more`` (``baseline``, ``seed_dirs``)."""
        from hetsync.benches.common import parse_seeds, split_list

        return Experiment(
            cases=tuple(Case(key=Path(n).stem, scenario=n) for n in split_list(args.scenarios, "--scenarios")),
            policies=tuple(split_list(args.policies, "--policies")) if args.policies else None,
            seeds=tuple(parse_seeds(args.seeds)),
            overrides=overrides_of(args, self.quick_max_time_s),
            **more,
        )


def overrides_of(args: Any, quick_max_time_s: float | None = None) -> dict[str, Any]:
    """The ``--set`` overrides; with ``--quick``, ``max_time_s`` defaults to ``quick_max_time_s``."""
    overrides = dict(parse_override(o) for o in args.overrides)
    if quick_max_time_s is not None and args.quick:
        overrides.setdefault("max_time_s", quick_max_time_s)
    return overrides


def add_quick_argument(p: Any, max_time_s: float, more: str = "") -> None:
    """``--quick``: ``max_time_s`` virtual seconds per run (unless ``--set`` gives it), and ``more``."""
    help_text = f"{max_time_s:g} virtual seconds per run instead of the scenario's{more}"
    p.add_argument("--quick", action="store_true", help=help_text)


def publish(args: Any, write: Callable[[Path], Any]) -> None:
    """Write a bench's page and its plots (``write(folder)``): always under
    ``--out``, and in ``--docs DIR`` when given."""
    for where in (Path(args.out), docs_dir(args)):
        if where is not None:
            write(where)


def run_real(
    raw: Mapping[str, Any],
    out: Path,
    *,
    timeout_s: float,
    specs: Sequence[str] | None = None,
    throttle: bool = False,
    figures: Figures | None = None,
) -> list[Run]:
    """A scenario (a mapping, as in a YAML file; written to ``out/<name>.yaml``)
    as real processes, one per worker and a server, launched as ``hetsync run``
    launches them; its policies, or ``specs``; ``throttle``: transfers last
    their bytes over the worker's bandwidth; ``figures`` as for
    :meth:`Experiment.run_case`. Returns the runs' summaries; RuntimeError
    with the end of the server's log if the run failed."""

    import yaml

    from hetsync.runtime.config import ProcessOptions, RunConfig
    from hetsync.runtime.launch import launch_run, server_log_tail
    from hetsync.scenario import scenario_from_dict

    sc = scenario_from_dict(dict(raw))
    policies = tuple(specs if specs is not None else raw["policies"])
    report.terminal_console().print(
        f"  {sc.name} on real processes: {sc.cluster.workers} workers and a server{', throttled links' if throttle else ''}, "
        f"{', '.join(policies)}, {sc.stop.max_time_s or 0:g} s each"
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(dict(raw), sort_keys=False))
    config = RunConfig(scenario=str(path), policies=policies, process=ProcessOptions(out=out, throttle=throttle))
    code = launch_run(config, int(raw["workers"]), timeout_s=timeout_s)
    if code != 0:
        raise RuntimeError(f"the runtime run failed (exit {code}):\n{server_log_tail(out)}")
    runs: list[Run] = as_dicts(read_summary(out / "summary.json"))
    add_figures(runs, out, sc, figures)
    return runs


def add_figures(runs: list[Run], folder: Path, sc: Scenario, figures: Figures | None) -> None:
    """Each run's own figures (:data:`Figures`), added to its summary."""
    for r in runs if figures is not None else []:
        r.update(figures(r, folder, sc))


def batch_stats(trace: Path, load: Any = None) -> dict[str, Any]:
    """How a run's batches moved (its trace's ``compute`` records): mean |Δ batch|
    per worker and round, early (rounds 1–10: ``move_early``) and later
    (``move_later``), each worker's ``final`` batch; with ``load`` (a
    BackgroundLoad), the loaded workers' mean batch while loaded
    (``loaded_batch_on``) and while not (``loaded_batch_off``)."""
    from hetsync.benches.plots import compute_records

    by_worker: dict[int, list[dict[str, Any]]] = {}
    for rec in compute_records(trace):
        by_worker.setdefault(rec["w"], []).append(rec)
    early, later = [], []
    for recs in by_worker.values():
        recs.sort(key=lambda r: r["step"])
        for prev, cur in zip(recs, recs[1:], strict=False):
            (early if cur["step"] <= 10 else later).append(abs(cur["batch"] - prev["batch"]))
    out: dict[str, Any] = {
        "move_early": mean_or_none(early),
        "move_later": mean_or_none(later),
        "final": [by_worker[w][-1]["batch"] for w in sorted(by_worker)],
    }
    if load is not None:
        batches = [(r["batch"], load.factor_at(w, r["t"]) > 1) for w in load.workers for r in by_worker.get(w, [])]
        out["loaded_batch_on"] = mean_or_none([b for b, on in batches if on])
        out["loaded_batch_off"] = mean_or_none([b for b, on in batches if not on])
    return out


def sync_per_step_s(run: Run) -> float:
    """Time a worker spends not computing, per step, averaged over workers: what
    synchronization costs a step, under any policy (from ``per_worker``'s compute times and steps)."""
    pw = run["per_worker"]
    per = [(run["wall_time_s"] - c) / k for c, k in zip(pw["compute_s"], pw["steps"], strict=True) if k]
    return sum(per) / len(per)


def default_progress(s: Run) -> str:
    """A run's progress figures: time to target, final metric, compute and wait shares."""
    metric = s["target_metric"]
    return (
        f"TTA {fmt_secs(s['time_to_target_s'])}, final {short_metric(metric)} {fmt_metric(metric, s['final_metric'])}, "
        f"compute {100 * s['compute_share']:.1f}%, wait {100 * s['wait_share']:.1f}%"
    )


# ------------------------------------------------------------------ aggregating
def labels_of(runs_by_seed: RunsBySeed) -> list[str]:
    """The run labels, in the order of the first seed."""
    return [r["label"] for r in next(iter(runs_by_seed.values()))]


def by_label(runs_by_seed: RunsBySeed, label: str) -> list[Run]:
    """The label's run of every seed, in seed order."""
    return [next(r for r in runs if r["label"] == label) for runs in runs_by_seed.values()]


def baseline_value(policy: str, key: str = "time_to_target_s") -> Callable[[list[Run]], float | None]:
    """The reference of :func:`paired_ratios`: ``key`` of the first run of ``policy`` among a seed's runs."""

    def value(runs: list[Run]) -> float | None:
        base = next((r for r in runs if r["policy"] == policy), None)
        return None if base is None else base[key]

    return value


def paired_ratios(
    runs_by_seed: RunsBySeed,
    label: str,
    reference: Callable[[list[Run]], float | None],
    *,
    key: str = "time_to_target_s",
    inverse: bool = False,
) -> list[float | None]:
    """Per seed, the reference's ``key`` (from that seed's runs) over the label's
    (a speed-up); ``inverse``: the label's over the reference's. None where
    either is missing (the target not reached) or zero."""
    out: list[float | None] = []
    for runs in runs_by_seed.values():
        ref, mine = reference(runs), next(r for r in runs if r["label"] == label)[key]
        num, den = (mine, ref) if inverse else (ref, mine)
        out.append(num / den if num is not None and den else None)
    return out


def means(runs: Sequence[Run], keys: Mapping[str, str]) -> dict[str, float | None]:
    """``{out_name: mean of run[key]}`` over the runs (None values left out)."""
    return {name: mean_or_none([r[key] for r in runs if r.get(key) is not None]) for name, key in keys.items()}


def seed_means(runs: Sequence[Run], keys: Iterable[str], **more: Any) -> dict[str, Any]:
    """A policy's runs over the seeds: the mean of each of ``keys`` (:func:`means`),
    ``more`` as given, and how many seeds reached the target of how many."""
    reached = sum(r["time_to_target_s"] is not None for r in runs)
    return {**means(runs, {k: k for k in keys}), **more, "reached": reached, "seeds": len(runs)}


def label_means(
    runs_by_seed: RunsBySeed, keys: Iterable[str], **more: Callable[[list[Run]], Any]
) -> list[dict[str, Any]]:
    """Per run label (in the first seed's order): ``label``, ``policy``, each of
    ``more`` computed from the label's runs over the seeds, and their
    :func:`seed_means` of ``keys``."""
    out = []
    for label in labels_of(runs_by_seed):
        rs = by_label(runs_by_seed, label)
        out.append(
            {"label": label, "policy": rs[0]["policy"], **{k: f(rs) for k, f in more.items()}, **seed_means(rs, keys)}
        )
    return out


Reference = str | Callable[[list[Run]], float | None]
"""What a paired ratio is against: a policy's name (its run of the same seed,
:func:`baseline_value`), or a figure picked from each seed's runs."""


def median_of_all(values: Sequence[float | None]) -> float | None:
    """The median over the seeds, or None unless every seed has a value."""
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known and len(known) == len(values) else None


def speedup_stats(
    label: str, runs_by_seed: RunsBySeed, baseline: Reference, name: str = "speedup", *, inverse: bool = False
) -> dict[str, float | int | None]:
    """Mean/min/max of the label's speed-ups over the baseline, paired by seed,
    how many pairs, and their median (None unless every seed has a pair);
    ``inverse``: the label's time over the reference's (a ratio below 1 is faster)."""
    reference = baseline_value(baseline) if isinstance(baseline, str) else baseline
    paired = paired_ratios(runs_by_seed, label, reference, inverse=inverse)
    ratios = [x for x in paired if x is not None]
    return {**spread(name, ratios), "speedup_pairs": len(ratios), f"{name}_median": median_of_all(paired)}


def tta_stats(runs: Sequence[Run]) -> dict[str, Any]:
    """``reached``, ``seeds``, ``tta_mean_s`` / ``_min_s`` / ``_max_s`` over the
    seeds that reached it and ``tta_median_s`` (None unless every seed did)."""
    ttas = [r["time_to_target_s"] for r in runs if r["time_to_target_s"] is not None]
    median = median_of_all([r["time_to_target_s"] for r in runs])
    return {"reached": len(ttas), "seeds": len(runs), **spread("tta", ttas, "_s"), "tta_median_s": median}


def final_stats(runs: Sequence[Run]) -> dict[str, float]:
    """Mean and standard deviation (0 for one seed) of the final metric."""
    finals = [r["final_metric"] for r in runs]
    return {
        "final_metric_mean": statistics.fmean(finals),
        "final_metric_sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
    }


def aggregate(
    label: str,
    per_seed: RunsBySeed,
    *,
    baseline: Reference,
    keys: Mapping[str, str],
    speedup: str = "speedup",
    inverse: bool = False,
    ratios: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A policy over the seeds: time to target (:func:`tta_stats`), the paired
    speed-up over ``baseline`` named ``speedup`` (:func:`speedup_stats`, with
    ``inverse``), the final metric (:func:`final_stats`), the means of ``keys``
    (:func:`means`) and, for each ``{name: key}`` of ``ratios``, the mean over
    the seeds of the label's ``key`` over the baseline policy's of the same seed."""
    runs = by_label(per_seed, label)
    paired = {
        name: mean_or_none(
            [
                x
                for x in paired_ratios(per_seed, label, baseline_value(baseline, key), key=key, inverse=True)
                if x is not None
            ]
        )
        for name, key in (ratios or {}).items()
        if isinstance(baseline, str)
    }
    return {
        "label": label,
        "policy": runs[0]["policy"],
        **tta_stats(runs),
        **speedup_stats(label, per_seed, baseline, speedup, inverse=inverse),
        **final_stats(runs),
        **means(runs, keys),
        **paired,
    }


POLICY_MEANS = {
    "compute_share_mean": "compute_share",
    "comm_share_mean": "comm_share",
    "wait_share_mean": "wait_share",
    "samples_per_s_mean": "samples_per_s",
    "updates_mean": "updates",
    "mean_staleness": "mean_staleness",
    "max_staleness_mean": "max_staleness",
}
"""The per-run figures a policy comparison averages over the seeds (``keys`` of :func:`aggregate`)."""
KEPT = (
    *("label", "policy", "seed", "scenario", "driver", "time_to_target_s", "final_metric", "best_metric"),
    *("compute_share", "comm_share", "wait_share", "samples_per_s", "steps", "updates", "wall_time_s"),
    *("mean_staleness", "max_staleness", "target_metric", "target_value", "target_direction"),
    *("trace", "metric_curve"),
)
"""The figures of a run a policy comparison's ``results.json`` keeps (:func:`lite`): enough to plot its metric."""


def inner_adamw_specs(sc: Scenario, specs: Iterable[str]) -> tuple[str, ...]:
    """``specs`` on this scenario: next to an SGD-tuned ``lr`` the inner AdamW
    of the local-update policies (DiLoCo, streaming DiLoCo, asynchronous local
    SGD) takes the small rate ``hetsync advise`` gives them."""
    from hetsync.advise.advice import DILOCO_SGD_INNER_LR, INNER_ADAMW

    if sc.job.optimizer.name != "sgd":
        return tuple(specs)
    return tuple(f"{s}:inner_lr={DILOCO_SGD_INNER_LR:g}" if s.split(":")[0] in INNER_ADAMW else s for s in specs)


def final_better(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, *, minimize: bool) -> bool | None:
    """Whether ``a``'s mean final metric is better than ``b``'s by more than
    ``b``'s standard deviation over the seeds (None when either did not run)."""
    if a is None or b is None:
        return None
    fa, fb, sd = a["final_metric_mean"], b["final_metric_mean"], b["final_metric_sd"]
    return bool(fa < fb - sd if minimize else fa > fb + sd)


def better(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, *, minimize: bool) -> bool | None:
    """Whether ``a`` beats ``b`` (aggregates) on the two figures the pages
    compare: it reaches the target on at least as many seeds and, where both
    reached it on some seed, its mean paired speed-up over the baseline is
    higher (else: it reached it on more seeds); and its mean final metric is
    not worse than ``b``'s by more than ``b``'s standard deviation over the
    seeds. None when either did not run."""
    if a is None or b is None:
        return None
    if a["reached"] < b["reached"]:
        return False
    sa, sb = a["speedup_vs_bsp_mean"], b["speedup_vs_bsp_mean"]
    faster = (sa is not None and sb is not None and sa > sb) or (a["reached"] > b["reached"])
    fa, fb, sd = a["final_metric_mean"], b["final_metric_mean"], b["final_metric_sd"]
    accurate = fa <= fb + sd if minimize else fa >= fb - sd
    return bool(faster and accurate)


def case_record(
    sc: Scenario,
    per_seed: RunsBySeed,
    *,
    aggregates: list[dict[str, Any]],
    keep: Callable[[Run], Run],
    calm: list[Run],
) -> dict[str, Any]:
    """A case's part of ``results.json``: the scenario that ran (its set-up in
    words, target, length, noise), the seeds, the aggregates, the runs of every
    seed as ``keep`` keeps them and the diagnosis runs (``calm``)."""
    from hetsync.benches.common import run_target, scenario_setup

    return {
        "scenario": sc.name,
        "description": sc.description,
        "setup": scenario_setup(sc),
        "workers": sc.cluster.workers,
        **run_target(sc, next(iter(per_seed.values()))),
        "max_time_s": sc.stop.max_time_s,
        "eval_every_s": sc.stop.eval_every_s,
        "jitter": sc.timing.jitter,
        "seeds": list(per_seed),
        "labels": labels_of(per_seed),
        "aggregate": aggregates,
        "runs": {str(s): [keep(r) for r in runs] for s, runs in per_seed.items()},
        "jitter_0": calm,
    }


def lite(run: Run, keys: Iterable[str]) -> Run:
    """The figures of a run a ``results.json`` keeps."""
    return {k: run.get(k) for k in keys}


def seed_runs(res: Mapping[str, Any], label: str) -> list[Run]:
    """The label's kept runs of a case record (:func:`case_record`), in seed order."""
    return [r for s in res["seeds"] for r in res["runs"].get(str(s), []) if r["label"] == label]


def seed_runs_of(res: Mapping[str, Any], seed: int) -> list[Run]:
    """A case record's kept runs of one seed, in their order."""
    return list(res["runs"].get(str(seed), []))


def by_policy(aggregates: Iterable[Mapping[str, Any]], *policies: str) -> list[Any]:
    """The aggregates (or runs) of the named policies, in their order."""
    return [a for a in aggregates if a["policy"] in policies]


def fastest(items: Iterable[Mapping[str, Any]], key: str, *, largest: bool = False) -> Any:
    """The item (a run or an aggregate) with the smallest ``key`` (``largest``:
    the largest) among those that have one (a time to target, a throughput); None if none has."""
    known = [a for a in items if a[key] is not None]
    return (max if largest else min)(known, key=lambda a: a[key], default=None)


def figure_of(res: Mapping[str, Any], policy: str, key: str) -> Any:
    """``key`` of the policy's aggregate in a case record, None if the case did not run it."""
    return next((a[key] for a in res["aggregate"] if a["policy"] == policy), None)


def all_aggregates(cases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every aggregate of the case records, each with its case's ``scenario``, in order."""
    return [{**a, "scenario": r["scenario"]} for r in cases for a in r["aggregate"]]


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``; None when either is missing or ``b`` is zero."""
    return a / b if a is not None and b else None


# ------------------------------------------------------------------ rows
def fmt_range(lo: float | None, hi: float | None, digits: int = 3) -> str:
    """``lo–hi`` with ``digits`` significant digits; empty when either is missing."""
    return "" if lo is None or hi is None else f"{lo:.{digits}g}–{hi:.{digits}g}"


def fmt_secs(v: float | None) -> str:
    """Seconds with three significant digits: ``2.41 s``, ``—`` for None."""
    return "—" if v is None else f"{v:.3g} s"


def fmt_x(v: float | None) -> str:
    """A ratio: ``1.31×``, ``—`` for None."""
    return "—" if v is None else f"{v:.2f}×"


def fmt_change(ratio: float | None) -> str:
    """A ratio of times as a signed change in %: 0.43 → ``−57%``, 1.12 → ``+12%``; ``—`` for None."""
    if ratio is None:
        return "—"
    change = round(100 * (ratio - 1))
    return f"−{-change}%" if change < 0 else f"+{change}%"


def fmt_pct_span(shares: Sequence[float]) -> str:
    """Shares (0–1) as the range of their percentages: ``81–85%``, ``100%`` when both ends round alike; ``—`` for none."""
    if not shares:
        return "—"
    lo, hi = 100 * min(shares), 100 * max(shares)
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}%"


def fmt_span(values: Iterable[float | None], spec: str = ".2f") -> str:
    """The known values as ``lo–hi`` in the format ``spec`` (one value when both ends read alike); ``—`` for none."""
    known = sorted(v for v in values if v is not None)
    return "—" if not known else "–".join(dict.fromkeys((format(known[0], spec), format(known[-1], spec))))


def img_name(prefix: str, name: str, kind: str) -> str:
    """A page's image name: ``prefix-name-kind.png``, ``name`` without a leading ``prefix-``."""
    return f"{prefix}-{report.safe_name(name).removeprefix(prefix + '-')}-{kind}.png"


def fmt_sig(v: float | None, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits, ``—`` for None."""
    return "—" if v is None else f"{v:.{digits}g}"


def tta_row(a: Mapping[str, Any], *, target: Mapping[str, Any], max_time_s: float | None, keys: Row) -> Row:
    """Time to target over the seeds (:func:`tta_stats`): the mean, with the range
    and how many seeds reached it when there are several; ``not in T s`` for none."""
    several = a["seeds"] > 1
    if a["tta_mean_s"] is None:
        shown: str | None = f"not in {max_time_s or 0:g} s"
    elif several:
        spread_text = f" [{fmt_range(a['tta_min_s'], a['tta_max_s'])}]" if a["reached"] > 1 else ""
        shown = f"{a['tta_mean_s']:.3g}{spread_text} ({a['reached']}/{a['seeds']})"
    else:
        shown = None
    return {"metric": f"time to {target_text(target)}", "value": a["tta_mean_s"], "unit": "s", "shown": shown, **keys}


def speedup_row(a: Mapping[str, Any], *, baseline: str, prefix: str = "speedup", keys: Row) -> Row:
    """The paired speed-up over the baseline (1 for the baseline itself), with its range over several pairs."""
    is_base = a["policy"] == baseline
    speed = 1.0 if is_base else a[f"{prefix}_mean"]
    shown = None
    if not is_base and speed is not None and a["speedup_pairs"] > 1:
        shown = f"{speed:.3g} [{fmt_range(a[f'{prefix}_min'], a[f'{prefix}_max'])}]"
    return {"metric": f"speed-up over {baseline}", "value": speed, "unit": "x", "shown": shown, **keys}


def final_row(metric: str, finals: Sequence[float], mean: float, keys: Row) -> Row:
    """The final metric: the seeds' mean, shown with ``± sd`` when there are several."""
    shown = with_sd(list(finals) or [mean], lambda v: fmt_metric(metric, v))
    return {"metric": f"final {metric}", "value": mean, "unit": "", "shown": shown, **keys}


def case_rows(
    res: Mapping[str, Any], columns: Sequence[Col], label: Callable[[str], str] = str, **keys: Any
) -> list[Row]:
    """A case record's printed table (:func:`table_rows` of its aggregates, set
    as :func:`~hetsync.benches.common.seeds_setting` says, policies shown as
    ``label`` shows them), then its diagnosis runs' (:func:`calm_rows`)."""
    where = seeds_setting(res["scenario"], res["seeds"])
    rows = table_rows(res["aggregate"], columns, policy=lambda a: label(a["label"]), setting=where, **keys)
    return rows + calm_rows(res, label, **keys)


def calm_rows(res: Mapping[str, Any], label: Callable[[str], str] = str, **keys: Any) -> list[Row]:
    """The diagnosis runs (``jitter_0``) as a table of their own: compute and wait shares."""
    rows: list[Row] = []
    for r in res["jitter_0"]:
        where = {"policy": label(r["label"]), "setting": f"{res['scenario']}, seed {r['seed']} without step-time noise"}
        rows += col_rows(r, [share_col(name, f"{name}_share") for name in ("compute", "wait")], {**where, **keys})
    return rows


# ------------------------------------------------------------------ pages
OUTPUT_OPTIONS = frozenset({"help", "out", "docs", "no_docs", "json", "overrides"})
"""Options that say where a bench writes, not what it runs: not part of a page's command."""


def options_of(add_arguments: Callable[[argparse.ArgumentParser], None]) -> list[tuple[str, Any]]:
    """``(dest, default)`` of every option a bench's ``add_arguments`` declares,
    in their order, but :data:`OUTPUT_OPTIONS`."""
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p)
    return [(a.dest, a.default) for a in p._actions if a.dest not in OUTPUT_OPTIONS]


def command_line(
    bench: str, args: Any, options: Sequence[tuple[str, Any]] | Callable[[argparse.ArgumentParser], None]
) -> str:
    """The command that reproduces a run: ``hetsync bench NAME`` and each
    ``(dest, default)`` of ``options`` (or of the options a bench's
    ``add_arguments`` declares: :func:`options_of`) whose value differs from
    its default (a flag when the default is False), in that order; then
    ``--set`` for each override."""
    parts = ["hetsync", "bench", bench]
    for dest, default in options_of(options) if callable(options) else options:
        value, flag = getattr(args, dest), "--" + dest.replace("_", "-")
        if default is False:
            parts += [flag] if value else []
        elif value != default:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    for o in args.overrides:
        parts += ["--set", o]
    return shlex.join(parts)


def md_table(header: Sequence[str], lines: Iterable[Sequence[str]], *, align: Sequence[str] = ()) -> list[str]:
    """A markdown table; ``align`` gives each column's alignment, ``"left"``,
    ``"right"`` or ``""`` (none, as for the columns it does not reach)."""

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"

    marks = {"": "---", "left": ":---", "right": "---:"}
    given = list(align) + [""] * (len(header) - len(align))
    return [line(header), "|" + "".join(marks[a] + "|" for a in given), *(line(cells) for cells in lines)]


Column = tuple[str, Callable[[Mapping[str, Any]], str]]
"""A page table's column: its header and the cell of one aggregate (or a :class:`Col`)."""


def pct_cell(share: float | None) -> str:
    """A share (0–1) as a page cell: ``52.3%``."""
    return "—" if share is None else f"{100 * share:.1f}%"


def tta_cell(a: Mapping[str, Any]) -> str:
    """Time to target over the seeds (:func:`tta_stats`): ``2.41 [2.1–2.8]``, ``—`` if none reached it."""
    if a["tta_mean_s"] is None:
        return "—"
    return f"{a['tta_mean_s']:.2f}" + (f" [{fmt_range(a['tta_min_s'], a['tta_max_s'])}]" if a["reached"] > 1 else "")


def speedup_cell(a: Mapping[str, Any], baseline: str, prefix: str = "speedup") -> str:
    """A paired speed-up (:func:`speedup_stats`): ``1.31× [1.2–1.4]``; ``1 (baseline)`` for the baseline."""
    if a["policy"] == baseline:
        return "1 (baseline)"
    if a[f"{prefix}_mean"] is None:
        return "—"
    rng = f" [{fmt_range(a[f'{prefix}_min'], a[f'{prefix}_max'])}]" if a["speedup_pairs"] > 1 else ""
    return f"{a[f'{prefix}_mean']:.2f}×{rng}"


def finals_column(res: Mapping[str, Any]) -> Column:
    """The final metric of a case record's policy: the seeds' mean, ``± sd`` when there are several."""
    metric = res["target_metric"]

    def cell(a: Mapping[str, Any]) -> str:
        finals = [r["final_metric"] for r in seed_runs(res, a["label"])] or [a["final_metric_mean"]]
        return with_sd(finals, lambda v: fmt_metric(metric, v))

    return f"final {short_metric(metric)}{' (± sd)' if len(res['seeds']) > 1 else ''}", cell


# ------------------------------------------------------------------ columns
class Col(NamedTuple):
    """One figure of a policy, declared once for both tables it shows in: the
    page's (``header`` and ``cell``; ``header`` None: not on the page) and the
    terminal's and ``--json``'s rows (``metric``, ``unit``, the ``value`` read
    by key or getter, and ``shown``, the text a row shows instead of its value
    when given; ``metric`` None: no row). ``row`` replaces the whole row (None: none);
    ``align``: the page column's alignment (:func:`md_table`)."""

    header: str | None
    cell: Callable[[Mapping[str, Any]], str] | None = None
    metric: str | None = None
    value: str | Callable[[Mapping[str, Any]], Any] | None = None
    unit: str = ""
    shown: Callable[[Mapping[str, Any]], str | None] | None = None
    row: Callable[[Mapping[str, Any]], Row | None] | None = None
    align: str = ""


def key_col(
    header: str | None,
    key: str,
    fmt: Callable[[Any], str],
    metric: str | None = None,
    unit: str = "",
    *,
    shown: bool = False,
) -> Col:
    """A column of one figure, ``item[key]``: ``fmt(value)`` on the page; the
    row ``metric`` with the value (``shown``: and the page's text)."""

    def cell(a: Mapping[str, Any]) -> str:
        return fmt(a[key])

    return Col(header, cell, metric, key, unit, cell if shown else None)


def share_col(name: str, key: str, header: str | None = None) -> Col:
    """A share (0–1) at ``key``: ``52.3%`` on the page (under ``header``, else
    ``name``), ``{name} share`` in % in the rows."""
    return Col(header or name, lambda a: pct_cell(a[key]), f"{name} share", lambda a: pct(a[key]), "%")


def ratio_col(header: str, key: str, metric: str | None = None) -> Col:
    """A ratio to a baseline at ``key`` (``1.31×``): ``1.00×`` for the baseline itself
    (an item without ``key``); the row ``metric`` (None: none) for the others only."""

    def row(a: Mapping[str, Any]) -> Row | None:
        return {"metric": metric, "value": a[key], "unit": "x"} if metric is not None and key in a else None

    return Col(header, lambda a: fmt_x(a.get(key, 1.0)), row=row)


def right(*columns: Col) -> list[Col]:
    """The columns aligned right on the page (figures)."""
    return [c._replace(align="right") for c in columns]


def aggregate_table(
    aggregates: Iterable[Mapping[str, Any]], columns: Sequence[Column | Col], *, left: int | None = None
) -> list[str]:
    """A markdown table with one line per aggregate (a policy) and the declared
    columns that have a header, each aligned as it declares (:attr:`Col.align`);
    ``left``: the columns after the first ``left`` aligned right (figures after names)."""
    if left is not None:
        columns = [*columns[:left], *right(*columns[left:])]  # type: ignore[arg-type]
    shown = [c for c in columns if c[0] is not None]
    align = [c.align if isinstance(c, Col) else "" for c in shown]
    return md_table([c[0] for c in shown], ([c[1](a) for c in shown] for a in aggregates), align=align)  # type: ignore[misc]


def col_rows(item: Mapping[str, Any], columns: Iterable[Col], keys: Row) -> list[Row]:
    """The terminal rows of one item (a policy) for the columns that declare a
    ``metric`` (or a ``row``), in their order, each with ``keys``."""
    rows: list[Row] = []
    for c in columns:
        if c.row is not None:
            rows += [] if (row := c.row(item)) is None else [{**row, **keys}]
        elif c.metric is not None:
            value = item[c.value] if isinstance(c.value, str) else c.value(item) if c.value else None
            shown = {} if c.shown is None else {"shown": c.shown(item)}
            rows.append({"metric": c.metric, "value": value, "unit": c.unit, **shown, **keys})
    return rows


def results_rows(results: Mapping[str, Any], columns_of: Callable[[Any], Sequence[Any]]) -> list[Row]:
    """A bench's rows: each case's aggregate in its columns (``columns_of(case)``),
    then the run time of all runs."""
    out: list[Row] = []
    for res in results["cases"]:
        out += table_rows(res["aggregate"], columns_of(res), setting=seeds_setting(res["scenario"], res["seeds"]))
    out.append({"metric": "run time, all runs", "value": results["host_time_s"], "unit": "s", "setting": "all"})
    return out


def table_rows(
    items: Iterable[Mapping[str, Any]],
    columns: Sequence[Col],
    *,
    policy: Callable[[Mapping[str, Any]], str] = lambda a: a["label"],
    **keys: Any,
) -> list[Row]:
    """A printed table's rows: :func:`col_rows` of every item (a line), keyed by
    ``policy`` (the item's label) and ``keys`` (its ``setting``, ...)."""
    return [row for a in items for row in col_rows(a, columns, {"policy": policy(a), **keys})]


def seed_tta_col(header: str, target: Mapping[str, Any]) -> Col:
    """The time to ``target`` of a policy's means over the seeds (:func:`seed_means`):
    ``2.41 s``, with ``(2/3)`` when not every seed reached it; ``not reached`` in the rows for none."""

    def cell(p: Mapping[str, Any]) -> str:
        return fmt_secs(p["time_to_target_s"]) + (
            "" if p["reached"] == p["seeds"] else f" ({p['reached']}/{p['seeds']})"
        )

    def shown(p: Mapping[str, Any]) -> str | None:
        tta, some = p["time_to_target_s"], p["reached"] != p["seeds"]
        return "not reached" if tta is None else f"{tta:.3g} ({p['reached']}/{p['seeds']})" if some else None

    return Col(header, cell, f"time to {target_text(target)}", "time_to_target_s", "s", shown)


def case_columns(res: Mapping[str, Any], *, baseline: str, speedup: str = "speedup") -> dict[str, Col]:
    """The columns every case table has (a :func:`case_record`'s aggregates), by
    name: time to target, the seeds that reached it (page only), the paired
    speed-up over ``baseline`` (named ``speedup``), the final metric, compute and wait shares."""

    def finals(a: Mapping[str, Any]) -> list[float]:
        return [r["final_metric"] for r in seed_runs(res, a["label"])]

    tta = partial(tta_row, target=res, max_time_s=res["max_time_s"], keys={})
    return {
        "tta": Col("TTA (s), mean [range]", tta_cell, row=tta),
        "reached": Col("reached", lambda a: f"{a['reached']}/{a['seeds']}"),
        "speedup": Col(
            f"speed-up vs {baseline.upper()}, mean [range]",
            lambda a: speedup_cell(a, baseline, speedup),
            row=partial(speedup_row, baseline=baseline, prefix=speedup, keys={}),
        ),
        "final": Col(
            *finals_column(res),
            row=lambda a: final_row(res["target_metric"], finals(a), a["final_metric_mean"], {}),
        ),
        "compute": share_col("compute", "compute_share_mean"),
        "wait": share_col("wait", "wait_share_mean"),
    }


# ------------------------------------------------------------------ page values
def case_values(res: Mapping[str, Any]) -> dict[str, Any]:
    """The placeholders every page fills from a case record: ``scenario``,
    ``description``, ``stop`` (how long a run lasts), ``target``, ``eval_every``."""
    return {
        "scenario": res["scenario"],
        "description": res["description"],
        "stop": f"{res['max_time_s']:g} virtual seconds per run" if res["max_time_s"] else "runs of max_steps",
        "target": target_text(res),
        "eval_every": res.get("eval_every_s") or "run length / 40",
    }


_BLOCK = re.compile(r"^<!-- block: ([a-z_]+) -->$", re.MULTILINE)


def _percent(share: float | None, digits: int = 0) -> str:
    """A share as a percentage: ``pct(0.123)`` ``12%``, ``pct(0.123, 1)`` ``12.3%``."""
    return "—" if share is None else f"{100 * share:.{digits}f}%"


def fmt_num(v: float | None, spec: str = "g") -> str:
    """``v`` with the format ``spec`` (``num(".2f")``), ``—`` for None."""
    return "—" if v is None else format(v, spec)


PAGES = jinja2.Environment(
    undefined=jinja2.StrictUndefined,  # a placeholder without a figure is a bug
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,  # markdown
    keep_trailing_newline=True,
)
"""The one renderer of the result pages (``.md.in`` next to each bench).
Filters: ``pct`` (a share: ``0.123|pct`` 12%, ``|pct(1)`` 12.3%), ``num`` (a
format spec: ``x|num(".2f")``), ``sig`` (significant digits), ``span`` (a pair
as ``lo–hi``), ``metric`` (``value|metric(name)``, as the tables show that
metric), ``change`` (a ratio of times as a signed change: ``−57%``),
``pct_span`` (shares as ``81–85%``), ``num_span`` (figures as ``lo–hi``:
:func:`fmt_span`); each gives ``—`` for None. ``aggregates`` (case records:
:func:`all_aggregates`), ``figure`` (``res|figure(policy, key)``:
:func:`figure_of`), ``target`` (a record's target in words) and
``setup_cell`` (set-ups: :func:`~hetsync.benches.common.setup_cell`),
``setup_table`` (case records: their set-up table, :func:`~hetsync.benches.common.setup_markdown`)
read results records. With
``trim_blocks`` a line that ends in a tag loses its newline: end such a line
with text, or leave a blank line after."""
PAGES.filters.update(
    pct=_percent,
    num=fmt_num,
    change=fmt_change,
    pct_span=lambda v: fmt_pct_span(list(v)),
    num_span=fmt_span,
    aggregates=all_aggregates,
    figure=figure_of,
    target=target_text,
    setup_cell=lambda setups, key: setup_cell(list(setups), key),
    setup_table=lambda records: "\n".join(setup_markdown([r["setup"] for r in records if r.get("setup")])),
    sig=lambda v, digits=3: fmt_sig(v, digits),
    span=lambda pair, digits=3: fmt_range(*pair, digits=digits),
    metric=lambda v, metric: fmt_metric(metric, v),
)


def page_blocks(bench_file: str, name: str) -> dict[str, jinja2.Template]:
    """The Jinja2 templates of the ``.md.in`` file ``name`` next to the bench
    module ``bench_file``: ``page`` (the text before the first marker), then one
    per ``<!-- block: NAME -->`` line (a section repeated per scenario, a
    paragraph that depends on the outcome)."""
    parts = _BLOCK.split(Path(bench_file).with_name(name).read_text(encoding="utf-8"))
    blocks = {"page": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}
    return {key: PAGES.from_string(text.strip("\n") + "\n") for key, text in blocks.items()}


def _lines(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(line, str) for line in v)


def fill_page(template: jinja2.Template, values: Mapping[str, Any] | None = None, **more: Any) -> str:
    """The template rendered with ``values`` and ``more`` (a missing one is an
    error); a list of strings is lines of text (an empty list, no text:
    a template tests and loops over it alike). Runs of blank lines left by empty
    placeholders or skipped paragraphs collapse into one, and the page ends with
    one newline."""
    given = {**(values or {}), **more}
    text = template.render({k: "\n".join(v) if _lines(v) else v for k, v in given.items()})
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def copy_plots(src: Path | None, img: Path, names: Mapping[str, str]) -> dict[str, str]:
    """Copy ``src/<file>`` (``src`` None: the path ``file``) to ``img/<new name>``
    for each ``{file: new name}`` that exists; returns ``{file: "img/<new name>"}``
    for the page."""
    import shutil

    img.mkdir(parents=True, exist_ok=True)
    copied = {}
    for file, new in names.items():
        path = Path(file) if src is None else src / file
        if path.is_file():
            shutil.copyfile(path, img / new)
            copied[file] = f"img/{new}"
    return copied
