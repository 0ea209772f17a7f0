"""hetsync.benches.sim: the network's share of a math-off run."""

from __future__ import annotations

from hetsync.benches.sim import _NETWORK_CALLS, _measure, _network_rows, _timed_network
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
