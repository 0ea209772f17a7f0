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

    def barriers(r: dict[str, Any], folder: Path, _sc: Any) -> dict[str, Any]:
        return {"barriers": len(barrier_times(folder / r["trace"], r["workers"])) if r.get("trace") else None}

    sc, per_seed = exp.run_case(
        case, out, figures=barriers, after=lambda runs, folder, _: report.write_report(runs, folder)
    )
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
    out = ex.case_rows(results, columns(results))
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
    shown = {"metric": curve, "shares": "shares.png", "bsp": "timeline-bsp.png"}
    img = {key: img.get(file, "") for key, file in shown.items()}
    img["superstep"] = _superstep_timeline(results, first, docs / "img") or ""
    path = docs / DOC_NAME
    path.write_text(ex.fill_page(PAGE, page_values(results), img=img, command=command), encoding="utf-8")
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
PAGE = ex.page_blocks(__file__, "paper_elastic.md.in")["page"]
"""The page (Jinja2): its prose, and the paragraphs that depend on the outcome."""


def page_values(results: dict[str, Any]) -> dict[str, Any]:
    """What the page reads besides the results record ``r``: the policies its
    prose names (``bsp``, ``asp``, ``elastic``, the ``best`` ElasticBSP setting:
    the fastest to the target, or the highest throughput when none reached it)
    and the checks its paragraphs turn on."""
    agg = results["aggregate"]
    elastic = ex.by_policy(agg, "elastic-bsp")
    bsp, asp = (next(iter(ex.by_policy(agg, p)), None) for p in (BASELINE, "asp"))
    reached = [a for a in elastic if a["speedup_vs_bsp_mean"] is not None]
    best = max(
        reached or elastic, key=lambda a: a["speedup_vs_bsp_mean" if reached else "samples_per_s_mean"], default=None
    )
    thr = ex.ratio(best["samples_per_s_mean"], bsp["samples_per_s_mean"]) if best and bsp else None
    quiet = {r["label"]: r for r in results.get("jitter_0") or []}
    return ex.case_values(results) | {
        "r": results,
        "setup": results.get("setup") or {},
        "setup_table": setup_markdown([results["setup"]] if results.get("setup") else []),
        "table": ex.aggregate_table(agg, columns(results)),
        "paper_speedup": PAPER_SPEEDUP,
        "bsp": bsp,
        "asp": asp,
        "elastic": elastic,
        "others": ex.by_policy(agg, BASELINE) + ex.by_policy(agg, "ssp", "asp", "dssp"),
        "best": best,
        "thr": thr,
        "reached": bool(reached),
        "beats": bool(reached) and best["speedup_vs_bsp_mean"] > 1,
        "stale_costs": bool(reached) and best["speedup_vs_bsp_mean"] < 0.95 * thr,
        "counted": [a for a in elastic if a["barriers_mean"]],
        "calm": [quiet[a["label"]] for a in elastic if a["label"] in quiet],
        "asp_calm": quiet.get("asp"),
    }
