"""hetsync.salvage: a run's summary entry rebuilt from its trace when rank 0
died before writing it (issue 30, item 1); the runs the summary names are
left as they are."""

from __future__ import annotations

import json

from hetsync.salvage import INTERRUPTED, salvage, summary_from_trace
from hetsync.summary import read_summary

START = {"t": 0.0, "ev": "start", "workers": 2, "policy": "ssp(s=3)", "scenario": "hetero-4", "seed": 1}
RECORDS = [
    {**START, "model_nbytes": 100, "driver": "dist"},
    {"t": 0.0, "ev": "compute", "w": 0, "end": 0.1, "step": 0, "batch": 32, "base": 0},
    {"t": 0.0, "ev": "compute", "w": 1, "end": 0.3, "step": 0, "batch": 32, "base": 0},
    {"t": 0.1, "ev": "apply", "version": 1, "ids": [0], "weights": [1.0], "staleness": [0]},
    {"t": 0.2, "ev": "eval", "version": 1, "accuracy": 0.5, "loss": 1.5},
    {"t": 0.3, "ev": "apply", "version": 2, "ids": [1], "weights": [1.0], "staleness": [1]},
    {"t": 0.35, "ev": "drop", "ids": [7], "steps": 2, "reason": "late"},
    {"t": 0.4, "ev": "left", "w": 1, "reason": "connection lost"},
    {"t": 0.5, "ev": "eval", "version": 2, "accuracy": 0.75, "loss": 1.0},
]


def _trace(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"t": 0.6, "ev": "comp')  # cut mid-write


def test_the_entry_counts_what_the_trace_holds_and_says_it_was_interrupted(tmp_path):
    _trace(tmp_path / "trace-ssp.jsonl", RECORDS)
    run = summary_from_trace(tmp_path / "trace-ssp.jsonl")
    assert run is not None
    assert (run["label"], run["driver"], run["workers"], run["seed"]) == ("ssp(s=3)", "dist", 2, 1)
    assert (run["steps"], run["updates"], run["dropped_steps"]) == (2, 2, 2)
    assert run["wall_time_s"] == 0.5 and run["final_metrics"] == {"accuracy": 0.75, "loss": 1.0}
    assert run["metric_curve"] == [[0.2, 0.5], [0.5, 0.75]] and run["stop_reason"] == INTERRUPTED
    assert run["workers_left"] == [{"worker": 1, "t": 0.4, "reason": "connection lost"}]


def test_salvage_appends_the_runs_the_summary_does_not_name_and_keeps_the_others(tmp_path):
    finished = {"label": "bsp", "trace": "trace-bsp.jsonl", "steps": 9}
    (tmp_path / "summary.json").write_text(json.dumps([finished]))
    _trace(tmp_path / "trace-bsp.jsonl", [{**RECORDS[0], "policy": "bsp"}])
    _trace(tmp_path / "trace-ssp.jsonl", RECORDS)
    (tmp_path / "trace-empty.jsonl").write_text("")  # no start record: nothing to say
    assert salvage(tmp_path) == ["ssp(s=3)"]
    runs = read_summary(tmp_path / "summary.json")  # (and it is a valid summary)
    assert runs[0] == finished and runs[1]["label"] == "ssp(s=3)" and len(runs) == 2
    assert salvage(tmp_path) == []  # once


def test_salvage_leaves_a_summary_it_cannot_read_alone(tmp_path):
    (tmp_path / "summary.json").write_text('{"not": "a list"}')
    _trace(tmp_path / "trace-ssp.jsonl", RECORDS)
    assert salvage(tmp_path) == []
    assert (tmp_path / "summary.json").read_text() == '{"not": "a list"}'
