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
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches import plots
from hetsync.benches.common import (
    Row,
    fmt_metric,
    setup_cell,
    short_metric,
    target_text,
)
from hetsync.errors import BadInput
from hetsync.runner import write_json_atomic
from hetsync.scenario import Scenario

NAME = "paper-wbsp"

SCENARIOS = ("wbsp-h1", "wbsp-h2", "wbsp-h3")
POLICIES = ("bsp", "ssp:s=40", "asp", "wbsp", "wbsp-overlap")
CANDIDATES = frozenset({"wbsp", "wbsp-overlap"})  # every other policy is a baseline
PLOTS = ("accuracy-zoom", "accuracy", "shares")  # for an accuracy target; see plot_kinds
TIMELINES = ("bsp", "wbsp", "wbsp-overlap")  # per-worker timelines drawn for these policies
TIMELINE_S = 5.0
SWEEP_SCENARIO = "wbsp-h2"
SWEEP_MODEL_BYTES = (600_000, 16_000_000)  # the paper's CIFAR-10 CNN (148k float32 parameters); 4x the default
OPTIONS = ex.Options(
    bench=NAME,
    page="results-wbsp.md",
    scenarios=SCENARIOS,
    policies=POLICIES,
    quick_max_time_s=30.0,
    quick_more=", and no model-size sweep",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    OPTIONS.add_arguments(p)
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
    exp = OPTIONS.experiment(args, seed_dirs=False)
    exp = replace(exp, cases=(*exp.cases, *sweep_cases(args.sweep_scenario, _sweep(args))))
    results = bench_paper_wbsp(exp, Path(args.out))
    command = ex.command_line(NAME, args, add_arguments)
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
def bench_paper_wbsp(exp: ex.Experiment, out: Path) -> list[dict[str, Any]]:
    """Run every policy on every case and seed; return one record per case (:func:`case_result`)."""
    exp.validate()  # every scenario before the first run
    results = []
    for case in exp.cases:
        if case.sweep:
            report.terminal_console().print(f"[bold]{case.key}[/]: {case.scenario} with {dict(case.overrides)}")
        draw = plots.case_plots(
            baselines=_is_baseline, timelines=() if case.sweep else TIMELINES, timeline_s=TIMELINE_S
        )
        sc, runs_by_seed = exp.run_case(case, out, progress=_progress, after=draw)
        results.append(case_result(case, sc, runs_by_seed, exp.folder(out, case, exp.seeds[0])))
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


def _is_baseline(run: dict[str, Any]) -> bool:
    return run["policy"] not in CANDIDATES


def _fastest_baseline(runs: list[dict[str, Any]]) -> tuple[str, float] | None:
    """The baseline (every policy but WBSP's) that reached the target first, and its time."""
    reached = [(r["label"], r["time_to_target_s"]) for r in runs if _is_baseline(r)]
    reached = [(label, t) for label, t in reached if t is not None]
    return min(reached, key=lambda lt: lt[1]) if reached else None


def _fastest_tta(runs: list[dict[str, Any]]) -> float | None:
    return (_fastest_baseline(runs) or ("", None))[1]


MEANS = {f"{k}_mean": k for k in ("compute_share", "comm_share", "wait_share", "steps", "dropped_steps", "updates")}
"""The figures averaged over the seeds, besides the shared ones (:func:`experiment.aggregate`)."""
KEPT = ("label", "policy", "seed", "time_to_target_s", "compute_share", "final_metric", "max_staleness", "host_time_s")
"""The figures of a run that ``results.json`` keeps."""


def case_result(case: Case, sc: Scenario, runs_by_seed: ex.RunsBySeed, where: Path) -> dict[str, Any]:
    """A case's record (:func:`experiment.case_record`): per policy the medians of
    the time to target and of its ratio to the fastest baseline's of the same
    seed (``tta_vs_fastest``), mean shares, final metric and counts, the largest
    staleness; the case's transfer time and fastest baselines, its plots in ``where``."""
    aggregates = [
        ex.aggregate(label, runs_by_seed, baseline=_fastest_tta, keys=MEANS, speedup="tta_vs_fastest", inverse=True)
        | {"baseline": _is_baseline(runs[0]), "max_staleness": max(r["max_staleness"] for r in runs)}
        for label in ex.labels_of(runs_by_seed)
        if (runs := ex.by_label(runs_by_seed, label))
    ]
    fastest = {seed: _fastest_baseline(runs) for seed, runs in runs_by_seed.items()}
    nbytes = sc.model_bytes
    return ex.case_record(sc, runs_by_seed, aggregates=aggregates, keep=lambda r: ex.lite(r, KEPT), calm=[]) | {
        "case": case.key,
        "sweep": case.sweep,
        "model_bytes": nbytes,
        "transfer_s": None if nbytes is None else nbytes / min(sc.bandwidth_Bps) + sc.latency_s,
        "delay_s": max(sc.delay_s),
        "fastest_baseline": {s: (f[0] if f else None) for s, f in fastest.items()},
        "host_time_s": sum(r["host_time_s"] for runs in runs_by_seed.values() for r in runs),
        "plots": {k: str(where / f"{k}.png") for k in plot_kinds(sc.target_metric) if (where / f"{k}.png").exists()},
        "timelines": {
            a["label"]: str(where / f"timeline-{report.safe_name(a['label'])}.png")
            for a in aggregates
            if a["policy"] in TIMELINES and not case.sweep
        },
    }


def columns(res: dict[str, Any]) -> dict[str, ex.Col]:
    """A case's figures per policy, by name (the page and the rows show them in
    the orders of :data:`PAGE_COLUMNS` and :data:`ROW_COLUMNS`)."""
    metric, seeds = res["target_metric"], res["seeds"]

    def tta_cell(a: dict[str, Any]) -> str:
        several = a["tta_median_s"] is None and len(seeds) > 1
        return _secs(a["tta_median_s"]) + (f" ({a['reached']} seeds)" if several else "")

    def tta_row(a: dict[str, Any]) -> Row:
        tta = a["tta_median_s"]
        reached = "" if tta is not None or len(seeds) == 1 else f" ({a['reached']}/{len(seeds)} seeds)"
        shown = None if tta is not None else f"not in {res['max_time_s']:g} s{reached}"
        return {"metric": f"time to {target_text(res)}", "value": tta, "unit": "s", "shown": shown}

    return {
        "policy": ex.key_col("policy", "label", str),
        **{name: ex.share_col(name, f"{name}_share_mean") for name in ("compute", "comm", "wait")},
        "tta": ex.Col("TTA (s)", tta_cell, row=tta_row),
        "ratio": ex.key_col(
            "TTA vs fastest baseline",
            "tta_vs_fastest_median",
            partial(ex.fmt_num, spec=".2f"),
            "TTA ÷ fastest baseline's",
        ),
        "final": ex.key_col(
            f"final {short_metric(metric)}",
            "final_metric_mean",
            partial(fmt_metric, metric),
            f"final {metric}",
            shown=True,
        ),
        **{
            header: ex.key_col(header, f"{key}_mean", "{:,.0f}".format)
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
        several = f", seeds {','.join(map(str, seeds))} (medians of times, means)" if len(seeds) > 1 else ""
        keys = {"scenario": res["scenario"], "case": res["case"], "setting": res["case"] + several}
        rows += ex.table_rows(res["aggregate"], [col[name] for name in ROW_COLUMNS], **keys)
    return rows


# --------------------------------------------------------------------- docs
PAGE = ex.page_blocks(__file__, "paper_wbsp.md.in")
"""The page (Jinja2: per-scenario sections, the paragraphs that depend on the outcome) and its set-up table."""


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}"


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
    return {p["policy"]: p for p in res["aggregate"]}


def _pick(main: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    """The policy's aggregate in each case that ran it."""
    return [by[policy] for r in main if policy in (by := _by_policy(r))]


def _share(res: dict[str, Any], policy: str) -> str:
    """The policy's compute share in a case, ``—`` if it did not run."""
    return ex.pct_cell(next((p["compute_share_mean"] for p in _pick([res], policy)), None))


def _gain(res: dict[str, Any], policy: str) -> str:
    """The policy's time to target against the fastest baseline's in a case, as a change."""
    return ex.fmt_change(next((p["tta_vs_fastest_median"] for p in _pick([res], policy)), None))


def _claims(main: list[dict[str, Any]]) -> dict[str, str]:
    """What this run measured beside the paper's claims (the claims are in the page template)."""
    shares: dict[str, list[float]] = {}
    changes: dict[str, list[str]] = {}
    for res in main:
        for p in (p for p in res["aggregate"] if not p["baseline"]):
            shares.setdefault(p["label"], []).append(p["compute_share_mean"])
            changes.setdefault(p["label"], []).append(
                f"{ex.fmt_change(p['tta_vs_fastest_median'])} ({res['scenario']})"
            )
    return {
        "wbsp": "; ".join(f"{label} {ex.fmt_pct_span(v)}" for label, v in shares.items()),
        "others": ex.fmt_pct_span([p["compute_share_mean"] for r in main for p in r["aggregate"] if p["baseline"]]),
        "tta": "; ".join(f"{label} " + ", ".join(v) for label, v in changes.items()),
    }


def _results_table(res: dict[str, Any]) -> list[str]:
    col = columns(res)
    return ex.aggregate_table(res["aggregate"], [col["policy"], *ex.right(*(col[n] for n in PAGE_COLUMNS[1:]))])


def _sweep_table(results: list[dict[str, Any]]) -> list[str]:
    """Cost of one transfer against compute shares and TTA ratios, a line per model size of the sweep."""
    points = _sweep_points(results)

    def fastest(r: dict[str, Any]) -> str:
        base = [p for p in r["aggregate"] if p["baseline"] and p["tta_median_s"] is not None]
        p = min(base, key=lambda p: p["tta_median_s"], default=None)
        return "—" if p is None else f"{p['label']} ({_secs(p['tta_median_s'])} s)"

    columns = [
        *ex.right(
            ex.Col(f"{points[0]['scenario']}: model size", lambda r: f"{(r['model_bytes'] or 0) / 1e6:g} MB"),
            ex.Col("one transfer", lambda r: f"{1000 * (r['transfer_s'] or 0):.0f} ms"),
            ex.Col("ASP compute", lambda r: _share(r, "asp")),
            ex.Col("WBSP compute", lambda r: _share(r, "wbsp")),
        ),
        ex.Col("fastest baseline (TTA)", fastest),
        *ex.right(
            ex.Col("WBSP TTA vs it", lambda r: _gain(r, "wbsp")),
            ex.Col("WBSP-overlap TTA vs it", lambda r: _gain(r, "wbsp-overlap")),
        ),
    ]
    return ex.aggregate_table(points, columns)


def _steps_gain(main: list[dict[str, Any]], policy: str) -> str:
    """How many more steps the policy computed than ASP, over the cases (``15–20%``)."""
    pairs = [(by[policy], by["asp"]) for r in main if {policy, "asp"} <= (by := _by_policy(r)).keys()]
    return ex.fmt_pct_span([p["steps_mean"] / a["steps_mean"] - 1 for p, a in pairs if a["steps_mean"]])


def _ratios(main: list[dict[str, Any]], policy: str) -> str:
    """The policy's TTA ratios to the fastest baseline over the cases, as ``lo–hi``."""
    values = sorted(v for p in _pick(main, policy) if (v := p["tta_vs_fastest_median"]) is not None)
    return "—" if not values else "–".join(dict.fromkeys((f"{values[0]:.2f}", f"{values[-1]:.2f}")))


def _best(main: list[dict[str, Any]]) -> str:
    found = [
        (p["tta_vs_fastest_median"], p["label"], r["scenario"])
        for r in main
        for p in r["aggregate"]
        if not p["baseline"] and p["tta_vs_fastest_median"] is not None
    ]
    if not found:
        return "— (no WBSP run reached the target)"
    ratio, label, scenario = min(found)
    return f"{ex.fmt_change(ratio)} ({label}, {scenario})"


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

    pick = partial(_pick, main)

    def finals(policy: str) -> str:
        return " / ".join(fmt_metric(metric, p["final_metric_mean"]) for p in pick(policy)) or "—"

    def reached(policy: str) -> int:
        return sum(p["tta_median_s"] is not None for p in pick(policy))

    def stale(*policies: str) -> str:
        values = [p["max_staleness"] for policy in policies for p in pick(policy)]
        return str(max(values)) if values else "—"

    asp, bsp = pick("asp"), pick("bsp")
    return {
        "cheap": bool(asp and bsp)
        and all(
            a["tta_median_s"] is not None and abs(a["final_metric_mean"] - b["final_metric_mean"]) <= 0.02
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
        "asp_idle": ex.fmt_pct_span(
            [1 - _by_policy(r)["asp"]["compute_share_mean"] for r in main if "asp" in _by_policy(r)]
        ),
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
        labels += [p["label"] for p in r["aggregate"] if p["baseline"] and p["label"] not in labels]
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
