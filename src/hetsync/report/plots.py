"""The comparison's PNG charts: the target metric against time, the time shares, the timelines.

* :func:`plot_metric` (the target metric against time; ``plot_accuracy`` is
  the same function), :func:`plot_shares` and :func:`plot_timeline` each
  write one PNG; :func:`write_report` writes all of them for a comparison.
* :func:`timeline_window` is the time window :func:`plot_timeline` shows by
  default, :func:`switch_window` the one around a policy's switch;
  :func:`timeline_names` names each run's timeline file.
* A run whose policy switched (``auto``: its switch notes) has its phases
  marked on the metric plot and its timelines: a line at each switch, the
  policy in force named over each phase.

Charts use matplotlib's object-oriented API with the Agg canvas, so no GUI
backend is touched. A run keeps the same colour in every chart: the colour
of its position in ``runs`` (tab10's nine colours, then five darker ones;
tab10's grey is left out, as the panels draw every other run in grey).

Traces of large runs can be hundreds of megabytes, so they are streamed line
by line (``hetsync.trace.iter_records``) and only records of the displayed
workers inside the displayed window are kept.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter

from hetsync.errors import BadInput
from hetsync.outdir import safe_name
from hetsync.report.common import (
    _MIN_METRICS,
    _curve,
    _direction,
    _distinct,
    _finite,
    _fmt_seconds,
    _metric,
    _metrics,
    _target_value,
    metric_plot_name,
)
from hetsync.summary import policy_phases
from hetsync.trace import INTERVAL_KINDS, iter_records

DPI = 130
"""Resolution of every PNG written here."""

TIMELINE_STEPS = 12
"""The default timeline window lasts until the slowest displayed worker has
computed this many steps."""

SWITCH_TIMELINES = 3
"""A run whose policy switched (``auto``) gets a timeline around each of its
first this many switches, besides the one of its first steps."""

SWITCH_LINESTYLE = "-."
"""Vertical lines at a policy's switches (the target lines are dashed)."""

# Okabe-Ito colours (distinguishable with colour-vision deficiencies).
COMPUTE_COLOR = "#009E73"
PUSH_COLOR = "#0072B2"
PULL_COLOR = "#56B4E9"
WAIT_COLOR = "#BBBBBB"
_WAIT_BACKGROUND = "#F1F1F1"
_PHASE_FONT_PT = 8.5  # the names of a policy's phases
_PHASE_LINE_PT = 1.4 * _PHASE_FONT_PT  # a line of them
_SWITCH_COLOR = "#D55E00"  # a policy's switch on a timeline (Okabe-Ito vermilion)
_WAIT_HATCH_COLOR = "#C8C8C8"
# one per run, in order: tab10 less its grey (the panels' field of other runs is grey), then five darker colours
_LABEL_COLORS = [h for h in map(to_hex, colormaps["tab10"].colors) if h != "#7f7f7f"] + [
    "#1a1a1a",
    "#b8860b",
    "#4b0082",
    "#008080",
    "#800000",
]
_SHARE_INSIDE_MIN = 6.0  # percent: a narrower bar segment has its number beside the bar


def _label_colors(runs: Sequence[dict[str, Any]]) -> list[str]:
    return [_LABEL_COLORS[i % len(_LABEL_COLORS)] for i in range(len(runs))]


def _save(fig: Figure, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(out, dpi=DPI)
    return out


# ---------------------------------------------------------------------------
# the metric and shares


def _first_reach(curve: Sequence[Sequence[float]], tta: float) -> float | None:
    """Value of the first evaluation at or after ``tta`` (None if none)."""
    for t, value in curve:
        if t >= tta - 1e-9:
            return value
    return None


def _log_scale(metrics: list[str], values: list[float]) -> bool:
    """Perplexity always, and a loss spanning a factor of 10 or more, read
    better on a log axis (when every value is positive)."""
    if not values or min(values) <= 0 or not all(m in _MIN_METRICS for m in metrics):
        return False
    return "perplexity" in metrics or max(values) >= 10 * min(values)


def _tta_note(run: dict[str, Any]) -> str:
    tta = run.get("time_to_target_s")
    if not _curve(run):
        return "no evaluations"
    return f"target at {_fmt_seconds(tta)} s" if _finite(tta) else "target not reached"


def _wrap_label(label: str, width: int = 36) -> str:
    """A long policy label on lines of at most ``width`` characters, broken
    after commas (small-multiple panel titles would run into each other)."""
    lines = [""]
    for part in label.replace(",", ",\0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _draw_curve(ax: Axes, run: dict[str, Any], color: str, *, label: str | None, linewidth: float = 1.8) -> None:
    """One run's metric curve, and a dot where it first reached the target."""
    curve = _curve(run)
    ax.plot([t for t, _ in curve], [v for _, v in curve], color=color, linewidth=linewidth, label=label, zorder=3)
    tta = run.get("time_to_target_s")
    reached = _first_reach(curve, tta) if curve and _finite(tta) else None
    if reached is not None:
        ax.plot(
            [tta],
            [reached],
            marker="o",
            markersize=8,
            color=color,
            markeredgecolor="white",
            markeredgewidth=1.5,
            zorder=5,
        )


def _draw_phases(
    ax: Axes,
    phases: Sequence[tuple[float, str]],
    window: tuple[float, float],
    *,
    color: str,
    row: int = 0,
    label: str | None = None,
    names: bool = True,
    prefix: str = "",
    above: bool = False,
) -> int:
    """Mark a run's policy phases (:func:`hetsync.summary.policy_phases`) on
    ``ax`` inside ``window``: a vertical line (gid ``switch``) at each switch,
    and with ``names`` the policy in force at the top of each phase (gid
    ``phase``, after ``prefix``; ``row`` stacks the names of several runs,
    two lines each: a name that would run into the one before goes on the
    second line, and is left out where both are taken — the lines and the
    report still show the switch; ``above``: over the axes, where no curve
    runs, the title raised by :func:`_phase_pad`). ``label`` names the first
    line in the legend. Returns the lines drawn; nothing for a run without
    phases."""
    lo, hi = window
    lines = 0
    fig = ax.get_figure()
    axes_in = ax.get_position().width * (fig.get_figwidth() if fig is not None else 8.0)
    char = _PHASE_FONT_PT * 0.62 / 72 / max(axes_in, 0.1)  # about a character's width, in axes fractions
    ends = [-math.inf, -math.inf]  # where the last name on each of the run's two lines ends
    for k, (t, name) in enumerate(phases):
        end = phases[k + 1][0] if k + 1 < len(phases) else math.inf
        if end <= lo or t >= hi:
            continue
        if t > lo:
            ax.axvline(t, color=color, linestyle=SWITCH_LINESTYLE, linewidth=1.3, zorder=4, gid="switch", label=label)
            label = None
            lines += 1
        if not names:
            continue
        x = (max(t, lo) - lo) / (hi - lo)
        free = next((i for i, end_x in enumerate(ends) if x >= end_x), None)
        if free is not None:
            ends[free] = x + (len(prefix + name) + 1) * char
            ax.annotate(
                prefix + name,
                xy=(max(t, lo), 1),
                xycoords=("data", "axes fraction"),
                xytext=(3, (2 if above else -3) + (1 if above else -1) * _PHASE_LINE_PT * (2 * row + free)),
                textcoords="offset points",
                ha="left",
                va="bottom" if above else "top",
                annotation_clip=False,
                fontsize=_PHASE_FONT_PT,
                color=color,
                gid="phase",
                zorder=6,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
            )
    return lines


def _phase_pad(runs_marked: int) -> float:
    """The title's pad (points) over the names of ``runs_marked`` runs' phases (two lines each)."""
    return 6.0 + 2 * runs_marked * _PHASE_LINE_PT if runs_marked else 6.0


def _run_phases(run: dict[str, Any]) -> list[tuple[float, str]]:
    notes = run.get("policy_notes")
    return policy_phases(notes) if isinstance(notes, list) else []


@dataclass
class _MetricAxes:
    """What every panel of a metric plot shares: the metric, the targets, the scales."""

    metrics: list[str]
    targets: list[tuple[float, str, str]]  # (value, direction, metric)
    log: bool
    x_max: float
    virtual: bool

    @classmethod
    def of(cls, runs: Sequence[dict[str, Any]]) -> _MetricAxes:
        metrics = _metrics(runs) or ["accuracy"]
        targets = sorted(
            {(float(_target_value(r)), _direction(r), _metric(r)) for r in runs if _finite(_target_value(r))}
        )
        plotted = [v for r in runs for _, v in _curve(r) if math.isfinite(v)]
        x_max = max([0.0, *(r.get("wall_time_s") or 0.0 for r in runs), *(t for r in runs for t, _ in _curve(r))])
        virtual = bool(runs) and all(r.get("driver") == "sim" for r in runs)
        return cls(metrics, targets, _log_scale(metrics, plotted + [t for t, _, _ in targets]), x_max, virtual)

    @property
    def name(self) -> str:
        return self.metrics[0] if len(self.metrics) == 1 else "metric (" + ", ".join(self.metrics) + ")"

    def target_text(self, target: float, direction: str, metric: str) -> str:
        # with mixed metrics, each line says whose target it is
        return f"{metric + ' ' if len(self.metrics) > 1 else ''}target {'≤ ' if direction == 'min' else ''}{target:g}"

    def style(self, ax: Axes, *, label_targets: bool) -> None:
        """Scale, target lines, limits and grid of one panel. ``label_targets``:
        name each target line in the right margin, outside the axes, where no
        curve can draw over the label."""
        if self.log:
            ax.set_yscale("log")
            # 20, 50, 100, 200, ... read better than powers of ten alone
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        for target, direction, metric in self.targets:
            ax.axhline(target, color="0.35", linestyle="--", linewidth=1.1, zorder=1)
            if label_targets:
                ax.annotate(
                    self.target_text(target, direction, metric),
                    xy=(1, target),
                    xycoords=("axes fraction", "data"),
                    xytext=(4, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=9,
                    color="0.3",
                    annotation_clip=False,
                )
        ax.set_xlim(0, self.x_max if self.x_max > 0 else 1.0)
        ax.grid(True, color="0.9", linewidth=0.8)
        ax.set_axisbelow(True)

    @property
    def xlabel(self) -> str:
        return "time (s, virtual)" if self.virtual else "time (s)"

    @property
    def ylabel(self) -> str:
        return f"test {self.name}" + (" (log scale)" if self.log else "")


SMALL_MULTIPLES_MIN = 5
"""From this many runs on, the metric plot draws one small panel per run
(the others in grey behind it) instead of one tangle of coloured curves."""


def plot_metric(runs: list[dict[str, Any]], path: str | Path) -> Path:
    """Plot the target metric against time for every run; return the PNG path.

    The metric is the runs' ``target_metric`` (accuracy for summaries from
    before metrics); a dashed line marks the target (named in the right
    margin, where no curve draws over it) and a dot the time each run first
    reached it (``time_to_target_s``: at or above the line for a metric to
    maximize, at or below it for one to minimize); runs that never did get no
    dot and say so. Perplexity, and a loss that spans a factor of 10, are
    drawn on a log axis.

    A run whose policy switched (``auto``'s switch notes in its
    ``policy_notes``) has a line in its colour at each switch and the policy
    in force named over each phase, above the axes.

    Up to ``SMALL_MULTIPLES_MIN - 1`` runs share one axes. More get small
    multiples: one panel per run, fastest to the target first, the run in its
    colour over every other run in light grey, so each curve can be read and
    compared with the field.
    """
    if len(runs) >= SMALL_MULTIPLES_MIN:
        return _plot_metric_panels(runs, path)
    shape = _MetricAxes.of(runs)
    fig = Figure(figsize=(8.6, 5), layout="constrained")
    ax = fig.add_subplot()
    switched = 0  # runs whose phases are marked (their names stacked at the top)
    for run, color in zip(runs, _label_colors(runs), strict=True):
        _draw_curve(ax, run, color, label=f"{run.get('label', '?')}  ({_tta_note(run)})")
        phases = _run_phases(run)
        if phases:
            window = (0.0, shape.x_max if shape.x_max > 0 else 1.0)
            label = f"{run.get('label', '?')}: switch of policy (the one in force named above the plot)"
            _draw_phases(ax, phases, window, color=color, row=switched, label=label, above=True)
            switched += 1
    shape.style(ax, label_targets=True)
    ax.set_xlabel(shape.xlabel)
    ax.set_ylabel(shape.ylabel)
    if not any(_curve(r) for r in runs) and shape.metrics == ["accuracy"]:
        ax.set_ylim(0, 1)
    ax.set_title(f"Test {shape.name} · {_distinct(runs, 'scenario')}", loc="left", pad=_phase_pad(switched))
    if runs:
        ax.legend(loc="best", fontsize=9, framealpha=0.92)
    return _save(fig, path)


def _by_time_to_target(runs: Sequence[dict[str, Any]]) -> list[int]:
    """Run indices, those that reached the target first (fastest first), in
    their order otherwise."""
    return sorted(
        range(len(runs)),
        key=lambda i: (0, runs[i]["time_to_target_s"], i) if _finite(runs[i].get("time_to_target_s")) else (1, 0.0, i),
    )


def _plot_metric_panels(runs: list[dict[str, Any]], path: str | Path) -> Path:
    shape = _MetricAxes.of(runs)
    colors = _label_colors(runs)
    n = len(runs)
    ncols = 4 if n > 9 or n in (7, 8) else 3
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(3.3 * ncols, 0.7 + 2.35 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    order = _by_time_to_target(runs)
    best = runs[order[0]].get("time_to_target_s")  # bold for the fastest, ties included
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.set_visible(False)
            continue
        i = order[k]
        for j, other in enumerate(runs):  # the field, in grey, behind the run
            if j != i:
                curve = _curve(other)
                ax.plot([t for t, _ in curve], [v for _, v in curve], color="0.83", linewidth=0.9, zorder=2)
        _draw_curve(ax, runs[i], colors[i], label=None, linewidth=2.0)
        phases = _run_phases(runs[i])
        if phases:
            _draw_phases(ax, phases, (0.0, shape.x_max if shape.x_max > 0 else 1.0), color=colors[i], above=True)
        shape.style(ax, label_targets=False)
        ax.set_title(
            f"{_wrap_label(str(runs[i].get('label', '?')))}\n{_tta_note(runs[i])}",
            pad=_phase_pad(1 if phases else 0),
            loc="left",
            fontsize=9,
            color=colors[i],
            fontweight="bold" if _finite(best) and runs[i].get("time_to_target_s") == best else "normal",
        )
        ax.tick_params(labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    if not any(_curve(r) for r in runs) and shape.metrics == ["accuracy"]:
        axes.flat[0].set_ylim(0, 1)
    targets = "; ".join(shape.target_text(*t) for t in shape.targets) or "no target"
    fig.suptitle(
        f"Test {shape.name} · {_distinct(runs, 'scenario')} · dashed: {targets} · "
        "panels fastest to the target first, every other run in grey",
        x=0.01,
        ha="left",
        fontsize=11,
    )
    fig.supxlabel(shape.xlabel, fontsize=10)
    fig.supylabel(shape.ylabel, fontsize=10)
    return _save(fig, path)


plot_accuracy = plot_metric
"""The metric plot under its first name (it drew accuracy only)."""


def plot_shares(runs: list[dict[str, Any]], path: str | Path) -> Path:
    """Plot each run's compute / comm / wait share as a stacked bar; return the path.

    Bars are horizontal, first run at the top; the legend sits under the bars
    (long run labels and the title never meet it). A segment wide enough for
    its percentage carries it inside; the percentages of narrower segments
    (above 0.05 %) follow the bar in the right margin, in the segment's colour.
    """
    n = len(runs)
    fig = Figure(figsize=(9, 1.9 + 0.5 * max(n, 1)), layout="constrained")
    ax = fig.add_subplot()
    parts = (
        ("compute", "compute_share", COMPUTE_COLOR, "white"),
        ("comm", "comm_share", PUSH_COLOR, "white"),
        ("wait", "wait_share", WAIT_COLOR, "black"),
    )
    rows = range(n)
    left = [0.0] * n
    margin: list[list[tuple[str, str]]] = [[] for _ in rows]  # (text, colour) of the narrow segments
    for name, key, color, text_color in parts:
        widths = [100 * r[key] if _finite(r.get(key)) else 0.0 for r in runs]
        bars = ax.barh(rows, widths, left=left, height=0.62, color=color, label=name)
        labels = [f"{w:.1f}%" if w >= _SHARE_INSIDE_MIN else "" for w in widths]
        ax.bar_label(bars, labels=labels, label_type="center", color=text_color, fontsize=9)
        for i, w in enumerate(widths):
            if 0.05 <= w < _SHARE_INSIDE_MIN:
                # the wait grey is too light for text: a darker grey says the same
                margin[i].append((f"{name} {w:.1f}%", "0.45" if name == "wait" else color))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for i, texts in enumerate(margin):
        x = 0.0
        for text, color in texts:
            ax.annotate(
                text,
                xy=(100, i),
                xytext=(5 + x, 0),
                textcoords="offset points",
                va="center",
                fontsize=8.5,
                color=color,
                annotation_clip=False,
            )
            x += 5.4 * len(text) + 8  # about the text's width in points at this size

    ax.set_yticks(list(rows), [str(r.get("label", "?")) for r in runs])
    for tick, color in zip(ax.get_yticklabels(), _label_colors(runs), strict=True):
        tick.set_color(color)
        tick.set_fontweight("bold")
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.xaxis.set_major_formatter(PercentFormatter(decimals=0))
    ax.set_xlabel("share of N × wall time")
    ax.set_title(f"Where worker time goes · {_distinct(runs, 'scenario')}", loc="left")
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.legend(
        handles=[Patch(facecolor=color, label=name) for name, _, color, _ in parts],
        loc="outside lower center",
        ncol=3,
        frameon=False,
        fontsize=9,
        handlelength=1.2,
        columnspacing=1.4,
    )
    return _save(fig, path)


# ---------------------------------------------------------------------------
# traces and the timeline

# peer to peer: a "send" is drawn as an upload on the sender's row and a
# download on the receiver's; an "allreduce" as an upload
_INTERVALS = INTERVAL_KINDS


@dataclass
class _Scan:
    """What the first pass over a trace learns about the displayed workers."""

    steps: int
    run_end: float | None = None
    last_seen: float = 0.0
    earliest_ends: dict[int, list[float]] = field(default_factory=dict)

    def add(self, rec: dict[str, Any]) -> None:
        if rec["ev"] == "end":
            self.run_end = float(rec.get("wall_time_s", rec["t"]))
            return
        end = float(rec["end"])
        self.last_seen = max(self.last_seen, end)
        # Max-heap (negated) of the `steps` earliest compute ends of the worker.
        heap = self.earliest_ends.setdefault(rec["w"], [])
        if len(heap) < self.steps:
            heapq.heappush(heap, -end)
        elif end < -heap[0]:
            heapq.heapreplace(heap, -end)

    def window(self) -> tuple[float, float]:
        run_end = self.run_end if self.run_end is not None else self.last_seen
        # A worker that computed fewer steps in the whole run needs the run end.
        ends = [-h[0] if len(h) == self.steps else run_end for h in self.earliest_ends.values()]
        end = min(run_end, 1.02 * max(ends)) if ends else run_end
        return (0.0, end if end > 0 else 1.0)


def switch_window(
    trace_path: str | Path, at_s: float, *, max_workers: int = 16, steps: int = TIMELINE_STEPS // 2
) -> tuple[float, float]:
    """A timeline window around a switch at ``at_s``: from the start of the
    ``steps``-th last step each displayed worker started before it, to the
    end of the ``steps``-th step each started from it on (the run's end for
    a worker that started fewer, but some), so the slowest shows as many
    steps on each side as the others."""
    before: dict[int, list[float]] = {}  # per worker: min-heap of its latest `steps` starts before at_s
    after: dict[int, list[float]] = {}  # per worker: max-heap (negated) of its earliest `steps` ends from at_s
    last = at_s
    for rec in iter_records(trace_path, kinds=("compute", "end"), workers=range(max_workers)):
        if rec["ev"] == "end":
            last = max(last, float(rec.get("wall_time_s", rec["t"])))
            continue
        t, end, w = float(rec["t"]), float(rec["end"]), rec["w"]
        last = max(last, end)
        if t < at_s:
            heap = before.setdefault(w, [])
            (heapq.heappush if len(heap) < steps else heapq.heappushpop)(heap, t)
        else:
            heap = after.setdefault(w, [])
            (heapq.heappush if len(heap) < steps else heapq.heappushpop)(heap, -end)
    lo = min((h[0] for h in before.values()), default=0.0)
    ends = [-min(h) if len(h) == steps else last for h in after.values()]
    hi = max(ends) if ends else last
    return (lo, max(hi, at_s + 1e-9))


def timeline_window(
    trace_path: str | Path, *, max_workers: int = 16, steps: int = TIMELINE_STEPS
) -> tuple[float, float]:
    """Return the default ``(start, end)`` window of :func:`plot_timeline`.

    The window starts at 0 and ends just after (2 %) the slowest of workers
    ``0 .. max_workers-1`` has finished ``steps`` compute steps, or at the run
    end if that comes first (or if a displayed worker computed fewer steps in
    the whole run). Workers that never computed are ignored. The run end is
    the ``end`` record's ``wall_time_s``, else the last compute end seen.
    """
    scan = _Scan(steps=steps)
    for rec in iter_records(trace_path, kinds=("compute", "end"), workers=range(max_workers)):
        scan.add(rec)
    return scan.window()


@dataclass
class _Timeline:
    """Intervals and update times of the displayed workers inside the window."""

    workers: int | None = None
    bars: dict[str, dict[int, list[tuple[float, float]]]] = field(
        default_factory=lambda: {kind: {} for kind in _INTERVALS}
    )
    batches: dict[int, list[tuple[float, float, int]]] = field(default_factory=dict)  # (start, length, batch)
    applies: list[float] = field(default_factory=list)
    p2p: bool = False
    notes: list[dict[str, Any]] = field(default_factory=list)  # the policy's, up to the window's end


def _collect(path: Path, max_workers: int, window: tuple[float, float]) -> _Timeline:
    """The window's bars. Peer to peer has no ``apply``: its updates are the
    finished exchanges, as the summary's ``updates`` counts them (a multicast
    when its last copy arrives, an all-reduce when it ends)."""
    lo, hi = window
    out = _Timeline()
    multicasts: dict[tuple[int, float], float] = {}  # (sender, start) -> last arrival
    # one pass: the start (at any t), and what starts before the window ends
    kinds = ("start", "apply", "note", *_INTERVALS)
    for rec in iter_records(path, kinds=kinds, workers=range(max_workers), until_s=hi):
        kind = rec["ev"]
        if kind == "start":
            out.workers = rec.get("workers")
        elif kind == "note":
            out.notes.append(rec)
        elif kind == "apply":
            if rec["t"] >= lo:
                out.applies.append(float(rec["t"]))
        elif rec["end"] > lo:
            t, end = float(rec["t"]), float(rec["end"])
            bar = (t, end - t)
            if kind in ("send", "allreduce"):
                out.p2p = True
                out.bars["push"].setdefault(rec["w"], []).append(bar)
                if kind == "send":
                    key = (rec["w"], t)
                    multicasts[key] = max(multicasts.get(key, end), end)
                    if rec["to"] < max_workers:
                        out.bars["pull"].setdefault(rec["to"], []).append(bar)
                elif end <= hi:
                    out.applies.append(end)
            else:
                out.bars[kind].setdefault(rec["w"], []).append(bar)
                if kind == "compute" and "batch" in rec:
                    out.batches.setdefault(rec["w"], []).append((t, end - t, int(rec["batch"])))
    out.applies += [end for end in multicasts.values() if lo <= end <= hi]
    return out


def _overlaps(bars: list[tuple[float, float]], others: list[tuple[float, float]]) -> bool:
    """Whether any interval of ``bars`` intersects one of ``others`` (``(start, length)`` each)."""
    if not bars or not others:
        return False
    spans = sorted(others)
    starts = [s for s, _ in spans]
    reach = list(itertools.accumulate((s + d for s, d in spans), max))  # furthest end so far
    for start, length in bars:
        k = bisect.bisect_left(starts, start + length)  # the others that start before this bar ends
        if k and reach[k - 1] > start:
            return True
    return False


def plot_timeline(
    trace_path: str | Path,
    path: str | Path,
    *,
    title: str,
    max_workers: int = 16,
    window_s: tuple[float, float] | None = None,
    phases: Sequence[tuple[float, str]] | None = None,
) -> Path:
    """Draw a per-worker Gantt chart of a trace; return the PNG path.

    One row per worker (worker 0 at the top) for the first ``max_workers``
    workers: compute, push and pull intervals as bars (peer to peer: sends and
    all-reduces on the upper half of the row, copies received on the lower
    half), waiting as the hatched background. A transfer that runs while the
    worker computes (WBSP-overlap's background channel) shows as a thin strip
    over the compute bar: at the bottom of the row for push and receive, at
    the top for send. When the batch size varies (LB-BSP) every compute bar
    wide enough says its batch. Ticks in a strip above mark global model
    updates: ``apply`` records, or in peer-to-peer runs the finished exchanges
    of the displayed workers. A run whose policy switched (``auto``'s
    ``note`` records) has a line at each switch in the window and the policy
    in force named in the updates strip: ``phases``
    (:func:`hetsync.summary.policy_phases` of its summary's notes), by
    default read from the trace's notes up to the window's end.
    ``window_s`` is the time window shown; by default :func:`timeline_window`.
    The file is streamed (twice when the window is chosen automatically).
    """
    trace = Path(trace_path)
    window = window_s or timeline_window(trace, max_workers=max_workers)
    lo, hi = window
    if not hi > lo:
        raise BadInput(f"timeline window must be (start, end) with end > start, got {window_s}")
    data = _collect(trace, max_workers, window)

    seen = max((w + 1 for per_worker in data.bars.values() for w in per_worker), default=0)
    shown = min(data.workers, max_workers) if data.workers else min(max(seen, 1), max_workers)
    if data.workers and data.workers > shown:
        which = "worker 0" if shown == 1 else f"workers 0–{shown - 1}"
        title = f"{title} · {which} of {data.workers}"
    batch_values = {b for w in range(shown) for _, _, b in data.batches.get(w, [])}
    label_batches = len(batch_values) > 1
    if label_batches:
        title = f"{title} · numbers: batch size"

    row_inches = 0.34
    fig = Figure(figsize=(11, 1.9 + row_inches * shown), layout="constrained")
    top, ax = fig.subplots(2, 1, sharex=True, height_ratios=[0.3, max(row_inches * shown, 0.6)])
    _draw_updates(top, data.applies, window)
    phases = policy_phases(data.notes) if phases is None else phases
    switches = 0
    if phases:  # the policy in force named in the updates strip, a line at each switch across both
        _draw_phases(top, phases, window, color=_SWITCH_COLOR, prefix="policy: ")
        switches = _draw_phases(ax, phases, window, color=_SWITCH_COLOR, names=False)
    height = 0.72
    strip = 0.24 * height
    behind = False  # whether any transfer runs while its worker computes
    for w in range(shown):
        y = w - height / 2
        ax.broken_barh(
            [(lo, hi - lo)],
            (y, height),
            facecolor=_WAIT_BACKGROUND,
            edgecolor=_WAIT_HATCH_COLOR,
            hatch="////",
            linewidth=0,
        )
        computes = data.bars["compute"].get(w, [])
        transfers = []
        for k, (kind, color) in enumerate((("push", PUSH_COLOR), ("pull", PULL_COLOR))):
            # peer to peer: a worker sends and receives at once; sends on the upper half, receives below
            band = (y + k * height / 2, height / 2) if data.p2p else (y, height)
            ax.broken_barh(data.bars[kind].get(w, []), band, facecolor=color)
            over = y if data.p2p and k == 0 else y + height - strip  # the strip drawn over compute
            transfers.append((data.bars[kind].get(w, []), over, color))
        ax.broken_barh(computes, (y, height), facecolor=COMPUTE_COLOR, edgecolor="white", linewidth=0.6)
        for bars, over, color in transfers:
            if _overlaps(bars, computes):
                behind = True
                ax.broken_barh(bars, (over, strip), facecolor=color, edgecolor="white", linewidth=0.3, zorder=3)
        if label_batches:
            _label_batches(ax, data.batches.get(w, []), w, window)

    ax.set_xlim(lo, hi)
    ax.set_ylim(shown - 0.5, -0.5)
    ax.set_yticks(range(shown), [f"w{w}" for w in range(shown)], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("time (s)")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    top.set_title(title, loc="left")
    handles = [
        Patch(facecolor=COMPUTE_COLOR, label="compute"),
        Patch(facecolor=PUSH_COLOR, label="send" if data.p2p else "push"),
        Patch(facecolor=PULL_COLOR, label="receive" if data.p2p else "pull"),
        Patch(facecolor=_WAIT_BACKGROUND, edgecolor=_WAIT_HATCH_COLOR, hatch="////", label="wait"),
    ]
    if behind:
        handles.append(Patch(facecolor="none", edgecolor="none", label="(thin strip on compute: transfer behind it)"))
    if switches:
        handles.append(Line2D([], [], color=_SWITCH_COLOR, linestyle=SWITCH_LINESTYLE, label="switch of policy"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False, fontsize=9)
    return _save(fig, path)


_TIMELINE_AXES_PX = 11 * DPI * 0.9  # about the width of the timeline's bars area, in pixels


def _label_batches(ax: Axes, batches: list[tuple[float, float, int]], row: int, window: tuple[float, float]) -> None:
    """Write each compute bar's batch size inside it, where the number fits."""
    lo, hi = window
    px_per_s = _TIMELINE_AXES_PX / (hi - lo)
    for start, length, batch in batches:
        text = str(batch)
        visible = min(start + length, hi) - max(start, lo)
        if visible * px_per_s >= 7 * len(text) + 4:  # about 6.5 pixels a digit at 7.5 pt
            mid = (max(start, lo) + min(start + length, hi)) / 2
            ax.text(mid, row, text, ha="center", va="center", fontsize=7.5, color="white", zorder=4)


def _draw_updates(ax: Axes, applies: list[float], window: tuple[float, float]) -> None:
    # Updates closer than about a pixel are drawn once: dense runs stay fast.
    lo, hi = window
    pixel = (hi - lo) / 2000
    ticks = sorted({lo + pixel * round((t - lo) / pixel) for t in applies})
    ax.vlines(ticks, 0, 1, color="0.25", linewidth=0.8)
    ax.set_ylim(0, 1)
    ax.set_yticks([0.5], ["updates"], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", bottom=False)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


# ---------------------------------------------------------------------------
# every plot of a comparison


def write_report(runs: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Write the metric plot, ``shares.png`` and one timeline per run.

    The metric plot is ``accuracy.png`` for accuracy targets and
    ``<metric>.png`` otherwise (e.g. ``perplexity.png``; see
    :func:`metric_plot_name`).

    Timelines are ``timeline-<safe_name(label)>.png``, drawn from the trace
    named by ``run["trace"]`` (relative to ``out_dir``); a run whose
    ``trace`` is null or missing gets none. A run whose policy switched
    gets ``timeline-<name>-switch-<k>.png`` too, around its k-th switch
    (:func:`switch_window`; the first ``SWITCH_TIMELINES``). Returns the
    paths written.
    """
    out = Path(out_dir)
    paths = [plot_metric(runs, out / f"{metric_plot_name(runs)}.png"), plot_shares(runs, out / "shares.png")]
    for run, name in zip(runs, timeline_names(runs), strict=True):
        if not run.get("trace") or not (out / run["trace"]).is_file():
            continue
        title = f"{run.get('label', '?')} · {run.get('scenario', '?')}"
        phases = _run_phases(run)
        paths.append(plot_timeline(out / run["trace"], out / f"timeline-{name}.png", title=title, phases=phases))
        for k, (t, policy) in enumerate(phases[1 : 1 + SWITCH_TIMELINES], 1):
            where = f"{title} · switch to {policy} at {t:.2f} s"
            paths.append(
                plot_timeline(
                    out / run["trace"],
                    out / f"timeline-{name}-switch-{k}.png",
                    title=where,
                    window_s=switch_window(out / run["trace"], t),
                    phases=phases,
                )
            )
    return paths


def timeline_names(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Each run's timeline name (``timeline-<name>.png``): :func:`safe_name`
    of its label, with ``-2``, ``-3``, ... after a name already taken."""
    used: set[str] = set()
    names = []
    for run in runs:
        name = base = safe_name(str(run.get("label", "run")))
        suffix = 2
        while name in used:
            name, suffix = f"{base}-{suffix}", suffix + 1
        used.add(name)
        names.append(name)
    return names
