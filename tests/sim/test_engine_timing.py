"""Analytic timing: with fixed step times and a free network the simulator's
clock and shares must match closed-form values."""

import pytest

from hetsync.sim.engine import Simulation
from tests.sim.conftest import make_scenario

SLOW = [1.0, 2.0, 3.0, 4.0]


def step_times(sc):
    return [sc.nominal_step_s(w, sc.job.batch_size) for w in range(sc.cluster.workers)]


def test_bsp_wall_time_is_steps_times_slowest_and_compute_share_mean_over_max():
    sc = make_scenario(slowdown=SLOW, max_steps=30)
    s = Simulation(sc, "bsp", math=False).run().summary
    t = step_times(sc)
    assert s["wall_time_s"] == pytest.approx(30 * max(t), rel=0.01)
    assert s["compute_share"] == pytest.approx(sum(t) / len(t) / max(t), rel=0.01)
    assert s["comm_share"] == pytest.approx(0.0, abs=1e-9)
    assert s["compute_share"] + s["wait_share"] == pytest.approx(1.0)


def test_asp_throughput_is_sum_of_worker_rates():
    sc = make_scenario(slowdown=SLOW, max_steps=None, max_time_s=40.0)
    s = Simulation(sc, "asp", math=False).run().summary
    rate = sum(1.0 / t for t in step_times(sc))
    assert s["steps"] / s["wall_time_s"] == pytest.approx(rate, rel=0.01)
    assert s["compute_share"] == pytest.approx(1.0, rel=0.01)


def test_network_costs_show_up_in_bsp_round_time():
    # 4 workers push 1 MB each into a 1 MB/s server link: incast 4 s, broadcast 4 s
    sc = make_scenario(
        slowdown=[1.0] * 4, max_steps=3, bandwidth_Bps=1e9, server_bandwidth_Bps=1e6, model_bytes=1_000_000
    )
    s = Simulation(sc, "bsp", math=False).run().summary
    step = step_times(sc)[0]
    assert s["wall_time_s"] == pytest.approx(3 * (step + 4.0 + 4.0), rel=1e-6)
    assert s["bytes_sent"] == 3 * 8 * 1_000_000
