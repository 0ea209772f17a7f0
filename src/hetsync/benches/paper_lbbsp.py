"""``hetsync bench paper-lbbsp``: LB-BSP's comparison, in the simulator (and optionally for real).

Chen, Weng, Wang, Li, Li, "Semi-dynamic load balancing: efficient distributed
learning in non-dedicated environments" (SoCC 2020, arXiv 1806.02508) re-size
each worker's batch at every BSP barrier so that all finish together, the
global batch fixed, and report training up to 54% faster than BSP on EC2 with
background load (CPU) and mixed GPU types (GPU). The experiment: every policy
of ``lbbsp-cpu`` and ``lbbsp-gpu`` for several seeds, paired speed-ups over
BSP, how the batches moved (from the traces), the BSP family once more without
step-time noise; ``--runtime``: BSP and LB-BSP as real processes with a
background load. The page ``results-lbbsp.md`` (``paper_lbbsp.md.in``) and its
plots ``img/lbbsp-*.png`` go under ``--out`` (and in ``--docs DIR``).
"""

from __future__ import annotations

import argparse
import re
import time
from functools import partial
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches.common import Row
from hetsync.benches.plots import compute_records, scenario_batches
from hetsync.errors import BadInput
from hetsync.runner import write_json_atomic
from hetsync.scenario import Scenario, load_scenario, scenario_from_dict
from hetsync.summary import read_summary

NAME = "paper-lbbsp"

BASELINE = "bsp"
BALANCING = ("lb-bsp", "lb-bsp-static")
DOC_NAME = "results-lbbsp.md"
RUNTIME_WORKERS = 4
SCENARIOS = ("lbbsp-cpu", "lbbsp-gpu")
OPTIONS = ex.Options(
    bench=NAME, page=DOC_NAME, scenarios=SCENARIOS, seeds="0,1,2", set_example="max_time_s=3", diagnosis=True
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    OPTIONS.add_arguments(p)
    real = f"also run bsp and lb-bsp as real processes ({RUNTIME_WORKERS} workers, about a minute)"
    p.add_argument("--runtime", action="store_true", help=real)
    p.add_argument("--runtime-time-s", type=float, default=12.0, help="length of each real run (default: %(default)s)")


def run(args: argparse.Namespace) -> list[Row]:
    exp = OPTIONS.experiment(args, baseline=BASELINE)
    if args.runtime_time_s <= 0:
        raise BadInput(f"--runtime-time-s must be > 0, got {args.runtime_time_s}")
    exp.validate()  # bad names and keys fail before any run
    command = ex.command_line(NAME, args, add_arguments)
    out = Path(args.out)
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "scenarios": [bench_scenario(exp, case, out, diagnosis=not args.no_diagnosis) for case in exp.cases],
        "seeds": list(exp.seeds),
        "runtime": run_runtime(out / "runtime", args.runtime_time_s) if args.runtime else None,
        "runtime_folder": str(out / "runtime") if args.runtime else None,
    }
    results["host_time_s"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    ex.publish(args, lambda where: write_doc(results, where, command))
    return rows(results)


# ------------------------------------------------------------------ running
def bench_scenario(exp: ex.Experiment, case: ex.Case, out: Path, *, diagnosis: bool = True) -> dict[str, Any]:
    """Every policy the scenario lists, for every seed; per-seed runs and aggregates."""
    sc, per_seed = exp.run_case(
        case, out, figures=_batches, after=lambda runs, folder, _: report.write_report(runs, folder)
    )
    folder = out / case.key
    quiet = [_lite(r) for r in exp.calm_runs(case, folder / "jitter-0", (BASELINE, *BALANCING))] if diagnosis else []
    load = sc.cluster.background_load
    aggregates = [_aggregate(label, per_seed) for label in ex.labels_of(per_seed)]
    return ex.case_record(sc, per_seed, aggregates=aggregates, keep=_lite, calm=quiet) | {
        "global_batch": sc.cluster.workers * sc.job.batch_size,
        "loaded_workers": list(load.workers) if load is not None else [],
        "folder": str(folder),
        "overrides": dict(exp.overrides),
    }


def _batches(r: dict[str, Any], folder: Path, sc: Scenario) -> dict[str, Any]:
    """A batch-sizing run's batch statistics (:func:`experiment.batch_stats`); None for the others."""
    return {
        "batches": ex.batch_stats(folder / r["trace"], sc.cluster.background_load) if r["policy"] in BALANCING else None
    }


KEPT = (
    *("label", "policy", "seed", "time_to_target_s", "final_metric", "compute_share", "comm_share", "wait_share"),
    *("samples_per_s", "steps", "updates", "wall_time_s", "host_time_s", "trace", "batches"),
)
"""The figures of a run that ``results.json`` keeps."""
_lite = partial(ex.lite, keys=KEPT)


def _aggregate(label: str, per_seed: ex.RunsBySeed) -> dict[str, Any]:
    batches = [r["batches"] for r in ex.by_label(per_seed, label) if r.get("batches")]
    means = {f"{k}_mean": k for k in ("compute_share", "wait_share", "samples_per_s")}
    ratios = {"throughput_vs_bsp": "samples_per_s"}  # the mean of the seeds' ratios to BSP's
    moves = ex.means(batches, {k: k for k in ("move_early", "move_later", "loaded_batch_on", "loaded_batch_off")})
    return ex.aggregate(label, per_seed, baseline=BASELINE, keys=means, ratios=ratios) | moves


# ------------------------------------------------------------------ runtime
RUNTIME_SCENARIO = {
    "name": "lbbsp-runtime",
    "description": "4 real workers on a wide MLP (synthetic data); a background load (3x) switches on and off "
    "on workers 1 and 3",
    "workers": RUNTIME_WORKERS,
    # a wide MLP: its step time grows with the batch (the digits models are mostly fixed cost per step)
    "workload": "synthetic",
    "workload_args": {"n_features": 512, "hidden": 1024, "n_samples": 4000},
    "batch_size": 64,
    "lr": 0.1,
    "target_accuracy": 0.9,
    "max_time_s": 12.0,
    "eval_every_s": 0.5,
    "seed": 0,
    "policies": ["bsp", "lb-bsp"],
    # every step sleeps 3x its measured compute time: sleeps, not the two shared cores, set the pace
    "slowdown": 4.0,
    "background_load": {"workers": [1, 3], "period_s": 6.0, "on_s": 3.0, "factor": 3.0, "random_phase": True},
}


def run_runtime(out: Path, max_time_s: float) -> dict[str, Any]:
    """BSP and LB-BSP as real processes; the batches the workers computed, from the traces."""
    raw = {**RUNTIME_SCENARIO, "max_time_s": max_time_s}
    t0 = time.perf_counter()
    runs = ex.run_real(raw, out, timeout_s=60 + 4 * max_time_s, figures=_runtime_figures)
    kept = (*KEPT, "rounds_per_s", "distinct_batches")
    return {"host_time_s": time.perf_counter() - t0, "scenario": raw, "runs": [ex.lite(r, kept) for r in runs]}


def _runtime_figures(r: dict[str, Any], folder: Path, sc: Scenario) -> dict[str, Any]:
    """A real run's batch statistics, rounds per second and the batch sizes its workers computed."""
    return {
        "batches": ex.batch_stats(folder / r["trace"], sc.cluster.background_load),
        "rounds_per_s": r["updates"] / r["wall_time_s"] if r["wall_time_s"] else None,
        "distinct_batches": sorted({rec["batch"] for rec in compute_records(folder / r["trace"])}),
    }


# --------------------------------------------------------------------- rows
def columns(res: dict[str, Any]) -> list[ex.Col]:
    """Per policy (a line of the page's table and of the printed one): time to
    target, speed-up over BSP, samples/s and its ratio to BSP's, final metric,
    shares (%); on the page also the seeds that reached the target and how much the batches moved."""
    col = ex.case_columns(res, baseline=BASELINE)

    def thr(a: dict[str, Any]) -> str:
        ratio = a["throughput_vs_bsp"] is not None and a["policy"] != BASELINE
        return f"{a['samples_per_s_mean']:,.0f}" + (f" ({a['throughput_vs_bsp']:.2f}×)" if ratio else "")

    def moves(a: dict[str, Any]) -> str:
        return "—" if a["move_early"] is None else f"{a['move_early']:.1f} → {ex.fmt_sig(a['move_later'], 2)}"

    return [
        ex.Col("policy", lambda a: f"`{short_label(a['label'])}`"),
        *(col[name] for name in ("tta", "reached")),
        col["speedup"]._replace(header="speed-up vs BSP [range]"),
        ex.Col("samples/s (× BSP)", thr, "samples/s", "samples_per_s_mean"),
        ex.Col(None, None, "samples/s ÷ bsp's", lambda a: 1.0 if a["policy"] == BASELINE else a["throughput_vs_bsp"]),
        *(col[name] for name in ("final", "compute", "wait")),
        ex.Col("batch moves/round, rounds 1–10 → later", moves),
    ]


def rows(results: dict[str, Any]) -> list[Row]:
    """Per scenario a table (:func:`columns`); the diagnosis and the runtime runs as tables of their own."""
    out: list[Row] = []
    for res in results["scenarios"]:
        out += ex.case_rows(res, columns(res), short_label, scenario=res["scenario"])
    rt = results.get("runtime")
    if rt:
        where = f"runtime: {RUNTIME_WORKERS} real workers, gloo, {rt['scenario']['max_time_s']:g} s"
        out += ex.table_rows(rt["runs"], RUNTIME_COLUMNS, setting=where)
    out.append({"metric": "run time, all runs", "value": results["host_time_s"], "unit": "s", "setting": ""})
    return out


# --------------------------------------------------------------------- plots
def short_label(label: str) -> str:
    """A run label with a long ``max_batch=a/b/c/...`` list shown as ``max_batch=caps``."""
    return re.sub(r"max_batch=[0-9/]{12,}", "max_batch=caps", label)


def _plots(results: dict[str, Any], img: Path) -> dict[str, str]:
    """The page's plots by key: per scenario its target metric against time on the
    first seed, redrawn with the table's short labels (``<scenario>:curve``; the
    shares are in the table), the batch sizes of the batch-sizing runs
    (``<scenario>:batches``); the batches of the real LB-BSP run (``runtime:batches``)."""
    made: dict[str, str] = {}
    for res in results["scenarios"]:
        first, name = res["seeds"][0], res["scenario"]
        folder = Path(res["folder"]) / f"seed-{first}"
        if (folder / "summary.json").is_file():
            made[f"{name}:curve"] = ex.img_name("lbbsp", name, report.metric_plot_name([res]))
            runs = read_summary(folder / "summary.json")
            report.plot_metric([{**r, "label": short_label(r["label"])} for r in runs], img / made[f"{name}:curve"])
        sc = load_scenario(name, **{**res["overrides"], "seed": first})
        balancing = [r for r in res["runs"][str(first)] if r["policy"] in BALANCING and r.get("trace")]
        if sc.cluster.background_load is not None:  # the predicting lb-bsp, then the static one
            order = [r for r in balancing if r["policy"] == "lb-bsp" and "predictor=" not in r["label"]]
            order += [r for r in balancing if r["policy"] == "lb-bsp-static"]
        else:  # lb-bsp's GPU variant first
            order = sorted(balancing, key=lambda r: (r["policy"] != "lb-bsp", "variant=gpu" not in r["label"]))
        if order:
            made[f"{name}:batches"] = ex.img_name("lbbsp", name, "batches")
            panels = [(f"{short_label(r['label'])} · seed {first}", folder / r["trace"]) for r in order]
            scenario_batches(panels, img / made[f"{name}:batches"], sc)
    rt, folder = results.get("runtime"), Path(results.get("runtime_folder") or ".")
    panels = [
        (f"{r['label']} on {RUNTIME_WORKERS} real worker processes (gloo)", folder / r["trace"])
        for r in (rt["runs"] if rt else [])
        if r["policy"] == "lb-bsp" and (folder / r["trace"]).is_file()
    ]
    if rt and panels:
        made["runtime:batches"] = "lbbsp-runtime-batches.png"
        title = "runtime: the batch each worker really computed (loaded workers in colour)"
        scenario_batches(
            panels, img / made["runtime:batches"], scenario_from_dict(rt["scenario"]), title=title, virtual=False
        )
    return {key: f"img/{name}" for key, name in made.items()}


# ---------------------------------------------------------------------- doc
def write_doc(results: dict[str, Any], docs: Path, command: str) -> Path:
    plots = _plots(results, docs / "img")
    path = docs / DOC_NAME
    path.write_text(ex.fill_page(PAGE, page_values(results, plots), command=command), encoding="utf-8")
    return path


PAGE = ex.page_blocks(__file__, "paper_lbbsp.md.in")["page"]
"""The page (Jinja2): a section per scenario, the claims, the runtime section,
the paragraphs that depend on the outcome."""


def page_values(results: dict[str, Any], plots: dict[str, str]) -> dict[str, Any]:
    """What the page reads besides the results record ``r``: a view per scenario
    (:func:`_scenario_view`) and the claims' rows that have figures."""
    views = [_scenario_view(res, plots) for res in results["scenarios"]]
    rt = results.get("runtime")
    speed = [
        (s, a)
        for s in views
        for a in s["lbs"]
        if a["speedup_mean"] is not None or (a["throughput_vs_bsp"] is not None and s["bsp"] is not None)
    ]
    return {
        **{"r": results, "plots": plots, "short": short_label, "scenarios": views, "speed_claims": speed},
        "static_claims": [s for s in views if s["fastest"] is not None and s["static_thr"] is not None],
        "runtime_workers": RUNTIME_WORKERS,
        "runtime_table": "\n".join(ex.aggregate_table(rt["runs"], RUNTIME_COLUMNS)) if rt else "",
    }


def _scenario_view(res: dict[str, Any], plots: dict[str, str]) -> dict[str, Any]:
    """One scenario's section: the policies the prose names (``best``: the LB-BSP
    setting with the highest throughput; ``rls``, ``ewma``: the two predictors;
    ``gpu``, ``cpu``: the two variants) and the checks it turns on."""
    bsp, static, asp = (next(iter(ex.by_policy(res["aggregate"], p)), None) for p in (BASELINE, BALANCING[1], "asp"))
    lbs = ex.by_policy(res["aggregate"], "lb-bsp")
    best = max(lbs, key=lambda a: a["throughput_vs_bsp"] or 0.0, default=None)
    parts = ("lb-bsp(variant=cpu)", "predictor=ewma", "variant=gpu", "variant=cpu")  # a label ends at its ")"
    rls, ewma, gpu, cpu = (next((a for a in lbs if part in a["label"]), None) for part in parts)
    return ex.case_values(res) | {
        **{"res": res, "bsp": bsp, "asp": asp, "lbs": lbs, "best": best},
        **{"rls": rls, "ewma": ewma, "gpu": gpu, "cpu": cpu, "predictors": _rls_vs_ewma(rls, ewma)},
        "table": "\n".join(ex.aggregate_table(res["aggregate"], columns(res))),
        "fastest": ex.fastest(lbs, "throughput_vs_bsp", largest=True),
        "static_thr": static and static["throughput_vs_bsp"],  # None: no static run, or no figure
        "calm": next((r for r in res["jitter_0"] if best and r["label"] == best["label"]), None),
        "asp_case": _asp_case(res, asp, best, bsp),
    }


def _rls_vs_ewma(rls: dict[str, Any] | None, ewma: dict[str, Any] | None) -> str | None:
    """``better``/``same``/``worse``: the load-aware regression's throughput against
    the moving average's (2% either way is the same); None without both."""
    if rls is None or ewma is None or not rls["throughput_vs_bsp"] or not ewma["throughput_vs_bsp"]:
        return None
    gain = rls["throughput_vs_bsp"] / ewma["throughput_vs_bsp"]
    return "better" if gain > 1.02 else "same" if gain >= 0.98 else "worse"


def _asp_case(res: dict[str, Any], asp: Any, best: Any, bsp: Any) -> str | None:
    """``faster``/``slower``: ASP's time to target against the best LB-BSP
    setting's; ``not_reached``: ASP did not reach it and ended worse than BSP."""
    if asp is None or best is None or bsp is None:
        return None
    if asp["tta_mean_s"] is not None and best["tta_mean_s"] is not None:
        return "faster" if asp["tta_mean_s"] < best["tta_mean_s"] else "slower"
    mine, bsps = asp["final_metric_mean"], bsp["final_metric_mean"]
    worse = bsps is not None and (mine > bsps if res.get("target_direction") == "min" else mine < bsps)
    return "not_reached" if asp["tta_mean_s"] is None and mine is not None and worse else None


def _on_off(r: dict[str, Any]) -> str:
    on, off = r["batches"].get("loaded_batch_on"), r["batches"].get("loaded_batch_off")
    return "—" if on is None or off is None else f"{on:.1f} / {off:.1f}"


def _batch(state: str) -> Any:
    return lambda r: r["batches"].get(f"loaded_batch_{state}")


def _distinct(r: dict[str, Any]) -> str:
    sizes = r["distinct_batches"]
    return ", ".join(map(str, sizes)) if len(sizes) <= 8 else f"{len(sizes)} sizes, {sizes[0]}–{sizes[-1]}"


RUNTIME_COLUMNS = (
    ex.Col("policy", lambda r: f"`{r['label']}`"),
    ex.key_col("rounds/s", "rounds_per_s", ex.fmt_sig, "rounds/s"),
    ex.key_col("compute", "compute_share", ex.pct_cell),
    ex.key_col("wait", "wait_share", ex.pct_cell),
    ex.Col("loaded workers' mean batch, load on / off", _on_off),
    *(ex.Col(None, None, f"loaded workers' batch, load {x}", _batch(x), "samples") for x in ("on", "off")),
    ex.Col("distinct batch sizes used", _distinct),
)
"""The runtime runs: per policy rounds/s, shares, the loaded workers' mean
batch with the load on and off, the batch sizes the workers used."""
