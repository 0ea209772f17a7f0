"""Tests of hetsync.report on fabricated summaries and traces (no simulation)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hetsync.errors import BadInput
from hetsync.report import (
    plot_accuracy,
    plot_shares,
    plot_timeline,
    safe_name,
    summary_table,
    timeline_window,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COMM = 0.01


def step_time(w: int) -> float:
    return 0.1 * (1 + w / 4)


def bsp_trace(workers: int, rounds: int) -> list[dict[str, Any]]:
    """Records of a BSP run: everyone computes, pushes, waits for the slowest, pulls."""
    recs: list[dict[str, Any]] = [
        {"t": 0.0, "ev": "start", "workers": workers, "policy": "bsp", "scenario": "s", "seed": 0, "model_nbytes": 8}
    ]
    t = 0.0
    for r in range(rounds):
        for w in range(workers):
            end = t + step_time(w)
            recs.append({"t": t, "ev": "compute", "w": w, "end": end, "step": r, "batch": 32, "base": r})
            recs.append(
                {
                    "t": end,
                    "ev": "push",
                    "w": w,
                    "end": end + COMM,
                    "id": r * workers + w,
                    "kind": "grad",
                    "nbytes": 8,
                    "steps": 1,
                }
            )
        barrier = t + step_time(workers - 1) + COMM
        ids = list(range(r * workers, (r + 1) * workers))
        weights, staleness = [1.0] * workers, [0] * workers
        recs.append(
            {"t": barrier, "ev": "apply", "version": r + 1, "ids": ids, "weights": weights, "staleness": staleness}
        )
        for w in range(workers):
            recs.append({"t": barrier, "ev": "pull", "w": w, "end": barrier + COMM, "version": r + 1, "nbytes": 8})
        t = barrier + COMM
    recs.append({"t": t, "ev": "eval", "accuracy": 0.5, "loss": 1.0, "version": rounds})
    recs.append({"t": t, "ev": "end", "wall_time_s": t, "reason": "max_steps"})
    return recs


def write_trace(path: Path, recs: list[dict[str, Any]], *, shuffle: bool = False, compact: bool = False) -> Path:
    body = recs[1:-1]
    if shuffle:
        body = body[:]
        random.Random(0).shuffle(body)
    separators = (",", ":") if compact else None
    lines = [json.dumps(r, separators=separators) for r in [recs[0], *body, recs[-1]]]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_run(label: str, *, tta: float | None = 2.0, curve: list[list[float]] | None = None) -> dict[str, Any]:
    if curve is None:
        curve = [[0.0, 0.1], [1.0, 0.5], [2.0, 0.82], [3.0, 0.9]]
    return {
        "policy": label.split("(")[0],
        "label": label,
        "params": {},
        "scenario": "hetero-8",
        "driver": "sim",
        "seed": 1,
        "workers": 8,
        "target_accuracy": 0.8,
        "time_to_target_s": tta,
        "final_accuracy": 0.9,
        "best_accuracy": 0.91,
        "wall_time_s": 3.0,
        "compute_share": 0.62,
        "comm_share": 0.07,
        "wait_share": 0.31,
        "samples_per_s": 1234.5,
        "steps": 800,
        "applied_steps": 800,
        "dropped_steps": 0,
        "outstanding_steps": 0,
        "updates": 100,
        "bytes_sent": 1000,
        "max_staleness": None,
        "mean_staleness": 0.0,
        "accuracy_curve": curve,
        "per_worker": {"compute_s": [], "comm_s": [], "wait_s": [], "steps": []},
        "host_time_s": 1.0,
        "math_time_s": 0.5,
        "trace": f"trace-{safe_name(label)}.jsonl",
    }


def assert_png(path: Path) -> None:
    assert path.is_file()
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 2000


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("bsp", "bsp"),
        ("ssp(s=3)", "ssp-s-3"),
        ("Local SGD (H=4, avg=delta)", "local-sgd-h-4-avg-delta"),
        ("backup(b=1)--x", "backup-b-1-x"),
        ("lr_0.1", "lr_0.1"),
        ("(=)", "run"),
    ],
)
def test_safe_name(label: str, name: str) -> None:
    assert safe_name(label) == name


def test_summary_table_one_row_per_run() -> None:
    runs = [make_run("bsp", tta=3.5), make_run("asp", tta=1.25), make_run("ssp(s=3)", tta=None)]
    table = summary_table(runs)
    assert table.row_count == 3
    console = Console(record=True, width=150)
    console.print(table)
    text = console.export_text()
    for label in ("bsp", "asp", "ssp(s=3)"):
        assert label in text
    assert "hetero-8" in text and "8 workers" in text
    assert "1.25" in text and "62.0%" in text and "1,234" in text
    assert "—" in text  # null TTA and null max staleness


def test_a_long_label_folds_and_no_number_is_cut_short() -> None:
    """The demo's SELMCAST label is 49 characters: in a 130-column terminal
    the label folds onto more lines, and every number stays whole."""
    long = "selmcast(sync=bsp,p=2,bandwidth=worst,floor=1.0)"
    console = Console(record=True, width=130)
    console.print(summary_table([make_run("bsp", tta=3.5), make_run(long, tta=1.25)]))
    text = console.export_text()
    assert "…" not in text
    assert "1.25" in text and "62.0%" in text and "1,234" in text
    assert long not in text and long in "".join(line.split("│")[1].strip() for line in text.splitlines() if "│" in line)


def test_html_table_lets_a_long_label_break_after_its_commas(tmp_path: Path) -> None:
    """Unbroken, the demo's SELMCAST label pushed the last column out of a
    1280-pixel page (behind a horizontal scroll bar)."""
    from hetsync.report import write_html

    long = "selmcast(sync=bsp,p=2,bandwidth=worst,floor=1.0)"
    page = write_html([make_run("bsp"), make_run(long)], tmp_path, tmp_path / "r.html", command="t").read_text()
    assert "<td>selmcast(sync=bsp,<wbr>p=2,<wbr>bandwidth=worst,<wbr>floor=1.0)</td>" in page
    assert re.search(r"td:first-child \{[^}]*white-space: normal", page)


def test_summary_table_empty() -> None:
    assert summary_table([]).row_count == 0


@pytest.mark.parametrize(
    "runs",
    [
        pytest.param([make_run("bsp"), make_run("asp", tta=None), make_run("ssp(s=3)", tta=1.5)], id="typical"),
        pytest.param([make_run("bsp")], id="single"),
        pytest.param([make_run("bsp", tta=None, curve=[]), make_run("asp")], id="empty-curve"),
        pytest.param([make_run("bsp", tta=None, curve=[])], id="only-empty"),
        pytest.param([make_run(f"ssp(s={k})", tta=1.0 + k / 10) for k in range(10)], id="ten"),
        pytest.param([], id="no-runs"),
    ],
)
def test_plots_write_png(tmp_path: Path, runs: list[dict[str, Any]]) -> None:
    assert_png(plot_accuracy(runs, tmp_path / "acc.png"))
    assert_png(plot_shares(runs, tmp_path / "sub" / "shares.png"))


def test_timeline_window_shows_steps_of_every_worker(tmp_path: Path) -> None:
    recs = bsp_trace(workers=8, rounds=40)
    trace = write_trace(tmp_path / "t.jsonl", recs, shuffle=True)
    lo, hi = timeline_window(trace)
    run_end = recs[-1]["wall_time_s"]
    assert lo == 0.0
    assert hi < run_end / 2  # a readable slice, not the whole run
    for w in range(8):
        done = [r for r in recs if r["ev"] == "compute" and r["w"] == w and r["end"] <= hi]
        assert 12 <= len(done) <= 14


def test_timeline_window_capped_at_run_end(tmp_path: Path) -> None:
    recs = bsp_trace(workers=4, rounds=5)
    trace = write_trace(tmp_path / "t.jsonl", recs)
    assert timeline_window(trace) == (0.0, recs[-1]["wall_time_s"])


def test_timeline_window_only_displayed_workers(tmp_path: Path) -> None:
    recs = bsp_trace(workers=8, rounds=40)
    trace = write_trace(tmp_path / "t.jsonl", recs, compact=True)
    # Worker 1 is faster than workers 2..7, so two displayed workers need less time.
    assert timeline_window(trace, max_workers=2)[1] < timeline_window(trace, max_workers=8)[1]
    assert timeline_window(trace, max_workers=2, steps=3)[1] < timeline_window(trace, max_workers=2)[1]


def test_plot_timeline_typical_truncated_and_windowed(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", bsp_trace(workers=20, rounds=30), shuffle=True)
    assert_png(plot_timeline(trace, tmp_path / "a.png", title="bsp"))
    assert_png(plot_timeline(trace, tmp_path / "b.png", title="bsp", max_workers=4))
    assert_png(plot_timeline(trace, tmp_path / "c.png", title="bsp", window_s=(1.0, 2.5)))


def test_plot_timeline_empty_trace(tmp_path: Path) -> None:
    recs = bsp_trace(workers=3, rounds=0)
    trace = write_trace(tmp_path / "t.jsonl", recs)
    assert_png(plot_timeline(trace, tmp_path / "empty.png", title="nothing"))


def test_plot_timeline_rejects_bad_window(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", bsp_trace(workers=2, rounds=3))
    with pytest.raises(BadInput, match="window"):
        plot_timeline(trace, tmp_path / "x.png", title="x", window_s=(2.0, 1.0))


def test_write_report(tmp_path: Path) -> None:
    runs = [make_run("bsp"), make_run("ssp(s=3)", tta=None), make_run("asp")]
    runs[2]["trace"] = None
    for run in runs[:2]:
        write_trace(tmp_path / run["trace"], bsp_trace(workers=4, rounds=20))
    paths = write_report(runs, tmp_path)
    assert [p.name for p in paths] == ["accuracy.png", "shares.png", "timeline-bsp.png", "timeline-ssp-s-3.png"]
    for path in paths:
        assert_png(path)


# ---------------------------------------------------------------------------
# named metrics: a perplexity target (a metric to minimize), mixed metrics


def make_lm_run(label: str, *, tta: float | None = 2.0, scale: float = 1.0) -> dict[str, Any]:
    """A run summary with a perplexity target, as Ledger.summary writes it (no accuracy aliases)."""
    curve = [[0.0, 900.0 * scale], [1.0, 120.0 * scale], [2.0, 39.0 * scale], [3.0, 31.5 * scale]]
    run = make_run(label, tta=tta)
    for key in ("target_accuracy", "final_accuracy", "best_accuracy", "accuracy_curve"):
        del run[key]
    return run | {
        "scenario": "tinylm-4",
        "target_metric": "perplexity",
        "target_value": 40.0,
        "target_direction": "min",
        "final_metric": curve[-1][1],
        "best_metric": curve[-1][1],
        "final_metrics": {"loss": 3.45, "perplexity": curve[-1][1], "accuracy": 0.31},
        "metric_curve": curve,
    }


def _text(table: Any) -> str:
    console = Console(record=True, width=150)
    console.print(table)
    return console.export_text()


def test_summary_table_follows_the_target_metric() -> None:
    text = _text(summary_table([make_lm_run("bsp"), make_lm_run("asp", tta=None, scale=1.5)]))
    assert "target perplexity ≤ 40.0" in text
    assert "final ppl" in text and "final acc" not in text
    assert "31.5" in text and "47.25" in text
    # accuracy runs, old or new, read as before
    text = _text(summary_table([make_run("bsp")]))
    assert "target accuracy 0.8" in text and "final acc" in text and "0.900" in text


def test_mixed_metrics_do_not_crash(tmp_path: Path) -> None:
    from hetsync.report import metric_plot_name, write_markdown

    runs = [make_run("bsp"), make_lm_run("asp")]
    text = _text(summary_table(runs))
    assert "accuracy 0.8; perplexity ≤ 40.0" in text
    assert "acc 0.900" in text and "ppl 31.5" in text
    assert metric_plot_name(runs) == "metrics"
    assert_png(plot_accuracy(runs, tmp_path / "m.png"))
    page = write_markdown(runs, tmp_path, tmp_path / "page.md", command="test")
    assert "| bsp |" in page.read_text()


def test_write_report_names_the_metric_plot_after_the_metric(tmp_path: Path) -> None:
    from hetsync.report import write_markdown

    runs = [make_lm_run("bsp"), make_lm_run("ssp(s=3)", tta=None, scale=1.4)]
    for run in runs:
        write_trace(tmp_path / run["trace"], bsp_trace(workers=4, rounds=20))
    paths = write_report(runs, tmp_path)
    assert [p.name for p in paths] == ["perplexity.png", "shares.png", "timeline-bsp.png", "timeline-ssp-s-3.png"]
    for path in paths:
        assert_png(path)
    page = write_markdown(runs, tmp_path, tmp_path / "doc" / "page.md", command="hetsync compare").read_text()
    assert "target perplexity ≤ 40.0" in page and "| final ppl |" in page and "| 31.5 |" in page
    assert "![perplexity](img/page-perplexity.png)" in page
    assert (tmp_path / "doc" / "img" / "page-perplexity.png").stat().st_size > 0


def test_the_metric_plot_uses_a_log_axis_for_perplexity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    monkeypatch.setattr("hetsync.report.plots._save", lambda fig, path: saved.append(fig) or Path(path))
    plot_accuracy([make_lm_run("bsp")], tmp_path / "p.png")
    plot_accuracy([make_run("bsp")], tmp_path / "a.png")
    (lm,), (acc,) = saved[0].axes, saved[1].axes
    assert lm.get_yscale() == "log" and "perplexity" in lm.get_ylabel()
    assert acc.get_yscale() == "linear" and acc.get_ylabel() == "test accuracy"
    assert any("target ≤ 40" in t.get_text() for t in lm.texts)


def test_html_page_is_self_contained_and_escapes_what_users_wrote(tmp_path: Path) -> None:
    from hetsync.report import write_html

    runs = [make_run("bsp"), make_run("<script>x</script>", tta=None)]
    runs[0]["notes"] = ["ran 4 of the scenario's 8 workers"]
    write_trace(tmp_path / runs[0]["trace"], bsp_trace(workers=4, rounds=20))
    write_report(runs[:1], tmp_path)
    page = write_html(runs, tmp_path, tmp_path / "r.html", command="hetsync compare -p 'a<b'").read_text()
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "a&lt;b" in page and "ran 4 of the scenario&#x27;s 8 workers" in page
    assert page.count("data:image/png;base64,") == 3 and 'src="http' not in page
    assert '<td class="best">' in page  # bsp reached the target, the other run did not


# ---------------------------------------------------------------------------
# what each plot must show (issue 15): figures captured instead of saved


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    saved: list[Any] = []
    monkeypatch.setattr("hetsync.report.plots._save", lambda fig, path: saved.append(fig) or Path(path))
    return saved


def test_many_runs_get_one_panel_each_fastest_first(figures: list[Any], tmp_path: Path) -> None:
    from hetsync.report import SMALL_MULTIPLES_MIN

    runs = [make_run(f"ssp(s={k})", tta=3.0 - k / 10) for k in range(SMALL_MULTIPLES_MIN + 2)]
    runs[2]["time_to_target_s"] = None
    plot_accuracy(runs, tmp_path / "acc.png")
    panels = [ax for ax in figures[0].axes if ax.get_visible()]
    assert len(panels) == len(runs)
    titles = [ax.get_title(loc="left").split("\n")[0] for ax in panels]
    reached = [r["label"] for r in sorted(runs, key=lambda r: r["time_to_target_s"] or 99)][: len(runs) - 1]
    assert titles == [*reached, "ssp(s=2)"]  # fastest first, the one that never reached it last
    assert "target not reached" in panels[-1].get_title(loc="left")
    assert all(len(ax.lines) >= len(runs) for ax in panels)  # the run over every other run in grey
    assert "target 0.8" in figures[0].get_suptitle()


def test_a_few_runs_share_one_axes_and_the_target_label_sits_outside_it(figures: list[Any], tmp_path: Path) -> None:
    plot_accuracy([make_run("bsp"), make_run("asp", tta=1.0)], tmp_path / "acc.png")
    (ax,) = figures[0].axes
    (label,) = [t for t in ax.texts if "target" in t.get_text()]
    assert label.xy[0] == 1 and label.get_position()[0] > 0  # in the right margin, where no curve runs


def test_narrow_share_segments_say_their_number_beside_the_bar(figures: list[Any], tmp_path: Path) -> None:
    run = make_run("wbsp-overlap") | {"compute_share": 0.975, "comm_share": 0.021, "wait_share": 0.004}
    plot_shares([make_run("bsp"), run], tmp_path / "shares.png")
    (ax,) = figures[0].axes
    texts = [t.get_text() for t in ax.texts]
    assert "comm 2.1%" in texts and "wait 0.4%" in texts and "wait 31.0%" not in texts
    assert ax.get_title(loc="left").startswith("Where worker time goes")
    assert figures[0].legends and not ax.get_legend()  # the legend sits under the bars, away from the title


def overlap_trace(workers: int, steps: int, *, batches: bool = False) -> list[dict[str, Any]]:
    """WBSP-overlap-like records: compute back to back, pushes and pulls behind it."""
    recs: list[dict[str, Any]] = [{"t": 0.0, "ev": "start", "workers": workers, "policy": "x", "scenario": "s"}]
    end = 0.0
    for w in range(workers):
        t = 0.0
        for k in range(steps):
            end = t + step_time(w)
            batch = 16 + 8 * ((w + k) % 3) if batches else 32
            recs.append({"t": t, "ev": "compute", "w": w, "end": end, "step": k, "batch": batch, "base": 0})
            recs.append({"t": end, "ev": "push", "w": w, "end": end + 0.05, "id": k, "kind": "delta", "nbytes": 8})
            t = end
    recs.append({"t": 0.5, "ev": "apply", "version": 1, "ids": [0], "weights": [1.0], "staleness": [0]})
    recs.append({"t": end, "ev": "end", "wall_time_s": end, "reason": "max_steps"})
    return recs


def test_transfers_behind_compute_show_as_a_strip(figures: list[Any], tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", overlap_trace(workers=3, steps=20), shuffle=True)
    plot_timeline(trace, tmp_path / "a.png", title="wbsp-overlap")
    labels = [t.get_text() for t in figures[0].legends[0].get_texts()]
    assert any("behind" in label for label in labels)
    plot_timeline(write_trace(tmp_path / "b.jsonl", bsp_trace(workers=3, rounds=20)), tmp_path / "b.png", title="bsp")
    assert not any("behind" in t.get_text() for t in figures[1].legends[0].get_texts())  # BSP never overlaps


def test_varying_batches_are_written_on_the_compute_bars(figures: list[Any], tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", overlap_trace(workers=3, steps=12, batches=True))
    plot_timeline(trace, tmp_path / "a.png", title="lb-bsp")
    _, ax = figures[0].axes
    numbers = {t.get_text() for t in ax.texts}
    assert numbers == {"16", "24", "32"} and "batch size" in figures[0].axes[0].get_title(loc="left")
    plot_timeline(write_trace(tmp_path / "b.jsonl", bsp_trace(workers=3, rounds=20)), tmp_path / "b.png", title="bsp")
    assert not figures[1].axes[1].texts  # one batch size: nothing to say


def test_p2p_updates_are_the_finished_exchanges(tmp_path: Path) -> None:
    from hetsync.report.plots import _collect

    recs: list[dict[str, Any]] = [{"t": 0.0, "ev": "start", "workers": 3, "policy": "selmcast", "scenario": "s"}]
    for r in range(4):
        t = 1.0 * r
        recs.append({"t": t, "ev": "compute", "w": 0, "end": t + 0.2, "step": r, "batch": 32, "base": 0})
        recs += [
            {"t": t + 0.2, "ev": "send", "w": 0, "to": 1, "end": t + 0.5, "nbytes": 8},
            {"t": t + 0.2, "ev": "send", "w": 0, "to": 2, "end": t + 0.7, "nbytes": 8},  # the multicast ends here
        ]
    recs.append({"t": 4.0, "ev": "end", "wall_time_s": 4.0, "reason": "max_steps"})
    data = _collect(write_trace(tmp_path / "t.jsonl", recs, shuffle=True), 16, (0.0, 4.0))
    assert data.p2p and sorted(data.applies) == pytest.approx([0.7, 1.7, 2.7, 3.7])


def test_tables_say_what_max_stale_counts(tmp_path: Path) -> None:
    from hetsync.report import STALE_HEADER, write_html, write_markdown

    runs = [make_run("bsp"), make_run("ssp(s=3)") | {"max_staleness": 15}]
    text = _text(summary_table(runs))
    assert STALE_HEADER in text and "SSP's bound s counts steps" in text
    md = write_markdown(runs, tmp_path, tmp_path / "page.md", command="test").read_text()
    assert f"| {STALE_HEADER} |" in md and "SSP's bound s counts steps" in md
    page = write_html(runs, tmp_path, tmp_path / "r.html", command="test").read_text()
    assert '<th title="† max stale: how many model versions' in page and "SSP&#x27;s bound s counts steps" in page


def test_html_page_points_to_trace_json_and_keeps_the_runs_order(tmp_path: Path) -> None:
    from hetsync.report import write_html
    from hetsync.report.perfetto import write_chrome_trace

    runs = [make_run("zeta"), make_run("alpha")]
    for run in runs:
        write_trace(tmp_path / run["trace"], bsp_trace(workers=2, rounds=5))
    write_report(runs, tmp_path)
    assert "trace.json" not in write_html(runs, tmp_path, tmp_path / "r.html", command="t").read_text()
    write_chrome_trace(runs, tmp_path, tmp_path / "trace.json")
    page = write_html(runs, tmp_path, tmp_path / "r.html", command="t").read_text()
    assert "<code>trace.json</code>" in page and "ui.perfetto.dev" in page
    assert page.index('alt="timeline-zeta"') < page.index('alt="timeline-alpha"')


def test_panels_of_a_perplexity_target_share_a_log_axis(figures: list[Any], tmp_path: Path) -> None:
    plot_accuracy([make_lm_run(f"r{k}", scale=1 + k / 10) for k in range(6)], tmp_path / "p.png")
    panels = [ax for ax in figures[0].axes if ax.get_visible()]
    assert len(panels) == 6 and all(ax.get_yscale() == "log" for ax in panels)
    assert "target ≤ 40" in figures[0].get_suptitle()


def test_one_column_spec_makes_every_page_of_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal table, the markdown page and the HTML report all take
    their columns, units, formats and footnotes from report.COLUMNS: a
    column added there shows on each, footnote included."""
    import html

    from hetsync import report
    from hetsync.report import table

    extra = report.Column("bytes_sent", "sent", lambda v: f"{v / 1e3:.1f} kB", footnote="sent: all transfers")
    monkeypatch.setattr(table, "COLUMNS", (*table.COLUMNS, extra))
    runs = [make_run("bsp", tta=3.5), make_run("asp", tta=1.25)]
    headers = table._grid(runs).headers
    assert headers[:2] == ["run", "TTA (s)"] and headers[-3:] == ["max stale†", "wall (s)", "sent‡"]
    text = _text(summary_table(runs))
    md = report.write_markdown(runs, tmp_path, tmp_path / "page.md", command="t").read_text()
    page = report.write_html(runs, tmp_path, tmp_path / "r.html", command="t").read_text()
    assert "| " + " | ".join(headers) + " |" in md and "|---" + "|---:" * (len(headers) - 1) + "|" in md
    assert "| asp | 1.25 |" in md and "| 1.0 kB |" in md
    ths = re.findall(r'<th(?: title="([^"]*)")?>([^<]*)</th>', page)
    assert [html.unescape(h) for _, h in ths] == headers
    notes = ["† max stale: how many model versions", "‡ sent: all transfers"]
    assert [html.unescape(t)[:36] for t, _ in ths if t] == [n[:36] for n in notes]
    assert md.index(notes[0]) < md.index(notes[1]) and page.index("‡ sent") > page.index("† max stale")
    assert all(n[:20] in text for n in notes)
    for header in headers:
        assert header in text


def test_every_page_highlights_each_best_time_to_target(tmp_path: Path) -> None:
    from hetsync.report import write_html

    runs = [make_run("bsp", tta=2.0), make_run("asp", tta=1.5), make_run("ssp", tta=1.5), make_run("x", tta=None)]
    page = write_html(runs, tmp_path, tmp_path / "r.html", command="t").read_text()
    assert page.count('<td class="best">') == 2 and '<td class="best">1.50</td>' in page
    table = summary_table(runs)
    styled = [cell.spans for cell in table.columns[1]._cells]
    assert [bool(s) for s in styled] == [False, True, True, False]


def test_long_labels_wrap_after_commas_in_panel_titles():
    from hetsync.report.plots import _wrap_label

    label = "selmcast(sync=ssp,s=3,p=2,bandwidth=worst,window_s=0.05)"
    lines = _wrap_label(label, width=36).split("\n")
    assert "".join(lines) == label and len(lines) == 2 and all(len(x) <= 36 for x in lines)
    assert _wrap_label("bsp") == "bsp"


def test_no_run_is_drawn_in_the_grey_of_the_other_runs(figures: list[Any], tmp_path: Path) -> None:
    """The panels draw every other run in light grey behind the run: a run of
    its own must not be grey too (tab10's eighth colour was, the demo's 8th run)."""
    from matplotlib.colors import rgb_to_hsv, to_rgb

    from hetsync.report import SMALL_MULTIPLES_MIN

    runs = [make_run(f"ssp(s={k})", tta=1.0 + k) for k in range(max(SMALL_MULTIPLES_MIN, 15))]
    plot_accuracy(runs, tmp_path / "acc.png")
    panels = [ax for ax in figures[0].axes if ax.get_visible()]
    assert len(panels) == len(runs)
    for ax in panels:
        (run,) = [line for line in ax.lines if line.get_linewidth() == 2.0]  # the panel's own run
        _, saturation, value = rgb_to_hsv(to_rgb(run.get_color()))
        assert saturation >= 0.3 or value <= 0.15, ax.get_title(loc="left")  # coloured, or near black


def test_the_caption_says_how_a_worker_that_left_is_counted_only_when_one_did():
    from hetsync.report import CAPTION, LEFT_CAPTION, summary_table

    stayed = make_run("bsp")
    gone = make_run("wbsp") | {"workers_left": [{"worker": 0, "t": 1.0, "reason": "its training loop ended"}]}
    assert summary_table([stayed]).caption.splitlines()[0] == CAPTION
    assert summary_table([stayed, gone]).caption.splitlines()[0] == CAPTION + LEFT_CAPTION


# ------------------------------------------------------ reading a summary (issue 30, item 5)
def test_a_summary_as_hetsync_writes_it_passes_the_check(tmp_path: Path) -> None:
    from hetsync.report import check_summary

    runs = [make_run("bsp"), make_run("ssp(s=3)", tta=None)]
    assert check_summary(runs, "s.json") is runs
    assert check_summary([{"label": "old"}], "s.json")  # an older summary's missing keys are no damage
    diverged = make_run("asp", curve=[[0.0, 0.1], [1.0, None]])
    assert check_summary([diverged], "s.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"wall_time_s": "3.0"}, r"run 1 \(bsp\): 'wall_time_s' is '3.0', not a number"),
        ({"steps": 1.5}, r"'steps' is 1.5, not an integer"),
        ({"seed": True}, r"'seed' is True, not an integer"),
        ({"scenario": 7}, r"'scenario' is 7, not text"),
        ({"per_worker": []}, r"'per_worker' is \[\], not an object"),
        ({"accuracy_curve": "rising"}, r"'accuracy_curve' is 'rising', not a list of \[t_s, value\]"),
        ({"accuracy_curve": [[0.0, "0.5"]]}, r"'accuracy_curve' holds \[0.0, '0.5'\], not \[t_s, value\]"),
        ({"notes": "one"}, r"'notes' is 'one', not a list of text"),
        ({"workers_left": [{"worker": "2"}]}, r"'workers_left' holds"),
        ({"label": ""}, r"run 1: 'label' is '', not the run's name"),
        ({"trace": "../../elsewhere.jsonl"}, r"'trace' is '../../elsewhere.jsonl', not the name of a file"),
        ({"time_to_target_s": "x" * 500}, r"'time_to_target_s' is 'xxx.*…; it is damaged"),
    ],
)
def test_a_damaged_summary_record_is_named_with_its_key(change: dict[str, Any], message: str) -> None:
    from hetsync.report import check_summary

    run = {**make_run("bsp"), **change}
    with pytest.raises(BadInput, match=message) as caught:
        check_summary([run], "runs/summary.json")
    assert str(caught.value).startswith("runs/summary.json: run 1") and "\n" not in str(caught.value)


def test_a_summary_that_is_no_list_of_runs_is_refused() -> None:
    from hetsync.report import check_summary

    with pytest.raises(BadInput, match="holds a dict, not a list of runs"):
        check_summary({"runs": []}, "s.json")
    with pytest.raises(BadInput, match=r"run 2: is 3, not an object"):
        check_summary([make_run("bsp"), 3], "s.json")
