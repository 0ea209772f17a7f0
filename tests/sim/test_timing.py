"""Analytic timing: with fixed step times and a free network the simulator's
clock and shares must match closed-form values."""

import pytest

from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation
from hetsync.sim.timing import TimingModel
from tests.sim.conftest import make_scenario

SLOW = [1.0, 2.0, 3.0, 4.0]


def step_times(sc):
    return [sc.nominal_step_s(w, sc.batch_size) for w in range(sc.workers)]


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


def test_gpu_curve_is_flat_then_linear_and_memory_cap_refuses():
    sc = scenario_from_dict(
        {
            "workers": 1,
            "max_steps": 1,
            "device": "gpu",
            "fixed_s": 0.1,
            "per_sample_s": 0.01,
            "saturation_batch": 32,
            "max_batch": 128,
        }
    )
    tm = TimingModel(sc)
    assert tm.step_duration_s(0, 8, 0.0) == pytest.approx(0.1)
    assert tm.step_duration_s(0, 32, 0.0) == pytest.approx(0.1)
    assert tm.step_duration_s(0, 64, 0.0) == pytest.approx(0.1 + 0.32)
    with pytest.raises(Exception, match="memory cap"):
        tm.step_duration_s(0, 129, 0.0)


def test_noise_has_mean_one_and_stragglers_and_delay_apply():
    sc = make_scenario(workers=1, jitter=0.3, straggler_prob=0.1, straggler_factor=5.0, delay_s=0.5)
    tm = TimingModel(sc)
    base = sc.per_sample_s * sc.batch_size
    d = [tm.step_duration_s(0, sc.batch_size, 0.0) - 0.5 for _ in range(20000)]
    mean = sum(d) / len(d)
    assert mean == pytest.approx(base * (0.9 + 0.1 * 5.0), rel=0.05)
    assert min(d) > 0


def test_background_load_square_wave():
    sc = make_scenario(
        workers=2, background_load={"workers": [1], "period_s": 10, "on_s": 4, "factor": 3, "random_phase": False}
    )
    tm = TimingModel(sc)
    base = sc.per_sample_s * sc.batch_size
    assert tm.step_duration_s(1, sc.batch_size, 1.0) == pytest.approx(3 * base)
    assert tm.step_duration_s(1, sc.batch_size, 5.0) == pytest.approx(base)
    assert tm.step_duration_s(0, sc.batch_size, 1.0) == pytest.approx(base)
