"""hetsync.summary: the run summary's type held to docs/formats.md, a real
simulated summary read back, and every refusal one line naming the key."""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.report.switches import run_switches
from hetsync.summary import (
    _CHECKS,
    _LISTS,
    KEYS,
    RunSummary,
    as_dicts,
    check_summary,
    finished_runs,
    policy_in_force,
    policy_phases,
    read_summary,
)

FORMATS = Path(__file__).resolve().parents[1] / "docs" / "formats.md"
HINTS = typing.get_type_hints(RunSummary)


def documented() -> dict[str, str]:
    """The keys of formats.md's ``summary.json`` table, each with its type column."""
    text = FORMATS.read_text()
    section = text.split("## `summary.json`", 1)[1].split("\n## ", 1)[0]
    keys: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        for key in re.findall(r"`([^`]+)`", cells[0]):
            keys[key] = cells[1]
    return keys


def declared(key: str) -> type:
    """The type a key's annotation gives (``T | None`` -> ``T``; ``list[X]`` -> ``list``)."""
    hint = HINTS[key]
    arms = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) else [hint]
    (arm,) = arms or [hint]
    return typing.get_origin(arm) or arm


# ----------------------------------------------------------- (a) the documented table
def test_the_type_has_exactly_the_keys_formats_md_documents():
    docs = documented()
    assert len(docs) > 50  # the table was found
    assert sorted(docs.keys() - KEYS) == [], "documented, not in RunSummary"
    assert sorted(KEYS - docs.keys()) == [], "in RunSummary, not documented"
    assert set(HINTS) == KEYS


def test_each_key_has_the_type_formats_md_gives_it():
    words = {"str": str, "int": int, "float": float, "bool": bool, "object": dict}
    for key, column in documented().items():
        word = column.removesuffix(" or null")
        want = list if word.startswith("list") else words[word]
        assert declared(key) is want, f"{key}: formats.md says {column}, RunSummary {HINTS[key]}"


def test_the_check_covers_every_key_and_only_the_label_is_required():
    assert RunSummary.__required_keys__ == {"label"}
    assert set(_CHECKS) | set(_LISTS) | {"label"} == KEYS
    assert not set(_CHECKS) & set(_LISTS)
    assert {k for k in KEYS if declared(k) is list} == set(_LISTS)


# ------------------------------------------------------- (b) a summary hetsync wrote
def fits(value: Any, hint: Any) -> bool:
    """``value`` is of the annotated type (strictly: an int where it says int)."""
    if hint is Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return type(value) in (int, float)
    if origin is list:
        return type(value) is list and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return type(value) is dict and all(type(k) is str and fits(v, args[1]) for k, v in value.items())
    if typing.is_typeddict(hint):
        inner = typing.get_type_hints(hint)
        return (
            type(value) is dict
            and hint.__required_keys__ <= value.keys()
            and all(fits(value[k], inner[k]) for k in value)
        )
    return type(value) is hint


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Summaries the simulator wrote, for half a virtual second each: a plain,
    a delay-compensated (max_kept_models) and a peer-to-peer run (topology),
    and one on two server nodes (servers)."""
    tmp = tmp_path_factory.mktemp("summaries")
    common = ["-s", "default", "--set", "max_time_s=0.5", "--set", "workers=2", "--no-plots"]
    assert main(["compare", *common, "-p", "bsp,asp:compensate=0.1,p2p-allreduce", "-o", str(tmp / "a")]) == 0
    assert main(["simulate", *common, "-p", "asp", "--servers", "2", "-o", str(tmp / "b")]) == 0
    return [tmp / "a" / "summary.json", tmp / "b" / "summary.json"]


def test_a_summary_the_simulator_wrote_reads_back_as_it_is(written):
    runs = [run for path in written for run in read_summary(path)]
    assert runs == [run for path in written for run in json.loads(path.read_text())]
    assert [r["label"] for r in runs] == ["bsp", "asp(compensate=0.1)", "p2p-allreduce(sync=bsp)", "asp"]
    seen: set[str] = set()
    for run in runs:
        assert sorted(run.keys() - KEYS) == [], "the simulator writes a key formats.md does not document"
        for key, value in run.items():
            assert fits(value, HINTS[key]), f"{run['label']}: {key} = {value!r} is not {HINTS[key]}"
        seen |= run.keys()
    assert {"max_kept_models", "topology", "servers", "metric_curve", "workers_left"} <= seen


# ------------------------------------------------------------------ (c) the refusals
def one_line(caught: pytest.ExceptionInfo[BadInput]) -> str:
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(BadInput) as caught:
        read_summary(tmp_path / "summary.json")
    assert one_line(caught).startswith(f"{tmp_path / 'summary.json'} is missing")


def test_a_file_that_is_no_json_is_refused(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('[{"label": "bsp",')
    with pytest.raises(BadInput, match=r"summary.json is not JSON \(.* at character \d+\).*hetsync") as caught:
        read_summary(path)
    one_line(caught)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"label": "bsp"}, r"holds a dict, not a list of runs"),
        ([{"label": "bsp"}, 3], r"run 2: is 3, not an object"),
        ([{"policy": "bsp"}], r"run 1: 'label' is missing"),
        ([{"label": ""}], r"run 1: 'label' is '', not the run's name"),
        ([{"label": 7}], r"run 1: 'label' is 7, not the run's name"),
        ([{"label": "bsp", "workers_left": [{"worker": 1, "t": 2.0}]}], r"'workers_left' holds .*reason"),
        ([{"label": "bsp", "final_metrics": {"loss": "low"}}], r"'final_metrics' is .*, not an object of numbers"),
        ([{"label": "bsp", "eval_beside": 1}], r"'eval_beside' is 1, not true or false"),
        ([{"label": "bsp", "trace": "../x.jsonl"}], r"'trace' is '../x.jsonl', not the name of a file"),
    ],
)
def test_a_summary_that_is_not_runs_is_refused_naming_the_run_and_key(tmp_path, raw, message):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(BadInput, match=message) as caught:
        read_summary(path)
    assert one_line(caught).startswith(str(path))


def wrong(key: str) -> Any:
    """A value of another type than ``key``'s."""
    return {str: 7, int: 1.5, float: "3.0", bool: 1, dict: [], list: "rising"}[declared(key)]


@pytest.mark.parametrize("key", sorted(KEYS - {"label"}))
def test_every_key_of_the_wrong_type_is_named(tmp_path, key):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps([{"label": "ok"}, {"label": "bsp", key: wrong(key)}]))
    with pytest.raises(BadInput) as caught:
        read_summary(path)
    message = one_line(caught)
    assert message.startswith(f"{path}: run 2 (bsp): {key!r} is {wrong(key)!r}, not "), message
    assert message.endswith("it is damaged or was not written by hetsync: run again to rewrite it")


def test_an_older_summary_and_keys_it_does_not_know_are_kept(tmp_path):
    """A key may be missing or null (older summaries, values that do not
    apply); a key the table does not list (a bench's figure) stays."""
    runs = [{"label": "old"}, {"label": "nulls", **dict.fromkeys(KEYS - {"label"})}, {"label": "x", "script": "a.py"}]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(runs))
    assert read_summary(path) == runs
    assert as_dicts(check_summary(runs, path)) is runs


def test_the_look_that_never_raises_keeps_the_runs_that_pass(tmp_path):
    path = tmp_path / "summary.json"
    assert finished_runs(path) == []
    path.write_text("[")
    assert finished_runs(path) == []
    path.write_text('{"label": "bsp"}')
    assert finished_runs(path) == []
    path.write_text(json.dumps([{"label": "bsp"}, "not a run", {"label": "asp", "steps": "many"}]))
    assert finished_runs(path) == [{"label": "bsp"}]


def test_report_refuses_a_summary_that_is_no_json_in_one_line(tmp_path, capsys):
    (tmp_path / "summary.json").write_text("not json")
    assert main(["report", str(tmp_path), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.json is not JSON" in err


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
RECORD = st.fixed_dictionaries({"label": st.text(min_size=1, max_size=5)}) | st.dictionaries(
    st.sampled_from(sorted(KEYS)), JSON, max_size=4
)


@given(st.lists(RECORD | JSON, max_size=3) | JSON)
def test_any_json_is_runs_or_one_line_of_bad_input(raw):
    try:
        runs = check_summary(raw, "s.json")
    except BadInput as e:
        assert "\n" not in str(e) and str(e).startswith("s.json")
    else:
        assert runs is raw and all(isinstance(r, dict) and r["label"] for r in runs)


def test_the_phases_and_the_policy_in_force_are_read_from_the_switch_notes(auto_switch_run):
    notes = auto_switch_run.run["policy_notes"]
    t = run_switches(auto_switch_run.run)[0]["t"]
    assert policy_phases(notes) == [(0.0, "bsp"), (t, "lb-bsp")]
    assert policy_in_force("auto", notes) == "auto→lb-bsp"
    assert policy_phases([]) == [] and policy_in_force("auto", []) == ""  # before any switch, and other policies
    back = {"t": t + 1, "what": "switch", "detail": {"from": "lb-bsp", "to": "backup"}}
    other = {"t": t + 2, "what": "something else", "detail": {"to": "bsp"}}
    assert policy_phases([*notes, back, other])[1:] == [(t, "lb-bsp"), (t + 1, "backup")]
    assert policy_in_force("auto", [*notes, back, other]) == "auto→backup"
    damaged = {"t": t + 3, "what": "switch", "detail": {"from": "backup"}}  # no 'to': not a switch to read
    assert policy_in_force("auto", [*notes, damaged]) == "auto→lb-bsp"
