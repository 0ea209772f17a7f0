"""Peer-to-peer policies in the simulator: the math, the transfer costs and
the link load match closed forms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsync.errors import PolicyError
from hetsync.policies.base import Multicast
from hetsync.sim.engine import Simulation
from tests.sim.conftest import make_scenario

MB = 1_000_000


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(("spec", "n"), [("p2p-allreduce", 4), ("p2p-random:p=1", 2), ("selmcast:p=2", 3)])
def test_full_averaging_equals_bsp(spec, n):
    """Everyone averaging everyone after a local step is BSP's update."""
    sc = make_scenario(workers=n, workload="digits-mlp", lr=0.2, max_steps=30, seed=5)
    bsp = Simulation(sc, "bsp").run().params
    p2p = Simulation(sc, spec).run()
    diff = (p2p.params - bsp).abs().max().item()
    assert diff <= 1e-5, diff
    assert p2p.summary["applied_steps"] == 30 * n and p2p.summary["outstanding_steps"] == 0


def test_ring_allreduce_takes_2_k_minus_1_over_k_model_times():
    k, bw = 4, 1e6
    sc = make_scenario(workers=k, bandwidth_Bps=bw, model_bytes=MB, max_steps=3)
    s = Simulation(sc, "p2p-allreduce", math=False).run().summary
    expected = 2 * (k - 1) * (MB / k) / bw
    assert s["allreduces"] == 3
    assert s["mean_exchange_s"] == pytest.approx(expected, rel=1e-9)
    assert s["mean_receivers"] == k - 1
    assert s["bytes_sent"] == 3 * 2 * (k - 1) * k * (MB // k)


def test_multicast_costs_what_the_uplinks_allow():
    # 3 workers, each to both others: every uplink and downlink carries 2 copies
    bw = 2e6
    sc = make_scenario(workers=3, bandwidth_Bps=bw, model_bytes=MB, max_steps=2)
    s = Simulation(sc, "p2p-random:p=2", math=False).run().summary
    assert s["mean_exchange_s"] == pytest.approx(2 * MB / bw, rel=1e-9)
    assert s["mean_receivers"] == 2


def test_a_slow_uplink_costs_its_copies(tmp_path):
    # worker 0's uplink is 4x slower: its 2 copies take 2 MB / (bw / 4)
    bw = 4e6
    sc = make_scenario(workers=3, bandwidth_Bps=[bw / 4, bw, bw], model_bytes=MB, max_steps=1)
    trace = tmp_path / "t.jsonl"
    Simulation(sc, "p2p-allreduce:sync=ssp", trace_path=trace, math=False).run()
    sends = [r for r in records(trace) if r["ev"] == "send" and r["w"] == 0]
    assert len(sends) == 2
    assert max(r["end"] - r["t"] for r in sends) == pytest.approx(2 * MB / (bw / 4), rel=1e-6)


def test_link_load_divides_the_bandwidth_and_switches_mid_transfer(tmp_path):
    bw, factor = 1e6, 4.0
    # always on: two workers, one copy each way at bw / factor
    loaded = {"workers": "all", "period_s": 10.0, "on_s": 10.0, "factor": factor, "random_phase": False}
    sc = make_scenario(
        workers=2, bandwidth_Bps=bw, model_bytes=MB, max_steps=1, per_sample_s=0.0, eval_every_s=1.0, link_load=loaded
    )
    s = Simulation(sc, "p2p-random:p=1", math=False).run().summary
    assert s["mean_exchange_s"] == pytest.approx(MB / (bw / factor), rel=1e-9)
    # on for the first 0.5 s of every 100 s: 0.5 s at bw / 4, the rest at bw
    switching = {"workers": "all", "period_s": 100.0, "on_s": 0.5, "factor": factor, "random_phase": False}
    sc = make_scenario(
        workers=2,
        bandwidth_Bps=bw,
        model_bytes=MB,
        max_steps=1,
        per_sample_s=0.0,
        eval_every_s=1.0,
        link_load=switching,
    )
    s = Simulation(sc, "p2p-random:p=1", math=False).run().summary
    moved = 0.5 * bw / factor
    assert s["mean_exchange_s"] == pytest.approx(0.5 + (MB - moved) / bw, rel=1e-9)


def test_reported_bandwidth_follows_the_link_load():
    seen = []

    class Spy(Simulation):
        def _deliver(self, event):
            if type(event).__name__ == "ComputeDone":
                seen.append((event.now_s, event.worker, event.uplink_Bps))
            super()._deliver(event)

    loaded = {"workers": [1], "period_s": 1.0, "on_s": 0.5, "factor": 2.0, "random_phase": False}
    sc = make_scenario(workers=2, bandwidth_Bps=1e9, max_steps=20, per_sample_s=0.01, link_load=loaded)
    Spy(sc, "p2p-random:p=1", math=False).run()
    for t, w, up in seen:
        on = w == 1 and t % 1.0 < 0.5
        assert up == (5e8 if on else 1e9), (t, w, up)
    assert {up for _, w, up in seen if w == 1} == {5e8, 1e9}


def test_ps_policies_see_the_link_load_too():
    loaded = {"workers": "all", "period_s": 10.0, "on_s": 10.0, "factor": 2.0, "random_phase": False}
    base = make_scenario(bandwidth_Bps=1e6, server_bandwidth_Bps=1e9, model_bytes=100_000, max_steps=5)
    slow = make_scenario(
        bandwidth_Bps=1e6, server_bandwidth_Bps=1e9, model_bytes=100_000, max_steps=5, link_load=loaded
    )
    a = Simulation(base, "bsp", math=False).run().summary["wall_time_s"]
    b = Simulation(slow, "bsp", math=False).run().summary["wall_time_s"]
    assert b > 1.5 * a


def test_traces_are_identical_for_the_same_seed(tmp_path):
    loaded = {"workers": [0, 2], "period_s": 1.0, "on_s": 0.3, "factor": 3.0}
    sc = make_scenario(
        workers=5, bandwidth_Bps={"linspace": [1e6, 1e7]}, model_bytes=MB // 10, link_load=loaded, jitter=0.3
    )
    for spec in ("selmcast:sync=ssp", "p2p-random"):
        a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
        Simulation(sc, spec, trace_path=a).run()
        Simulation(sc, spec, trace_path=b).run()
        assert a.read_bytes() == b.read_bytes()


def test_topologies_do_not_mix():
    sc = make_scenario(workers=2, max_steps=1)
    sim = Simulation(sc, "bsp", math=False)
    with pytest.raises(PolicyError, match="peer-to-peer command"):
        sim.wiring.execute([Multicast(worker=0, receivers=(1,))])


@pytest.mark.parametrize("spec", ["p2p-random:p=2", "selmcast:p=2", "selmcast:sync=ssp:p=2"])
def test_push_sum_weights_are_conserved(spec):
    """Every copy carries its share of the sender's weight: once the run has
    drained, the workers' weights and those of the copies not yet mixed add
    up to N, while unequal fan-out has made them unequal."""
    n = 6
    sc = make_scenario(
        workers=n, bandwidth_Bps=[1e6, 4e6, 1.6e7] * 2, model_bytes=MB, max_steps=8, seed=3, p2p_mixing="push-sum"
    )
    sim = Simulation(sc, spec, math=False)
    sim.run()
    held = [w.model.weight + sum(wt for _, wt in w.inbox) for w in sim.workers]
    assert sum(held) == pytest.approx(n, rel=1e-12)
    assert max(w.model.weight for w in sim.workers) > 1.01 * min(w.model.weight for w in sim.workers)


def test_an_allreduce_keeps_weights_at_one():
    sc = make_scenario(workers=4, workload="digits-mlp", max_steps=3)
    sim = Simulation(sc, "p2p-allreduce")
    sim.run()
    assert [w.model.weight for w in sim.workers] == [1.0] * 4
