"""``hetsync bench paper-elastic``: the ElasticBSP paper's 4-worker comparison
in the simulator.

Zhao, Papagelis, An, Chen, Liu, Hu, "Elastic Bulk Synchronous Parallel Model
for Distributed Deep Learning" (ICDM 2019) and the ZipLine paper (*Machine
Learning* 2021) compare ElasticBSP (look-ahead R from 15 to 960) with BSP,
ASP, SSP (s = 3) and DSSP (s_L = 3, r_max = 12) on 4 machines; on VGG-16 /
ImageNet they report ElasticBSP reaching its accuracy 1.77× faster than BSP,
with higher accuracy, and accuracy comparable to or better than SSP and ASP.

The experiment (:mod:`hetsync.benches.experiment`): those policies on
``elastic-4`` (4 workers 1×, 1.3×, 1.8× and 2.5× slower than the fastest,
per-step noise, digits-cnn) for several seeds, BSP the baseline of the paired
speed-ups; the diagnosis reruns BSP, ASP and ElasticBSP on the first seed
without step-time noise. Runs go under ``--out`` (``seed-<s>/``,
``jitter-0/``, ``results.json``); the page ``results-elastic.md``
(``paper_elastic.md.in``) and the first seed's plots ``img/elastic-*.png``
under ``--out``, and in ``--docs DIR`` when given.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches.common import (
    Row,
    add_output_arguments,
    fmt_metric,
    parse_seeds,
    seeds_setting,
    setup_markdown,
    split_list,
)
from hetsync.runner import write_json_atomic
from hetsync.scenario import add_override_argument
from hetsync.trace import iter_records

NAME = "paper-elastic"

SCENARIO = "elastic-4"
POLICIES = (
    "bsp",
    "asp",
    "ssp:s=3",
    "dssp:s_L=3:r_max=12",
    "elastic-bsp:R=15",
    "elastic-bsp:R=60",
    "elastic-bsp:R=240",
)
SEEDS = "0,1,2"
BASELINE = "bsp"
DIAGNOSED = ("bsp", "asp", "elastic-bsp")  # rerun without step-time noise
PAPER_SPEEDUP = 1.77  # ElasticBSP over BSP, VGG-16 on ImageNet, 4 workers
DOC_NAME = "results-elastic.md"
IMG_PREFIX = "elastic"
KEPT = (
    *("label", "seed", "time_to_target_s", "final_metric", "best_metric", "compute_share", "comm_share"),
    *("wait_share", "samples_per_s", "steps", "updates", "mean_staleness", "max_staleness", "barriers"),
    *("host_time_s", "trace"),
)
DEFAULTS = {"scenario": SCENARIO, "policies": ",".join(POLICIES), "seeds": SEEDS, "no_diagnosis": False}
"""The options' defaults; the page's command names those that differ."""
MEANS = {
    "best_metric_mean": "best_metric",
    "compute_share_mean": "compute_share",
    "wait_share_mean": "wait_share",
    "samples_per_s_mean": "samples_per_s",
    "mean_staleness": "mean_staleness",
    "barriers_mean": "barriers",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default=SCENARIO, help="built-in name or YAML file (default: %(default)s)")
    p.add_argument("--policies", default=DEFAULTS["policies"], help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", default=SEEDS, help="comma-separated seeds (default: %(default)s)")
    add_override_argument(p, "max_time_s=5")
    add_output_arguments(p, NAME, DOC_NAME)
    p.add_argument(
        "--no-diagnosis",
        action="store_true",
        help="skip the extra runs without step-time noise (jitter 0) that explain ElasticBSP's barrier wait",
    )


def run(args: argparse.Namespace) -> list[Row]:
    exp = ex.Experiment(
        cases=(ex.Case(key="", scenario=args.scenario),),
        policies=tuple(split_list(args.policies, "--policies")),
        seeds=tuple(parse_seeds(args.seeds)),
        overrides=ex.overrides_of(args),
        baseline=BASELINE,
    )
    command = ex.command_line(NAME, args, list(DEFAULTS.items()))
    results = bench_paper_elastic(exp, Path(args.out), diagnosis=not args.no_diagnosis)
    ex.publish(args, lambda where: write_doc(results, where, Path(args.out), command))
    return rows(results)


# ------------------------------------------------------------------ running
def bench_paper_elastic(exp: ex.Experiment, out: Path, *, diagnosis: bool = True) -> dict[str, Any]:
    """Run the experiment; per-seed runs, aggregates and the diagnosis in ``out/results.json``."""
    t0 = time.perf_counter()
    case = exp.cases[0]

    def after(runs: list[dict[str, Any]], folder: Path, sc: Any) -> None:
        for r in runs:
            r["barriers"] = len(barrier_times(folder / r["trace"], r["workers"])) if r.get("trace") else None
        report.write_report(runs, folder)

    sc, per_seed = exp.run_case(case, out, after=after)
    quiet = []
    if diagnosis and any(spec.startswith("elastic-bsp") for spec in exp.specs(sc)):
        quiet = [_lite(r) for r in exp.calm_runs(case, out / "jitter-0", DIAGNOSED)]
    aggregates = [
        ex.aggregate(label, per_seed, baseline=BASELINE, keys=MEANS, speedup="speedup_vs_bsp")
        for label in ex.labels_of(per_seed)
    ]
    results = ex.case_record(sc, per_seed, aggregates=aggregates, keep=_lite, calm=quiet)
    results["slowdown_range"] = [min(sc.slowdown), max(sc.slowdown)] if sc.slowdown else None
    results["host_time_s"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    return results


def barrier_times(trace: Path, n: int) -> list[float]:
    """Instants at which all n workers start a pull together: global barriers."""
    starts = Counter(r["t"] for r in iter_records(trace, kinds={"pull"}))
    return sorted(t for t, count in starts.items() if count == n)


def _lite(r: dict[str, Any]) -> dict[str, Any]:
    return ex.lite(r, KEPT) | {"steps_per_worker": r["per_worker"]["steps"]}


# ------------------------------------------------------------------ tables
def columns(results: dict[str, Any]) -> list[ex.Col]:
    """Per policy (a line of the page's table and of the printed one): time to
    target, speed-up over BSP, final metric, shares (%), samples/s, staleness;
    on the page also the seeds that reached the target and the barriers."""
    col = ex.case_columns(results, baseline=BASELINE, speedup="speedup_vs_bsp")
    return [
        ex.Col("policy", lambda a: f"`{a['label']}`"),
        *(col[name] for name in ("tta", "reached", "speedup", "final", "compute", "wait")),
        ex.key_col("samples/s", "samples_per_s_mean", "{:.0f}".format, "samples/s"),
        ex.key_col("mean staleness (versions)", "mean_staleness", "{:.2f}".format, "mean staleness", "versions"),
        ex.Col("barriers", lambda a: "—" if a["barriers_mean"] is None else f"{a['barriers_mean']:.0f}"),
    ]


def rows(results: dict[str, Any]) -> list[Row]:
    """The table's rows (:func:`columns`); the diagnosis runs as a second table."""
    where = seeds_setting(results["scenario"], results["seeds"])
    out = ex.table_rows(results["aggregate"], columns(results), setting=where)
    out += ex.calm_rows(results)
    out.append({"metric": "run time, all runs", "value": results["host_time_s"], "unit": "s", "setting": where})
    return out


# ------------------------------------------------------------------- plots
def write_doc(results: dict[str, Any], docs: Path, out: Path, command: str) -> Path:
    """``results-elastic.md`` in ``docs`` plus the first seed's plots in ``docs/img``."""
    first = out / f"seed-{results['seeds'][0]}"
    curve = f"{report.metric_plot_name([results])}.png"  # accuracy.png, or perplexity.png, ...
    img = ex.copy_plots(
        first, docs / "img", {p: f"{IMG_PREFIX}-{p}" for p in (curve, "shares.png", "timeline-bsp.png")}
    )
    img["metric"] = img.get(curve, "")
    img["superstep"] = _superstep_timeline(results, first, docs / "img") or ""
    path = docs / DOC_NAME
    path.write_text(_doc_text(results, img, command), encoding="utf-8")
    return path


def _superstep_timeline(results: dict[str, Any], first: Path, img: Path) -> str | None:
    """One ElasticBSP superstep, barrier to barrier (R = 60 if it ran), from the first seed."""
    runs = [r for r in results["runs"][str(results["seeds"][0])] if r["label"].startswith("elastic-bsp")]
    run = next((r for r in runs if r["label"] == "elastic-bsp(R=60)"), runs[0] if runs else None)
    if run is None or not run.get("trace"):
        return None
    times = barrier_times(first / run["trace"], results["workers"])
    if len(times) < 3:
        return None
    start, end = times[1], times[2]  # times[0] closes the one-step measuring superstep
    name = f"{IMG_PREFIX}-timeline-{report.safe_name(run['label'])}-superstep.png"
    report.plot_timeline(
        first / run["trace"],
        img / name,
        title=f"{run['label']} · seed {results['seeds'][0]} · one superstep, barrier to barrier",
        window_s=(start - 0.03 * (end - start), end + 0.08 * (end - start)),
    )
    return f"img/{name}"


# --------------------------------------------------------------------- page
PAGE = ex.page_blocks(__file__, "paper_elastic.md.in")
"""The page and its paragraphs that depend on the outcome."""


def _finals(results: dict[str, Any], aggregates: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"`{a['label']}` {fmt_metric(results['target_metric'], a['final_metric_mean'])}" for a in aggregates
    )


def _doc_text(results: dict[str, Any], img: dict[str, str], command: str) -> str:
    aggregates, metric = results["aggregate"], results["target_metric"]
    elastic = ex.by_policy(aggregates, "elastic-bsp")
    speeds = ", ".join(
        f"`{a['label']}` {a['speedup_vs_bsp_mean']:.2f}×" if a["speedup_vs_bsp_mean"] is not None else f"{a['label']} —"
        for a in elastic
    )
    others = ex.by_policy(aggregates, BASELINE) + ex.by_policy(aggregates, "ssp", "asp", "dssp")
    bsp = next(iter(ex.by_policy(aggregates, BASELINE)), None)
    slow, setup = results.get("slowdown_range"), results.get("setup") or {}
    return ex.fill_page(
        PAGE["page"],
        ex.case_values(results),
        command=command,
        host_s=f"{results['host_time_s']:.0f}",
        seeds=", ".join(map(str, results["seeds"])),
        setup=setup_markdown([setup] if setup else []),
        table=ex.aggregate_table(results["aggregate"], columns(results)),
        paper_speedup=PAPER_SPEEDUP,
        claim_speed=speeds or "no ElasticBSP run",
        claim_accuracy=f"final {metric} {_finals(results, elastic)}; {_finals(results, others)}"
        if elastic
        else "no ElasticBSP run",
        metric=metric,
        img_metric=img["metric"],
        img_shares=img.get("shares.png", ""),
        img_bsp=img.get("timeline-bsp.png", ""),
        superstep=ex.fill_page(PAGE["superstep"], img=img["superstep"]) if img["superstep"] else "",
        analysis=_analysis(results),
        extremes=f"{slow[1] / slow[0]:.3g} for the extremes of `{results['scenario']}`" if slow else "a few",
        network=setup.get("network", "—"),
        bsp_comm="—" if bsp is None else f"{100 * (1 - bsp['compute_share_mean'] - bsp['wait_share_mean']):.0f}%",
        workload=setup.get("workload", "—"),
        finals=_finals(results, results["aggregate"]),
    )


def _analysis(results: dict[str, Any]) -> list[str]:
    """The paragraphs of the page's analysis that apply, filled with the figures."""
    bsp, asp = (next(iter(ex.by_policy(results["aggregate"], p)), None) for p in (BASELINE, "asp"))
    elastic, metric = ex.by_policy(results["aggregate"], "elastic-bsp"), results["target_metric"]
    if bsp is None or not elastic:
        return [ex.fill_page(PAGE["needs_both"])]
    reached = [a for a in elastic if a["speedup_vs_bsp_mean"] is not None]
    best = max(reached or elastic, key=lambda a: a["speedup_vs_bsp_mean"] if reached else a["samples_per_s_mean"])
    thr = best["samples_per_s_mean"] / bsp["samples_per_s_mean"]
    values: dict[str, Any] = {
        "best": best["label"],
        "paper": PAPER_SPEEDUP,
        "thr": f"{thr:.2f}",
        "share": f"{100 * best['compute_share_mean']:.0f}%",
        "bsp_share": f"{100 * bsp['compute_share_mean']:.0f}%",
        "stale": f"{best['mean_staleness']:.2f}",
        "metric": metric,
        "finals": _finals(results, elastic),
        "bsp_final": fmt_metric(metric, bsp["final_metric_mean"]),
    }
    if reached:
        speed = best["speedup_vs_bsp_mean"]
        rng = ex.fmt_range(best["speedup_vs_bsp_min"], best["speedup_vs_bsp_max"])
        values |= {
            "verdict": "beats" if speed > 1 else "does not beat",
            "speed": f"{speed:.2f}",
            "range": f" (range {rng} over the paired seeds)" if best["speedup_pairs"] > 1 else "",
            "cost": "part of it" if speed < 0.95 * thr else "little of it on this task",
        }
    out = [ex.fill_page(PAGE["best_reached" if reached else "best_not_reached"], values)]
    if asp is not None:
        both = asp["tta_mean_s"] is not None and best["tta_mean_s"] is not None
        tail = (
            ex.fill_page(
                PAGE["asp_times"],
                best=best["label"],
                asp_s=f"{asp['tta_mean_s']:.2f}",
                best_s=f"{best['tta_mean_s']:.2f}",
            )
            if both
            else "the table shows how far each got."
        )
        values |= {"asp_thr": f"{asp['samples_per_s_mean'] / bsp['samples_per_s_mean']:.2f}", "tail": tail.strip()}
        out.append(ex.fill_page(PAGE["asp_bound"], values, wait=f"{100 * best['wait_share_mean']:.1f}%"))
    counted = [a for a in elastic if a["barriers_mean"]]
    if len(counted) > 1 and results["max_time_s"]:
        worker_s = results["workers"] * results["max_time_s"]
        shown = ", ".join(
            f"`{a['label']}` {100 * a['wait_share_mean']:.1f}% of the worker time over {a['barriers_mean']:.0f} "
            f"barriers, {a['wait_share_mean'] * worker_s / a['barriers_mean']:.2f} worker-seconds each"
            for a in counted
        )
        out.append(ex.fill_page(PAGE["barrier_waits"], run_s=f"{results['max_time_s']:g}", shown=shown))
    quiet = {r["label"]: r for r in results.get("jitter_0") or []}
    calm = [quiet[a["label"]] for a in elastic if a["label"] in quiet]
    if calm and results.get("jitter"):
        shown = ", ".join(
            f"`{r['label']}` {100 * r['wait_share']:.1f}% (compute {100 * r['compute_share']:.0f}%)" for r in calm
        )
        asp_calm = quiet.get("asp")
        versus = f", ASP's compute share being {100 * asp_calm['compute_share']:.0f}%" if asp_calm else ""
        out.append(
            ex.fill_page(PAGE["calm"], jitter=f"{results['jitter']:g}", seed=calm[0]["seed"], shown=shown + versus)
        )
    return [text.rstrip("\n") for text in out]
