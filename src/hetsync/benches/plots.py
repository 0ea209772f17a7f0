"""Plots that several benches draw, from a case's runs and traces.

- :func:`case_plots`: a seed's metric curve (and its zoom on the start), the
  shares, a bench's own, and per-worker timelines of chosen policies;
- :func:`plot_batches`: the batch size each worker computed over time, one
  panel per trace, with the background load below (:func:`group_colors`: a colour per kind of worker;
  :func:`scenario_batches`: coloured as the scenario's load or kinds of worker ask);
- :func:`plot_run_bars`: a bar per run for each of a few figures (a panel each);
- :func:`plot_seed_bars`: small multiples of a figure per label and group, the seeds as dots;
- :func:`timelines_in`: the timelines of chosen policies in a folder;
- :func:`drawn`: the files :func:`case_plots` drew, by kind (benches copy them to their pages);
- :func:`compute_records`: a trace's ``compute`` records, what they read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from hetsync import report
from hetsync.report.plots import _label_colors
from hetsync.trace import iter_records

PALETTE = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
OTHER = "#AAAAAA"  # workers not singled out


def plot_timelines(
    runs: list[dict[str, Any]], where: Path, policies: Collection[str], *, window_s: float, max_workers: int
) -> None:
    """The first ``window_s`` of the timeline of every run of ``policies``."""
    for r in runs:
        if r["trace"] and r["policy"] in policies:
            end = min(window_s, r["wall_time_s"])
            report.plot_timeline(
                where / r["trace"],
                where / timeline_name(r["label"]),
                title=f"{r['label']} · {r['scenario']} · first {end:g} s",
                max_workers=max_workers,
                window_s=(0.0, end),
            )


def timeline_name(label: str) -> str:
    """The file :func:`plot_timelines` (and ``hetsync run``) draws a run's timeline in."""
    return f"timeline-{report.safe_name(label)}.png"


def drawn(where: Path, metric: str, labels: Collection[str] = ()) -> dict[str, str]:
    """The plots :func:`case_plots` drew in a seed's folder, that exist: by kind
    the metric's zoom, curve and shares (kinds ``accuracy-zoom``, ``accuracy``,
    ``shares`` for an accuracy target), then the timelines of ``labels`` (kind
    ``timeline-<label>``)."""
    curve = report.metric_plot_name([{"target_metric": metric}])
    files = {kind: f"{kind}.png" for kind in (f"{curve}-zoom", curve, "shares")}
    files |= {timeline_name(label).removesuffix(".png"): timeline_name(label) for label in labels}
    return {kind: str(where / name) for kind, name in files.items() if (where / name).exists()}


def timelines_in(where: Path, policies: Collection[str]) -> list[Path]:
    """The timelines of ``policies``' runs in a folder (``hetsync run`` draws one for every policy)."""
    names = tuple(f"timeline-{p}" for p in policies)
    return [png for png in sorted(where.glob("timeline-*.png")) if png.stem.startswith(names)]


def plot_run_bars(runs: list[dict[str, Any]], figures: list[tuple[str, str]], path: Path, *, title: str) -> Path:
    """A bar panel per figure (``(key, axis label)``), a bar per run (None as 0), in the runs' colours."""
    from matplotlib.figure import Figure

    colors = _label_colors(runs)
    fig = Figure(figsize=(5.5 * len(figures), 3.6), layout="constrained")
    axes = fig.subplots(1, len(figures), squeeze=False)[0]
    y = range(len(runs))
    for k, (ax, (key, label)) in enumerate(zip(axes, figures, strict=True)):
        ax.barh(y, [r[key] or 0.0 for r in runs], color=colors)
        ax.set_xlabel(label)
        ax.set_yticks(list(y), [r["label"] for r in runs] if k == 0 else [""] * len(runs), fontsize=8)
        ax.invert_yaxis()
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.suptitle(title, x=0.01, ha="left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_seed_bars(grid: list[list[dict[str, Any]]], path: Path, *, title: str, xlabel: str) -> Path:
    """Small multiples of a figure's mean over the seeds, each seed a dot: ``grid``
    is rows of panels, a panel ``{"title", "labels", "groups", "xlim"}``, a group
    ``{"name", "means", "seeds", "reference"}`` a bar per label in its colour
    (matplotlib's cycle) and a dashed line at its ``reference`` (None: none)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6 * len(grid[0]), 3.2 * len(grid)), layout="constrained")
    axes = fig.subplots(len(grid), len(grid[0]), squeeze=False)
    for r, row in enumerate(grid):
        for c, panel in enumerate(row):
            ax, n = axes[r][c], len(panel["groups"])
            for k, group in enumerate(panel["groups"]):
                y = [i + (k - (n - 1) / 2) * 0.38 for i in range(len(group["means"]))]
                ax.barh(y, group["means"], height=0.36, color=f"C{k}", label=group["name"])
                for yi, seeds in zip(y, group["seeds"], strict=True):
                    ax.plot(seeds, [yi] * len(seeds), "k.", markersize=4)
                if group["reference"] is not None:
                    ax.axvline(group["reference"], color=f"C{k}", linestyle="--", linewidth=0.8)
            ax.set_yticks(range(len(panel["labels"])), panel["labels"], fontsize=8)
            ax.invert_yaxis()
            ax.set_xlim(*panel["xlim"])
            ax.set_xlabel(xlabel)
            ax.set_title(panel["title"], fontsize=10, loc="left")
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if r == 0 and c == len(row) - 1:
                ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, x=0.01, ha="left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def compute_records(trace: Path) -> list[dict[str, Any]]:
    """The ``compute`` records of a trace: start ``t``, ``end``, worker ``w``, ``step``, ``batch``."""
    return [dict(r) for r in iter_records(trace, kinds={"compute"})]


def case_plots(
    *,
    baselines: Callable[[dict[str, Any]], bool] | None,
    timelines: Collection[str] = (),
    timeline_s: float = 5.0,
    max_workers: int = 8,
    more: Callable[[list[dict[str, Any]], Path, Any], None] | None = None,
) -> Callable[[list[dict[str, Any]], Path, Any], None]:
    """An ``after`` hook for :meth:`Experiment.run_case` that draws a seed's
    plots in its folder: the metric curve, its zoom on the start (to 2.5 × the
    fastest baseline's time to target, rounded up to 10 s; none when that cuts
    nothing, or without ``baselines``), the shares, the bench's ``more`` plots,
    and the first ``timeline_s`` seconds of the per-worker timeline (up to
    ``max_workers`` rows) of each policy in ``timelines``; then prints the
    seed's table. ``baselines`` tells a baseline run from a candidate's."""

    def plot(runs: list[dict[str, Any]], where: Path, sc: Any) -> None:
        curve = report.metric_plot_name(runs)  # accuracy, or the target's metric
        report.plot_metric(runs, where / f"{curve}.png")
        if baselines is not None:
            zoom, zoom_png = zoomed(runs, baselines), where / f"{curve}-zoom.png"
            if zoom and zoom[0]["wall_time_s"] < max(r["wall_time_s"] for r in runs):
                report.plot_metric(zoom, zoom_png)
            else:  # a zoom that cuts nothing would be the plot above again
                zoom_png.unlink(missing_ok=True)
        report.plot_shares(runs, where / "shares.png")
        if more is not None:
            more(runs, where, sc)
        plot_timelines(runs, where, timelines, window_s=timeline_s, max_workers=max_workers)
        report.terminal_console().print(report.summary_table(runs))

    return plot


def zoomed(runs: list[dict[str, Any]], baselines: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The runs cut to the interesting start: 2.5 × the fastest baseline's time to target."""
    ttas = [r["time_to_target_s"] for r in runs if baselines(r) and r["time_to_target_s"] is not None]
    wall = max(r["wall_time_s"] for r in runs)
    end = min(wall, 10 * math.ceil(2.5 * min(ttas) / 10)) if ttas else wall
    curves = ("metric_curve", "accuracy_curve")  # the second: an alias, for accuracy targets
    return [{**r, "wall_time_s": end, **{k: [p for p in r[k] if p[0] <= end] for k in curves if k in r}} for r in runs]


def group_colors(values: Sequence[float], name: Callable[[float], str]) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """A colour per kind of worker (``values``: each worker's, e.g. its slowdown), for
    :func:`plot_batches`: the workers' colours and the legend, a line per kind (``name(value)``)."""
    kinds = sorted(set(values))
    color = {v: PALETTE[[1, 4, 0, 2, 3, 5][i % 6]] for i, v in enumerate(kinds)}
    return {w: color[v] for w, v in enumerate(values)}, [(name(v), color[v]) for v in kinds]


def scenario_batches(
    panels: list[tuple[str, Path]], path: Path, sc: Any, *, title: str = "", virtual: bool = True
) -> Path:
    """:func:`plot_batches` coloured from the scenario ``sc``: with a background
    load, the loaded workers in colour and the load below; otherwise a colour per
    kind of worker (its slowdown) over the first second. ``title`` replaces the
    one that says so."""
    if sc.cluster.background_load is not None:
        title = title or f"{sc.name}: batch size per worker (loaded workers in colour, the others grey)"
        return plot_batches(panels, path, title=title, load=sc.cluster.background_load, virtual=virtual)
    fastest = min(sc.cluster.slowdown)
    colors, legend = group_colors(sc.cluster.slowdown, lambda s: "fastest" if s == fastest else f"{s:g}x slower")
    title = title or f"{sc.name}: batch size per worker over the first second"
    window_s = min(1.0, sc.stop.max_time_s or 1.0)
    return plot_batches(panels, path, title=title, colors=colors, legend=legend, window_s=window_s, virtual=virtual)


def plot_batches(
    panels: list[tuple[str, Path]],
    path: Path,
    *,
    title: str,
    colors: dict[int, str] | None = None,
    legend: list[tuple[str, str]] | None = None,
    window_s: float | None = None,
    load: Any = None,
    virtual: bool = True,
) -> Path:
    """Batch size over time per worker, one panel per trace (workers not in ``colors`` in grey);
    with ``load`` (a BackgroundLoad), a last panel shows when each loaded worker's load is on,
    and ``colors`` and ``legend`` default to a colour per loaded worker, the others grey."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    if colors is None:
        colors = {w: PALETTE[k % len(PALETTE)] for k, w in enumerate(load.workers if load is not None else ())}
    if legend is None:
        legend = [(f"w{w}", c) for w, c in colors.items()] + [("unloaded", OTHER)]

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
                color=colors.get(w, OTHER),
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
            ax.fill_between(ts, k - 0.38, k + 0.38, where=on, step="post", color=colors.get(w, OTHER), linewidth=0)
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
