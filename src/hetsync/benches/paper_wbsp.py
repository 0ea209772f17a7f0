"""``hetsync bench paper-wbsp``: the WBSP paper's experiment in the simulator.

Yang, Hu, Liu, Jin, Yeung, You, "WBSP: Addressing stragglers in distributed
machine learning with worker-busy synchronous parallel", Parallel Computing
121 (2024) 103092, make half of the workers slow by sleeping 0.5 / 1.0 /
1.5 s before every step (settings H1 / H2 / H3) and compare WBSP and its
overlapped version with BSP, SSP (s = 40) and ASP. They report that WBSP
spends 91 % of the time computing against 55–72 % for the other methods, and
reaches the target accuracy in up to 60 % less time than the fastest of them.

This benchmark runs the same comparison on the built-in scenarios
``wbsp-h1``, ``wbsp-h2`` and ``wbsp-h3`` and prints, per scenario and
policy, the compute share, the time to the target accuracy, the final
accuracy and the time to target relative to the fastest baseline (BSP, SSP,
ASP: every policy that is not WBSP). A scenario whose target names another
metric (``--set 'target={metric: loss, value: 0.3}'``) gets the same figures
for that metric. It writes the runs under ``--out``
(``summary.json``, traces and plots per scenario, and ``results.json``) and,
the page ``results-wbsp.md`` with the plots copied to ``img/wbsp-*.png``
(under ``--out``, and in ``--docs DIR`` when given). Every figure is
measured in the run that prints it.
"""

from __future__ import annotations

import argparse
import math
import shlex
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches.common import (
    Row,
    add_output_arguments,
    docs_dir,
    fmt_metric,
    parse_seeds,
    pct,
    run_target,
    scenario_setup,
    setup_cell,
    short_metric,
    split_list,
    target_text,
)
from hetsync.errors import BadInput
from hetsync.runner import compare, write_json_atomic
from hetsync.scenario import Scenario, add_override_argument, load_scenario, parse_override

NAME = "paper-wbsp"

SCENARIOS = ("wbsp-h1", "wbsp-h2", "wbsp-h3")
POLICIES = ("bsp", "ssp:s=40", "asp", "wbsp", "wbsp-overlap")
CANDIDATES = frozenset({"wbsp", "wbsp-overlap"})  # every other policy is a baseline
QUICK_MAX_TIME_S = 30.0
PLOTS = ("accuracy-zoom", "accuracy", "shares")  # for an accuracy target; see plot_kinds
TIMELINES = ("bsp", "wbsp", "wbsp-overlap")  # per-worker timelines drawn for these policies
TIMELINE_S = 5.0
SWEEP_SCENARIO = "wbsp-h2"
SWEEP_MODEL_BYTES = (600_000, 16_000_000)  # the paper's CIFAR-10 CNN (148k float32 parameters); 4x the default

PAPER_COMPUTE_SHARE_WBSP = 0.91
PAPER_COMPUTE_SHARE_OTHERS = (0.55, 0.72)
PAPER_TTA_REDUCTION = 0.60  # "up to 60 % lower than the fastest baseline"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_arguments(p, NAME, "results-wbsp.md", quick=True)
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_MAX_TIME_S:g} virtual seconds per run instead of the scenario's, and no model-size sweep",
    )
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: %(default)s)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds; several give medians (default: 0)")
    add_override_argument(p, "workers=4")
    p.add_argument(
        "--comm-sweep",
        default=None,
        metavar="BYTES,...",
        help=f"also run --sweep-scenario with these model sizes, to see how the gains depend on the cost of "
        f"communication (default: {','.join(map(str, SWEEP_MODEL_BYTES))}; none with --quick; '' for none)",
    )
    p.add_argument("--sweep-scenario", default=SWEEP_SCENARIO, help="scenario of the sweep (default: %(default)s)")


@dataclass(frozen=True, slots=True)
class Case:
    """One scenario to run every policy on: a main scenario, or a point of the sweep."""

    key: str  # folder name under --out, and the result's "case"
    scenario: str  # built-in name or YAML path
    overrides: dict[str, Any] = field(default_factory=dict)
    sweep: bool = False


def run(args: argparse.Namespace) -> list[Row]:
    overrides = dict(parse_override(o) for o in args.overrides)
    if args.quick:
        overrides.setdefault("max_time_s", QUICK_MAX_TIME_S)
    specs = split_list(args.policies, "--policies")
    seeds = parse_seeds(args.seeds)
    cases = [
        Case(key=load_scenario(n, **overrides).name, scenario=n) for n in split_list(args.scenarios, "--scenarios")
    ]
    cases += sweep_cases(args.sweep_scenario, _sweep(args))
    docs = docs_dir(args)
    results = bench_paper_wbsp(cases, specs, seeds, Path(args.out), overrides=overrides)
    for where in (Path(args.out), docs):  # the page and its plots: always under --out, in docs if asked
        if where is not None:
            write_docs(results, where, command=_command(args))
    return rows_of(results)


def _sweep(args: argparse.Namespace) -> list[int]:
    if args.comm_sweep is None:
        return [] if args.quick else list(SWEEP_MODEL_BYTES)
    try:
        sizes = [int(float(v)) for v in args.comm_sweep.split(",") if v.strip()]
    except ValueError:
        raise BadInput(f"--comm-sweep must be comma-separated byte counts, got {args.comm_sweep!r}") from None
    if any(v < 0 for v in sizes):
        raise BadInput(f"--comm-sweep byte counts must be >= 0, got {args.comm_sweep!r}")
    return sizes


def sweep_cases(scenario: str, sizes: list[int]) -> list[Case]:
    stem = Path(scenario).stem
    return [Case(key=f"{stem}-model-{v}B", scenario=scenario, overrides={"model_bytes": v}, sweep=True) for v in sizes]


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (options left at their defaults omitted)."""
    parts = ["hetsync", "bench", NAME]
    if args.quick:
        parts.append("--quick")
    for option, value, default in (
        ("--scenarios", args.scenarios, ",".join(SCENARIOS)),
        ("--policies", args.policies, ",".join(POLICIES)),
        ("--seeds", args.seeds, "0"),
        ("--comm-sweep", args.comm_sweep, None),
        ("--sweep-scenario", args.sweep_scenario, SWEEP_SCENARIO),
    ):
        if value != default:
            parts += [option, value]
    for o in args.overrides:
        parts += ["--set", o]
    return " ".join(shlex.quote(p) for p in parts)


# ------------------------------------------------------------------ running
def bench_paper_wbsp(
    cases: list[Case],
    specs: list[str],
    seeds: list[int],
    out: Path,
    *,
    overrides: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every policy on every case and seed; return one record per case."""
    con = report.terminal_console()
    overrides = overrides or {}
    for case in cases:  # validate every scenario before the first run
        load_scenario(case.scenario, **{**overrides, **case.overrides})
    clock = [time.perf_counter()]

    def done(s: dict[str, Any]) -> None:
        now = time.perf_counter()
        tta = s["time_to_target_s"]
        con.print(
            f"  {s['scenario']} seed {s['seed']} · {s['label']}: compute {100 * s['compute_share']:.1f}%, "
            f"TTA {'—' if tta is None else f'{tta:g} s'}, "
            f"final {short_metric(s['target_metric'])} {fmt_metric(s['target_metric'], s['final_metric'])} "
            f"({now - clock[0]:.1f} s real)"
        )
        clock[0] = now

    results = []
    for case in cases:
        if case.sweep:
            con.print(f"[bold]{case.key}[/]: {case.scenario} with {case.overrides}")
        runs_by_seed: dict[int, list[dict[str, Any]]] = {}
        for seed in seeds:
            sc = load_scenario(case.scenario, **{**overrides, **case.overrides, "seed": seed})
            where = _run_dir(out, case.key, seed, seeds)
            clock[0] = time.perf_counter()
            runs = compare(sc, specs, where, on_result=done)
            curve = report.metric_plot_name(runs)  # accuracy, or the target's metric
            report.plot_metric(runs, where / f"{curve}.png")
            zoomed, zoom_png = _zoomed(runs), where / f"{curve}-zoom.png"
            if zoomed and zoomed[0]["wall_time_s"] < max(r["wall_time_s"] for r in runs):
                report.plot_metric(zoomed, zoom_png)
            else:  # a zoom that cuts nothing (--quick) would be the plot above again
                zoom_png.unlink(missing_ok=True)
            report.plot_shares(runs, where / "shares.png")
            for r in runs:
                if r["policy"] in TIMELINES and r["trace"] and not case.sweep:
                    report.plot_timeline(
                        where / r["trace"],
                        where / f"timeline-{report.safe_name(r['label'])}.png",
                        title=f"{r['label']} · {r['scenario']} · first {min(TIMELINE_S, r['wall_time_s']):g} s",
                        max_workers=8,
                        window_s=(0.0, min(TIMELINE_S, r["wall_time_s"])),
                    )
            con.print(report.summary_table(runs))
            runs_by_seed[seed] = runs
        results.append(_aggregate(case, sc, runs_by_seed, out))
    write_json_atomic(out / "results.json", results)
    return results


def plot_kinds(metric: str) -> tuple[str, ...]:
    """The plots of a case: PLOTS, with the target metric in place of accuracy."""
    curve = report.metric_plot_name([{"target_metric": metric}])
    return tuple(kind.replace("accuracy", curve) for kind in PLOTS)


def _zoomed(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs cut to the interesting start: 2.5 × the fastest baseline's time to target."""
    ttas = [r["time_to_target_s"] for r in runs if r["policy"] not in CANDIDATES and r["time_to_target_s"] is not None]
    wall = max(r["wall_time_s"] for r in runs)
    end = min(wall, 10 * math.ceil(2.5 * min(ttas) / 10)) if ttas else wall
    curves = ("metric_curve", "accuracy_curve")  # the second: an alias, for accuracy targets
    return [{**r, "wall_time_s": end, **{k: [p for p in r[k] if p[0] <= end] for k in curves if k in r}} for r in runs]


def _run_dir(out: Path, scenario: str, seed: int, seeds: list[int]) -> Path:
    return out / scenario / f"seed-{seed}" if len(seeds) > 1 else out / scenario


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _aggregate(case: Case, sc: Scenario, runs_by_seed: dict[int, list[dict[str, Any]]], out: Path) -> dict[str, Any]:
    """Per policy: mean shares and final target metric, median time to target and ratio over the seeds."""
    seeds = sorted(runs_by_seed)
    fastest: dict[int, tuple[str, float] | None] = {}
    for seed, runs in runs_by_seed.items():
        reached = [(r["label"], r["time_to_target_s"]) for r in runs if r["policy"] not in CANDIDATES]
        reached = [(label, t) for label, t in reached if t is not None]
        fastest[seed] = min(reached, key=lambda lt: lt[1]) if reached else None
    policies = []
    for i, first in enumerate(runs_by_seed[seeds[0]]):
        per_seed = [runs_by_seed[s][i] for s in seeds]
        ttas = [r["time_to_target_s"] for r in per_seed]
        ratios = []
        for s, r in zip(seeds, per_seed, strict=True):
            base = fastest[s]
            ratios.append(r["time_to_target_s"] / base[1] if base and r["time_to_target_s"] is not None else None)
        all_reached = all(t is not None for t in ttas)
        all_ratios = all(x is not None for x in ratios)
        policies.append(
            {
                "policy": first["policy"],
                "label": first["label"],
                "baseline": first["policy"] not in CANDIDATES,
                "compute_share": statistics.fmean(r["compute_share"] for r in per_seed),
                "comm_share": statistics.fmean(r["comm_share"] for r in per_seed),
                "wait_share": statistics.fmean(r["wait_share"] for r in per_seed),
                "time_to_target_s": _median(ttas) if all_reached else None,  # type: ignore[arg-type]
                "reached": sum(t is not None for t in ttas),
                "tta_vs_fastest_baseline": _median(ratios) if all_ratios else None,  # type: ignore[arg-type]
                "final_metric": statistics.fmean(r["final_metric"] for r in per_seed),
                "steps": statistics.fmean(r["steps"] for r in per_seed),
                "dropped_steps": statistics.fmean(r["dropped_steps"] for r in per_seed),
                "updates": statistics.fmean(r["updates"] for r in per_seed),
                "max_staleness": max(r["max_staleness"] for r in per_seed),
                "per_seed": [
                    {
                        "seed": s,
                        "time_to_target_s": r["time_to_target_s"],
                        "tta_vs_fastest_baseline": x,
                        "compute_share": r["compute_share"],
                        "final_metric": r["final_metric"],
                        "host_time_s": r["host_time_s"],
                    }
                    for s, r, x in zip(seeds, per_seed, ratios, strict=True)
                ],
            }
        )
    where = _run_dir(out, case.key, seeds[0], seeds)
    nbytes = sc.model_bytes
    return {
        "case": case.key,
        "sweep": case.sweep,
        "scenario": sc.name,
        "model_bytes": nbytes,
        "transfer_s": None if nbytes is None else nbytes / min(sc.bandwidth_Bps) + sc.latency_s,
        "description": sc.description,
        "setup": scenario_setup(sc),
        "workers": sc.workers,
        "delay_s": max(sc.delay_s),
        **run_target(sc, [r for runs in runs_by_seed.values() for r in runs]),
        "max_time_s": sc.max_time_s,
        "seeds": seeds,
        "fastest_baseline": {s: (f[0] if f else None) for s, f in fastest.items()},
        "host_time_s": sum(r["host_time_s"] for runs in runs_by_seed.values() for r in runs),
        "plots": {
            kind: str(where / f"{kind}.png")
            for kind in plot_kinds(sc.target_metric)
            if (where / f"{kind}.png").exists()
        },
        "timelines": {
            p["label"]: str(where / f"timeline-{report.safe_name(p['label'])}.png")
            for p in policies
            if p["policy"] in TIMELINES and not case.sweep
        },
        "policies": policies,
    }


def rows_of(results: list[dict[str, Any]]) -> list[Row]:
    """The printed and ``--json`` rows: per case (a table) and policy (a line),
    the time to target, its ratio to the fastest baseline's, the final
    metric, the three shares (in %) and the largest staleness."""
    rows: list[Row] = []
    for res in results:
        seeds = res["seeds"]
        setting = res["case"] + (
            f", seeds {','.join(map(str, seeds))} (medians of times, means)" if len(seeds) > 1 else ""
        )
        for p in res["policies"]:
            keys = {"scenario": res["scenario"], "case": res["case"], "policy": p["label"], "setting": setting}
            tta = p["time_to_target_s"]
            reached = "" if tta is not None or len(seeds) == 1 else f" ({p['reached']}/{len(seeds)} seeds)"
            rows.append(
                {
                    "metric": f"time to {target_text(res)}",
                    "value": tta,
                    "unit": "s",
                    "shown": None if tta is not None else f"not in {res['max_time_s']:g} s{reached}",
                    "reached": p["reached"],
                    **keys,
                }
            )
            rows.append(
                {"metric": "TTA ÷ fastest baseline's", "value": p["tta_vs_fastest_baseline"], "unit": "", **keys}
            )
            rows.append(
                {
                    "metric": f"final {res['target_metric']}",
                    "value": p["final_metric"],
                    "unit": "",
                    "shown": fmt_metric(res["target_metric"], p["final_metric"]),
                    **keys,
                }
            )
            for share in ("compute", "comm", "wait"):
                rows.append({"metric": f"{share} share", "value": pct(p[f"{share}_share"]), "unit": "%", **keys})
            rows.append({"metric": "max staleness", "value": p["max_staleness"], "unit": "versions", **keys})
    return rows


# --------------------------------------------------------------------- docs
def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _span(values: list[float]) -> str:
    if not values:
        return "—"
    lo, hi = min(values), max(values)
    return f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}–{100 * hi:.0f}%"


def _img_name(scenario: str, kind: str) -> str:
    stem = report.safe_name(scenario)
    return f"{stem if stem.startswith('wbsp') else 'wbsp-' + stem}-{kind}.png"


def write_docs(results: list[dict[str, Any]], docs: Path, *, command: str) -> Path:
    """Write ``results-wbsp.md`` and copy the plots to ``img/wbsp-*.png``."""
    img = docs / "img"
    img.mkdir(parents=True, exist_ok=True)
    main = [r for r in results if not r["sweep"]]
    for res in main:
        for kind in res["plots"]:
            shutil.copyfile(res["plots"][kind], img / _img_name(res["scenario"], kind))
    if main:  # timelines of the first scenario only: they look alike in the others
        for label, src in main[0]["timelines"].items():
            shutil.copyfile(src, img / _timeline_name(main[0]["scenario"], label))
    path = docs / "results-wbsp.md"
    path.write_text(render_markdown(results, command=command))
    return path


def _timeline_name(scenario: str, label: str) -> str:
    return _img_name(scenario, f"timeline-{report.safe_name(label)}")


def _by_policy(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["policy"]: p for p in res["policies"]}


def _change(ratio: float | None) -> str:
    """A TTA ratio as a signed change: 0.43 → "−57%", 1.12 → "+12%"."""
    if ratio is None:
        return "—"
    change = round(100 * (ratio - 1))
    return f"−{-change}%" if change < 0 else f"+{change}%"


def _claims(main: list[dict[str, Any]]) -> list[str]:
    """The paper's two claims beside what this run measured."""
    shares: dict[str, list[float]] = {}
    others: list[float] = []
    changes: dict[str, list[str]] = {}
    for res in main:
        for p in res["policies"]:
            if p["baseline"]:
                others.append(p["compute_share"])
            else:
                shares.setdefault(p["label"], []).append(p["compute_share"])
                changes.setdefault(p["label"], []).append(
                    f"{_change(p['tta_vs_fastest_baseline'])} ({res['scenario']})"
                )
    lo, hi = PAPER_COMPUTE_SHARE_OTHERS
    return [
        "| claim (paper) | measured here |",
        "|---|---|",
        f"| WBSP computes {100 * PAPER_COMPUTE_SHARE_WBSP:.0f}% of the time "
        f"| {'; '.join(f'{label} {_span(v)}' for label, v in shares.items())} |",
        f"| the other methods {100 * lo:.0f}–{100 * hi:.0f}% | {_span(others)} |",
        f"| time to accuracy up to {100 * PAPER_TTA_REDUCTION:.0f}% lower than the fastest baseline "
        f"| {'; '.join(f'{label} ' + ', '.join(v) for label, v in changes.items())} |",
    ]


def _results_table(res: dict[str, Any]) -> list[str]:
    lines = [
        "| policy | compute | comm | wait | TTA (s) | TTA vs fastest baseline "
        f"| final {short_metric(res['target_metric'])} | steps | dropped | updates"
        " | max stale (versions) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in res["policies"]:
        ratio = p["tta_vs_fastest_baseline"]
        reached = "" if p["time_to_target_s"] is not None or len(res["seeds"]) == 1 else f" ({p['reached']} seeds)"
        lines.append(
            f"| {p['label']} | {_pct(p['compute_share'])} | {_pct(p['comm_share'])} | {_pct(p['wait_share'])} "
            f"| {_secs(p['time_to_target_s'])}{reached} | {'—' if ratio is None else f'{ratio:.2f}'} "
            f"| {fmt_metric(res['target_metric'], p['final_metric'])} | {p['steps']:,.0f} | {p['dropped_steps']:,.0f} "
            f"| {p['updates']:,.0f} | {p['max_staleness']} |"
        )
    return lines


def _sweep_table(results: list[dict[str, Any]]) -> list[str]:
    """Cost of one transfer against compute shares and TTA ratios, for the sweep scenario."""
    sweep = [r for r in results if r["sweep"]]
    if not sweep:
        return []
    name = sweep[0]["scenario"]
    points = sorted((r for r in results if r["scenario"] == name), key=lambda r: r["model_bytes"] or 0)
    lines = [
        f"| {name}: model size | one transfer | ASP compute | WBSP compute | fastest baseline (TTA) "
        "| WBSP TTA vs it | WBSP-overlap TTA vs it |",
        "|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in points:
        by = _by_policy(r)
        base = [p for p in r["policies"] if p["baseline"] and p["time_to_target_s"] is not None]
        fastest = min(base, key=lambda p: p["time_to_target_s"]) if base else None
        shown = "—" if fastest is None else f"{fastest['label']} ({_secs(fastest['time_to_target_s'])} s)"
        lines.append(
            f"| {(r['model_bytes'] or 0) / 1e6:g} MB | {1000 * (r['transfer_s'] or 0):.0f} ms "
            f"| {_pct(by['asp']['compute_share']) if 'asp' in by else '—'} "
            f"| {_pct(by['wbsp']['compute_share']) if 'wbsp' in by else '—'} | {shown} "
            f"| {_change(by['wbsp']['tta_vs_fastest_baseline']) if 'wbsp' in by else '—'} "
            f"| {_change(by['wbsp-overlap']['tta_vs_fastest_baseline']) if 'wbsp-overlap' in by else '—'} |"
        )
    return lines


def _steps_gain(main: list[dict[str, Any]], policy: str) -> str:
    gains = []
    for res in main:
        by = _by_policy(res)
        if policy in by and "asp" in by and by["asp"]["steps"]:
            gains.append(by[policy]["steps"] / by["asp"]["steps"] - 1)
    return _span(gains) if gains else "—"


def _ratios(main: list[dict[str, Any]], policy: str) -> str:
    values = sorted(
        v
        for r in main
        if policy in _by_policy(r)
        if (v := _by_policy(r)[policy]["tta_vs_fastest_baseline"]) is not None
    )
    if not values:
        return "—"
    lo, hi = f"{values[0]:.2f}", f"{values[-1]:.2f}"
    return lo if lo == hi else f"{lo}–{hi}"


def _best(main: list[dict[str, Any]]) -> str:
    found = [
        (p["tta_vs_fastest_baseline"], p["label"], r["scenario"])
        for r in main
        for p in r["policies"]
        if not p["baseline"] and p["tta_vs_fastest_baseline"] is not None
    ]
    if not found:
        return "— (no WBSP run reached the target)"
    ratio, label, scenario = min(found)
    return f"{_change(ratio)} ({label}, {scenario})"


def _sweep_text(results: list[dict[str, Any]]) -> str:
    name = next(r["scenario"] for r in results if r["sweep"])
    points = sorted((r for r in results if r["scenario"] == name), key=lambda r: r["model_bytes"] or 0)
    small, large = _by_policy(points[0]), _by_policy(points[-1])

    def share(by: dict[str, dict[str, Any]], policy: str) -> str:
        return _pct(by[policy]["compute_share"]) if policy in by else "—"

    def change(by: dict[str, dict[str, Any]], policy: str) -> str:
        return _change(by[policy]["tta_vs_fastest_baseline"]) if policy in by else "—"

    return SWEEP_AFTER.strip().format(
        asp_small=share(small, "asp"),
        asp_large=share(large, "asp"),
        wbsp_small=change(small, "wbsp"),
        wbsp_large=change(large, "wbsp"),
        overlap_small=change(small, "wbsp-overlap"),
        overlap_large=change(large, "wbsp-overlap"),
    )


def _tta_text(main: list[dict[str, Any]]) -> list[str]:
    """What decided the times to accuracy, from the measurements of the main scenarios."""
    if not main:
        return []
    metric = main[0]["target_metric"]

    def pick(policy: str) -> list[dict[str, Any]]:
        return [_by_policy(r)[policy] for r in main if policy in _by_policy(r)]

    def finals(policy: str) -> str:
        values = [fmt_metric(metric, p["final_metric"]) for p in pick(policy)]
        return " / ".join(values) if values else "—"

    def reached(policy: str) -> int:
        return sum(p["time_to_target_s"] is not None for p in pick(policy))

    def stale(*policies: str) -> str:
        values = [p["max_staleness"] for policy in policies for p in pick(policy)]
        return str(max(values)) if values else "—"

    lines = [
        TTA_THROUGHPUT.strip().format(
            wbsp_steps=_steps_gain(main, "wbsp"),
            overlap_steps=_steps_gain(main, "wbsp-overlap"),
            asp_stale=stale("asp"),
            wbsp_stale=stale("wbsp", "wbsp-overlap"),
        ),
        "",
    ]
    asp, bsp = pick("asp"), pick("bsp")
    close = all(
        a["time_to_target_s"] is not None and abs(a["final_metric"] - b["final_metric"]) <= 0.02
        for a, b in zip(asp, bsp, strict=False)
    )
    args = {"metric": metric, "asp_finals": finals("asp"), "bsp_finals": finals("bsp")}
    ratios = {"wbsp_ratios": _ratios(main, "wbsp"), "overlap_ratios": _ratios(main, "wbsp-overlap")}
    if asp and bsp and close:
        lines.append(TTA_CHEAP.strip().format(**args, **ratios))
    else:
        ssp = next((p["policy"] for p in main[0]["policies"] if p["policy"] == "ssp"), "ssp")
        fastest = ", ".join(sorted({str(v) for r in main for v in r["fastest_baseline"].values()}))
        lines.append(
            TTA_COSTLY.strip().format(
                **args,
                **ratios,
                cases=len(main),
                asp_reached=reached("asp"),
                ssp_reached=reached(ssp),
                ssp_finals=finals(ssp),
                wbsp_reached=reached("wbsp"),
                overlap_reached=reached("wbsp-overlap"),
                wbsp_finals=finals("wbsp"),
                overlap_finals=finals("wbsp-overlap"),
                fastest=fastest,
            )
        )
    lines.append("")
    return lines


def render_markdown(results: list[dict[str, Any]], *, command: str) -> str:
    main = [r for r in results if not r["sweep"]]
    seeds = results[0]["seeds"] if results else [0]
    host = sum(r["host_time_s"] for r in results)
    lines = [
        "# WBSP in the simulator: the paper's H1–H3 experiment",
        "",
        "Yang, Hu, Liu, Jin, Yeung, You, *WBSP: Addressing stragglers in distributed machine learning with",
        "worker-busy synchronous parallel*, Parallel Computing 121 (2024) 103092. This page is written by",
        f"`{command}` ({host:.0f} s of run time; seed{'s' if len(seeds) > 1 else ''} "
        f"{', '.join(map(str, seeds))}{': medians of times and ratios, means of shares' if len(seeds) > 1 else ''}).",
        "Every figure below is measured in that run; the text between the tables explains them.",
        "",
        *setup_table(main),
        "",
    ]
    for res in main:
        fastest = ", ".join(sorted({str(v) for v in res["fastest_baseline"].values()}))
        lines += [
            f"## {res['scenario']}: {res['description']}",
            "",
            f"Target {target_text(res)}, {res['max_time_s']:g} virtual seconds per run; "
            f"fastest baseline: {fastest if fastest != 'None' else 'none reached the target'}."
            + (
                f" The plots show seed {res['seeds'][0]}; the table is over all seeds." if len(res["seeds"]) > 1 else ""
            ),
            "",
            *_results_table(res),
            "",
            *[f"![{kind}, {res['scenario']}](img/{_img_name(res['scenario'], kind)})" for kind in res["plots"]],
            "",
        ]
    lines += ["## The paper's claims beside the measurements", "", *_claims(main), ""]
    lines += [
        "### Compute share",
        "",
        COMPUTE_SHARE.strip().format(
            baselines=_span([p["compute_share"] for r in main for p in r["policies"] if p["baseline"]])
        ),
        "",
        "### Time to accuracy",
        "",
        *_tta_text(main),
        f'The largest reduction measured here is {_best(main)}, against the paper\'s "up to 60 %".',
        "",
    ]
    sweep = _sweep_table(results)
    if sweep:
        asp_idle = _span([1 - _by_policy(r)["asp"]["compute_share"] for r in main if "asp" in _by_policy(r)])
        lines += [SWEEP.strip().format(asp_idle=asp_idle), "", *sweep, "", _sweep_text(results), ""]
    if main and main[0]["timelines"]:
        first = main[0]
        lines += [
            f"## Per-worker timelines, {first['scenario']}, first {TIMELINE_S:g} s",
            "",
            TIMELINES_TEXT.strip(),
            "",
        ]
        lines += [
            f"![timeline {label}](img/{_timeline_name(first['scenario'], label)})" for label in first["timelines"]
        ]
        lines += [""]
    lines += [MODEL.strip(), ""]
    return "\n".join(lines)


def setup_table(main: list[dict[str, Any]]) -> list[str]:
    """The set-up: the paper's column as published, ours from the scenarios that ran."""
    setups = [r["setup"] for r in main if r.get("setup")]
    if not setups:
        return []
    labels: list[str] = []
    for r in main:
        labels += [p["label"] for p in r["policies"] if p["baseline"] and p["label"] not in labels]
    lr = setup_cell(setups, "recipe")
    evals = sorted({r["setup"]["duration"].split(", evaluated every ")[-1] for r in main if r.get("setup")})
    rows = [
        (
            "cluster",
            SETUP_PAPER["cluster"],
            setup_cell([{**s, "c": f"{s['workers']} simulated workers and a parameter server"} for s in setups], "c"),
        ),
        ("heterogeneity and step time", SETUP_PAPER["heterogeneity"], setup_cell(setups, "step")),
        (
            "learning job",
            SETUP_PAPER["learning job"],
            setup_cell([{**s, "j": f"{s['workload']}, batch {s['batch']}"} for s in setups], "j"),
        ),
        ("network", SETUP_PAPER["network"], setup_cell(setups, "network")),
        (
            "training recipe",
            SETUP_PAPER["learning rate"],
            f"{lr}. ASP and SSP weight each gradient 1/N; WBSP steps locally with the same recipe and weights "
            "deltas 1/N",
        ),
        ("duration", "until the target accuracy", setup_cell(setups, "duration")),
        (
            "baselines",
            SETUP_PAPER["baselines"],
            ", ".join(labels) + " — ADSP is not implemented (see the last section)",
        ),
    ]
    names = ", ".join(f"`{r['scenario']}`" for r in main)
    return [
        "## Set-up",
        "",
        "| | paper | here |",
        "|---|---|---|",
        *[f"| {name} | {paper} | {here} |" for name, paper, here in rows],
        "",
        f"The scenario{'s are' if len(main) > 1 else ' is'} {names} (`hetsync scenarios`). "
        + SETUP_NOTES.strip().format(evals=", ".join(evals)),
    ]


SETUP_PAPER = {
    "cluster": "parameter server and GPU workers (V100); half of the workers sleep before every step (the "
    "authors' code: the odd-numbered of 8)",
    "heterogeneity": "sleep 0.5 / 1.0 / 1.5 s per step (H1 / H2 / H3)",
    "learning job": "CIFAR-10 CNN (148k parameters in the authors' code), AlexNet, ImageNet models",
    "network": "not modelled: real sockets (the authors' code moves every tensor with a length/acknowledgement "
    "exchange over TCP)",
    "learning rate": "0.1, then 0.01, 0.001 (authors' code)",
    "baselines": "BSP, SSP (s = 40), ASP, ADSP",
}
"""The paper's column of the set-up table, as published."""

SETUP_NOTES = """
Shares are of N × wall time
(compute + comm + wait = 100 %); the injected sleep counts as compute, since it stands for a slower
device. Wall time is virtual. TTA is the first evaluation (every {evals}) at which the
global model reached the target; "vs fastest baseline" divides it by the smallest TTA of the
baselines in the same scenario and seed. Staleness counts global versions (SSP's s counts a
worker's steps, so a staleness above s does not break SSP's bound).
"""


COMPUTE_SHARE = """
BSP and SSP (s = 40) idle about half of the time: the fast workers wait for the slow ones at every
barrier, and SSP's 40-step allowance is spent within the first seconds, after which the fast
workers are held to the slow workers' pace. ASP never waits, but a fast worker pushes a gradient
and pulls the model around every step. Plain WBSP pulls once per round instead of once per
step, so its fast workers spend only the push on communication. WBSP-overlap computes all the
time: the simulator counts a worker as computing while a step is in progress, and all of its
transfers happen behind steps. The authors' overlapped worker (`wk_pcc_v2.py`) starts no step
while it downloads the new model, which is one reason their figure is 91 % and not 100 %. The
baselines compute {baselines} of the time here, against 55–72 % in the paper.
"""

TTA_THROUGHPUT = """
Two things decide the times to accuracy. First, throughput: in the same virtual time plain WBSP
computes {wbsp_steps} more steps than ASP and WBSP-overlap {overlap_steps} more. Second, what a step
is worth: an ASP worker starts every step from the newest global model but its gradient lands on a
model that has moved on (staleness up to {asp_stale} versions here), while a WBSP worker learns of
the others' progress only once per round (its steps in between follow its own local model) and
its deltas are applied together at the round's end (staleness at most {wbsp_stale}).
"""

TTA_CHEAP = """
On this task ASP's staleness costs little (it reached the target in every scenario, final {metric}
{asp_finals} against BSP's {bsp_finals}): we read the measured ratios — plain WBSP {wbsp_ratios},
WBSP-overlap {overlap_ratios} of the fastest baseline's time — as plain WBSP's extra throughput
being mostly used up by its once-per-round view of the others, and WBSP-overlap's larger one
carrying through.
"""

TTA_COSTLY = """
On this task staleness costs: ASP reached the target in {asp_reached} of {cases} scenarios (final
{metric} {asp_finals} against BSP's {bsp_finals}), and SSP, whose gradients are as stale once its
allowance is spent, {ssp_reached} of {cases} ({ssp_finals}). WBSP and WBSP-overlap reached it in
{wbsp_reached} and {overlap_reached} of {cases} (final {metric} {wbsp_finals} and {overlap_finals}):
averaging a round's deltas keeps their updates close to BSP's. Their times against the fastest
baseline ({fastest}): plain WBSP {wbsp_ratios}, WBSP-overlap {overlap_ratios}.
"""


SWEEP = """
### Why not 60 %: the cost of communication

WBSP's lever against ASP is the communication it saves or hides, so its gain depends on what a
transfer costs next to a step. The paper's baselines spent 28–45 % of their time not computing;
here ASP spends {asp_idle}. The bench reruns one scenario with the model size (hence the cost of
every push and pull) changed:
"""

SWEEP_AFTER = """
From the smallest to the largest model, ASP's compute share goes from {asp_small} to {asp_large};
plain WBSP's time to accuracy against the fastest baseline goes from {wbsp_small} to {wbsp_large},
and WBSP-overlap's from {overlap_small} to {overlap_large}. As transfers grow, ASP and plain WBSP
lose compute time (WBSP less: one transfer per step instead of two), while WBSP-overlap hides its
transfers behind steps. A reduction of the order of the paper's is therefore a matter of a testbed
where a transfer costs about as much as a fast worker's step — as the paper's baselines' compute
shares suggest — more than of the synchronization rule alone.
"""


TIMELINES_TEXT = """
Green is computing, dark blue pushing, light blue pulling, hatched grey waiting; ticks on top mark
global updates. BSP's fast workers (0–3) wait for the slow ones (4–7) every round; under WBSP they
keep stepping and pushing, and a round closes when a slow worker's push arrives; under
WBSP-overlap nobody stops (its pushes and pulls run underneath the green bars).
"""

MODEL = """
## How WBSP is modelled, and what is not

- `src/hetsync/policies/wbsp.py`, `wbsp_overlap.py` (headers give the rules). The server holds a
  round's deltas and applies them together (weight 1/N each) when every live worker has pushed in
  the round; the worker whose push completes the round is its slowest, found online. Every worker
  is flagged then and pulls at its next push reply, so all pulls of a round return the same
  version. Deltas that arrive after the close — including the one a flagged worker pushes before
  it pulls — go to the next round (staleness 1); nothing is dropped. The authors' server instead
  adds each delta to the global model on arrival and only gates the pulls, and watches one
  hard-coded slow worker.
- WBSP-overlap pushes whatever it has accumulated at the moment it learns of the flag, together
  with the pull, and keeps pushing while the pull is in flight; steps finished after the last push
  started are overwritten by the pulled model and counted as dropped (the `dropped` column). With
  symmetric links the push sent with the pull lands at the same instant as the pull, the
  simulator delivers it first (start order), and the worker pushes the steps finished meanwhile
  just before the new model replaces its own — so no step is dropped. On a slower uplink the
  pull would land first and those steps would be lost.
- The in-flight step of an overlapped worker whose pull lands finishes on the new model: its
  gradient, computed on the old local model, is applied to the loaded one (as when the authors'
  two threads share one model).
- ADSP (Hu, Wang, Wu, AAAI 2020), the paper's fourth baseline, is not included. Its core — the
  server's online search for the commit rate, driven by the global model's measured loss — could
  not be specified faithfully from what is public (the paper's search algorithm could not be read
  in full; the public prototype code differs from the paper's description), and hetsync policies
  cannot see the global model's loss: the sans-IO contract has no event that carries it.
"""
