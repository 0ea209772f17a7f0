"""The JSON-lines trace: one compact JSON object per line, as json.dumps
writes it; the schema every writer follows and the reader every consumer uses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.outdir import partial_name
from hetsync.report import safe_name
from hetsync.scenario import load_scenario
from hetsync.sim.engine import Simulation
from hetsync.trace import (
    _BATCH,
    INTERVAL_KINDS,
    KINDS,
    SCHEMA,
    TraceError,
    TraceWriter,
    first_record,
    iter_records,
    metrics,
    read_trace,
    schema_error,
)

scalars = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**70), 2**70),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
)
records = st.dictionaries(st.text(max_size=6), st.one_of(scalars, st.lists(scalars, max_size=4)), max_size=9)


@settings(max_examples=50, deadline=None)
@given(st.lists(records, max_size=2 * _BATCH + 3))
def test_lines_are_what_json_dumps_writes(tmp_path_factory, recs):
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    with TraceWriter(path) as tw:
        for rec in recs:
            tw.write(rec)
    expected = "".join(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n" for rec in recs)
    assert path.read_text() == expected
    assert read_trace(path) == recs


def test_nothing_is_written_without_a_path_and_after_close(tmp_path):
    tw = TraceWriter(None)
    assert not tw.enabled
    tw.write({"t": 0.0})
    tw.close()
    path = tmp_path / "t.jsonl"
    tw = TraceWriter(path)
    tw.write({"t": 1.5, "ev": "x"})
    tw.close()
    tw.write({"t": 2.0})
    assert path.read_text() == '{"t":1.5,"ev":"x"}\n'


@pytest.mark.parametrize("bad", [{"t": math.nan}, {"t": math.inf}, {"t": object()}])
@pytest.mark.parametrize("before", [0, 3, _BATCH - 1, _BATCH + 5])
def test_an_unencodable_record_raises_once_and_the_others_are_written(tmp_path, bad, before):
    path = tmp_path / "t.jsonl"
    tw = TraceWriter(path)
    good = [{"i": i} for i in range(before)]
    errors = 0
    for rec in [*good, bad, {"i": "after"}]:
        try:
            tw.write(rec)
        except (TypeError, ValueError):
            errors += 1
    try:
        tw.close()
    except (TypeError, ValueError):
        errors += 1
    assert errors == 1
    assert read_trace(path) == [*good, {"i": "after"}]


# ---------------------------------------------------------------------------
# the schema and the reader


def _records_of(tmp_path: Path, spec: str, scenario: str = "default") -> list[dict[str, Any]]:
    path = tmp_path / f"{safe_name(spec)}.jsonl"
    Simulation(load_scenario(scenario, max_time_s=1.0), spec, trace_path=path).run()
    return [json.loads(line) for line in path.read_text().splitlines()]


# one policy per kind of record the simulator writes: pushes of gradients and
# of deltas, drops by the policy and of overwritten local work, sends, all-reduces
@pytest.mark.parametrize("spec", ["bsp", "backup:b=1", "local-sgd:H=4", "wbsp-overlap", "p2p-allreduce", "selmcast"])
def test_every_record_the_simulator_writes_fits_the_schema(tmp_path, spec):
    recs = _records_of(tmp_path, spec)
    assert recs[0]["ev"] == "start" and recs[-1]["ev"] == "end"
    problems = {schema_error(r) for r in recs} - {None}
    assert not problems, problems
    evals = [r for r in recs if r["ev"] == "eval"]
    assert evals and all(set(metrics(r)) == {"accuracy", "loss"} for r in evals)


def test_the_schema_covers_every_kind_and_says_what_is_wrong():
    assert set(SCHEMA) == KINDS and INTERVAL_KINDS < KINDS
    ok = {"t": 0.0, "ev": "drop", "ids": [1], "steps": 1, "reason": "late"}
    assert schema_error(ok) is None and schema_error({**ok, "w": 2}) is None
    assert schema_error({"t": 0.0, "ev": "nap"}).startswith("unknown kind ev='nap'")
    assert schema_error({k: v for k, v in ok.items() if k != "steps"}) == "drop record lacks steps"
    assert schema_error({**ok, "to": 3}) == "drop record has keys its kind does not carry: to"
    assert schema_error({"t": 1.0, "ev": "eval", "version": 3, "loss": None, "ppl": 4.5}) is None
    assert "carry: note" in schema_error({"t": 1.0, "ev": "eval", "version": 3, "note": "x"})


def _trace(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    recs = [
        {"t": 0.0, "ev": "start", "workers": 3, "policy": "bsp", "scenario": "s", "seed": 0, "model_nbytes": 8},
        {"t": 0.0, "ev": "compute", "w": 0, "end": 1.0, "step": 0, "batch": 4, "base": 0},
        {"t": 0.0, "ev": "compute", "w": 2, "end": 2.0, "step": 0, "batch": 4, "base": 0},
        {"t": 1.0, "ev": "push", "w": 0, "end": 1.5, "id": 0, "kind": "grad", "nbytes": 8, "steps": 1},
        {"t": 2.0, "ev": "apply", "version": 1, "ids": [0], "weights": [1.0], "staleness": [0]},
        {"t": 2.0, "ev": "drop", "ids": [], "steps": 1, "reason": "overwritten", "w": 2},
        {"t": 2.0, "ev": "eval", "accuracy": 0.5, "loss": None, "version": 1},
        {"t": 2.5, "ev": "pull", "w": 1, "end": 3.0, "version": 1, "nbytes": 8},
        {"t": 3.0, "ev": "end", "wall_time_s": 3.0, "reason": "max_time"},
    ]
    path = tmp_path / "trace-bsp.jsonl"
    with TraceWriter(path) as tw:
        for rec in recs:
            tw.write(rec)
    return path, recs


def test_filters_by_kind_worker_and_time(tmp_path):
    path, recs = _trace(tmp_path)
    assert read_trace(path) == recs
    assert [r["ev"] for r in iter_records(path, kinds={"compute", "end"})] == ["compute", "compute", "end"]
    # workers: a worker's records (the overwritten drop of w2 too); records of no worker pass
    assert [r["ev"] for r in iter_records(path, workers={0})] == ["start", "compute", "push", "apply", "eval", "end"]
    assert read_trace(path, kinds="pull", workers=1) == [recs[7]] and read_trace(path, kinds="pull", workers=0) == []
    assert [r["ev"] for r in iter_records(path, workers={2})] == ["start", "compute", "apply", "drop", "eval", "end"]
    assert [r.get("w") for r in iter_records(path, kinds=INTERVAL_KINDS, workers=range(2))] == [0, 0, 1]
    # time: intervals that overlap [1.0, 2.5), other records with 1.0 <= t < 2.5
    window = [(r["ev"], r.get("w")) for r in iter_records(path, since_s=1.0, until_s=2.5)]
    assert window == [("compute", 2), ("push", 0), ("apply", None), ("drop", 2), ("eval", None)]
    assert [r["ev"] for r in iter_records(path, until_s=0.5)] == ["start", "compute", "compute"]
    assert first_record(path) == recs[0]
    (tmp_path / "empty.jsonl").write_text("")
    assert first_record(tmp_path / "empty.jsonl") is None
    with pytest.raises(ValueError, match="kinds: unknown kind"):
        list(iter_records(path, kinds={"computes"}))


def test_spaces_after_colons_read_the_same(tmp_path):
    path, recs = _trace(tmp_path)
    loose = tmp_path / "loose.jsonl"
    loose.write_text("".join(json.dumps(r) + "\n" for r in recs))  # '"ev": "pull"', as json.dumps writes by default
    for filters in [{}, {"kinds": {"pull"}}, {"workers": {0}}, {"since_s": 1.0, "until_s": 2.5}]:
        assert read_trace(loose, **filters) == read_trace(path, **filters)


def test_a_cut_last_line_is_skipped_and_a_partial_trace_is_read(tmp_path):
    path, recs = _trace(tmp_path)
    text = path.read_text()
    cut = text[: text.rindex('{"t":3.0') + 12]  # a crash in the middle of writing the end record
    kept = partial_name(path)
    kept.write_text(cut)
    path.unlink()
    assert read_trace(path, partial=True) == recs[:-1]
    assert read_trace(kept, kinds={"end"}) == []
    with pytest.raises(FileNotFoundError):
        read_trace(path)
    (tmp_path / "whole.jsonl").write_text(text.rstrip("\n"))  # a last line whole but without its newline
    assert read_trace(tmp_path / "whole.jsonl") == recs


def test_a_damaged_line_names_the_file_and_line(tmp_path):
    path, _recs = _trace(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = lines[3][:20] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(TraceError, match=r"trace-bsp\.jsonl:4 is not a JSON record"):
        read_trace(path)
    path.write_text('{"t":0.0,"ev":"start"}\n[1, 2]\n')
    with pytest.raises(TraceError, match=r":2 is not a JSON object"):
        read_trace(path)
