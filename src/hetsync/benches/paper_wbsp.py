"""``hetsync bench paper-wbsp``: the WBSP paper's experiment in the simulator.

Yang, Hu, Liu, Jin, Yeung, You, "WBSP: Addressing stragglers in distributed
machine learning with worker-busy synchronous parallel", Parallel Computing
121 (2024) 103092, make half of the workers sleep 0.5 / 1.0 / 1.5 s before
every step (H1 / H2 / H3) and compare WBSP and its overlapped version with
BSP, SSP (s = 40) and ASP: WBSP computes 91 % of the time against 55–72 %,
and reaches the target accuracy in up to 60 % less time than the fastest of
them. This bench runs that comparison on ``wbsp-h1``..``wbsp-h3`` (and a
model-size sweep on one of them) as an :class:`~hetsync.benches.experiment.Experiment`:
per scenario and policy the shares, the time to target (or to another metric's
target, ``--set 'target=...'``), its ratio to the fastest baseline's (every
policy but WBSP's) on the same seed, the final metric. It writes the runs and
``results.json`` under ``--out``, and the page ``results-wbsp.md``
(``paper_wbsp.md.in``) with its plots ``img/wbsp-*.png`` (also in ``--docs DIR``).
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
from hetsync.benches.common import Row, fmt_metric, parse_numbers, short_metric, target_text
from hetsync.runner import write_json_atomic
from hetsync.scenario import Scenario

NAME = "paper-wbsp"

SCENARIOS = ("wbsp-h1", "wbsp-h2", "wbsp-h3")
POLICIES = ("bsp", "ssp:s=40", "asp", "wbsp", "wbsp-overlap")
CANDIDATES = frozenset({"wbsp", "wbsp-overlap"})  # every other policy is a baseline
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
        f"communication (default: {','.join(map(str, SWEEP_MODEL_BYTES))}; none with --quick; 'none' for none)",
    )
    p.add_argument("--sweep-scenario", default=SWEEP_SCENARIO, help="scenario of the sweep (default: %(default)s)")


Case = ex.Case  # one scenario to run every policy on: a main scenario, or a point of the sweep


def run(args: argparse.Namespace) -> list[Row]:
    exp = OPTIONS.experiment(args, seed_dirs=False)
    sweep = ex.override_cases(args.sweep_scenario, "model_bytes", _sweep(args), name="model-{}B".format, sweep=True)
    exp = replace(exp, cases=(*exp.cases, *sweep))
    results = bench_paper_wbsp(exp, Path(args.out))
    command = ex.command_line(NAME, args, add_arguments)
    ex.publish(args, lambda where: write_docs(results, where, command=command))
    return rows_of(results)


def _sweep(args: argparse.Namespace) -> list[int]:
    if args.comm_sweep is None:
        return [] if args.quick else list(SWEEP_MODEL_BYTES)
    what, example = "a byte count", "e.g. 6e5,1.6e7"
    sizes = parse_numbers(
        args.comm_sweep, "--comm-sweep", what=what, example=example, bound=">= 0", ok=lambda v: v >= 0
    )
    return [int(v) for v in sizes]


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
        sc, runs_by_seed = exp.run_case(case, out, after=draw)
        results.append(case_result(case, sc, runs_by_seed, exp.folder(out, case, exp.seeds[0])))
    write_json_atomic(out / "results.json", results)
    return results


def _is_baseline(run: dict[str, Any]) -> bool:
    return run["policy"] not in CANDIDATES


def _fastest_tta(runs: list[dict[str, Any]]) -> float | None:
    """The time to target of the baseline that reached it first (None: none did)."""
    return (ex.fastest([r for r in runs if _is_baseline(r)], "time_to_target_s") or {}).get("time_to_target_s")


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
    fastest = {
        seed: ex.fastest([r for r in runs if _is_baseline(r)], "time_to_target_s")
        for seed, runs in runs_by_seed.items()
    }
    nbytes, timelines = sc.job.model_bytes, [a for a in aggregates if a["policy"] in TIMELINES and not case.sweep]
    return ex.case_record(sc, runs_by_seed, aggregates=aggregates, keep=lambda r: ex.lite(r, KEPT), calm=[]) | {
        "case": case.key,
        "sweep": case.sweep,
        "model_bytes": nbytes,
        "transfer_s": None if nbytes is None else nbytes / min(sc.cluster.bandwidth_Bps) + sc.cluster.latency_s,
        "delay_s": max(sc.cluster.delay_s),
        "fastest_baseline": {s: (f["label"] if f else None) for s, f in fastest.items()},
        "host_time_s": sum(r["host_time_s"] for runs in runs_by_seed.values() for r in runs),
        "plots": plots.drawn(where, sc.stop.target.metric),
        "timelines": {a["label"]: str(where / plots.timeline_name(a["label"])) for a in timelines},
    }


def columns(res: dict[str, Any]) -> dict[str, ex.Col]:
    """A case's figures per policy, by name (the page and the rows show them in
    the orders of :data:`PAGE_COLUMNS` and :data:`ROW_COLUMNS`)."""
    metric, seeds = res["target_metric"], res["seeds"]
    two, final = partial(ex.fmt_num, spec=".2f"), partial(fmt_metric, metric)

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
        "ratio": ex.key_col("TTA vs fastest baseline", "tta_vs_fastest_median", two, "TTA ÷ fastest baseline's"),
        "final": ex.key_col(f"final {short_metric(metric)}", "final_metric_mean", final, f"final {metric}", shown=True),
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
PAGE = ex.page_blocks(__file__, "paper_wbsp.md.in")["page"]
"""The page (Jinja2): the set-up, a section per scenario, the claims and the paragraphs that depend on the outcome."""


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _img(scenario: str, kind: str) -> str:
    return ex.img_name("wbsp", scenario, kind)


def write_docs(results: list[dict[str, Any]], docs: Path, *, command: str) -> Path:
    """Write ``results-wbsp.md`` and copy the plots to ``img/wbsp-*.png``
    (the timelines of the first scenario only: they look alike in the others)."""
    main = [r for r in results if not r["sweep"]]
    for i, res in enumerate(main):
        plots = {src: _img(res["scenario"], k) for k, src in res["plots"].items()}
        timelines = {
            src: _img(res["scenario"], f"timeline-{report.safe_name(k)}") for k, src in res["timelines"].items()
        }
        ex.copy_plots(None, docs / "img", plots | (timelines if i == 0 else {}))
    path = docs / "results-wbsp.md"
    path.write_text(render_markdown(results, command=command))
    return path


def _results_table(res: dict[str, Any]) -> list[str]:
    col = columns(res)
    return ex.aggregate_table(res["aggregate"], [col[n] for n in PAGE_COLUMNS], left=1)


def _sweep_table(points: list[dict[str, Any]]) -> list[str]:
    """Cost of one transfer against compute shares and TTA ratios, a line per model size of the sweep."""

    def share(policy: str) -> Any:
        return lambda r: ex.pct_cell(ex.figure_of(r, policy, "compute_share_mean"))

    def gain(policy: str) -> Any:
        return lambda r: ex.fmt_change(ex.figure_of(r, policy, "tta_vs_fastest_median"))

    def fastest(r: dict[str, Any]) -> str:
        p = ex.fastest((p for p in r["aggregate"] if p["baseline"]), "tta_median_s")
        return "—" if p is None else f"{p['label']} ({_secs(p['tta_median_s'])} s)"

    columns = [
        *ex.right(
            ex.Col(f"{points[0]['scenario']}: model size", lambda r: f"{(r['model_bytes'] or 0) / 1e6:g} MB"),
            ex.Col("one transfer", lambda r: f"{1000 * (r['transfer_s'] or 0):.0f} ms"),
            ex.Col("ASP compute", share("asp")),
            ex.Col("WBSP compute", share("wbsp")),
        ),
        ex.Col("fastest baseline (TTA)", fastest),
        *ex.right(ex.Col("WBSP TTA vs it", gain("wbsp")), ex.Col("WBSP-overlap TTA vs it", gain("wbsp-overlap"))),
    ]
    return ex.aggregate_table(points, columns)


def steps_gain(main: list[dict[str, Any]], policy: str) -> list[float]:
    """Per case, how many more steps the policy computed than ASP (a fraction)."""
    pairs = [(ex.figure_of(r, policy, "steps_mean"), ex.figure_of(r, "asp", "steps_mean")) for r in main]
    return [p / a - 1 for p, a in pairs if p is not None and a]


def asp_is_cheap(main: list[dict[str, Any]]) -> bool:
    """The claim the time-to-accuracy prose turns on: ASP reached the target in every
    scenario, its final metric within 0.02 of BSP's (then staleness costs little on this task)."""
    found = [(ex.by_policy(r["aggregate"], "asp"), ex.by_policy(r["aggregate"], "bsp")) for r in main]
    pairs = [(a[0], b[0]) for a, b in found if a and b]
    return bool(pairs) and all(
        a["tta_median_s"] is not None and abs(a["final_metric_mean"] - b["final_metric_mean"]) <= 0.02 for a, b in pairs
    )


def render_markdown(results: list[dict[str, Any]], *, command: str) -> str:
    main = [r for r in results if not r["sweep"]]
    sweep = next((r["scenario"] for r in results if r["sweep"]), None)  # its points: that scenario's cases
    points = sorted((r for r in results if r["scenario"] == sweep), key=lambda r: r["model_bytes"] or 0)
    first = main[0] if main and main[0]["timelines"] else None
    return ex.fill_page(
        PAGE,
        command=command,
        host_s=sum(r["host_time_s"] for r in results),
        seeds=results[0]["seeds"] if results else [0],
        main=main,
        setups=[r["setup"] for r in main if r.get("setup")],
        tables={r["case"]: "\n".join(_results_table(r)) for r in main},
        img=_img,
        steps_gain=lambda policy: ex.fmt_pct_span(steps_gain(main, policy)),
        cheap=asp_is_cheap(main),
        fastest=", ".join(sorted({str(v) for r in main for v in r["fastest_baseline"].values()})),
        points=points,
        sweep_table=_sweep_table(points) if points else [],
        timelines=[
            (label, _img(first["scenario"], f"timeline-{report.safe_name(label)}")) for label in first["timelines"]
        ]
        if first
        else [],
        timeline_s=TIMELINE_S,
    )
