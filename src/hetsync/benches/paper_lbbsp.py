"""``hetsync bench paper-lbbsp``: LB-BSP's comparison, in the simulator (and optionally for real).

Chen, Weng, Wang, Li, Li, "Semi-dynamic load balancing: efficient
distributed learning in non-dedicated environments" (SoCC 2020, arXiv
1806.02508) re-size each worker's batch at every BSP barrier so that all
finish together, the global batch staying fixed; they report distributed
training accelerated by up to 54% over BSP on EC2 clusters with background
load from a stress tool (CPU) and with mixed GPU types (GPU).

This benchmark runs, on the built-in scenarios ``lbbsp-cpu`` (16 CPU
workers, a stress tool switching on and off on 6 of them) and ``lbbsp-gpu``
(8 GPUs of three generations with flat-then-linear step curves and memory
caps), every policy the scenario lists — BSP, SSP(3), ASP, the static
ablation ``lb-bsp-static`` and ``lb-bsp`` (with the EWMA predictor on the CPU
scenario, with the CPU rule and the GPU variant on the GPU scenario) — for
several seeds. Per policy it reports the time to the target accuracy (mean
over the seeds that reached it, with the range), the speed-up over BSP
(paired by seed), the final accuracy, the compute and wait shares and the
samples per second; for the batch-sizing policies also how much the batches
move from round to round and, on the CPU scenario, the mean batch of the
loaded workers while loaded and while not. A diagnosis re-runs the
BSP-family policies of the first seed without step-time noise (jitter 0):
how much of the remaining wait is the noise that no predictor can foresee.

With ``--runtime`` it also runs BSP and LB-BSP as real processes (4
workers and a server, ``hetsync run``), on a scenario whose background load
switches on and off during the run, and reports the batch sizes the workers
really computed, read from the trace.

It writes the runs under ``--out`` and the page ``results-lbbsp.md`` with
plots in ``img/lbbsp-*.png`` (under ``--out``, and in ``--docs DIR`` when
given). Every
figure is measured in the run that prints it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.benches.common import (
    Row,
    add_output_arguments,
    docs_dir,
    fmt_metric,
    mean_or_none,
    parse_seeds,
    pct,
    run_target,
    scenario_setup,
    seeds_setting,
    setup_markdown,
    short_metric,
    split_list,
    spread,
    target_text,
    with_sd,
)
from hetsync.errors import BadInput
from hetsync.runner import compare, write_json_atomic
from hetsync.scenario import Scenario, add_override_argument, load_scenario, parse_override

NAME = "paper-lbbsp"

SCENARIOS = "lbbsp-cpu,lbbsp-gpu"
SEEDS = "0,1,2"
BASELINE = "bsp"
PAPER_SPEEDUP = 1.54  # "accelerating distributed training by up to 54%"
BALANCING = ("lb-bsp", "lb-bsp-static")
DOC_NAME = "results-lbbsp.md"
IMG_PREFIX = "lbbsp"
RUNTIME_WORKERS = 4


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default=SCENARIOS, help="comma-separated (default: %(default)s)")
    p.add_argument("--seeds", default=SEEDS, help="comma-separated seeds (default: %(default)s)")
    add_override_argument(p, "max_time_s=3")
    add_output_arguments(p, NAME, DOC_NAME)
    p.add_argument("--no-diagnosis", action="store_true", help="skip the runs without step-time noise")
    p.add_argument(
        "--runtime",
        action="store_true",
        help=f"also run bsp and lb-bsp as real processes ({RUNTIME_WORKERS} workers, about a minute)",
    )
    p.add_argument("--runtime-time-s", type=float, default=12.0, help="length of each real run (default: %(default)s)")


def run(args: argparse.Namespace) -> list[Row]:
    overrides = dict(parse_override(o) for o in args.overrides)
    scenarios = split_list(args.scenarios, "--scenarios")
    seeds = parse_seeds(args.seeds)
    if args.runtime_time_s <= 0:
        raise BadInput(f"--runtime-time-s must be > 0, got {args.runtime_time_s}")
    for name in scenarios:  # bad names and keys fail before any run
        load_scenario(name, **overrides)
    command = shlex.join(["hetsync", "bench", NAME, *_argv(args)])
    out = Path(args.out)
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "scenarios": [
            bench_scenario(name, seeds, out / name, overrides=overrides, diagnosis=not args.no_diagnosis)
            for name in scenarios
        ],
        "seeds": seeds,
        "runtime": run_runtime(out / "runtime", args.runtime_time_s) if args.runtime else None,
        "runtime_folder": str(out / "runtime") if args.runtime else None,
    }
    results["host_time_s"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", results)
    for where in (out, docs_dir(args)):  # the page and its plots: always under --out, in docs if asked
        if where is not None:
            write_doc(results, where, out, command)
    return rows(results)


def _argv(args: argparse.Namespace) -> list[str]:
    argv = []
    if args.scenarios != SCENARIOS:
        argv += ["--scenarios", args.scenarios]
    if args.seeds != SEEDS:
        argv += ["--seeds", args.seeds]
    for o in args.overrides:
        argv += ["--set", o]
    if args.no_diagnosis:
        argv.append("--no-diagnosis")
    if args.runtime:
        argv.append("--runtime")
        if args.runtime_time_s != 12.0:
            argv += ["--runtime-time-s", f"{args.runtime_time_s:g}"]
    return argv


# ------------------------------------------------------------------ running
def bench_scenario(
    name: str, seeds: list[int], out: Path, *, overrides: dict[str, Any] | None = None, diagnosis: bool = True
) -> dict[str, Any]:
    """Every policy the scenario lists, for every seed; per-seed runs and aggregates."""
    con = report.terminal_console()
    per_seed: dict[int, list[dict[str, Any]]] = {}
    sc: Scenario | None = None
    for seed in seeds:
        sc = load_scenario(name, **{**(overrides or {}), "seed": seed})
        folder = out / f"seed-{seed}"

        def done(summary: dict[str, Any], _seed: int = seed) -> None:
            con.print(
                f"  {name} seed {_seed} {summary['label']:<34} TTA {_fmt(summary['time_to_target_s'])} s, "
                f"wait {100 * summary['wait_share']:.0f}%  ({summary['host_time_s']:.1f} s)"
            )

        runs = compare(sc, list(sc.policies), folder, on_result=done)
        report.write_report(runs, folder)
        for r in runs:
            r["batches"] = batch_stats(folder / r["trace"], sc) if r["policy"] in BALANCING else None
        per_seed[seed] = runs
    assert sc is not None
    quiet: list[dict[str, Any]] = []
    family = [spec for spec in sc.policies if spec.split(":")[0] in (BASELINE, *BALANCING)]
    if diagnosis and sc.jitter > 0 and family:
        con.print(f"  {name} diagnosis: seed {seeds[0]} without step-time noise (jitter 0)")
        calm = load_scenario(name, **{**(overrides or {}), "seed": seeds[0], "jitter": 0.0})
        quiet = [_lite(r) for r in compare(calm, family, out / "jitter-0")]
    labels = [r["label"] for r in per_seed[seeds[0]]]
    load = sc.background_load
    return {
        "scenario": sc.name,
        "description": sc.description,
        "setup": scenario_setup(sc),
        "workers": sc.workers,
        "global_batch": sc.workers * sc.batch_size,
        **run_target(sc, per_seed[seeds[0]]),
        "max_time_s": sc.max_time_s,
        "eval_every_s": sc.eval_every_s,
        "jitter": sc.jitter,
        "loaded_workers": list(load.workers) if load is not None else [],
        "seeds": seeds,
        "labels": labels,
        "aggregate": [_aggregate(label, per_seed, seeds) for label in labels],
        "runs": {str(s): [_lite(r) for r in runs] for s, runs in per_seed.items()},
        "jitter_0": quiet,
        "folder": str(out),
        "overrides": dict(overrides or {}),
    }


def compute_records(trace: Path) -> list[dict[str, Any]]:
    """The ``compute`` records of a trace: start ``t``, ``end``, worker ``w``, ``step``, ``batch``."""
    out = []
    with trace.open(encoding="utf-8") as lines:
        for line in lines:
            if '"compute"' in line:
                rec = json.loads(line)
                if rec.get("ev") == "compute":
                    out.append(rec)
    return out


def batch_stats(trace: Path, sc: Scenario) -> dict[str, Any]:
    """How the batches moved: mean |Δ batch| per worker and round, early (rounds 1–10) and later;
    with background load, the loaded workers' mean batch while loaded and while not."""
    by_worker: dict[int, list[dict[str, Any]]] = {}
    for rec in compute_records(trace):
        by_worker.setdefault(rec["w"], []).append(rec)
    early, later = [], []
    for recs in by_worker.values():
        recs.sort(key=lambda r: r["step"])
        for prev, cur in zip(recs, recs[1:], strict=False):
            (early if cur["step"] <= 10 else later).append(abs(cur["batch"] - prev["batch"]))
    out: dict[str, Any] = {
        "move_early": statistics.fmean(early) if early else None,
        "move_later": statistics.fmean(later) if later else None,
        "final": [by_worker[w][-1]["batch"] for w in sorted(by_worker)],
    }
    load = sc.background_load
    if load is not None:
        on = [r["batch"] for w in load.workers for r in by_worker.get(w, []) if load.factor_at(w, r["t"]) > 1]
        off = [r["batch"] for w in load.workers for r in by_worker.get(w, []) if load.factor_at(w, r["t"]) == 1]
        out["loaded_batch_on"] = statistics.fmean(on) if on else None
        out["loaded_batch_off"] = statistics.fmean(off) if off else None
    return out


def _lite(r: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "label",
        "policy",
        "seed",
        "time_to_target_s",
        "final_metric",
        "compute_share",
        "comm_share",
        "wait_share",
        "samples_per_s",
        "steps",
        "updates",
        "wall_time_s",
        "host_time_s",
        "trace",
        "batches",
    )
    return {k: r.get(k) for k in keep}


def _aggregate(label: str, per_seed: dict[int, list[dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    runs = [next(r for r in per_seed[s] if r["label"] == label) for s in seeds]
    ttas = [r["time_to_target_s"] for r in runs if r["time_to_target_s"] is not None]
    ratios = []
    for seed, r in zip(seeds, runs, strict=True):
        base = next((b for b in per_seed[seed] if b["policy"] == BASELINE), None)
        if base is not None and base["time_to_target_s"] is not None and r["time_to_target_s"] is not None:
            ratios.append(base["time_to_target_s"] / r["time_to_target_s"])
    base_rate = [next((b["samples_per_s"] for b in per_seed[s] if b["policy"] == BASELINE), None) for s in seeds]
    rate_ratios = [r["samples_per_s"] / b for r, b in zip(runs, base_rate, strict=True) if b]
    batches = [r["batches"] for r in runs if r.get("batches")]

    def batchmean_or_none(key: str) -> float | None:
        return mean_or_none([b[key] for b in batches if b.get(key) is not None])

    return {
        "label": label,
        "policy": runs[0]["policy"],
        "reached": len(ttas),
        "seeds": len(runs),
        **spread("tta", ttas, "_s"),
        **spread("speedup", ratios),
        "speedup_pairs": len(ratios),
        "throughput_vs_bsp": mean_or_none(rate_ratios),
        "final_metric_mean": statistics.fmean(r["final_metric"] for r in runs),
        "final_metric_sd": statistics.stdev([r["final_metric"] for r in runs]) if len(runs) > 1 else 0.0,
        "compute_share_mean": statistics.fmean(r["compute_share"] for r in runs),
        "wait_share_mean": statistics.fmean(r["wait_share"] for r in runs),
        "samples_per_s_mean": statistics.fmean(r["samples_per_s"] for r in runs),
        "move_early": batchmean_or_none("move_early"),
        "move_later": batchmean_or_none("move_later"),
        "loaded_batch_on": batchmean_or_none("loaded_batch_on"),
        "loaded_batch_off": batchmean_or_none("loaded_batch_off"),
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
    import yaml

    from hetsync.runtime.launch import launch, server_log_tail
    from hetsync.scenario import scenario_from_dict

    out.mkdir(parents=True, exist_ok=True)
    raw = {**RUNTIME_SCENARIO, "max_time_s": max_time_s}
    path = out / "lbbsp-runtime.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    sc = scenario_from_dict(raw, default_name="lbbsp-runtime")
    con = report.terminal_console()
    specs = ",".join(raw["policies"])
    con.print(f"  runtime: {RUNTIME_WORKERS} workers + server, {specs}, {max_time_s:g} s each")
    t0 = time.perf_counter()
    code = launch(
        RUNTIME_WORKERS,
        ["--scenario", str(path), "--policies", specs, "--out", str(out)],
        out,
        timeout_s=60 + 4 * max_time_s,
    )
    if code != 0:
        raise RuntimeError(f"the runtime run failed (exit {code}):\n{server_log_tail(out)}")
    runs = json.loads((out / "summary.json").read_text())
    result: dict[str, Any] = {"host_time_s": time.perf_counter() - t0, "scenario": raw, "runs": []}
    for r in runs:
        recs = compute_records(out / r["trace"])
        entry = _lite(r) | {"batches": batch_stats(out / r["trace"], sc)}
        entry["rounds_per_s"] = r["updates"] / r["wall_time_s"] if r["wall_time_s"] else None
        entry["distinct_batches"] = sorted({rec["batch"] for rec in recs})
        result["runs"].append(entry)
    return result


# --------------------------------------------------------------------- rows
def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


def _range(lo: float | None, hi: float | None, digits: int = 3) -> str:
    return "" if lo is None or hi is None else f"{lo:.{digits}g}–{hi:.{digits}g}"


def rows(results: dict[str, Any]) -> list[Row]:
    """Per scenario a table, per policy a line: time to target, speed-up over
    BSP, samples/s and its ratio to BSP's, final metric, shares (%); the
    diagnosis and the runtime runs as tables of their own."""
    out: list[Row] = []
    for res in results["scenarios"]:
        seeds = res["seeds"]
        several = len(seeds) > 1
        where = seeds_setting(res["scenario"], seeds)
        metric = res["target_metric"]
        for a in res["aggregate"]:
            keys = {"policy": short_label(a["label"]), "setting": where, "scenario": res["scenario"]}
            if a["tta_mean_s"] is None:
                tta_shown = f"not in {res['max_time_s'] or 0:g} s"
            elif several:
                spread_text = f" [{_range(a['tta_min_s'], a['tta_max_s'])}]" if a["reached"] > 1 else ""
                tta_shown = f"{a['tta_mean_s']:.3g}{spread_text} ({a['reached']}/{a['seeds']})"
            else:
                tta_shown = None
            out.append(
                {
                    "metric": f"time to {target_text(res)}",
                    "value": a["tta_mean_s"],
                    "unit": "s",
                    "shown": tta_shown,
                    **keys,
                }
            )
            speed = 1.0 if a["policy"] == BASELINE else a["speedup_mean"]
            speed_shown = None
            if a["policy"] != BASELINE and speed is not None and a["speedup_pairs"] > 1:
                speed_shown = f"{speed:.3g} [{_range(a['speedup_min'], a['speedup_max'])}]"
            out.append({"metric": "speed-up over bsp", "value": speed, "unit": "x", "shown": speed_shown, **keys})
            out.append({"metric": "samples/s", "value": a["samples_per_s_mean"], "unit": "", **keys})
            out.append(
                {
                    "metric": "samples/s ÷ bsp's",
                    "value": 1.0 if a["policy"] == BASELINE else a["throughput_vs_bsp"],
                    "unit": "",
                    **keys,
                }
            )
            finals = [r["final_metric"] for s in seeds for r in res["runs"][str(s)] if r["label"] == a["label"]]
            out.append(
                {
                    "metric": f"final {metric}",
                    "value": a["final_metric_mean"],
                    "unit": "",
                    "shown": with_sd(finals or [a["final_metric_mean"]], lambda v, m=metric: fmt_metric(m, v)),
                    **keys,
                }
            )
            out.append({"metric": "compute share", "value": pct(a["compute_share_mean"]), "unit": "%", **keys})
            out.append({"metric": "wait share", "value": pct(a["wait_share_mean"]), "unit": "%", **keys})
        for r in res["jitter_0"]:
            keys = {
                "policy": short_label(r["label"]),
                "setting": f"{res['scenario']}, seed {r['seed']} without step-time noise",
                "scenario": res["scenario"],
            }
            out.append({"metric": "compute share", "value": pct(r["compute_share"]), "unit": "%", **keys})
            out.append({"metric": "wait share", "value": pct(r["wait_share"]), "unit": "%", **keys})
    rt = results.get("runtime")
    if rt:
        where = f"runtime: {RUNTIME_WORKERS} real workers, gloo, {rt['scenario']['max_time_s']:g} s"
        for r in rt["runs"]:
            keys = {"policy": r["label"], "setting": where}
            out.append({"metric": "rounds/s", "value": r["rounds_per_s"], "unit": "", **keys})
            b = r["batches"]
            for state in ("on", "off"):
                out.append(
                    {
                        "metric": f"loaded workers' batch, load {state}",
                        "value": b.get(f"loaded_batch_{state}"),
                        "unit": "samples",
                        **keys,
                    }
                )
    out.append({"metric": "run time, all runs", "value": results["host_time_s"], "unit": "s", "setting": ""})
    return out


# --------------------------------------------------------------------- plots
_PALETTE = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
_OTHER = "#AAAAAA"


def short_label(label: str) -> str:
    """A run label with a long ``max_batch=a/b/c/...`` list shown as ``max_batch=caps``."""
    return re.sub(r"max_batch=[0-9/]{12,}", "max_batch=caps", label)


def plot_batches(
    panels: list[tuple[str, Path]],
    path: Path,
    *,
    title: str,
    colors: dict[int, str],
    legend: list[tuple[str, str]],
    window_s: float | None = None,
    load: Any = None,
    virtual: bool = True,
) -> Path:
    """Batch size over time per worker, one panel per trace (workers not in ``colors`` in grey);
    with ``load`` (a BackgroundLoad), a last panel shows when each loaded worker's load is on."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows = len(panels) + (1 if load is not None else 0)
    ratios = [3.0] * len(panels) + ([0.35 * len(load.workers) + 0.4] if load is not None else [])
    height = 2.5 * len(panels) + (0.3 * len(load.workers) + 0.8 if load is not None else 0) + 0.8
    fig = Figure(figsize=(10, height), layout="constrained")
    axes = fig.subplots(rows, 1, sharex=True, gridspec_kw={"height_ratios": ratios}, squeeze=False)[:, 0]
    end = 0.0
    for ax, (label, trace) in zip(axes, panels, strict=False):
        by_worker: dict[int, list[tuple[float, int]]] = {}
        for rec in compute_records(trace):
            if window_s is None or rec["t"] <= window_s:
                by_worker.setdefault(rec["w"], []).append((rec["t"], rec["batch"]))
        for w in sorted(by_worker, key=lambda w: (w in colors, w)):  # coloured workers on top
            pts = sorted(by_worker[w])
            end = max(end, pts[-1][0])
            ax.step(
                [t for t, _ in pts],
                [b for _, b in pts],
                where="post",
                color=colors.get(w, _OTHER),
                linewidth=1.5 if w in colors else 0.8,
                alpha=0.95 if w in colors else 0.7,
            )
        ax.set_ylabel("batch (samples)")
        ax.set_title(label, loc="left", fontsize=10)
        ax.grid(True, color="0.9", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_ylim(bottom=0)
    right = window_s if window_s is not None else end
    if load is not None:
        ax = axes[-1]
        steps = 2000
        for k, w in enumerate(load.workers):
            ts = [right * i / steps for i in range(steps + 1)]
            on = [load.factor_at(w, t) > 1 for t in ts]
            ax.fill_between(ts, k - 0.38, k + 0.38, where=on, step="post", color=colors.get(w, _OTHER), linewidth=0)
        ax.set_yticks(range(len(load.workers)), [f"w{w}" for w in load.workers], fontsize=8)
        ax.set_ylim(len(load.workers) - 0.5, -0.5)
        ax.set_title(f"background load on ({load.factor:g}x slower), per loaded worker", loc="left", fontsize=9)
        ax.grid(True, axis="x", color="0.9", linewidth=0.8)
    axes[-1].set_xlabel("time (s, virtual)" if virtual else "time (s)")
    axes[-1].set_xlim(0, right)
    handles = [Line2D([], [], color=c, linewidth=2) for _, c in legend]
    fig.legend(
        handles, [n for n, _ in legend], loc="outside lower center", ncol=min(len(legend), 8), fontsize=8, frameon=False
    )
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(out, dpi=report.DPI)
    return out


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
        elif (folder / src).is_file():
            shutil.copyfile(folder / src, img / dst)
            made[f"{res['scenario']}:curve"] = f"img/{dst}"
        sc = load_scenario(res["scenario"], **{**res["overrides"], "seed": first})
        balancing = [r for r in res["runs"][str(first)] if r["policy"] in BALANCING and r.get("trace")]
        if not balancing:
            continue
        name = _img_name(res["scenario"], "batches.png")
        if sc.background_load is not None:
            order = [r for r in balancing if r["policy"] == "lb-bsp" and "predictor=" not in r["label"]]
            order += [r for r in balancing if r["policy"] == "lb-bsp-static"]
            colors = {w: _PALETTE[k % len(_PALETTE)] for k, w in enumerate(sc.background_load.workers)}
            plot_batches(
                [(f"{short_label(r['label'])} · seed {first}", folder / r["trace"]) for r in order],
                img / name,
                title=f"{res['scenario']}: batch size per worker (loaded workers in colour, the others grey)",
                colors=colors,
                legend=[(f"w{w}", c) for w, c in colors.items()] + [("unloaded", _OTHER)],
                load=sc.background_load,
            )
        else:
            order = sorted(balancing, key=lambda r: (r["policy"] != "lb-bsp", "variant=gpu" not in r["label"]))
            kinds = sorted(set(sc.slowdown))
            kind_color = {s: _PALETTE[[1, 4, 0, 2, 3, 5][i % 6]] for i, s in enumerate(kinds)}
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
        from hetsync.scenario import scenario_from_dict

        sc = scenario_from_dict(rt["scenario"])
        load = sc.background_load
        assert load is not None
        colors = {w: _PALETTE[k % len(_PALETTE)] for k, w in enumerate(load.workers)}
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
                colors=colors,
                legend=[(f"w{w}", c) for w, c in colors.items()] + [("unloaded", _OTHER)],
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
    path.write_text(_doc_text(results, plots, command), encoding="utf-8")
    return path


def _find(res: dict[str, Any], label: str) -> dict[str, Any] | None:
    return next((a for a in res["aggregate"] if a["label"] == label), None)


def _policy(res: dict[str, Any], policy: str) -> list[dict[str, Any]]:
    return [a for a in res["aggregate"] if a["policy"] == policy]


def _speed(a: dict[str, Any]) -> str:
    if a["policy"] == BASELINE:
        return "1 (baseline)"
    if a["speedup_mean"] is None:
        return "—"
    if a["speedup_pairs"] < 2:
        return f"{a['speedup_mean']:.2f}×"
    return f"{a['speedup_mean']:.2f}× [{_range(a['speedup_min'], a['speedup_max'])}]"


def _better(metric: str, res: dict[str, Any], a: float, b: float | None) -> bool:
    """Whether value a of the metric is at least as good as b (the target's direction)."""
    if b is None:
        return True
    return a <= b if res.get("target_direction") == "min" else a >= b


def _finals(res: dict[str, Any], label: str) -> list[float]:
    return [r["final_metric"] for s in res["seeds"] for r in res["runs"][str(s)] if r["label"] == label]


def _doc_text(results: dict[str, Any], plots: dict[str, str], command: str) -> str:
    seeds = results["seeds"]
    lines = [
        "# LB-BSP in the simulator: the paper's CPU and GPU set-ups",
        "",
        f"Produced by `{command}` ({results['host_time_s']:.0f} s of real time on a shared 2-core machine);",
        "every figure below is measured in that run. Seeds "
        f"{', '.join(map(str, seeds))} (a seed changes the initialisation, the shards, the timing noise and the",
        "phases of the background load; within a seed all policies see the same per-worker noise, so speed-ups",
        "are paired by seed). LB-BSP keeps the global batch X = N × `batch_size` of BSP and weights each",
        "gradient by x_i / X, so per round it does exactly BSP's math; any difference in time to accuracy is",
        "the length of the rounds. Where the paper predicts CPU throughput with a NARX neural network,",
        "`lb-bsp` uses a linear model with the same inputs (recursive least squares over lagged throughputs",
        "and load readings); `predictor=ewma` is a moving average that ignores the load.",
        "",
    ]
    for res in results["scenarios"]:
        lines += _scenario_section(res, plots)
    lines += _claims(results)
    rt = results.get("runtime")
    if rt:
        lines += _runtime_section(rt, plots)
    lines += _analysis(results)
    return "\n".join(lines) + "\n"


def _scenario_section(res: dict[str, Any], plots: dict[str, str]) -> list[str]:
    metric = res["target_metric"]
    stop = f"{res['max_time_s']:g} virtual seconds per run" if res["max_time_s"] else "runs of max_steps"
    lines = [
        f"## `{res['scenario']}`",
        "",
        f"{res['description']}. Global batch {res['global_batch']}; {stop}; target "
        f"{target_text(res)}, evaluated every {res['eval_every_s'] or 'run length / 40'} s.",
        "",
        *setup_markdown([res["setup"]] if res.get("setup") else []),
        "| policy | TTA (s), mean [range] | reached | speed-up vs BSP [range] | samples/s (× BSP) "
        f"| final {short_metric(metric)}{' (± sd)' if len(res['seeds']) > 1 else ''} | compute | wait "
        "| batch moves/round, rounds 1–10 → later |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in res["aggregate"]:
        tta = "—" if a["tta_mean_s"] is None else f"{a['tta_mean_s']:.2f}"
        if a["tta_mean_s"] is not None and a["reached"] > 1:
            tta += f" [{_range(a['tta_min_s'], a['tta_max_s'])}]"
        thr = f"{a['samples_per_s_mean']:,.0f}"
        if a["throughput_vs_bsp"] is not None and a["policy"] != BASELINE:
            thr += f" ({a['throughput_vs_bsp']:.2f}×)"
        moves = "—" if a["move_early"] is None else f"{a['move_early']:.1f} → {_fmt(a['move_later'], 2)}"
        lines.append(
            f"| `{short_label(a['label'])}` | {tta} | {a['reached']}/{a['seeds']} | {_speed(a)} | {thr} "
            f"| {with_sd(_finals(res, a['label']) or [a['final_metric_mean']], lambda v: fmt_metric(metric, v))} "
            f"| {100 * a['compute_share_mean']:.1f}% | {100 * a['wait_share_mean']:.1f}% | {moves} |"
        )
    lines += [
        "",
        "*Samples/s* is the deterministic side of the comparison (training samples processed per virtual",
        "second); *TTA* adds the noise of SGD and of the evaluation grid. *Batch moves*: mean |Δ batch|",
        "of a worker from one round to the next."
        + (
            " `max_batch=caps`: the scenario's memory caps, handed to the policy (it cannot read the scenario)."
            if any("max_batch=" in a["label"] for a in res["aggregate"])
            else ""
        ),
        "",
    ]
    if res["loaded_workers"]:
        loaded = [a for a in res["aggregate"] if a["loaded_batch_on"] is not None]
        if loaded:
            shown = "; ".join(
                f"`{short_label(a['label'])}` {a['loaded_batch_on']:.1f} while loaded, "
                f"{a['loaded_batch_off']:.1f} while not"
                for a in loaded
                if a["loaded_batch_off"] is not None
            )
            lines += [
                f"Mean batch of the loaded workers (equal share: {res['global_batch'] // res['workers']}): {shown}.",
                "",
            ]
    if res["jitter_0"]:
        shown = ", ".join(f"`{short_label(r['label'])}` {100 * r['wait_share']:.1f}%" for r in res["jitter_0"])
        lines += [
            f"Diagnosis, seed {res['jitter_0'][0]['seed']} without step-time noise (jitter 0 instead of "
            f"{res['jitter']:g}): wait share {shown}.",
            "",
        ]
    key = f"{res['scenario']}:batches"
    if key in plots:
        lines += [f"![batch sizes]({plots[key]})", ""]
    curve = plots.get(f"{res['scenario']}:curve")
    if curve:
        lines += [f"![{metric} vs time, first seed]({curve})", ""]
    return lines


def _claims(results: dict[str, Any]) -> list[str]:
    lines = [
        "## Beside the paper",
        "",
        "| claim (Chen et al., SoCC 2020) | measured here |",
        "|---|---|",
    ]
    shown = []
    for res in results["scenarios"]:
        bsp = next(iter(_policy(res, BASELINE)), None)
        metric = res["target_metric"]
        for a in _policy(res, "lb-bsp"):
            if a["speedup_mean"] is not None:
                shown.append(
                    f"`{res['scenario']}` `{short_label(a['label'])}` {a['speedup_mean']:.2f}× to the target "
                    f"({100 * (1 - 1 / a['speedup_mean']):.0f}% less time), "
                    f"{a['throughput_vs_bsp']:.2f}× the samples per second"
                )
            elif a["throughput_vs_bsp"] is not None and bsp is not None:
                shown.append(
                    f"`{res['scenario']}` `{short_label(a['label'])}`: target not reached by both in the run; "
                    f"{a['throughput_vs_bsp']:.2f}× the samples per second, final {metric} "
                    f"{fmt_metric(metric, a['final_metric_mean'])} (BSP {fmt_metric(metric, bsp['final_metric_mean'])})"
                )
    lines.append(
        "| LB-BSP accelerates distributed training by up to 54% over BSP (CPU clusters with a stress tool; "
        f"GPU clusters of mixed types) | {'; '.join(shown) or 'no lb-bsp run'} |"
    )
    pred = []
    for res in results["scenarios"]:
        static = _policy(res, "lb-bsp-static")
        best = max(
            (a for a in _policy(res, "lb-bsp") if a["throughput_vs_bsp"] is not None),
            key=lambda a: a["throughput_vs_bsp"],
            default=None,
        )
        if static and best is not None and static[0]["throughput_vs_bsp"] is not None:
            pred.append(
                f"`{res['scenario']}`: static {static[0]['throughput_vs_bsp']:.2f}×, "
                f"`{short_label(best['label'])}` {best['throughput_vs_bsp']:.2f}× BSP's samples per second"
            )
    lines.append(
        "| batch sizes must follow the workers' *current* capability: a one-off (static) assignment does not "
        f"keep up in non-dedicated clusters | {'; '.join(pred) or 'no static run'} |"
    )
    return [*lines, ""]


def _runtime_section(rt: dict[str, Any], plots: dict[str, str]) -> list[str]:
    sc = rt["scenario"]
    load = sc["background_load"]
    lines = [
        "## On real processes",
        "",
        f"`--runtime`: {RUNTIME_WORKERS} worker processes and a server on this machine (gloo), scenario "
        f"`{sc['name']}`: {sc['description']} (period {load['period_s']:g} s, on for {load['on_s']:g} s), "
        f"{sc['max_time_s']:g} s per policy ({rt['host_time_s']:.0f} s of real time in all, start-up included).",
        "The workers really compute on the batch size each command gives them; the numbers come from the",
        "trace's compute records. Rounds per second are wall-clock figures from five processes sharing two",
        "cores with whatever else runs on the machine, so they vary from run to run; the batch columns and",
        "the plot are the point: the loaded workers' batches drop while their load is on.",
        "",
        "| policy | rounds/s | compute | wait | loaded workers' mean batch, load on / off | distinct batch sizes used |",
        "|---|---|---|---|---|---|",
    ]
    for r in rt["runs"]:
        b = r["batches"]
        onoff = (
            f"{b['loaded_batch_on']:.1f} / {b['loaded_batch_off']:.1f}"
            if b.get("loaded_batch_on") is not None and b.get("loaded_batch_off") is not None
            else "—"
        )
        distinct = r["distinct_batches"]
        shown = (
            ", ".join(map(str, distinct))
            if len(distinct) <= 8
            else f"{len(distinct)} sizes, {distinct[0]}–{distinct[-1]}"
        )
        lines.append(
            f"| `{r['label']}` | {_fmt(r['rounds_per_s'])} | {100 * r['compute_share']:.1f}% "
            f"| {100 * r['wait_share']:.1f}% | {onoff} | {shown} |"
        )
    lines.append("")
    if "runtime:batches" in plots:
        lines += [f"![runtime batch sizes]({plots['runtime:batches']})", ""]
    return lines


def _analysis(results: dict[str, Any]) -> list[str]:
    lines = ["## What the numbers say", ""]
    for res in results["scenarios"]:
        bsp = next(iter(_policy(res, BASELINE)), None)
        lbs = _policy(res, "lb-bsp")
        static = next(iter(_policy(res, "lb-bsp-static")), None)
        asp = next(iter(_policy(res, "asp")), None)
        if bsp is None or not lbs:
            continue
        best = max(lbs, key=lambda a: a["throughput_vs_bsp"] or 0.0)
        measured = (
            f"{best['speedup_mean']:.2f}× measured over {best['speedup_pairs']} paired seeds"
            if best["speedup_mean"] is not None
            else "not measured: the target was not reached by both"
        )
        lines.append(
            f"- `{res['scenario']}`: BSP's workers wait {100 * bsp['wait_share_mean']:.0f}% of the time; "
            f"`{short_label(best['label'])}` cuts that to {100 * best['wait_share_mean']:.0f}% and processes "
            f"{best['throughput_vs_bsp']:.2f}× BSP's samples per second, which is its expected speed-up to the "
            f"target, up to SGD noise (TTA speed-up {measured})."
        )
        quiet = {r["label"]: r for r in res["jitter_0"]}
        if best["label"] in quiet:
            lines.append(
                f"  Without step-time noise its wait drops to {100 * quiet[best['label']]['wait_share']:.0f}%: most "
                f"of what remains is the per-step noise (log-sd {res['jitter']:g}), which no predictor can "
                "foresee — the slowest of N noisy workers still sets each barrier."
            )
        if static is not None and static["throughput_vs_bsp"] is not None:
            if res["loaded_workers"]:
                lines.append(
                    f"  The static ablation reaches {static['throughput_vs_bsp']:.2f}× BSP's throughput: it "
                    "sizes the batches from the first round, so a worker measured unloaded keeps a full share "
                    "when its background load switches on (and one measured loaded stays starved when it "
                    "switches off); prediction is what follows the load."
                )
            else:
                lines.append(
                    f"  The static ablation reaches {static['throughput_vs_bsp']:.2f}× BSP's throughput: with no "
                    "load changes there is nothing to predict, but one measurement at the equal batch "
                    "extrapolates each GPU's time proportionally, and a GPU's time is flat up to its knee and "
                    "steeper after it, so the fast GPUs get too many samples."
                )
        ewma = next((a for a in lbs if "predictor=ewma" in a["label"]), None)
        rls = next((a for a in lbs if a["label"] == "lb-bsp(variant=cpu)"), None)
        if ewma is not None and rls is not None and ewma["throughput_vs_bsp"] and rls["throughput_vs_bsp"]:
            gain = rls["throughput_vs_bsp"] / ewma["throughput_vs_bsp"]
            if gain > 1.02:
                verdict = (
                    "beats the moving average that ignores the load: after a load switch it moves at the first "
                    "reading, the average takes several rounds to catch up"
                )
            elif gain >= 0.98:
                verdict = "does no better than the moving average that ignores the load, in this run"
            else:
                verdict = "does worse than the moving average that ignores the load, in this run"
            lines.append(
                f"  Predictors: the online regression over lagged throughputs and load readings "
                f"({rls['throughput_vs_bsp']:.2f}× BSP's samples per second, wait "
                f"{100 * rls['wait_share_mean']:.0f}%) {verdict} ({ewma['throughput_vs_bsp']:.2f}×, wait "
                f"{100 * ewma['wait_share_mean']:.0f}%)."
            )
        gpu = next((a for a in lbs if "variant=gpu" in a["label"]), None)
        cpu_rule = next((a for a in lbs if "variant=cpu" in a["label"]), None)
        if gpu is not None and cpu_rule is not None and not res["loaded_workers"]:
            lines.append(
                f"  GPU variant against the CPU rule on GPUs: {gpu['throughput_vs_bsp']:.2f}× against "
                f"{cpu_rule['throughput_vs_bsp']:.2f}× BSP's samples per second, batches moving "
                f"{_fmt(gpu['move_early'], 2)} → {_fmt(gpu['move_later'], 2)} against "
                f"{_fmt(cpu_rule['move_early'], 2)} → {_fmt(cpu_rule['move_later'], 2)} samples per round. "
                "Throughput-proportional sizing has equal finish times as its fixed point on any increasing "
                "curve, so once settled it is about as fast; it oscillates on the way there (a throughput "
                "measured on a GPU's flat part promises cheap samples past the knee, so the fast GPUs "
                "overshoot, then swing back) and keeps chasing the step-time noise, while the fitted curve, "
                "the trust region and the halving damper settle in a few rounds and stay put."
            )
        metric = res["target_metric"]
        if asp is not None and asp["tta_mean_s"] is not None and best["tta_mean_s"] is not None:
            faster = asp["tta_mean_s"] < best["tta_mean_s"]
            why = (
                "it never waits, and on this task stale gradients cost it little"
                if faster
                else "it never waits, but its stale gradients cost more than that throughput gains"
            )
            lines.append(
                f"  ASP reaches the target {'faster' if faster else 'slower'} ({asp['tta_mean_s']:.2f} s against "
                f"{best['tta_mean_s']:.2f} s, {asp['throughput_vs_bsp']:.2f}× BSP's samples per second): {why}. "
                "LB-BSP's claim is against BSP: it keeps BSP's update, the exact mean gradient of the global "
                "batch (no staleness)."
            )
        elif (
            asp is not None
            and asp["tta_mean_s"] is None
            and asp["final_metric_mean"] is not None
            and not (_better(metric, res, asp["final_metric_mean"], bsp["final_metric_mean"]))
        ):
            lines.append(
                f"  ASP processes {asp['throughput_vs_bsp']:.2f}× BSP's samples per second but did not reach the "
                f"target (final {metric} {fmt_metric(metric, asp['final_metric_mean'])}, against "
                f"{fmt_metric(metric, best['final_metric_mean'])} for `{short_label(best['label'])}` and "
                f"{fmt_metric(metric, bsp['final_metric_mean'])} for BSP): its gradients are applied one at a "
                "time to a model that has moved on, and with this recipe that staleness costs more than the "
                "throughput gains. LB-BSP keeps BSP's update, the exact mean gradient of the global batch."
            )
    lines += [
        "- Batch sizing removes the part of the barrier wait that comes from *persistently* slower or "
        "loaded workers, as in both scenarios here; the part that comes from per-step noise (the only kind "
        "on dedicated, equal machines) it cannot remove.",
        "",
    ]
    return lines
