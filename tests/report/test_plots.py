"""hetsync.report.plots: the phases of a run whose policy switched, on a real
simulated switch (tests/conftest.py); figures captured instead of saved."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from hetsync.report import SMALL_MULTIPLES_MIN, plot_metric, plot_timeline, write_report
from hetsync.report.switches import run_switches


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    saved: list[Any] = []
    monkeypatch.setattr(
        "hetsync.report.plots._save", lambda fig, path: saved.append((Path(path).name, fig)) or Path(path)
    )
    return saved


def _switch_lines(ax: Any) -> list[float]:
    return [line.get_xdata()[0] for line in ax.lines if line.get_gid() == "switch"]


def _phase_names(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.texts if t.get_gid() == "phase"]


def test_the_metric_plot_marks_the_switch_and_names_each_phase(auto_switch_run, figures, tmp_path: Path):
    run = auto_switch_run.run
    t = run_switches(run)[0]["t"]
    quiet = copy.deepcopy(run) | {"label": "auto-without-notes", "policy_notes": []}
    plot_metric([run, quiet], tmp_path / "a.png")
    ((_, fig),) = figures
    (ax,) = fig.axes
    assert _switch_lines(ax) == [t] and _phase_names(ax) == ["bsp", "lb-bsp"]
    assert any("switch of policy" in x.get_text() for x in ax.get_legend().get_texts())
    # the same run without its notes: nothing marked
    plot_metric([quiet], tmp_path / "b.png")
    (ax,) = figures[1][1].axes
    assert _switch_lines(ax) == [] and _phase_names(ax) == []


def test_in_small_multiples_only_the_switching_run_s_panel_is_marked(auto_switch_run, figures, tmp_path: Path):
    run = auto_switch_run.run
    others = [copy.deepcopy(run) | {"label": f"other{k}", "policy_notes": []} for k in range(SMALL_MULTIPLES_MIN)]
    plot_metric([run, *others], tmp_path / "a.png")
    panels = [ax for ax in figures[0][1].axes if ax.get_visible()]
    marked = [ax.get_title(loc="left").split("\n")[0] for ax in panels if _switch_lines(ax)]
    assert marked == ["auto"] and sum(bool(_phase_names(ax)) for ax in panels) == 1


def test_the_timelines_name_the_policy_and_one_is_drawn_around_the_switch(auto_switch_run, figures, tmp_path: Path):
    out = tmp_path / "out"
    shutil.copytree(auto_switch_run.out, out)
    run = auto_switch_run.run
    t = run_switches(run)[0]["t"]
    write_report([run], out)
    drawn = dict(figures)
    assert set(drawn) >= {"timeline-auto.png", "timeline-auto-switch-1.png"}
    top, bars = drawn["timeline-auto-switch-1.png"].axes
    assert _phase_names(top) == ["policy: bsp", "policy: lb-bsp"]
    assert _switch_lines(top) == [t] and _switch_lines(bars) == [t]  # across the updates strip and the rows
    lo, hi = bars.get_xlim()
    assert lo < t < hi and "switch to lb-bsp" in top.get_title(loc="left")
    # the first steps: before the switch, the policy named and no line
    top, bars = drawn["timeline-auto.png"].axes
    assert _phase_names(top) == ["policy: bsp"] and _switch_lines(bars) == []


def test_a_timeline_reads_the_phases_from_its_trace_and_a_run_without_notes_has_none(
    auto_switch_run, figures, tmp_path
):
    run = auto_switch_run.run
    t = run_switches(run)[0]["t"]
    trace = auto_switch_run.out / run["trace"]
    plot_timeline(trace, tmp_path / "a.png", title="auto", window_s=(t - 0.1, t + 0.1))
    top, bars = figures[0][1].axes
    assert _phase_names(top) == ["policy: bsp", "policy: lb-bsp"] and _switch_lines(bars) == [t]
    plot_timeline(trace, tmp_path / "b.png", title="auto", window_s=(t - 0.1, t + 0.1), phases=[])
    top, bars = figures[1][1].axes
    assert (
        _phase_names(top) == []
        and _switch_lines(bars) == []
        and not any("switch" in x.get_text() for x in figures[1][1].legends[0].get_texts())
    )


def test_names_of_phases_too_close_to_read_go_on_a_second_line_then_are_left_out(auto_switch_run, figures, tmp_path):
    run = copy.deepcopy(auto_switch_run.run)
    (note,) = run_switches(run)
    t = note["t"]
    for k, (old, new) in enumerate((("lb-bsp", "backup"), ("backup", "lb-bsp")), 1):
        run["policy_notes"].append({"t": t + 0.01 * k, "what": "switch", "detail": {"from": old, "to": new}})
    plot_metric([run], tmp_path / "a.png")
    (ax,) = figures[0][1].axes
    assert _switch_lines(ax) == [t, t + 0.01, t + 0.02]  # every switch has its line
    names = [x for x in ax.texts if x.get_gid() == "phase"]
    assert [x.get_text() for x in names] == ["bsp", "lb-bsp", "backup"]  # the last would cover both lines
    assert names[2].xyann[1] > names[1].xyann[1] > 0  # above the axes, backup on the second line, over lb-bsp
