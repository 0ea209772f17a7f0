"""``hetsync bench scale``: hetsync's data paths against DDP on the same model and batch.

The same training script (:mod:`hetsync.benches.scale_loop`: an MLP of about
1M, 12M or 50M parameters, or a small transformer encoder of about 20M, on
generated data, SGD with momentum) runs as plain DDP under ``torchrun`` and
converted to hetsync BSP under ``hetsync launch`` on each path — ``ps``
(every gradient to rank 0, which steps and sends the model back) and
``collective`` (the round all-reduced among the workers during backward,
each stepping its own optimizer; rank 0 only decides) — and to LB-BSP on
the collective path (``lb-bsp``: the batch-sizing policy's rounds, equal
here, weighted by the batches) and local SGD on it (``local-sgd``: H local
steps of the script's optimizer, then a round of model deltas), with 2 and
4 workers, the forms of one cell one after another (their order swapped
every other repeat). Figures per cell:

- the median step time (each worker's median interval between the ends of
  consecutive ``opt.step()`` calls, the first :data:`WARMUP_STEPS` left out;
  the median over workers) and its ratio to DDP's (the issue's target: BSP
  on the collective path within 1.05× DDP at every size);
- bytes a step moves per worker and at the busiest process, as the
  algorithm moves them (nominal, not captured: a ring all-reduce moves
  2(N−1)/N of the model out of and into every member; the parameter server
  receives N gradients and sends N models);
- rank 0's CPU time over its run's wall time (hetsync's summary:
  ``server_cpu_s``): the server's share of a CPU.

On a shared machine the step times move with its load (printed); the
ratios, measured side by side, less.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hetsync.benches.common import Row
from hetsync.benches.scale_loop import LOCAL_SGD_H
from hetsync.console import terminal_console
from hetsync.errors import BadInput
from hetsync.summary import as_dicts, read_summary

NAME = "scale"
SCRIPT = Path(__file__).with_name("scale_loop.py")
MODELS = ("mlp-1", "mlp-12", "mlp-50", "transformer-20")
WORKERS = (2, 4)
FORMS = {
    "ddp": "DDP (torchrun)",
    "ps": "hetsync BSP, path ps",
    "collective": "hetsync BSP, path collective",
    "lb-bsp": "hetsync LB-BSP, path collective",
    "local-sgd": f"hetsync local SGD (H={LOCAL_SGD_H}), path collective",
}
"""Each form's label; the hetsync forms' policy and path: :data:`hetsync.benches.scale_loop.POLICY_PATH`."""
WARMUP_STEPS = 3
RUN_LIMIT_S = 600.0
TARGET_RATIO = 1.05


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default: {','.join(MODELS)})")
    p.add_argument("--workers", default=",".join(map(str, WORKERS)), help="comma-separated worker counts (default 2,4)")
    p.add_argument("--steps", type=int, default=15, help="steps each worker takes (default 15)")
    p.add_argument("--batch", type=int, default=64, help="each worker's batch (default 64)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each form per cell, alternately (default 1)")
    p.add_argument("--forms", default=",".join(FORMS), help=f"comma-separated (default: {','.join(FORMS)})")
    p.add_argument("--out", type=Path, default=None, help="keep the runs' logs here (default: a temporary folder)")


def run(args: argparse.Namespace) -> list[Row]:
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    try:
        workers = [int(n) for n in args.workers.split(",") if n.strip()]
    except ValueError:
        raise BadInput(f"--workers takes comma-separated counts, got {args.workers!r}") from None
    bad = [m for m in models if m.partition("-")[0] not in ("mlp", "transformer")] + [
        f for f in forms if f not in FORMS
    ]
    if bad or not models or not forms or not workers or min(workers) < 1:
        raise BadInput(f"--models mlp-<M>|transformer-<M>, --forms {'|'.join(FORMS)}, --workers >= 1; got {bad}")
    if args.steps <= WARMUP_STEPS + 1 or args.batch < 1 or args.repeats < 1:
        raise BadInput(f"--steps must be > {WARMUP_STEPS + 1}, --batch and --repeats >= 1")
    if args.out is not None:
        rows = _run(args, models, workers, forms, args.out)
        if "ddp" in forms and len(forms) > 1:
            plot_ratios(rows, args.out / "scale.png")
        return rows
    with tempfile.TemporaryDirectory() as tmp:
        return _run(args, models, workers, forms, Path(tmp))


def command(form: str, nproc: int, script: Path, args: list[str], out: Path) -> list[str]:
    """The launching command of one run, as a user types it."""
    loop = [str(script), form, *args]
    if form == "ddp":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *loop]
    return [sys.executable, "-m", "hetsync", "launch", "--nproc", str(nproc), "--out", str(out), *loop]


def time_run(form: str, model: str, nproc: int, steps: int, batch: int, folder: Path) -> dict[str, float]:
    """One run: the median step (s), the parameter count, the load average at
    its start and (hetsync) rank 0's CPU share."""
    marks = folder / "marks"
    if marks.exists():  # (an earlier run into the same --out: its marks are not this run's)
        shutil.rmtree(marks)
    marks.mkdir(parents=True)
    # (run from its own folder: the benches' folder on sys.path would shadow top-level modules)
    script = Path(shutil.copyfile(SCRIPT, folder / SCRIPT.name))
    cmd = command(form, nproc, script, [model, str(marks), str(steps), str(batch)], folder / "out")
    load = os.getloadavg()[0]
    with (folder / "launch.log").open("w") as log:
        try:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_LIMIT_S, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{FORMS[form]} did not finish within {RUN_LIMIT_S:.0f} s; see {folder}") from None
    ranks = [json.loads(p.read_text()) for p in sorted(marks.glob("rank-*.json"))]
    if done.returncode != 0 or len(ranks) != nproc:
        tail = (folder / "launch.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{FORMS[form]} failed (status {done.returncode}); see {folder}:\n{tail}")
    period = LOCAL_SGD_H if form == "local-sgd" else 1
    step_s = statistics.median(median_step_s(r["ends"], period) for r in ranks)
    figures = {"step_s": step_s, "params": float(ranks[0]["params"]), "load": load}
    if form != "ddp":
        (summary,) = as_dicts(read_summary(folder / "out" / "summary.json"))
        figures["server_share"] = summary["server_cpu_s"] / summary["wall_time_s"]
    return figures


def median_step_s(ends: list[float], period: int = 1) -> float:
    """The median interval between consecutive step ends, the warm-up's left
    out; with ``period`` > 1 (local SGD: a round every ``period`` steps) the
    median of the mean step over each whole period, so the rounds count."""
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)][WARMUP_STEPS:]
    means = [statistics.fmean(gaps[i : i + period]) for i in range(0, len(gaps) - period + 1, period)]
    if not means:
        raise ValueError("too few steps to time")
    return statistics.median(means)


def nominal_bytes(form: str, nproc: int, params: float) -> tuple[float, float]:
    """(per worker, at the busiest process) bytes one step moves in and out, as the algorithm moves them."""
    model = 4 * params
    if form == "ps":
        return 2 * model, 2 * nproc * model  # a gradient up, a model down; rank 0 takes N and sends N
    ring = 2 * 2 * (nproc - 1) / nproc * model  # reduce-scatter + all-gather, out and in
    if form == "local-sgd":
        ring /= LOCAL_SGD_H  # a round every H steps
    return ring, ring


def _run(args: argparse.Namespace, models: list[str], workers: list[int], forms: list[str], out: Path) -> list[Row]:
    con = terminal_console()
    rows: list[Row] = []
    loads: list[float] = []
    failed: list[str] = []
    for model in models:
        for nproc in workers:
            times: dict[str, list[dict[str, float]]] = {f: [] for f in forms}
            for i in range(args.repeats):
                for form in forms if i % 2 == 0 else list(reversed(forms)):
                    folder = out / f"{model}-{nproc}w-{form}-{i}"
                    try:
                        t = time_run(form, model, nproc, args.steps, args.batch, folder)
                    except RuntimeError as e:  # (one failed run does not lose the others' figures)
                        failed.append(f"{model}, {nproc} workers, {FORMS[form]}: {str(e).splitlines()[0]}")
                        con.print(f"  {failed[-1]}", markup=False, highlight=False)
                        continue
                    times[form].append(t)
                    loads.append(t["load"])
                    con.print(
                        f"  {model}, {nproc} workers, {FORMS[form]}: {1000 * t['step_s']:.1f} ms a step "
                        f"(load average {t['load']:.2f})",
                        markup=False,
                        highlight=False,
                    )
            if any(times.values()):
                rows += cell_rows(model, nproc, args.batch, {f: ts for f, ts in times.items() if ts})
    if loads:
        rows.append(
            {
                "metric": "load average (1 min) at the runs' starts",
                "value": statistics.median(loads),
                "unit": "",
                "shown": f"{statistics.median(loads):.2f} [{min(loads):.2f}–{max(loads):.2f}] on {os.cpu_count()} CPUs",
            }
        )
    if failed:
        rows.append({"metric": "runs that failed", "value": len(failed), "unit": "", "shown": "; ".join(failed)})
    return rows


def cell_rows(model: str, nproc: int, batch: int, times: dict[str, list[dict[str, float]]]) -> list[Row]:
    """One cell's table: per form the median step, its ratio to DDP's, the bytes and rank 0's CPU share."""
    params = next(iter(times.values()))[0]["params"]
    setting = f"{model} ({params / 1e6:.1f}M parameters), {nproc} workers, batch {batch} each"
    out: list[Row] = []
    ddp = statistics.median(t["step_s"] for t in times["ddp"]) if "ddp" in times else None
    for form, ts in times.items():
        step = statistics.median(t["step_s"] for t in ts)
        values = [t["step_s"] for t in ts]
        shown = f"{1000 * step:.1f}" + (f" [{1000 * min(values):.1f}–{1000 * max(values):.1f}]" if len(ts) > 1 else "")
        per_worker, busiest = nominal_bytes(form, nproc, params)
        base = {"policy": FORMS[form], "setting": setting}
        out.append({**base, "metric": "step", "value": 1000 * step, "unit": "ms", "shown": shown})
        if ddp is not None:
            ratio = step / ddp
            ratio_name = f"÷ DDP's (target ≤ {TARGET_RATIO:g})"
            out.append({**base, "metric": ratio_name, "value": ratio, "unit": "x", "shown": f"{ratio:.2f}"})
        out.append({**base, "metric": "bytes/step/worker", "value": per_worker / 1e6, "unit": "MB"})
        out.append({**base, "metric": "bytes/step at the busiest", "value": busiest / 1e6, "unit": "MB"})
        share = statistics.median(t["server_share"] for t in ts) if form != "ddp" else None
        out.append({**base, "metric": "rank 0's CPU", "value": None if share is None else 100 * share, "unit": "%"})
    return out


def plot_ratios(rows: list[Row], path: Path) -> Path:
    """Each hetsync path's step time over DDP's, one group of bars per cell
    (model × workers), with DDP's own (1) and the target (1.05) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios: dict[str, dict[str, float]] = {}
    for r in rows:
        if str(r.get("metric", "")).startswith("÷ DDP's") and r["policy"] != FORMS["ddp"]:
            cell = str(r["setting"]).split(", batch")[0].replace(" parameters)", ")")
            ratios.setdefault(r["policy"], {})[cell] = float(r["value"])
    cells = list(dict.fromkeys(c for by_cell in ratios.values() for c in by_cell))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(cells) + 2), 4.8))
    width = 0.8 / max(1, len(ratios))
    colors = {FORMS["ps"]: "#D55E00", FORMS["collective"]: "#0072B2", FORMS["lb-bsp"]: "#009E73"}
    colors[FORMS["local-sgd"]] = "#CC79A7"
    for k, (form, by_cell) in enumerate(ratios.items()):
        xs = [i + (k - (len(ratios) - 1) / 2) * width for i in range(len(cells))]
        values = [by_cell.get(c, float("nan")) for c in cells]
        bars = ax.bar(xs, values, width, label=form, color=colors.get(form))
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8, label="DDP")
    ax.axhline(TARGET_RATIO, color="black", linewidth=0.8, linestyle="--", label=f"target ≤ {TARGET_RATIO:g}")
    ax.set_xticks(range(len(cells)), [c.replace(", ", "\n") for c in cells], fontsize=8)
    ax.set_ylabel("step time ÷ DDP's")
    ax.set_title("hetsync against DDP, same model and batch (lower is faster)")
    # (below the bars: above them it hid the tallest ones)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
