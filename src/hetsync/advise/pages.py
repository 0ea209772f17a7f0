"""What ``hetsync advise`` shows and writes: the tables, the plot and the page.

The ranking and the verification as tables (:func:`table_rows` and
:func:`verification_rows` are the cells the terminal's rich tables and the
HTML page share), the time-to-target plot (:func:`plot_tta`), and
:func:`write_outputs`: ``advice.json`` and, with plots, ``advice-tta.png``
and ``advice.html`` (the recommendation, the features, the ranking, the
verification, then the seed-0 comparison as :func:`hetsync.report.write_html`
writes it). ``summary.json`` (the seed-0 runs, as ``hetsync compare`` writes
it, so ``hetsync report DIR`` works) is written while the runs go
(:func:`hetsync.advise.advice.advise`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from hetsync.advise.advice import BASELINE, Advice, Features, Ranked, _fmt_ms, _fmt_pct, _fmt_range, _fmt_s, speedup
from hetsync.advise.verification import Verification, Verified

ADVICE_JSON = "advice.json"
ADVICE_HTML = "advice.html"
TTA_PLOT = "advice-tta.png"
"""What advise writes besides a comparison folder's files (removed before a new advice)."""
PLOTTED_RUNS = 4
"""The comparison part of the page plots the seed-0 curves and timelines of this many top candidates (and BSP)."""


def seed_range(r: Ranked) -> str:
    """min–max of the time to target over the seeds; an unreached seed shows as > its run's length."""
    if r.failed:
        return "failed"
    if not r.tta_s:
        return "—"
    lo = r.min_tta_s
    hi = r.max_tta_s
    limits = [t for t, tta in zip(r.limit_s, r.tta_s, strict=False) if tta is None and t is not None]
    hi_text = _fmt_s(hi) if math.isfinite(hi) else (f">{_fmt_s(max(limits))}" if limits else "—")
    if lo is None:
        return "not reached"
    return _fmt_s(lo) if len(r.tta_s) == 1 else f"{_fmt_s(lo)}–{hi_text}"


def table_rows(advice: Advice) -> tuple[list[str], list[list[str]]]:
    """The ranking's headers and cells, shared by the terminal and the HTML page."""
    n = len(advice.seeds)
    metric = advice.scenario.stop.target.metric
    headers = [
        "#",
        "candidate",
        "TTA median (s)",
        f"TTA range over {n} seeds",
        "reached",
        "vs BSP",
        f"final {metric}",
        "wait",
        "samples/s",
    ]
    base = advice.baseline
    rows = []
    for r in advice.ranked:
        gain, span = speedup(r, base)
        if r is base:
            vs = "reference"
        elif gain is None:
            vs = "—"
        else:
            vs = f"{gain:.2f}×" + (f" ({_fmt_range(span)})" if span and n > 1 else "")
        final = r.median_final
        wait_s = r.median_of(r.wait_share)
        rate = r.median_of(r.samples_per_s)
        rows.append(
            [
                str(r.rank),
                r.label,
                _fmt_s(r.median_tta_s),
                seed_range(r),
                f"{r.reached}/{len(r.tta_s)}",
                vs,
                "—" if final is None else f"{final:.3g}",
                "—" if wait_s is None else f"{wait_s:.0%}",
                "—" if rate is None else f"{rate:,.0f}",
            ]
        )
    return headers, rows


def ranking_table(advice: Advice) -> Any:
    """The ranking as a rich table; every cell is literal text (labels come from users)."""
    from rich.table import Table
    from rich.text import Text

    sc = advice.scenario
    limit = f", {_fmt_s(sc.stop.max_time_s)} s each" if sc.stop.max_time_s is not None else ""
    table = Table(
        title=Text(
            f"{sc.name} · {sc.cluster.workers} workers · target {advice.target} · {len(advice.seeds)} seeds{limit}"
        ),
        caption="TTA: time to target (virtual s); wait, samples/s: medians; vs BSP: median speed-up (seed range)",
        header_style="bold",
    )
    headers, rows = table_rows(advice)
    for j, h in enumerate(headers):
        table.add_column(Text(h), justify="left" if j == 1 else "right", no_wrap=True)
    top = advice.recommendation
    for r, cells in zip(advice.ranked, rows, strict=True):
        style = ""
        if r.rank == 1 and top.verdict in ("switch", "bsp"):
            style = "bold green"
        elif r.candidate.is_reference:
            style = "bold"
        table.add_row(*(Text(c) for c in cells), style=style)
    return table


def verification_rows(v: Verification) -> tuple[list[str], list[list[str]]]:
    headers = [
        "candidate",
        "TTA predicted (s)",
        "TTA measured (s)",
        "error",
        "samples/s predicted",
        "samples/s measured",
        "error",
    ]

    def err(e: float | None) -> str:
        return "—" if e is None else f"{e:+.0%}"

    def rate(x: float | None) -> str:
        return "—" if x is None else f"{x:,.0f}"

    rows = []
    for r in v.rows:
        lo, hi = r.predicted_tta_range
        span = f" ({_fmt_s(lo)}–{_fmt_s(hi) if math.isfinite(hi) else '>'})" if lo is not None and lo != hi else ""
        rows.append(
            [
                r.label + (" ★" if r.recommended else ""),
                _fmt_s(r.predicted_tta_s) + span,
                (_fmt_s(r.measured_tta_s) if r.measured_tta_s is not None else r.measured_note or "not reached")
                + _seed_span(r),
                err(r.tta_error),
                rate(r.predicted_samples_per_s),
                rate(r.measured_samples_per_s),
                err(r.rate_error),
            ]
        )
    return headers, rows


def _seed_span(r: Verified) -> str:
    """`` (lo–hi)`` of the real seeds' times to target (``>``: a seed missed), or nothing for one seed."""
    ttas = r.measured_tta_seeds_s
    if len(ttas) < 2:
        return ""
    reached = [t for t in ttas if t is not None]
    if not reached:
        return ""
    hi = _fmt_s(max(reached)) if len(reached) == len(ttas) else ">"
    return f" ({_fmt_s(min(reached))}–{hi})"


def verification_table(v: Verification, advice: Advice) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(
            f"verify · predicted (simulator, median over {len(advice.seeds)} seeds) vs measured (real processes"
            + (f", median over {len(v.seeds)} seeds)" if len(v.seeds) > 1 else ")")
        ),
        caption=f"★ recommended; error: measured / predicted − 1; real runs in {v.folder}/"
        + (
            f": your script {v.script} under hetsync launch, on {v.emulated or 'no emulated cluster'}"
            if v.script
            else ""
        ),
        header_style="bold",
    )
    headers, rows = verification_rows(v)
    for j, h in enumerate(headers):
        table.add_column(Text(h), justify="left" if j == 0 else "right", no_wrap=True)
    fastest = v.fastest
    for r, cells in zip(v.rows, rows, strict=True):
        table.add_row(*(Text(c) for c in cells), style="bold green" if r is fastest else "")
    return table


def plot_tta(advice: Advice, path: Path) -> Path:
    """Time to target per candidate: the median as a dot, the seed range as a bar;
    candidates that did not reach the target at the run's end, hollow."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from hetsync.report import DPI

    ranked = list(advice.ranked)
    n = len(ranked)
    fig = Figure(figsize=(8.5, 1.6 + 0.34 * n), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    limits = [t for r in ranked for t in r.limit_s if t is not None]
    limit = advice.scenario.stop.max_time_s or (max(limits) if limits else 1.0)
    base = advice.baseline
    winner_color, base_color, other_color, miss_color = "#009E73", "#333333", "#0072B2", "#BBBBBB"
    for y, r in enumerate(ranked):
        is_base = r is base
        color = base_color if is_base else other_color
        if r.rank == 1 and advice.recommendation.verdict in ("switch", "not-significant"):
            color = winner_color
        reached = [t for t in r.tta_s if t is not None]
        lo = min(reached) if reached else None
        hi = r.max_tta_s if math.isfinite(r.max_tta_s) else limit
        if lo is not None:
            ax.plot([lo, hi], [y, y], color=color, lw=2.2, solid_capstyle="butt")
            ax.plot([lo, lo], [y - 0.18, y + 0.18], color=color, lw=1.2)
            if math.isfinite(r.max_tta_s):
                ax.plot([hi, hi], [y - 0.18, y + 0.18], color=color, lw=1.2)
            else:  # some seed never reached: the bar runs on to the end
                ax.plot([limit], [y], ">", color=color, ms=6)
        median = r.median_tta_s
        if median is not None:
            ax.plot([median], [y], "o", color=color, ms=7, zorder=3)
        else:
            ax.plot([limit], [y], "o", mfc="white", mec=miss_color, ms=7, zorder=3)
            final = r.median_final
            note = "not reached" + (f" (final {final:.3g})" if final is not None else "")
            ax.text(
                limit * 0.985,
                y,
                note,
                va="center",
                ha="right",
                fontsize=8,
                color="#666666",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
            )
    if base is not None and base.median_tta_s is not None:
        ax.axvline(base.median_tta_s, color=base_color, ls="--", lw=1)
    ax.set_yticks(range(n), [_literal(f"{r.rank}. {r.label}") for r in ranked], fontsize=8.5)
    ax.invert_yaxis()
    missing = any(r.median_tta_s is None or not math.isfinite(r.max_tta_s) for r in ranked)
    if missing:
        ax.axvline(limit, color="#999999", lw=0.8, ls=":")
    highest = max((r.max_tta_s for r in ranked if math.isfinite(r.max_tta_s)), default=limit)
    ax.set_xlim(0, limit * 1.05 if missing else min(limit, highest) * 1.08)
    ax.set_ylim(n - 0.4, -0.6)
    ax.set_xlabel(f"time to {advice.target} (virtual seconds)")
    ax.grid(axis="x", color="#E5E5E5")
    ax.set_axisbelow(True)
    ax.set_title(
        _literal(f"{advice.scenario.name}: time to target over {len(advice.seeds)} seeds"),
        fontsize=11,
        loc="left",
    )
    handles = [
        Line2D([], [], color=other_color, marker="o", lw=2.2, label="median, min–max over seeds"),
        Line2D([], [], color=winner_color, marker="o", lw=2.2, label="recommended"),
        Line2D([], [], color=base_color, ls="--", lw=1, label="BSP median"),
    ]
    if missing:
        handles.append(Line2D([], [], color=miss_color, marker="o", mfc="white", lw=0, label="median not reached"))
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _literal(text: str) -> str:
    """Text matplotlib draws as it is (a ``$`` would start mathtext)."""
    return text.replace("$", r"\$")


def feature_rows(f: Features) -> list[tuple[str, str]]:
    """The features as (name, value) lines for the page."""
    steps = f.step_s
    rows = [
        ("workers", str(f.workers)),
        (
            "nominal step (fastest / median / slowest)",
            f"{_fmt_ms(min(steps))} / {_fmt_ms(f.median_step_s)} / {_fmt_ms(max(steps))}",
        ),
        ("slowest ÷ fastest", f"{f.spread:.2f}×"),
        ("workers ≥ 1.2× the median", ", ".join(map(str, f.slow_workers)) or "none"),
        ("per-step noise (log-sd)", f"{f.jitter:g}"),
        (
            "transient stragglers",
            f"{_fmt_pct(f.straggler_prob)} of steps × {f.straggler_factor:.3g} "
            f"({_fmt_pct(f.round_hit)} of BSP rounds hit)"
            if f.straggler_prob > 0
            else "none",
        ),
        (
            "background load",
            f"{f.load_workers} workers × {f.load_factor:g}, on {_fmt_pct(f.load_duty)} of the time"
            if f.load_workers
            else "none",
        ),
        (
            "model transfer",
            f"{f.model_bytes / 1e6:.3g} MB; push + pull {_fmt_ms(f.transfer_s)} = {f.comm_ratio:.2f}× the median step",
        ),
        (
            "links (slowest ÷ fastest)",
            f"{f.link_spread:.3g}×"
            + (f"; traffic on {f.link_load_workers} links × {f.link_load_factor:g}" if f.link_load_workers else ""),
        ),
    ]
    return rows


def write_outputs(advice: Advice, out: Path, *, plots: bool = True, command: str = "hetsync advise") -> list[Path]:
    """Write ``advice.json`` (and, with plots, the PNGs and ``advice.html``);
    ``summary.json`` is already there. Returns the files written."""
    from hetsync.outdir import SUMMARY, write_json_atomic

    write_json_atomic(out / ADVICE_JSON, advice.to_dict())
    written = [out / ADVICE_JSON, out / SUMMARY]
    written += [out / r["trace"] for r in advice.runs if r.get("trace") and (out / r["trace"]).is_file()]
    if plots:
        written.append(plot_tta(advice, out / TTA_PLOT))
        written.append(write_html(advice, out, command=command))
    return written


def _shown_runs(advice: Advice) -> list[dict[str, Any]]:
    """The seed-0 runs the comparison's plots show: the top few and BSP."""
    shown = list(advice.runs[:PLOTTED_RUNS])
    for r in advice.runs:
        if r.get("policy") == BASELINE and not r.get("params") and r.get("path", "ps") == "ps" and r not in shown:
            shown.append(r)
    return shown


def write_html(advice: Advice, out: Path, *, command: str) -> Path:
    """``advice.html``: the recommendation, the features, the ranking and the
    time-to-target plot, then the seed-0 comparison as :func:`hetsync.report.write_html`
    writes it (every run in the table; curves and timelines of the top few and BSP)."""
    import base64
    import html
    import re

    from hetsync import report

    esc = html.escape
    sc = advice.scenario
    rec = advice.recommendation
    report.write_report(_shown_runs(advice), out)
    tmp = out / (ADVICE_HTML + ".tmp")
    report.write_html(list(advice.runs), out, tmp, command=command)
    compared = tmp.read_text(encoding="utf-8")
    tmp.unlink()
    style = re.search(r"<style>(.*?)</style>", compared, re.S)
    body = re.search(r"<body>(.*)</body>", compared, re.S)
    headers, rows = table_rows(advice)
    verdict_color = {"switch": "#007a3d", "bsp": "#007a3d", "not-significant": "#8a5a00", "none": "#b00020"}
    limit = f", {_fmt_s(sc.stop.max_time_s)} s of virtual time per run" if sc.stop.max_time_s is not None else ""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>hetsync advise · {esc(sc.name)}</title>",
        f"<style>{style.group(1) if style else ''}\n.rec {{ font-size: 1.2em; }}\n"
        "td.l { text-align: left; }</style></head><body>",
        f"<h1>hetsync advise · {esc(sc.name)}</h1>",
        f"<p>Generated by <code>{esc(command)}</code> on {time.strftime('%Y-%m-%d')}, in the simulator: "
        f"{sc.cluster.workers} workers, target {esc(advice.target)}, {len(advice.candidates)} candidates × "
        f"{len(advice.seeds)} seeds ({', '.join(map(str, advice.seeds))}){esc(limit)}; "
        f"{advice.elapsed_s:.0f} s on {advice.jobs} processes.</p>",
        f'<p class="rec" style="color:{verdict_color.get(rec.verdict, "#222")}"><b>Recommendation:</b> '
        f"{esc(rec.headline)}.</p>",
        f"<p><b>Why:</b> {esc(rec.reason)}</p>",
        "<h2>Ranking</h2>",
        "<table><caption>"
        + esc(
            "TTA: time to target (virtual s); wait, samples/s: medians over seeds; vs BSP: median speed-up "
            "(range of the per-seed ratios)"
        )
        + "</caption>",
        "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>",
    ]
    for r, cells in zip(advice.ranked, rows, strict=True):
        best = r.rank == 1 and rec.verdict in ("switch", "bsp")
        classes = {1: ' class="l"', 2: ' class="best"' if best else ""}
        tds = [f"<td{classes.get(j, '')}>{esc(c)}</td>" for j, c in enumerate(cells)]
        parts.append("<tr>" + "".join(tds) + "</tr>")
    parts.append("</table>")
    png = out / TTA_PLOT
    if png.exists():
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f'<img alt="time to target per candidate" src="data:image/png;base64,{data}">')
    if advice.verification is not None:
        v = advice.verification
        vh, vr = verification_rows(v)
        parts += [
            "<h2>Verified on real processes</h2>",
            f"<p><b>{esc(v.verdict())}</b></p>",
            "<table><caption>"
            + esc(
                "predicted: the simulator (median over seeds, range); measured: "
                + (
                    f"your script {v.script} under hetsync launch, on {v.emulated or 'no emulated cluster'}, "
                    if v.script
                    else "hetsync run "
                )
                + f"in {v.folder}/; error: measured / predicted − 1; ★ recommended"
            )
            + "</caption>",
            "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in vh) + "</tr>",
        ]
        parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>" for cells in vr]
        parts.append("</table>")
    parts += ["<h2>The cluster</h2>", "<table>"]
    parts += [f'<tr><td class="l">{esc(k)}</td><td>{esc(v)}</td></tr>' for k, v in feature_rows(advice.features)]
    parts.append("</table>")
    if advice.skipped:
        parts.append("<p>Not applicable here:</p><ul>")
        parts += [f"<li><code>{esc(s)}</code>: {esc(why)}</li>" for s, why in advice.skipped]
        parts.append("</ul>")
    failed = [r for r in advice.ranked if any(r.errors)]
    if failed:
        parts.append("<ul>")
        parts += [
            f'<li class="note">{esc(r.label)} seed {s}: {esc(str(e))}</li>'
            for r in failed
            for s, e in zip(r.seeds, r.errors, strict=False)
            if e
        ]
        parts.append("</ul>")
    parts.append(f"<h2>Seed {advice.seeds[0]}: every candidate's run</h2>")
    if body:
        parts.append(re.sub(r"<h1>.*?</h1>", "", body.group(1), count=1, flags=re.S))
    parts.append("</body></html>")
    page = out / ADVICE_HTML
    page.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return page
