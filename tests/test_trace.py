"""The JSON-lines trace: one compact JSON object per line, as json.dumps writes it."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.trace import _BATCH, TraceWriter, read_trace

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
