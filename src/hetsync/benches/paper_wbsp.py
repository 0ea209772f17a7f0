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
import statistics
from functools import partial
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches import plots
from hetsync.benches.common import (
    Row,
    add_output_arguments,
    fmt_metric,
    parse_seeds,
    run_target,
    scenario_setup,
    setup_cell,
    short_metric,
    split_list,
    target_text,
)
from hetsync.errors import BadInput
from hetsync.runner import write_json_atomic
from hetsync.scenario import Scenario, add_override_argument, load_scenario

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
DEFAULTS = {"quick": False, "scenarios": ",".join(SCENARIOS), "policies": ",".join(POLICIES), "seeds": "0"}
DEFAULTS |= {"comm_sweep": None, "sweep_scenario": SWEEP_SCENARIO}
"""The options' defaults; the page's command names those that differ."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_arguments(p, NAME, "results-wbsp.md", quick=True)
    ex.add_quick_argument(p, QUICK_MAX_TIME_S, ", and no model-size sweep")
    p.add_argument("--scenarios", default=DEFAULTS["scenarios"], help="comma-separated (default: %(default)s)")
    p.add_argument("--policies", default=DEFAULTS["policies"], help="comma-separated (default: %(default)s)")
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


Case = ex.Case  # one scenario to run every policy on: a main scenario, or a point of the sweep


def run(args: argparse.Namespace) -> list[Row]:
    overrides = ex.overrides_of(args, QUICK_MAX_TIME_S)
    specs = split_list(args.policies, "--policies")
    seeds = parse_seeds(args.seeds)
    cases = [
        Case(key=load_scenario(n, **overrides).name, scenario=n) for n in split_list(args.scenarios, "--scenarios")
    ]
    cases += sweep_cases(args.sweep_scenario, _sweep(args))
    results = bench_paper_wbsp(cases, specs, seeds, Path(args.out), overrides=overrides)
    command = ex.command_line(NAME, args, list(DEFAULTS.items()))
    ex.publish(args, lambda where: write_docs(results, where, command=command))
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
    exp = ex.Experiment(
        cases=tuple(cases), policies=tuple(specs), seeds=tuple(seeds), overrides=overrides or {}, seed_dirs=False
    )
    exp.validate()  # every scenario before the first run
    results = []
    for case in cases:
        if case.sweep:
            report.terminal_console().print(f"[bold]{case.key}[/]: {case.scenario} with {dict(case.overrides)}")
        draw = plots.case_plots(
            baselines=_is_baseline, timelines=() if case.sweep else TIMELINES, timeline_s=TIMELINE_S
        )
        sc, runs_by_seed = exp.run_case(case, out, progress=_progress, after=draw)
        results.append(_aggregate(case, sc, runs_by_seed, out))
    write_json_atomic(out / "results.json", results)
    return results


def _progress(s: dict[str, Any]) -> str:
    tta, metric = s["time_to_target_s"], s["target_metric"]
    return (
        f"compute {100 * s['compute_share']:.1f}%, TTA {'—' if tta is None else f'{tta:g} s'}, "
        f"final {short_metric(metric)} {fmt_metric(metric, s['final_metric'])}"
    )


def plot_kinds(metric: str) -> tuple[str, ...]:
    """The plots of a case: PLOTS, with the target metric in place of accuracy."""
    curve = report.metric_plot_name([{"target_metric": metric}])
    return tuple(kind.replace("accuracy", curve) for kind in PLOTS)


def _run_dir(out: Path, scenario: str, seed: int, seeds: list[int]) -> Path:
    return out / scenario / f"seed-{seed}" if len(seeds) > 1 else out / scenario


def _is_baseline(run: dict[str, Any]) -> bool:
    return run["policy"] not in CANDIDATES


def _fastest_baseline(runs: list[dict[str, Any]]) -> tuple[str, float] | None:
    """The baseline (every policy but WBSP's) that reached the target first, and its time."""
    reached = [(r["label"], r["time_to_target_s"]) for r in runs if r["policy"] not in CANDIDATES]
    reached = [(label, t) for label, t in reached if t is not None]
    return min(reached, key=lambda lt: lt[1]) if reached else None


def _median_or_none(values: list[float | None]) -> float | None:
    """The median over the seeds, or None unless every seed has a value."""
    return float(statistics.median(values)) if all(v is not None for v in values) else None  # type: ignore[type-var]


def _aggregate(case: Case, sc: Scenario, runs_by_seed: ex.RunsBySeed, out: Path) -> dict[str, Any]:
    """Per policy: mean shares and final target metric, median time to target and ratio over the seeds."""
    seeds = sorted(runs_by_seed)
    fastest = {seed: _fastest_baseline(runs) for seed, runs in runs_by_seed.items()}
    policies = []
    for label in ex.labels_of(runs_by_seed):
        per_seed = ex.by_label(runs_by_seed, label)
        ratios = ex.paired_ratios(
            runs_by_seed, label, lambda runs: (_fastest_baseline(runs) or (0, None))[1], inverse=True
        )
        policies.append(
            {
                "policy": per_seed[0]["policy"],
                "label": label,
                "baseline": per_seed[0]["policy"] not in CANDIDATES,
                **ex.means(per_seed, {k: k for k in ("compute_share", "comm_share", "wait_share")}),
                "time_to_target_s": _median_or_none([r["time_to_target_s"] for r in per_seed]),
                "reached": sum(r["time_to_target_s"] is not None for r in per_seed),
                "tta_vs_fastest_baseline": _median_or_none(ratios),
                **ex.means(per_seed, {k: k for k in ("final_metric", "steps", "dropped_steps", "updates")}),
                "max_staleness": max(r["max_staleness"] for r in per_seed),
                "per_seed": [
                    {"seed": s, **ex.lite(r, ["time_to_target_s"]), "tta_vs_fastest_baseline": x}
                    | ex.lite(r, ("compute_share", "final_metric", "host_time_s"))
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


def columns(res: dict[str, Any]) -> dict[str, ex.Col]:
    """A case's figures per policy, by name (the page and the rows show them in
    the orders of :data:`PAGE_COLUMNS` and :data:`ROW_COLUMNS`)."""
    metric, seeds, ratio = res["target_metric"], res["seeds"], "tta_vs_fastest_baseline"

    def tta_cell(p: dict[str, Any]) -> str:
        several = p["time_to_target_s"] is None and len(seeds) > 1
        return _secs(p["time_to_target_s"]) + (f" ({p['reached']} seeds)" if several else "")

    def tta_row(p: dict[str, Any]) -> Row:
        tta = p["time_to_target_s"]
        reached = "" if tta is not None or len(seeds) == 1 else f" ({p['reached']}/{len(seeds)} seeds)"
        shown = None if tta is not None else f"not in {res['max_time_s']:g} s{reached}"
        return {
            "metric": f"time to {target_text(res)}",
            "value": tta,
            "unit": "s",
            "shown": shown,
            "reached": p["reached"],
        }

    return {
        "policy": ex.key_col("policy", "label", str),
        **{name: ex.share_col(name, f"{name}_share") for name in ("compute", "comm", "wait")},
        "tta": ex.Col("TTA (s)", tta_cell, row=tta_row),
        "ratio": ex.key_col("TTA vs fastest baseline", ratio, _fixed, "TTA ÷ fastest baseline's"),
        "final": ex.key_col(
            f"final {short_metric(metric)}", "final_metric", partial(fmt_metric, metric), f"final {metric}", shown=True
        ),
        **{
            header: ex.key_col(header, key, "{:,.0f}".format)
            for header, key in (("steps", "steps"), ("dropped", "dropped_steps"), ("updates", "updates"))
        },
        "stale": ex.key_col("max stale (versions)", "max_staleness", str, "max staleness", "versions"),
    }


PAGE_COLUMNS = ("policy", "compute", "comm", "wait", "tta", "ratio", "final", "steps", "dropped", "updates", "stale")
ROW_COLUMNS = ("tta", "ratio", "final", "compute", "comm", "wait", "stale")


def rows_of(results: list[dict[str, Any]]) -> list[Row]:
    """The printed and ``--json`` rows: per case (a table) and policy (a line),
    the time to target, its ratio to the fastest baseline's, the final
    metric, the three shares (in %) and the largest staleness."""
    rows: list[Row] = []
    for res in results:
        seeds, col = res["seeds"], columns(res)
        setting = res["case"] + (
            f", seeds {','.join(map(str, seeds))} (medians of times, means)" if len(seeds) > 1 else ""
        )
        for p in res["policies"]:
            keys = {"scenario": res["scenario"], "case": res["case"], "policy": p["label"], "setting": setting}
            rows += ex.col_rows(p, [col[name] for name in ROW_COLUMNS], keys)
    return rows


# --------------------------------------------------------------------- docs
PAGE = ex.page_blocks(__file__, "paper_wbsp.md.in")
"""The page (Jinja2: per-scenario sections, the paragraphs that depend on the outcome) and its set-up table."""


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _fixed(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


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
    main = [r for r in results if not r["sweep"]]
    for res in main:
        ex.copy_plots(None, docs / "img", {src: _img_name(res["scenario"], k) for k, src in res["plots"].items()})
    if main:  # timelines of the first scenario only: they look alike in the others
        names = {src: _timeline_name(main[0]["scenario"], label) for label, src in main[0]["timelines"].items()}
        ex.copy_plots(None, docs / "img", names)
    path = docs / "results-wbsp.md"
    path.write_text(render_markdown(results, command=command))
    return path


def _timeline_name(scenario: str, label: str) -> str:
    return _img_name(scenario, f"timeline-{report.safe_name(label)}")


def _by_policy(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["policy"]: p for p in res["policies"]}


def _share(res: dict[str, Any], policy: str) -> str:
    """The policy's compute share in a case, ``—`` if it did not run."""
    p = _by_policy(res).get(policy)
    return "—" if p is None else ex.pct_cell(p["compute_share"])


def _gain(res: dict[str, Any], policy: str) -> str:
    """The policy's time to target against the fastest baseline's in a case, as a change (:func:`_change`)."""
    p = _by_policy(res).get(policy)
    return "—" if p is None else _change(p["tta_vs_fastest_baseline"])


def _change(ratio: float | None) -> str:
    """A TTA ratio as a signed change: 0.43 → "−57%", 1.12 → "+12%"."""
    if ratio is None:
        return "—"
    change = round(100 * (ratio - 1))
    return f"−{-change}%" if change < 0 else f"+{change}%"


def _claims(main: list[dict[str, Any]]) -> dict[str, str]:
    """What this run measured beside the paper's claims (the claims are in the page template)."""
    shares: dict[str, list[float]] = {}
    changes: dict[str, list[str]] = {}
    for res in main:
        for p in (p for p in res["policies"] if not p["baseline"]):
            shares.setdefault(p["label"], []).append(p["compute_share"])
            changes.setdefault(p["label"], []).append(f"{_change(p['tta_vs_fastest_baseline'])} ({res['scenario']})")
    return {
        "wbsp": "; ".join(f"{label} {_span(v)}" for label, v in shares.items()),
        "others": _span([p["compute_share"] for r in main for p in r["policies"] if p["baseline"]]),
        "tta": "; ".join(f"{label} " + ", ".join(v) for label, v in changes.items()),
    }


def _results_table(res: dict[str, Any]) -> list[str]:
    col = columns(res)
    return ex.aggregate_table(res["policies"], [col[name] for name in PAGE_COLUMNS], left=1)


def _sweep_table(results: list[dict[str, Any]]) -> list[str]:
    """Cost of one transfer against compute shares and TTA ratios, for the sweep scenario."""
    sweep = [r for r in results if r["sweep"]]
    if not sweep:
        return []
    name, points = sweep[0]["scenario"], _sweep_points(results)
    lines = [
        f"| {name}: model size | one transfer | ASP compute | WBSP compute | fastest baseline (TTA) "
        "| WBSP TTA vs it | WBSP-overlap TTA vs it |",
        "|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in points:
        base = [p for p in r["policies"] if p["baseline"] and p["time_to_target_s"] is not None]
        fastest = min(base, key=lambda p: p["time_to_target_s"]) if base else None
        shown = "—" if fastest is None else f"{fastest['label']} ({_secs(fastest['time_to_target_s'])} s)"
        lines.append(
            f"| {(r['model_bytes'] or 0) / 1e6:g} MB | {1000 * (r['transfer_s'] or 0):.0f} ms "
            f"| {_share(r, 'asp')} | {_share(r, 'wbsp')} | {shown} | {_gain(r, 'wbsp')} | {_gain(r, 'wbsp-overlap')} |"
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


def _sweep_points(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep scenario's results, smallest model first."""
    name = next(r["scenario"] for r in results if r["sweep"])
    return sorted((r for r in results if r["scenario"] == name), key=lambda r: r["model_bytes"] or 0)


def _tta(main: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The figures the time-to-accuracy paragraphs quote, and their check ``cheap``:
    ASP reached the target in every scenario, its final metric within 0.02 of BSP's
    (then staleness costs little on this task)."""
    if not main:
        return None
    metric = main[0]["target_metric"]

    def pick(policy: str) -> list[dict[str, Any]]:
        return [_by_policy(r)[policy] for r in main if policy in _by_policy(r)]

    def finals(policy: str) -> str:
        return " / ".join(fmt_metric(metric, p["final_metric"]) for p in pick(policy)) or "—"

    def reached(policy: str) -> int:
        return sum(p["time_to_target_s"] is not None for p in pick(policy))

    def stale(*policies: str) -> str:
        values = [p["max_staleness"] for policy in policies for p in pick(policy)]
        return str(max(values)) if values else "—"

    asp, bsp = pick("asp"), pick("bsp")
    return {
        "cheap": bool(asp and bsp)
        and all(
            a["time_to_target_s"] is not None and abs(a["final_metric"] - b["final_metric"]) <= 0.02
            for a, b in zip(asp, bsp, strict=False)
        ),
        "wbsp_steps": _steps_gain(main, "wbsp"),
        "overlap_steps": _steps_gain(main, "wbsp-overlap"),
        "asp_stale": stale("asp"),
        "wbsp_stale": stale("wbsp", "wbsp-overlap"),
        "metric": metric,
        "cases": len(main),
        "fastest": ", ".join(sorted({str(v) for r in main for v in r["fastest_baseline"].values()})),
        **{f"{name}_finals": finals(policy) for name, policy in _NAMED.items()},
        **{f"{name}_reached": reached(policy) for name, policy in _NAMED.items()},
        **{f"{name}_ratios": _ratios(main, policy) for name, policy in _NAMED.items()},
    }


_NAMED = {"asp": "asp", "bsp": "bsp", "ssp": "ssp", "wbsp": "wbsp", "overlap": "wbsp-overlap"}
"""The policies the page's prose names, by the prefix of their figures."""


def _sweep_figures(results: list[dict[str, Any]], main: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The figures of the sweep's paragraph (smallest and largest model), None without a sweep."""
    if not any(r["sweep"] for r in results):
        return None
    points = _sweep_points(results)
    small, large = points[0], points[-1]
    return {
        "asp_idle": _span([1 - _by_policy(r)["asp"]["compute_share"] for r in main if "asp" in _by_policy(r)]),
        "table": "\n".join(_sweep_table(results)),
        "asp_small": _share(small, "asp"),
        "asp_large": _share(large, "asp"),
        **{
            f"{name}_{end}": _gain(r, policy)
            for name, policy in (("wbsp", "wbsp"), ("overlap", "wbsp-overlap"))
            for end, r in (("small", small), ("large", large))
        },
    }


def render_markdown(results: list[dict[str, Any]], *, command: str) -> str:
    main = [r for r in results if not r["sweep"]]
    sections = [
        {
            "res": res,
            "target": target_text(res),
            "fastest": ", ".join(sorted({str(v) for v in res["fastest_baseline"].values()})),
            "table": "\n".join(_results_table(res)),
            "plots": [(kind, _img_name(res["scenario"], kind)) for kind in res["plots"]],
        }
        for res in main
    ]
    first = main[0] if main and main[0]["timelines"] else None
    return ex.fill_page(
        PAGE["page"],
        command=command,
        host_s=sum(r["host_time_s"] for r in results),
        seeds=results[0]["seeds"] if results else [0],
        main=main,
        setup=setup_table(main),
        sections=sections,
        claims=_claims(main),
        tta=_tta(main),
        best=_best(main),
        sweep=_sweep_figures(results, main),
        timelines=[(label, _timeline_name(first["scenario"], label)) for label in first["timelines"]] if first else [],
        timeline_s=TIMELINE_S,
    )


def setup_table(main: list[dict[str, Any]]) -> list[str]:
    """The set-up: the paper's column as published, ours from the scenarios that ran."""
    setups = [r["setup"] for r in main if r.get("setup")]
    if not setups:
        return []
    labels: list[str] = []
    for r in main:
        labels += [p["label"] for p in r["policies"] if p["baseline"] and p["label"] not in labels]
    evals = sorted({r["setup"]["duration"].split(", evaluated every ")[-1] for r in main if r.get("setup")})
    text = ex.fill_page(
        PAGE["setup"],
        cluster=setup_cell(
            [{**s, "c": f"{s['workers']} simulated workers and a parameter server"} for s in setups], "c"
        ),
        step=setup_cell(setups, "step"),
        job=setup_cell([{**s, "j": f"{s['workload']}, batch {s['batch']}"} for s in setups], "j"),
        network=setup_cell(setups, "network"),
        recipe=setup_cell(setups, "recipe"),
        duration=setup_cell(setups, "duration"),
        baselines=", ".join(labels),
        are="s are" if len(main) > 1 else " is",
        names=", ".join(f"`{r['scenario']}`" for r in main),
        evals=", ".join(evals),
    )
    return text.splitlines()
