"""hetsync.benches.sim: the network's share of a math-off run, and ``--before``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsync.benches.sim import (
    _NETWORK_CALLS,
    _before_rows,
    _floor_of_events_rows,
    _floor_rows,
    _in_fresh_process,
    _math_floor,
    _measure,
    _measure_floor,
    _network_rows,
    _RecordedNetwork,
    _ReplayedNetwork,
    _source_dir,
    _timed_network,
)
from hetsync.errors import BadInput
from hetsync.sim.network import Network


def test_timed_network_counts_every_call_and_restores_the_methods():
    before = {name: getattr(Network, name) for name in _NETWORK_CALLS}
    spent = [0.0]
    with _timed_network(spent):
        net = Network([1e6, 1e6], [1e6, 1e6], 0.001)
        net.start_flow(0.0, 0, 1, 1000, "a")
        assert net.advance(net.next_event_s()) == ["a"]
    assert spent[0] > 0.0
    assert {name: getattr(Network, name) for name in _NETWORK_CALLS} == before
    timed_s = spent[0]
    net.start_flow(1.0, 1, 0, 1000, "b")  # no longer timed
    assert net.advance(net.next_event_s()) == ["b"]
    assert spent[0] == timed_s


def test_measure_times_the_network_within_the_run():
    run = _measure("default", {"max_steps": 3}, "asp", False, False, False, True)
    assert 0.0 < run["network_s"] < run["host_time_s"]
    rows = {r["metric"]: r["value"] for r in _network_rows("default, asp", run)}
    assert 0.0 < rows["network share of run time, math off"] < 100.0
    assert rows["network time per event, math off"] > 0.0
    assert _measure("default", {"max_steps": 3}, "asp", False, False, False)["network_s"] is None


def test_replayed_network_answers_as_the_recorded_one_did():
    recorded = _RecordedNetwork(Network([1e6, 1e6, 1e6], [1e6, 1e6, 1e6], 0.001))
    calls = [(0.0, 1, 0, 1000, "a"), (0.0002, 2, 0, 3000, "b")]
    for call in calls:
        recorded.start_flow(*call)
    got = []
    while (t := recorded.next_event_s()) < float("inf"):
        got.append((t, recorded.advance(t)))
    assert [tokens for _, tokens in got] == [["a"], ["b"]]
    replayed = _ReplayedNetwork(recorded)
    for call in calls:
        replayed.start_flow(*call[:4], call[4].upper())  # other tokens, the same start order
    for t, tokens in got:
        assert replayed.next_event_s() == t
        assert replayed.advance(t) == [x.upper() for x in tokens]


def test_measure_floor_replays_the_same_run_cheaper():
    floor = _measure_floor("default", {"max_steps": 3}, "asp", 1)
    assert floor["same_trace"] is True  # the replayed network answered every call as the real one
    assert floor["events"] > 0 and floor["steps"] == 3 * 8
    rows = {r["metric"]: r for r in _floor_of_events_rows("default, asp", floor, 1)}
    assert rows["events per second, math off, replayed"]["value"] == floor["events"] / floor["replayed"]
    assert "sha256 equal" in rows["events per second, math off, replayed"]["setting"]
    assert rows["bookkeeping per step, math off, no trace"]["value"] == 1e6 * floor["no trace"] / floor["steps"]


@pytest.mark.dist
def test_before_runs_another_source_tree_in_a_fresh_process(tmp_path):
    import shutil

    import hetsync

    src = tmp_path / "old" / "src"
    shutil.copytree(Path(hetsync.__file__).parent, src / "hetsync", ignore=shutil.ignore_patterns("__pycache__"))
    run = _in_fresh_process("default", {"max_steps": 2}, "asp", False, False, False, source=_source_dir(src))
    assert run["source"] == str(src.resolve())
    assert run["steps"] == 16 and run["events"] > 0


def test_before_must_be_a_hetsync_src_folder(tmp_path):
    with pytest.raises(BadInput, match="--before .*hetsync/__init__.py"):
        _source_dir(tmp_path)
    assert _source_dir(None) is None


def _run(steps, events, host_s, trace="same", cpu_s=None):
    return {
        "steps": steps,
        "events": events,
        "host_time_s": host_s,
        "trace_sha256": trace,
        "cpu_s": host_s if cpu_s is None else cpu_s,
    }


def test_before_rows_give_both_figures_and_their_ratio():
    runs = {
        ("/old", True): [_run(100, 0, 2.0, cpu_s=1.5), _run(100, 0, 2.5, cpu_s=1.2)],
        (None, True): [_run(100, 0, 1.0, cpu_s=0.8), _run(100, 0, 1.1, cpu_s=0.6)],
        ("/old", False): [_run(100, 0, 4.0)],
        (None, False): [_run(100, 0, 4.0)],
        ("/old", None): [_run(100, 1000, 0.5)],
        (None, None): [_run(100, 750, 0.25)],
    }
    rows = {
        (r["metric"], r["setting"].split(", ")[3].split(":")[0]): r["value"]
        for r in _before_rows("s, p, 8 workers", runs, "/old", 2)
    }
    assert rows["gradient steps simulated per second, before", "batched math"] == 50.0
    assert rows["gradient steps simulated per second, after / before", "batched math"] == 2.0
    assert rows["gradient steps simulated per second, after / before", "unbatched math"] == 1.0
    # and of the least CPU time of each, whichever run that was
    assert rows["gradient steps simulated per second, after / before, CPU time", "batched math"] == 2.0
    # math off: the ratio is of steps per second (the same work), events per second each as counted
    assert rows["gradient steps simulated per second, after / before", "math off"] == 2.0
    assert rows["events per second, math off, before", "math off"] == 2000.0
    assert rows["events per second, math off, after", "math off"] == 3000.0
    # the same trace: the before version's count over this version's time
    assert rows["events per second, math off, after, counted as before", "math off"] == 4000.0


def test_before_rows_count_events_as_before_only_for_the_same_trace():
    runs = {
        (v, mode): [_run(100, 1000 if v else 750, 1.0, trace=str(v))]
        for v in ("/old", None)
        for mode in (True, False, None)
    }
    metrics = [r["metric"] for r in _before_rows("s, p, 8 workers", runs, "/old", 2)]
    assert "events per second, math off, after" in metrics
    assert "events per second, math off, after, counted as before" not in metrics


def test_math_floor_counts_the_flops_and_times_each_way():
    floor = _math_floor("default", {}, 8, repeat=1)
    # digits-mlp 64 -> 64 -> 10 at batch 32: the forward's two matmuls, the same again for the
    # weight gradients, and the hidden layer's input gradient (the data's is not needed)
    assert floor["flops"] == 2 * 32 * (64 * 64 + 64 * 10) * 2 + 2 * 32 * 64 * 10
    assert floor["models"] == 8 and floor["workload"] == "digits-mlp"
    assert 0.0 < floor["matmul_s"] < floor["vmap_s"]
    assert floor["one_s"] > 0.0
    rows = {r["metric"]: r["value"] for r in _floor_rows("default, digits-mlp", floor)}
    assert rows["gradient FLOPs per step"] == floor["flops"] / 1e6
    assert rows["bound on batched / unbatched math"] == pytest.approx(floor["one_s"] / floor["matmul_s"])
