"""The compute timing model both drivers use: the simulator's step
durations and a runtime worker's extra sleep (hetsync.driver.timing). The
memory cap is checked by the driver core (tests/driver/test_core.py)."""

import pytest

from hetsync.driver.timing import TimingModel
from hetsync.scenario import scenario_from_dict
from tests.sim.conftest import make_scenario


def test_gpu_curve_is_flat_then_linear():
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


def test_noise_has_mean_one_and_stragglers_and_delay_apply():
    sc = make_scenario(workers=1, jitter=0.3, straggler_prob=0.1, straggler_factor=5.0, delay_s=0.5)
    tm = TimingModel(sc)
    base = sc.step_cost.step_s(sc.job.batch_size) - sc.step_cost.fixed_s
    d = [tm.step_duration_s(0, sc.job.batch_size, 0.0) - 0.5 for _ in range(20000)]
    mean = sum(d) / len(d)
    assert mean == pytest.approx(base * (0.9 + 0.1 * 5.0), rel=0.05)
    assert min(d) > 0


def test_background_load_square_wave():
    sc = make_scenario(
        workers=2, background_load={"workers": [1], "period_s": 10, "on_s": 4, "factor": 3, "random_phase": False}
    )
    tm = TimingModel(sc)
    base = sc.step_cost.step_s(sc.job.batch_size) - sc.step_cost.fixed_s
    assert tm.step_duration_s(1, sc.job.batch_size, 1.0) == pytest.approx(3 * base)
    assert tm.step_duration_s(1, sc.job.batch_size, 5.0) == pytest.approx(base)
    assert tm.step_duration_s(0, sc.job.batch_size, 1.0) == pytest.approx(base)


def test_a_paced_step_lasts_the_modelled_time_whatever_the_real_step_took():
    sc = make_scenario(workers=2, fixed_s=0.02, per_sample_s=0.0025, slowdown=[1, 3], delay_s=[0.0, 0.5], jitter=0.1)
    modelled, paced = TimingModel(sc), TimingModel(sc)  # the same noise streams
    for real_s in (0.001, 0.05):
        want = modelled.step_duration_s(1, 32, 0.0)
        assert real_s + paced.extra_sleep_s(1, real_s, 0.0, paced_batch=32) == pytest.approx(want)
    # a real step longer than the model is not cut short
    assert paced.extra_sleep_s(0, 5.0, 0.0, paced_batch=32) == 0.0


@pytest.mark.parametrize("straggler_prob", [0.0, 0.1])
def test_durations_are_those_of_one_draw_per_step(straggler_prob):
    """Normals drawn ahead in chunks (no stragglers) give every worker the
    very durations, bit for bit, that one draw per step gives."""
    sc = make_scenario(workers=3, jitter=0.3, straggler_prob=straggler_prob, straggler_factor=5.0, delay_s=0.5)
    fast, plain = TimingModel(sc), TimingModel(sc)
    assert fast._chunked == (straggler_prob == 0.0)
    plain._chunked = False
    order = [w for w in (0, 2, 1, 0, 0, 2) for _ in range(23)]  # workers interleaved, past a chunk's end
    got = [fast.step_duration_s(w, sc.job.batch_size, 0.0) for w in order]
    want = [plain.step_duration_s(w, sc.job.batch_size, 0.0) for w in order]
    assert [x.hex() for x in got] == [x.hex() for x in want]
    assert len(set(got)) == len(got)  # noise there is
