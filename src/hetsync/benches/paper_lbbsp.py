"""``hetsync bench paper-lbbsp``: LB-BSP's comparison, in the simulator (and optionally for real).

Chen, Weng, Wang, Li, Li, "Semi-dynamic load balancing: efficient
distributed learning in non-dedicated environments" (SoCC 2020, arXiv
1806.02508) re-size each worker's batch at every BSP barrier so that all
finish together, the global batch staying fixed; they report distributed
training accelerated by up to 54% over BSP on EC2 clusters with background
load from a stress tool (CPU) and with mixed GPU types (GPU).

The experiment (:mod:`hetsync.benches.experiment`): every policy of
``lbbsp-cpu`` (16 CPU workers, a stress tool switching on and off on 6 of
them) and ``lbbsp-gpu`` (8 GPUs of three generations, flat-then-linear step
curves, memory caps) for several seeds, BSP the baseline of the paired
speed-ups; for the batch-sizing policies also how much the batches move and
the loaded workers' batches while loaded and not (from the traces). The
diagnosis reruns the BSP family on the first seed without step-time noise.
``--runtime`` also runs BSP and LB-BSP as real processes (4 workers and a
server) with a background load switching on and off, and reports the batches
the workers really computed. The page ``results-lbbsp.md``
(``paper_lbbsp.md.in``) and its plots ``img/lbbsp-*.png`` go under ``--out``,
and in ``--docs DIR`` when given.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches import experiment as ex
from hetsync.benches.common import (
    Row,
    mean_or_none,
    seeds_setting,
    setup_markdown,
)
from hetsync.benches.plots import PALETTE, compute_records, plot_batches
from hetsync.errors import BadInput
from hetsync.runner import write_json_atomic
from hetsync.scenario import Scenario, load_scenario, scenario_from_dict

NAME = "paper-lbbsp"

BASELINE = "bsp"
PAPER_SPEEDUP = 1.54  # "accelerating distributed training by up to 54%"
BALANCING = ("lb-bsp", "lb-bsp-static")
DOC_NAME = "results-lbbsp.md"
IMG_PREFIX = "lbbsp"
RUNTIME_WORKERS = 4
OPTIONS = ex.Options(
    bench=NAME,
    page=DOC_NAME,
    scenarios=("lbbsp-cpu", "lbbsp-gpu"),
    seeds="0,1,2",
    set_example="max_time_s=3",
    diagnosis=True,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    OPTIONS.add_arguments(p)
    p.add_argument(
        "--runtime",
        action="store_true",
        help=f"also run bsp and lb-bsp as real processes ({RUNTIME_WORKERS} workers, about a minute)",
    )
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
    ex.publish(args, lambda where: write_doc(results, where, out, command))
    return rows(results)


# ------------------------------------------------------------------ running
def bench_scenario(exp: ex.Experiment, case: ex.Case, out: Path, *, diagnosis: bool = True) -> dict[str, Any]:
    """Every policy the scenario lists, for every seed; per-seed runs and aggregates."""
    sc, per_seed = exp.run_case(
        case, out, figures=_batches, after=lambda runs, folder, _: report.write_report(runs, folder)
    )
    folder = out / case.key
    quiet = [_lite(r) for r in exp.calm_runs(case, folder / "jitter-0", (BASELINE, *BALANCING))] if diagnosis else []
    load = sc.background_load
    aggregates = [_aggregate(label, per_seed) for label in ex.labels_of(per_seed)]
    return ex.case_record(sc, per_seed, aggregates=aggregates, keep=_lite, calm=quiet) | {
        "global_batch": sc.workers * sc.batch_size,
        "loaded_workers": list(load.workers) if load is not None else [],
        "folder": str(folder),
        "overrides": dict(exp.overrides),
    }


def _batches(r: dict[str, Any], folder: Path, sc: Scenario) -> dict[str, Any]:
    """A batch-sizing run's batch statistics (:func:`experiment.batch_stats`); None for the others."""
    return {"batches": ex.batch_stats(folder / r["trace"], sc.background_load) if r["policy"] in BALANCING else None}


KEPT = (
    *("label", "policy", "seed", "time_to_target_s", "final_metric", "compute_share", "comm_share", "wait_share"),
    *("samples_per_s", "steps", "updates", "wall_time_s", "host_time_s", "trace", "batches"),
)
"""The figures of a run that ``results.json`` keeps."""


def _lite(r: dict[str, Any]) -> dict[str, Any]:
    return ex.lite(r, KEPT)


def _aggregate(label: str, per_seed: ex.RunsBySeed) -> dict[str, Any]:
    rates = ex.paired_ratios(
        per_seed, label, ex.baseline_value(BASELINE, "samples_per_s"), key="samples_per_s", inverse=True
    )
    batches = [r["batches"] for r in ex.by_label(per_seed, label) if r.get("batches")]
    means = {f"{k}_mean": k for k in ("compute_share", "wait_share", "samples_per_s")}
    return {
        **ex.aggregate(label, per_seed, baseline=BASELINE, keys=means),
        "throughput_vs_bsp": mean_or_none([x for x in rates if x is not None]),
        **ex.means(batches, {k: k for k in ("move_early", "move_later", "loaded_batch_on", "loaded_batch_off")}),
    }


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
        "batches": ex.batch_stats(folder / r["trace"], sc.background_load),
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
        where = seeds_setting(res["scenario"], res["seeds"])
        out += ex.table_rows(
            res["aggregate"],
            columns(res),
            policy=lambda a: short_label(a["label"]),
            setting=where,
            scenario=res["scenario"],
        )
        out += ex.calm_rows(res, short_label, scenario=res["scenario"])
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


def _img_name(scenario: str, what: str) -> str:
    return f"{IMG_PREFIX}-{scenario.removeprefix(IMG_PREFIX + '-')}-{what}"


def _plots(results: dict[str, Any], img: Path) -> dict[str, str]:
    """Accuracy and share plots of each scenario's first seed, and the batch-size plots."""
    made: dict[str, str] = {}
    for res in results["scenarios"]:
        first = res["seeds"][0]
        folder = Path(res["folder"]) / f"seed-{first}"
        # the target metric against time (accuracy.png, perplexity.png, ...); the shares are in the table
        src = f"{report.metric_plot_name([res])}.png"
        dst = _img_name(res["scenario"], src)
        if (folder / "summary.json").is_file():  # redrawn with the short labels of the table
            runs = json.loads((folder / "summary.json").read_text())
            report.plot_metric([{**r, "label": short_label(r["label"])} for r in runs], img / dst)
            made[f"{res['scenario']}:curve"] = f"img/{dst}"
        elif ex.copy_plots(folder, img, {src: dst}):
            made[f"{res['scenario']}:curve"] = f"img/{dst}"
        sc = load_scenario(res["scenario"], **{**res["overrides"], "seed": first})
        balancing = [r for r in res["runs"][str(first)] if r["policy"] in BALANCING and r.get("trace")]
        if not balancing:
            continue
        name = _img_name(res["scenario"], "batches.png")
        if sc.background_load is not None:
            order = [r for r in balancing if r["policy"] == "lb-bsp" and "predictor=" not in r["label"]]
            order += [r for r in balancing if r["policy"] == "lb-bsp-static"]
            plot_batches(
                [(f"{short_label(r['label'])} · seed {first}", folder / r["trace"]) for r in order],
                img / name,
                title=f"{res['scenario']}: batch size per worker (loaded workers in colour, the others grey)",
                load=sc.background_load,
            )
        else:
            order = sorted(balancing, key=lambda r: (r["policy"] != "lb-bsp", "variant=gpu" not in r["label"]))
            kinds = sorted(set(sc.slowdown))
            kind_color = {s: PALETTE[[1, 4, 0, 2, 3, 5][i % 6]] for i, s in enumerate(kinds)}
            plot_batches(
                [(f"{short_label(r['label'])} · seed {first}", folder / r["trace"]) for r in order],
                img / name,
                title=f"{res['scenario']}: batch size per worker over the first second",
                colors={w: kind_color[s] for w, s in enumerate(sc.slowdown)},
                legend=[("fastest" if s == min(kinds) else f"{s:g}x slower", kind_color[s]) for s in kinds],
                window_s=min(1.0, res["max_time_s"] or 1.0),
            )
        made[f"{res['scenario']}:batches"] = f"img/{name}"
    rt = results.get("runtime")
    folder = Path(results["runtime_folder"]) if results.get("runtime_folder") else None
    if rt and folder is not None:
        load = scenario_from_dict(rt["scenario"]).background_load
        assert load is not None
        panels = [
            (f"{r['label']} on {RUNTIME_WORKERS} real worker processes (gloo)", folder / r["trace"])
            for r in rt["runs"]
            if r["policy"] == "lb-bsp"
        ]
        if panels and panels[0][1].is_file():
            name = f"{IMG_PREFIX}-runtime-batches.png"
            plot_batches(
                panels,
                img / name,
                title="runtime: the batch each worker really computed (loaded workers in colour)",
                load=load,
                virtual=False,
            )
            made["runtime:batches"] = f"img/{name}"
    return made


# ---------------------------------------------------------------------- doc
def write_doc(results: dict[str, Any], docs: Path, out: Path, command: str) -> Path:
    img = docs / "img"
    img.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, img)
    path = docs / DOC_NAME
    path.write_text(ex.fill_page(PAGE, page_values(results, plots), command=command), encoding="utf-8")
    return path


def _policy(res: dict[str, Any], policy: str) -> list[dict[str, Any]]:
    return ex.by_policy(res["aggregate"], policy)


def _better(res: dict[str, Any], a: float, b: float | None) -> bool:
    """Whether value a of the metric is at least as good as b (the target's direction)."""
    if b is None:
        return True
    return a <= b if res.get("target_direction") == "min" else a >= b


PAGE = ex.page_blocks(__file__, "paper_lbbsp.md.in")["page"]
"""The page (Jinja2): a section per scenario, the claims, the runtime section,
the paragraphs that depend on the outcome."""


def page_values(results: dict[str, Any], plots: dict[str, str]) -> dict[str, Any]:
    """What the page reads besides the results record ``r``: a view per scenario
    (:func:`_scenario_view`) and the claims' rows that have figures."""
    views = [_scenario_view(res, plots) for res in results["scenarios"]]
    rt = results.get("runtime")
    return {
        "r": results,
        "plots": plots,
        "short": short_label,
        "scenarios": views,
        "speed_claims": [
            (s, a)
            for s in views
            for a in s["lbs"]
            if a["speedup_mean"] is not None or (a["throughput_vs_bsp"] is not None and s["bsp"] is not None)
        ],
        "static_claims": [s for s in views if s["fastest"] is not None and s["static_thr"] is not None],
        "runtime_workers": RUNTIME_WORKERS,
        "runtime_table": "\n".join(ex.aggregate_table(rt["runs"], RUNTIME_COLUMNS)) if rt else "",
    }


def _scenario_view(res: dict[str, Any], plots: dict[str, str]) -> dict[str, Any]:
    """One scenario's section and analysis: the policies the prose names (``best``:
    the LB-BSP setting with the highest throughput) and the checks it turns on."""
    bsp, static, asp = (next(iter(_policy(res, p)), None) for p in (BASELINE, "lb-bsp-static", "asp"))
    lbs = _policy(res, "lb-bsp")
    best = max(lbs, key=lambda a: a["throughput_vs_bsp"] or 0.0, default=None)
    ewma = next((a for a in lbs if "predictor=ewma" in a["label"]), None)
    rls = next((a for a in lbs if a["label"] == "lb-bsp(variant=cpu)"), None)
    gpu = next((a for a in lbs if "variant=gpu" in a["label"]), None)
    cpu = next((a for a in lbs if "variant=cpu" in a["label"]), None)
    images = [(f"{res['scenario']}:batches", "batch sizes"), (f"{res['scenario']}:curve", "")]
    return ex.case_values(res) | {
        "res": res,
        "setup": "\n".join(setup_markdown([res["setup"]] if res.get("setup") else [])),
        "table": "\n".join(ex.aggregate_table(res["aggregate"], columns(res))),
        "capped": any("max_batch=" in a["label"] for a in res["aggregate"]),
        "loaded": [
            a for a in res["aggregate"] if a["loaded_batch_on"] is not None and a["loaded_batch_off"] is not None
        ]
        if res["loaded_workers"]
        else [],
        "images": [
            (alt or f"{res['target_metric']} vs time, first seed", plots[key]) for key, alt in images if key in plots
        ],
        "bsp": bsp,
        "asp": asp,
        "lbs": lbs,
        "best": best,
        "fastest": max(
            (a for a in lbs if a["throughput_vs_bsp"] is not None), key=lambda a: a["throughput_vs_bsp"], default=None
        ),
        "static_thr": None if static is None else static["throughput_vs_bsp"],
        "calm": next((r for r in res["jitter_0"] if best and r["label"] == best["label"]), None),
        "rls": rls,
        "ewma": ewma,
        "predictors": _rls_vs_ewma(rls, ewma),
        "gpu": gpu,
        "cpu": cpu,
        "gpu_variant": gpu is not None and cpu is not None and not res["loaded_workers"],
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
    if (
        asp["tta_mean_s"] is None
        and asp["final_metric_mean"] is not None
        and not _better(res, asp["final_metric_mean"], bsp["final_metric_mean"])
    ):
        return "not_reached"
    return None


def _loaded_batch(state: str) -> Any:
    return lambda r: r["batches"].get(f"loaded_batch_{state}")


def _on_off(r: dict[str, Any]) -> str:
    on, off = _loaded_batch("on")(r), _loaded_batch("off")(r)
    return "—" if on is None or off is None else f"{on:.1f} / {off:.1f}"


def _distinct(r: dict[str, Any]) -> str:
    sizes = r["distinct_batches"]
    return ", ".join(map(str, sizes)) if len(sizes) <= 8 else f"{len(sizes)} sizes, {sizes[0]}–{sizes[-1]}"


RUNTIME_COLUMNS = (
    ex.Col("policy", lambda r: f"`{r['label']}`"),
    ex.key_col("rounds/s", "rounds_per_s", ex.fmt_sig, "rounds/s"),
    ex.key_col("compute", "compute_share", ex.pct_cell),
    ex.key_col("wait", "wait_share", ex.pct_cell),
    ex.Col(
        "loaded workers' mean batch, load on / off",
        _on_off,
        "loaded workers' batch, load on",
        _loaded_batch("on"),
        "samples",
    ),
    ex.Col(None, None, "loaded workers' batch, load off", _loaded_batch("off"), "samples"),
    ex.Col("distinct batch sizes used", _distinct),
)
"""The runtime runs: per policy rounds/s, shares, the loaded workers' mean
batch with the load on and off, the batch sizes the workers used."""
