"""A runtime run's progress file and lines (hetsync.runtime.progress)."""

import json

from hetsync.runtime.progress import PROGRESS_LINE_S, Progress


def test_the_progress_file_is_rewritten_and_lines_come_every_few_seconds(tmp_path, capsys):
    progress = Progress(tmp_path, "bsp", 1, lines=True)
    for now in (0.5, 1.0, PROGRESS_LINE_S + 0.5, PROGRESS_LINE_S + 1.0):
        progress.update(now, now / 100, lambda t: f"{t} s · 3 steps")
    assert json.loads((tmp_path / "progress.json").read_text()) == {
        "label": "bsp",
        "run": 1,
        "fraction": (PROGRESS_LINE_S + 1.0) / 100,
        "status": f"{PROGRESS_LINE_S + 1.0} s · 3 steps",  # what hetsync run's bar shows beside it
    }
    assert capsys.readouterr().out.splitlines() == [f"hetsync: bsp  {PROGRESS_LINE_S + 0.5} s · 3 steps"]
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]  # written through a temporary file
    Progress(tmp_path, "bsp", 0, lines=False).update(60.0, 1.0, lambda t: "never")
    assert capsys.readouterr().out == ""
