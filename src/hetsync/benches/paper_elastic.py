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
without step-time noise.

The two readings of a superstep (issue 28, item 2; :mod:`hetsync.policies.elastic_bsp`):
BSP and ElasticBSP R = 15 and 60, each ``within=async`` (gradients applied on
arrival, as ASP) and ``within=local`` (local steps, deltas aggregated at the
barrier weighted by samples), on ``elastic-4`` and ``elastic-4-signal``
(``--readings``), same seeds. Which reading reproduces the paper's claims is
judged by :func:`claims` with the criteria declared there before any run.

Runs go under ``--out`` (``seed-<s>/``, ``jitter-0/``,
``readings/<scenario>/seed-<s>/``, ``results.json``); the page
``results-elastic.md`` (``paper_elastic.md.in``) and the first seed's plots
``img/elastic-*.png`` under ``--out``, and in ``--docs DIR`` when given.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import replace
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
    *("host_time_s", "trace", "milestones_s"),
)
READINGS = ("elastic-4", "elastic-4-signal")
"""Scenarios of the two readings of a superstep, as shipped (no override)."""
READING_POLICIES = (
    "bsp",
    "elastic-bsp:R=15",
    "elastic-bsp:R=15:within=local",
    "elastic-bsp:R=60",
    "elastic-bsp:R=60:within=local",
)
"""BSP and both readings at the default look-ahead and at R = 60, declared before any run."""
DEFAULTS = {
    "scenario": SCENARIO,
    "policies": ",".join(POLICIES),
    "seeds": SEEDS,
    "no_diagnosis": False,
    "readings": ",".join(READINGS),
}
"""The options' defaults; the page's command names those that differ."""
MEANS = {
    "best_metric_mean": "best_metric",
    "compute_share_mean": "compute_share",
    "comm_share_mean": "comm_share",
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
    p.add_argument(
        "--readings",
        default=DEFAULTS["readings"],
        help=f"scenarios on which to run the two readings of a superstep ({', '.join(READING_POLICIES)}); "
        "'none' for none (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> list[Row]:
    exp = ex.Experiment(
        cases=(ex.Case(key="", scenario=args.scenario),),
        policies=tuple(split_list(args.policies, "--policies")),
        seeds=tuple(parse_seeds(args.seeds)),
        overrides=ex.overrides_of(args),
        baseline=BASELINE,
    )
    readings = [] if args.readings.strip().lower() == "none" else split_list(args.readings, "--readings")
    cases = tuple(ex.Case(key=f"readings/{Path(n).stem}", scenario=n) for n in readings)
    reading_exp = replace(exp, cases=cases, policies=READING_POLICIES) if cases else None
    command = ex.command_line(NAME, args, list(DEFAULTS.items()))
    results = bench_paper_elastic(exp, Path(args.out), diagnosis=not args.no_diagnosis, readings=reading_exp)
    ex.publish(args, lambda where: write_doc(results, where, Path(args.out), command))
    return rows(results)


# ------------------------------------------------------------------ running
def bench_paper_elastic(
    exp: ex.Experiment, out: Path, *, diagnosis: bool = True, readings: ex.Experiment | None = None
) -> dict[str, Any]:
    """Run the experiment, then the two readings' (``readings``, if any); per-seed
    runs, aggregates, the diagnosis and the readings' records in ``out/results.json``."""
    t0 = time.perf_counter()
    case = exp.cases[0]
    if readings is not None:
        readings.validate()  # every scenario before the first run
    sc, per_seed = exp.run_case(case, out, figures=_barriers, after=_draw)
    quiet = []
    if diagnosis and any(spec.startswith("elastic-bsp") for spec in exp.specs(sc)):
        quiet = [_lite(r) for r in exp.calm_runs(case, out / "jitter-0", DIAGNOSED)]
    aggregates = [
        ex.aggregate(label, per_seed, baseline=BASELINE, keys=MEANS, speedup="speedup_vs_bsp")
        for label in ex.labels_of(per_seed)
    ]
    results = ex.case_record(sc, per_seed, aggregates=aggregates, keep=_lite, calm=quiet)
    results["slowdown_range"] = [min(sc.cluster.slowdown), max(sc.cluster.slowdown)] if sc.cluster.slowdown else None
    results["readings"] = [] if readings is None else [_reading(readings, c, out) for c in readings.cases]
    results["host_time_s"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    return results


def _barriers(r: dict[str, Any], folder: Path, _sc: Any) -> dict[str, Any]:
    return {"barriers": len(barrier_times(folder / r["trace"], r["workers"])) if r.get("trace") else None}


def _draw(runs: list[dict[str, Any]], folder: Path, _sc: Any) -> None:
    report.write_report(runs, folder)


def _reading_figures(r: dict[str, Any], folder: Path, sc: Any) -> dict[str, Any]:
    """The barriers, and under a step-decay schedule the instants at which each
    worker started its step at each milestone (``milestones_s``: one list per
    milestone, None where a worker never got there). Those are the instants its
    rate fell where the schedule's clock is the worker's step count: BSP's
    rounds (the global step) and the local reading's local steps; the async
    reading's rate follows the server's global step instead (None here)."""
    figures = _barriers(r, folder, sc)
    clocked = r["policy"] == BASELINE or within_of(r["label"]) == "local"
    if sc.job.schedule.name != "step" or not clocked or not r.get("trace"):
        return figures | {"milestones_s": None}
    starts: dict[tuple[int, int], float] = {}
    wanted = {int(m) for m in sc.job.schedule.milestones}
    for rec in iter_records(folder / r["trace"], kinds={"compute"}):
        if rec["step"] in wanted:
            starts.setdefault((rec["w"], rec["step"]), rec["t"])
    by_milestone = [[starts.get((w, int(m))) for w in range(sc.cluster.workers)] for m in sc.job.schedule.milestones]
    return figures | {"milestones_s": by_milestone}


def _reading(exp: ex.Experiment, case: ex.Case, out: Path) -> dict[str, Any]:
    """One scenario of the two readings: its case record, each aggregate with
    its reading (``within``: None for BSP) and mean throughput relative to BSP's."""
    sc, per_seed = exp.run_case(case, out, figures=_reading_figures, after=_draw)
    aggregates = [
        ex.aggregate(
            label,
            per_seed,
            baseline=BASELINE,
            keys=MEANS,
            speedup="speedup_vs_bsp",
            ratios={"thr_vs_bsp": "samples_per_s"},
        )
        | {"within": within_of(label)}
        for label in ex.labels_of(per_seed)
    ]
    record = ex.case_record(sc, per_seed, aggregates=aggregates, keep=_lite, calm=[]) | {"case": case.key}
    record["milestones"] = list(sc.job.schedule.milestones) if sc.job.schedule.name == "step" else []
    bsp = next((a for a in aggregates if a["policy"] == BASELINE), None)
    for a in aggregates:
        a |= claims(a, bsp, maximize=record["target_direction"] != "min")
    return record


def within_of(label: str) -> str | None:
    """The reading an ElasticBSP label names (``async`` when it names none); None for another policy."""
    if not label.startswith("elastic-bsp"):
        return None
    return "local" if "within=local" in label else "async"


def claims(a: dict[str, Any], bsp: dict[str, Any] | None, *, maximize: bool = True) -> dict[str, bool | None]:
    """The paper's two claims, judged per policy and scenario against BSP over
    the same seeds (criteria declared before any run):

    - ``faster``: reaches the target on every seed BSP reaches it on, and its
      mean paired speed-up over BSP is above 1 (or, where no seed pairs it
      with BSP, it reached the target on more seeds);
    - ``accurate``: its mean final metric is at least BSP's mean minus BSP's
      standard deviation over the seeds (not measurably below BSP's; for a
      metric to minimize, at most BSP's mean plus its sd).

    None for BSP itself, or when BSP did not run."""
    if bsp is None or a["policy"] == BASELINE:
        return {"faster": None, "accurate": None}
    speedup = a["speedup_vs_bsp_mean"]
    ahead = speedup > 1 if speedup is not None else a["reached"] > bsp["reached"]  # (BSP never reached it)
    faster = a["reached"] >= bsp["reached"] and ahead
    mean, sd = bsp["final_metric_mean"], bsp["final_metric_sd"]
    accurate = a["final_metric_mean"] >= mean - sd if maximize else a["final_metric_mean"] <= mean + sd
    return {"faster": faster, "accurate": accurate}


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


def reading_columns(res: dict[str, Any]) -> list[ex.Col]:
    """Per policy of a readings scenario: the reading, time to target, speed-up
    over BSP, final metric, throughput (mean [range], and its paired ratio to
    BSP's), shares, barriers and the two claims (:func:`claims`)."""
    col = ex.case_columns(res, baseline=BASELINE, speedup="speedup_vs_bsp")

    def thr(a: dict[str, Any]) -> str:
        rates = [r["samples_per_s"] for r in ex.seed_runs(res, a["label"])]
        return f"{a['samples_per_s_mean']:.0f}" + (f" [{ex.fmt_span(rates, '.0f')}]" if len(rates) > 1 else "")

    def yes(key: str) -> Any:
        return lambda a: "—" if a[key] is None else "yes" if a[key] else "**no**"

    return [
        ex.Col("policy", lambda a: f"`{a['label']}`"),
        ex.Col("within", lambda a: a["within"] or "—"),
        *(col[name] for name in ("tta", "reached", "speedup", "final")),
        ex.Col("samples/s, mean [range]", thr, "samples/s", "samples_per_s_mean", "samples/s"),
        ex.Col("samples/s vs BSP", lambda a: ex.fmt_x(a["thr_vs_bsp"])),
        *(col[name] for name in ("compute", "wait")),
        ex.Col("barriers", lambda a: "—" if a["barriers_mean"] is None else f"{a['barriers_mean']:.0f}"),
        ex.Col("faster than BSP", yes("faster")),
        ex.Col("accuracy ≥ BSP", yes("accurate")),
    ]


def rows(results: dict[str, Any]) -> list[Row]:
    """The table's rows (:func:`columns`); the diagnosis runs as a second table;
    then one table per scenario of the two readings."""
    where = seeds_setting(results["scenario"], results["seeds"])
    out = ex.case_rows(results, columns(results))
    for res in results.get("readings") or []:
        setting = f"two readings of a superstep: {seeds_setting(res['scenario'], res['seeds'])}"
        out += ex.table_rows(res["aggregate"], reading_columns(res), setting=setting)
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
    for res in results.get("readings") or []:
        seed = out / res["case"] / f"seed-{res['seeds'][0]}"
        name = f"{report.metric_plot_name([res])}.png"
        copied = ex.copy_plots(seed, docs / "img", {name: f"{IMG_PREFIX}-readings-{Path(res['case']).name}-{name}"})
        img[f"readings-{res['case']}"] = copied.get(name, "")
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
        "readings": [reading_values(res) for res in results.get("readings") or []],
        "reading_policies": READING_POLICIES,
    }


def reading_values(res: dict[str, Any]) -> dict[str, Any]:
    """What the page's section on the two readings reads of one scenario: its
    record ``res``, table, BSP's aggregate, and per reading (``async``,
    ``local``) its settings' aggregates and whether all / some of them meet
    both claims (:func:`claims`)."""
    agg = res["aggregate"]
    verdicts = {}
    for within in ("async", "local"):
        mine = [a for a in agg if a["within"] == within]
        met = [a for a in mine if a["faster"] and a["accurate"]]
        verdicts[within] = {"aggs": mine, "all": bool(mine) and len(met) == len(mine), "some": bool(met)}
    for v in verdicts.values():
        v["fast"] = bool(v["aggs"]) and all(a["faster"] for a in v["aggs"])
        v["accurate"] = bool(v["aggs"]) and all(a["accurate"] for a in v["aggs"])
    pairs = []  # (async, local) at the same look-ahead
    for a in verdicts["async"]["aggs"]:
        local = next((b for b in verdicts["local"]["aggs"] if b["label"] == a["label"][:-1] + ",within=local)"), None)
        if local is not None:
            pairs.append((a, local))
    first = str(res["seeds"][0])
    schedule = {}  # seed 0: when BSP's and each local run's workers reached each milestone
    for r in res["runs"][first]:
        if r.get("milestones_s"):
            schedule[r["label"]] = r["milestones_s"]
    return {
        "res": res,
        "case": ex.case_values(res),
        "table": "\n".join(ex.aggregate_table(agg, reading_columns(res))),
        "bsp": next(iter(ex.by_policy(agg, BASELINE)), None),
        "by": verdicts,
        "pairs": pairs,
        "local_ahead": bool(pairs) and all(_at_least(loc, asy) for asy, loc in pairs),
        "schedule": schedule,
    }


def _at_least(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``a`` is at least as fast to the target as ``b`` (a mean paired speed-up
    at least ``b``'s, or ``b`` never reached it) and its mean final metric is no
    lower than ``b``'s minus ``b``'s sd over the seeds (accuracy-like metrics)."""
    fast = b["speedup_vs_bsp_mean"] is None or (
        a["speedup_vs_bsp_mean"] is not None and a["speedup_vs_bsp_mean"] >= b["speedup_vs_bsp_mean"]
    )
    return (
        fast
        and a["reached"] >= b["reached"]
        and a["final_metric_mean"] >= b["final_metric_mean"] - b["final_metric_sd"]
    )
