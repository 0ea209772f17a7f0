"""The plots several benches share: which files a case's plots are, and colours per kind of worker."""

from __future__ import annotations

from hetsync.benches import plots


def test_drawn_lists_the_case_plots_that_exist_by_kind_with_the_targets_metric(tmp_path):
    for name in ("perplexity.png", "shares.png", "timeline-wbsp.png", "timeline-bsp.png"):
        (tmp_path / name).write_bytes(b"png")
    found = plots.drawn(tmp_path, "perplexity", labels=["wbsp", "asp"])
    assert list(found) == ["perplexity", "shares", "timeline-wbsp"]  # no zoom, no asp timeline drawn
    assert found["shares"] == str(tmp_path / "shares.png")
    assert plots.timelines_in(tmp_path, ["bsp"]) == [tmp_path / "timeline-bsp.png"]


def test_group_colors_give_a_colour_and_a_legend_line_per_kind_of_worker():
    colors, legend = plots.group_colors([1.0, 2.0, 1.0, 4.0], lambda s: f"{s:g}x")
    assert colors[0] == colors[2] != colors[1] != colors[3]
    assert [name for name, _ in legend] == ["1x", "2x", "4x"] and legend[0][1] == colors[0]


def test_seed_bars_and_run_bars_draw_their_panels(tmp_path):
    group = {"name": "equal", "means": [0.8, 0.9], "seeds": [[0.79, 0.81], [0.9]], "reference": 0.8}
    panel = {"title": "a · bsp", "labels": ["x", "y"], "groups": [group], "xlim": (0.7, 1.0)}
    assert plots.plot_seed_bars([[panel, panel]], tmp_path / "bars.png", title="t", xlabel="acc").stat().st_size > 0
    runs = [{"label": "a", "r": 2.0, "s": None}, {"label": "b", "r": 3.0, "s": 0.1}]
    assert plots.plot_run_bars(runs, [("r", "r"), ("s", "s")], tmp_path / "runs.png", title="t").is_file()
