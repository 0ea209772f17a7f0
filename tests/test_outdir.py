"""The run folder: starting clean removes only what hetsync wrote; atomic JSON."""

from __future__ import annotations

import json

from hetsync.outdir import partial_name, previous_results, start_clean, write_json_atomic


def test_start_clean_removes_hetsync_files_only(tmp_path):
    out = tmp_path / "run"
    (out / "logs").mkdir(parents=True)
    ours = [
        "summary.json",
        "progress.json",
        "exit-status.json",
        "trace-bsp.jsonl",
        "trace-asp.jsonl.partial",
        "timeline-bsp.png",
        "shares.png",
        "perplexity.png",  # the old summary's target metric names its plot
        "report.html",
        "trace.json",
        "logs/rank-0.log",
    ]
    for name in ours:
        (out / name).write_text("x")
    (out / "summary.json").write_text(json.dumps([{"label": "bsp", "target_metric": "perplexity"}]))
    theirs = ["notes.txt", "loss.png", "trace.jsonl", "logs/mine.txt"]
    for name in theirs:
        (out / name).write_text("keep")
    assert sorted(p.relative_to(out).as_posix() for p in previous_results(out)) == sorted(ours)
    removed = start_clean(out)
    assert len(removed) == len(ours)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(theirs)


def test_start_clean_can_set_the_traces_aside_for_a_run_that_resumes(tmp_path):
    for name, text in (
        ("trace-bsp.jsonl", "new"),
        ("trace-bsp.jsonl.partial", "old"),
        ("trace-asp.jsonl.partial", "old"),
    ):
        (tmp_path / name).write_text(text)
    (tmp_path / "summary.json").write_text("[]")
    assert len(start_clean(tmp_path, set_aside_traces=True)) == 4
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"trace-bsp.jsonl.partial": "new"}


def test_start_clean_creates_the_folder_and_drops_an_empty_logs_folder(tmp_path):
    assert start_clean(tmp_path / "new") == [] and (tmp_path / "new").is_dir()
    (tmp_path / "new" / "logs").mkdir()
    (tmp_path / "new" / "logs" / "rank-1.log").write_text("")
    start_clean(tmp_path / "new")
    assert not (tmp_path / "new" / "logs").exists()


def test_write_json_atomic_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, [1])
    write_json_atomic(path, [{"a": 2}])
    assert json.loads(path.read_text()) == [{"a": 2}]
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_partial_name():
    from pathlib import Path

    assert partial_name(Path("o/trace-bsp.jsonl")) == Path("o/trace-bsp.jsonl.partial")
