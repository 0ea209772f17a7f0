"""Tests of hetsync.report.perfetto: the Chrome trace-event export of real simulated runs."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from hetsync.report.perfetto import chrome_events, lanes, wait_gaps, write_chrome_trace
from hetsync.report.switches import run_switches
from hetsync.runner import compare
from hetsync.scenario import load_scenario

# a parameter server, its overlapped variant (transfers behind compute), a
# re-sizing barrier policy and a peer-to-peer one (multicasts overlap)
SPECS = ["bsp", "wbsp-overlap", "lb-bsp", "selmcast"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path_factory.mktemp("demo")
    # a step budget drains the run: every step and transfer has ended, and is in the trace, when it stops
    runs = compare(load_scenario("default", max_time_s=None, max_steps=30), SPECS, out)
    path = write_chrome_trace(runs, out, out / "trace.json")
    assert path == out / "trace.json"
    return out, runs, json.loads(path.read_text(encoding="utf-8"))


def x_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def thread_names(doc: dict[str, Any], pid: int) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid
    }


def test_the_file_is_trace_event_json(demo: tuple[Path, list[dict[str, Any]], dict[str, Any]]) -> None:
    _, runs, doc = demo
    assert isinstance(doc["traceEvents"], list)
    # Perfetto keeps only a top-level "metadata" object (as json_metadata.*, scalars) and flags
    # displayTimeUnit in its import stats; chrome://tracing shows "metadata" too
    assert set(doc) == {"metadata", "traceEvents"}
    assert "virtual" in doc["metadata"]["clock"]
    assert all(isinstance(v, str | int) for v in doc["metadata"].values())
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in {"M", "X", "i", "C"}
        assert isinstance(e["pid"], int) and 1 <= e["pid"] <= len(runs)
        if e["ph"] != "M" or e["name"].startswith("thread"):
            assert isinstance(e["tid"], int)  # Perfetto drops a thread-scoped instant without one
        if e["ph"] != "M":
            assert isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0
        if e["ph"] == "C":
            assert all(isinstance(v, float) and math.isfinite(v) for v in e["args"].values())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {i + 1: r["label"] for i, r in enumerate(runs)}


def perfetto_ns(us: float) -> int:
    """A ``ts`` or ``dur`` in nanoseconds as Perfetto's JSON importer reads it
    (json_trace_tokenizer.cc, CoerceToTs: whole numbers times 1000, else
    llround(us * 1000))."""
    return int(us) * 1000 if us == math.trunc(us) else math.floor(us * 1000.0 + 0.5)


def test_events_of_one_thread_never_overlap(demo: tuple[Path, list[dict[str, Any]], dict[str, Any]]) -> None:
    """Not even by a nanosecond once Perfetto has made integers of them: its
    slice tracker moves a complete event that partially overlaps another of
    its thread to an overflow track and reports an import error."""
    _, _, doc = demo
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in x_events(doc):
        start = perfetto_ns(e["ts"])
        by_thread[(e["pid"], e["tid"])].append((start, start + perfetto_ns(e["dur"])))
    assert by_thread
    touching = 0
    for spans in by_thread.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end
            touching += start == end
    assert touching > 0  # back-to-back compute and wait events stay back to back


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of the intervals, as disjoint intervals in order."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1] + 1e-3:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def test_every_worker_time_adds_up_as_the_summary_counts_it(
    demo: tuple[Path, list[dict[str, Any]], dict[str, Any]],
) -> None:
    """Per worker, the events of its threads tile the run without a hole, and
    the compute and wait events sum to the summary's compute_s and wait_s
    (the run drained, so the idle time after the last step is a wait)."""
    _, runs, doc = demo
    for pid, run in enumerate(runs, start=1):
        threads = thread_names(doc, pid)
        totals: dict[tuple[str, str], float] = defaultdict(float)
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for e in x_events(doc):
            if e["pid"] == pid:
                worker = threads[e["tid"]].split()[0]
                totals[(worker, e["name"])] += e["dur"] / 1e6
                spans[worker].append((e["ts"], e["ts"] + e["dur"]))
        for w in range(run["workers"]):
            name = f"w{w}"
            assert merged(spans[name]) == [(0.0, pytest.approx(run["wall_time_s"] * 1e6, abs=1e-2))], run["label"]
            assert totals[(name, "compute")] == pytest.approx(run["per_worker"]["compute_s"][w], abs=1e-6)
            wait = totals[(name, "wait")] + totals[(name, "wait or unfinished")]
            assert wait == pytest.approx(run["per_worker"]["wait_s"][w], abs=1e-6), run["label"]


def test_transfers_and_updates(demo: tuple[Path, list[dict[str, Any]], dict[str, Any]]) -> None:
    out, runs, doc = demo
    for pid, run in enumerate(runs, start=1):
        events = [e for e in doc["traceEvents"] if e["pid"] == pid]
        instants = [e for e in events if e["ph"] == "i"]
        if run.get("topology") == "p2p":
            assert thread_names(doc, pid)[0] == "exchanges"
            assert sum(e["name"] == "exchange done" for e in instants) == run["updates"] > 0
            sends = [e for e in events if e["ph"] == "X" and e["name"].startswith("send →")]
            receives = [e for e in events if e["ph"] == "X" and e["name"].startswith("receive ←")]
            assert len(sends) == len(receives) > 0
            assert any(name.endswith("net 2") for name in thread_names(doc, pid).values())  # multicasts overlap
        else:
            assert thread_names(doc, pid)[0] == "server"
            assert sum(e["name"].startswith("update v") for e in instants) == run["updates"] > 0
            trace = [json.loads(line) for line in (out / run["trace"]).read_text().splitlines()]
            for kind in ("push", "pull"):
                assert sum(e["ph"] == "X" and e["name"] == kind for e in events) == sum(r["ev"] == kind for r in trace)
        counters = [e for e in events if e["ph"] == "C" and e["name"] == "eval" and "accuracy" in e["args"]]
        assert all(len(e["args"]) == 1 for e in events if e["ph"] == "C")  # Perfetto: track "eval accuracy"
        assert len(counters) == len(run["metric_curve"])


def test_lb_bsp_compute_events_carry_the_batch(demo: tuple[Path, list[dict[str, Any]], dict[str, Any]]) -> None:
    _, runs, doc = demo
    pid = 1 + next(i for i, r in enumerate(runs) if r["policy"] == "lb-bsp")
    batches = {e["args"]["batch"] for e in x_events(doc) if e["pid"] == pid and e["name"] == "compute"}
    assert len(batches) > 1  # the policy re-sizes the batches


def test_max_workers_keeps_the_first_workers_and_says_so(
    demo: tuple[Path, list[dict[str, Any]], dict[str, Any]],
) -> None:
    out, runs, _ = demo
    events = list(chrome_events(out / runs[0]["trace"], pid=1, label="bsp", max_workers=2))
    assert events[0]["args"]["name"] == "bsp (workers 0–1 of 8)"
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"server", "w0", "w0 net", "w1", "w1 net"}


def test_no_traces_no_file(tmp_path: Path) -> None:
    assert write_chrome_trace([{"label": "bsp", "trace": None}], tmp_path, tmp_path / "trace.json") is None
    assert not (tmp_path / "trace.json").exists()


def test_lanes_separate_overlaps_and_reuse_freed_lanes() -> None:
    spans = [(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (1.5, 1.8), (5.0, 6.0)]
    got = lanes(spans)
    assert got == [0, 1, 0, 2, 0]  # (2, 4) reuses lane 0 as (0, 2) ends; three open at once at 1.5
    for a in range(len(spans)):
        for b in range(a):
            if got[a] == got[b]:
                assert spans[a][0] >= spans[b][1] or spans[b][0] >= spans[a][1]
    assert lanes([]) == []


def test_wait_gaps_are_the_uncovered_parts() -> None:
    assert wait_gaps([(1.0, 2.0), (1.5, 3.0), (4.0, 5.0)], 0.0, 6.0) == [(0.0, 1.0), (3.0, 4.0), (5.0, 6.0)]
    assert wait_gaps([(0.0, 7.0)], 0.0, 6.0) == []
    assert wait_gaps([], 0.0, 1.0) == [(0.0, 1.0)]


def test_a_crashed_run_s_cut_trace_exports_what_it_holds(
    demo: tuple[Path, list[dict[str, Any]], dict[str, Any]], tmp_path: Path
) -> None:
    """A run that died while writing leaves a last line cut short (and no
    ``end``): the export is that of the trace without its last record."""
    out, runs, _ = demo
    text = (out / runs[0]["trace"]).read_text()
    whole = text.rstrip("\n").rsplit("\n", 1)[0] + "\n"  # every record but the end
    (tmp_path / "whole.jsonl").write_text(whole)
    (tmp_path / "cut.jsonl").write_text(text[: len(whole) + 9])  # ... and the first bytes of the end record
    cut = list(chrome_events(tmp_path / "cut.jsonl", pid=1, label="bsp"))
    assert cut == list(chrome_events(tmp_path / "whole.jsonl", pid=1, label="bsp"))
    assert any(e["ph"] == "X" and e["name"] == "compute" for e in cut)


def test_a_policy_switch_is_an_instant_on_the_server_thread_with_its_cause(auto_switch_run) -> None:
    run = auto_switch_run.run
    (note,) = run_switches(run)
    events = list(chrome_events(auto_switch_run.out / run["trace"], pid=1, label="auto"))
    (switch,) = [e for e in events if e["ph"] == "i" and e["name"].startswith("policy ")]
    assert switch["name"] == "policy bsp → lb-bsp" and switch["tid"] == 0
    assert switch["ts"] == pytest.approx(note["t"] * 1e6) and switch["args"] == note["detail"]
