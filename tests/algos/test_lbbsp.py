import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.algos.lbbsp import (
    CPUBatchManager,
    Damper,
    EWMAPredictor,
    GPUBatchManager,
    RLSPredictor,
    StepCurve,
    StepCurveEstimator,
    equal_finish_batches,
    equal_finish_split,
    fit_step_curve,
    largest_remainder,
)


def _makespan(curves, x, comm=None):
    comm = comm or [0.0] * len(curves)
    return max(c.time_s(b) + ci for c, b, ci in zip(curves, x, comm, strict=True))


def _compositions(total, n):
    if n == 1:
        yield (total,)
        return
    for first in range(1, total - n + 2):
        for rest in _compositions(total - first, n - 1):
            yield (first, *rest)


# ------------------------------------------------------------------ rounding
def test_largest_remainder_hand_examples():
    assert largest_remainder([1.5, 1.5, 1.0], 4) == [2, 1, 1]  # tie: lower index first
    assert largest_remainder([3.7, 3.2, 3.1], 10) == [4, 3, 3]
    assert largest_remainder([0.2, 9.8], 10) == [1, 9]  # lo = 1 lifts the small one
    assert largest_remainder([5.0, 5.0], 10, hi=[3, 10]) == [3, 7]  # a cap pushes the rest elsewhere
    assert largest_remainder([1.0, 1.0, 1.0], 9) == [3, 3, 3]  # shares need not add up


@settings(max_examples=200, deadline=None)
@given(
    shares=st.lists(st.floats(0, 500), min_size=1, max_size=20),
    extra=st.integers(0, 300),
    cap_seed=st.integers(0, 2**16),
)
def test_largest_remainder_sums_exactly_within_bounds(shares, extra, cap_seed):
    n = len(shares)
    rng = np.random.default_rng(cap_seed)
    caps = [int(c) for c in rng.integers(1, 200, n)]
    total = min(n + extra, sum(caps))
    out = largest_remainder(shares, total, hi=caps)
    assert sum(out) == total
    assert all(1 <= x <= c for x, c in zip(out, caps, strict=True))


def test_largest_remainder_is_hamilton_when_shares_add_up():
    shares = [10.4, 20.35, 30.25]  # floors 60, one unit left: the largest remainder (.4)
    assert largest_remainder(shares, 61) == [11, 20, 30]


def test_largest_remainder_rejects_impossible_totals():
    with pytest.raises(ValueError, match="at least 1"):
        largest_remainder([1, 1, 1], 2)
    with pytest.raises(ValueError, match="caps add up"):
        largest_remainder([1, 1], 10, hi=[3, 3])
    with pytest.raises(ValueError, match="finite"):
        largest_remainder([math.nan, 1], 4)


# ------------------------------------------------------------ CPU: the split
def test_split_is_proportional_without_comm():
    assert equal_finish_split([100, 200, 100], 40) == [10, 20, 10]
    assert sum(equal_finish_split([3.0, 1.0, 1.0, 1.0], 17)) == 17


def test_split_equalizes_compute_plus_comm():
    v = [1000.0, 500.0, 250.0, 800.0]
    c = [0.010, 0.002, 0.030, 0.0]
    x = equal_finish_split(v, 4000, comm_s=c)
    assert sum(x) == 4000
    finish = [xi / vi + ci for xi, vi, ci in zip(x, v, c, strict=True)]
    assert max(finish) - min(finish) <= 1.0 / min(v) + 1e-12  # equal up to one sample of rounding


def test_split_holds_lagging_worker_at_one_and_respects_caps():
    # worker 2 is so far behind on communication that its real share is negative
    x = equal_finish_split([100.0, 100.0, 100.0], 30, comm_s=[0.0, 0.0, 10.0])
    assert x == [15, 14, 1]
    x = equal_finish_split([1000.0, 10.0, 10.0], 60, caps=[20, 60, 60])
    assert x == [20, 20, 20]


@settings(max_examples=100, deadline=None)
@given(
    v=st.lists(st.floats(1.0, 1e3), min_size=1, max_size=3),
    c=st.lists(st.floats(0.0, 0.1), min_size=3, max_size=3),
    per=st.integers(1, 9),
)
def test_split_is_within_one_sample_of_the_best_integer_split(v, c, per):
    n = len(v)
    total = n * per
    x = equal_finish_split(v, total, comm_s=c[:n])
    assert sum(x) == total and min(x) >= 1

    def makespan(y):
        return max(yi / vi + ci for yi, vi, ci in zip(y, v, c, strict=False))

    best = min(makespan(y) for y in _compositions(total, n))
    assert makespan(x) <= best + 1.0 / min(v) + 1e-9


def test_split_rejects_bad_speeds():
    with pytest.raises(ValueError, match="speeds"):
        equal_finish_split([1.0, 0.0], 4)


# ---------------------------------------------------------- CPU: predictors
def _load_series(k, seed=1, noise=0.1):
    rng = np.random.default_rng(seed)
    load = np.where((np.arange(k) + 7) % 60 < 25, 2.5, 1.0)
    speed = 800.0 / load * np.exp(rng.normal(-(noise**2) / 2, noise, k))
    return load, speed


def _mean_error(predictor, load, speed, warmup=60):
    errors = []
    for k in range(len(speed)):
        if k > warmup:
            errors.append(abs(predictor.predict(load[k - 1]) - speed[k]) / (800.0 / load[k]))
        predictor.observe(speed[k], load[k])
    return float(np.mean(errors))


def test_rls_learns_the_load_and_beats_ewma_and_last_value():
    load, speed = _load_series(1500)
    rls = _mean_error(RLSPredictor(2, 0.95), load, speed)
    ewma = _mean_error(EWMAPredictor(0.3), load, speed)
    last = _mean_error(EWMAPredictor(1.0), load, speed)
    assert rls < 0.9 * ewma and rls < 0.9 * last, (rls, ewma, last)


def test_rls_without_noise_predicts_a_load_change_it_has_learned():
    p = RLSPredictor(1, 0.98)
    for k in range(300):
        load = 3.0 if (k // 10) % 2 else 1.0
        p.observe(600.0 / load, load)
    # the monitor now reads load 3 although the last iteration ran unloaded
    assert p.predict(3.0) == pytest.approx(200.0, rel=0.05)
    assert p.predict(1.0) == pytest.approx(600.0, rel=0.05)


def test_predictors_start_as_last_value_and_check_input():
    p = RLSPredictor(2)
    assert p.predict() is None
    p.observe(100.0, 1.0)
    assert p.predict(1.0) == 100.0
    e = EWMAPredictor(0.5)
    e.observe(100.0)
    e.observe(200.0)
    assert e.predict() == 150.0
    with pytest.raises(ValueError, match="throughput"):
        p.observe(0.0)
    with pytest.raises(ValueError, match="load"):
        p.observe(1.0, 0.0)
    with pytest.raises(ValueError, match="lags"):
        RLSPredictor(0)


def test_rls_covariance_stays_bounded_under_constant_load():
    p = RLSPredictor(2, 0.9, max_trace=100.0)
    for _ in range(2000):
        p.observe(500.0, 1.0)
    assert np.trace(p.P) <= 100.0 + 1e-9
    assert p.predict(1.0) == pytest.approx(500.0, rel=1e-6)


def test_cpu_manager_moves_work_away_from_a_loaded_worker():
    m = CPUBatchManager(3, 96)
    assert m.allocate([0, 1, 2]) == {0: 32, 1: 32, 2: 32}  # nothing known yet
    for _ in range(5):
        m.observe(0, 32, 0.032, 1.0)
        m.observe(1, 32, 0.032, 1.0)
        m.observe(2, 32, 0.096, 3.0)
    x = m.allocate([0, 1, 2])
    assert sum(x.values()) == 96 and x[2] < x[0] and x[0] == pytest.approx(41, abs=1)
    assert m.allocate([0, 2]) == {0: 72, 2: 24}  # a worker left: the others share X


def test_cpu_manager_rejects_unknown_predictor():
    with pytest.raises(ValueError, match="predictor"):
        CPUBatchManager(2, 8, predictor="narx")


# -------------------------------------------------------- GPU: step curves
def test_fit_recovers_a_noise_free_hinge():
    truth = StepCurve(flat_s=0.03, saturation=64, slope_s=0.001)
    bs = [16, 32, 64, 96, 128, 160]
    curve = fit_step_curve(bs, [truth.time_s(b) for b in bs])
    assert curve.saturation == 64
    assert curve.flat_s == pytest.approx(0.03) and curve.slope_s == pytest.approx(0.001)


def test_fit_with_one_batch_size_is_proportional():
    curve = fit_step_curve([32, 32], [0.1, 0.1])
    assert curve.time_s(64) == pytest.approx(0.2) and curve.time_s(16) == pytest.approx(0.05)


def test_fit_is_nonnegative_and_honours_weights():
    curve = fit_step_curve([10, 20, 30], [0.3, 0.2, 0.1])  # decreasing: flat, never negative slope
    assert curve.slope_s == 0.0 and curve.flat_s == pytest.approx(0.2)
    curve = fit_step_curve([10, 20, 30], [0.1, 0.2, 9.0], [1.0, 1.0, 0.0])  # an ignored outlier
    assert curve.time_s(30) == pytest.approx(0.3)


def test_curve_max_batch_within():
    c = StepCurve(flat_s=0.02, saturation=32, slope_s=0.001)
    assert c.max_batch_within(0.01) == -math.inf
    assert c.max_batch_within(0.05) == pytest.approx(62)
    assert StepCurve(flat_s=0.02, saturation=32, slope_s=0.0).max_batch_within(0.05) == math.inf


def test_estimator_keeps_the_slope_once_batches_settle():
    truth = StepCurve(flat_s=0.03, saturation=64, slope_s=0.001)
    est = StepCurveEstimator(history=10)
    for b in (32, 64, 128, 96, 100):
        est.observe(b, truth.time_s(b))
    for _ in range(60):  # settled: the same batch over and over
        est.observe(100, truth.time_s(100))
    curve = est.curve()
    assert curve is not None
    assert curve.time_s(140) == pytest.approx(truth.time_s(140), rel=0.01)


def test_equal_finish_batches_balances_linear_parts():
    curves = [StepCurve(0.0, 0, 0.001), StepCurve(0.0, 0, 0.002), StepCurve(0.0, 0, 0.004)]
    assert equal_finish_batches(curves, 70) == [40, 20, 10]


def test_equal_finish_batches_uses_flat_parts_and_caps():
    # the slow GPU cannot finish before its flat 0.075 s: the others fill up to that for free,
    # the surplus is trimmed, and nobody ends later than 0.075 s
    curves = [StepCurve(0.03, 128, 0.0008), StepCurve(0.075, 32, 0.002)]
    x = equal_finish_batches(curves, 160, caps=[512, 128])
    assert sum(x) == 160
    assert max(c.time_s(b) for c, b in zip(curves, x, strict=True)) == pytest.approx(0.075)
    # a cap that binds sends the rest to the other worker
    x = equal_finish_batches([StepCurve(0.0, 0, 0.001), StepCurve(0.0, 0, 0.004)], 100, caps=[50, 100])
    assert x == [50, 50]


@settings(max_examples=80, deadline=None)
@given(
    params=st.lists(st.tuples(st.floats(0.0, 0.1), st.integers(0, 12), st.floats(1e-4, 1e-2)), min_size=1, max_size=3),
    comm=st.lists(st.floats(0.0, 0.05), min_size=3, max_size=3),
    per=st.integers(1, 9),
)
def test_equal_finish_batches_matches_brute_force(params, comm, per):
    curves = [StepCurve(a, s, k) for a, s, k in params]
    n = len(curves)
    total = per * n
    x = equal_finish_batches(curves, total, comm_s=comm[:n])
    assert sum(x) == total and min(x) >= 1
    best = min(_makespan(curves, y, comm[:n]) for y in _compositions(total, n))
    assert _makespan(curves, x, comm[:n]) <= best + 1e-9


def test_damper_halves_on_reversal():
    d = Damper(2)
    assert d.damp([0, 1], [50, 50], [70, 30], 100, None) == [70, 30]  # first move: all the way
    assert d.damp([0, 1], [70, 30], [50, 50], 100, None) == [60, 40]  # reversal: half the way
    assert d.step == [0.5, 0.5]
    assert d.damp([0, 1], [60, 40], [80, 20], 100, None) == [65, 35]  # reversed again: a quarter
    assert d.step == [0.25, 0.25]
    assert d.damp([0, 1], [65, 35], [85, 15], 100, None) == [70, 30]  # same direction: still a quarter
    assert d.damp([0, 1], [70, 30], [90, 10], 100, None) == [80, 20]  # twice the same way: doubled


def test_gpu_manager_converges_on_simulated_gpus():
    truth = [StepCurve(0.03, 128, 0.0008), StepCurve(0.048, 64, 0.00128), StepCurve(0.075, 32, 0.002)]
    m = GPUBatchManager(3, 384, caps=[512, 256, 128])
    workers = [0, 1, 2]
    x = m.allocate(workers)
    assert x == {0: 128, 1: 128, 2: 128}
    for _ in range(25):
        for w in workers:
            m.observe(w, x[w], truth[w].time_s(x[w]))
        x = m.allocate(workers)
        assert sum(x.values()) == 384
    optimum = max(c.time_s(b) for c, b in zip(truth, equal_finish_batches(truth, 384), strict=True))
    assert max(truth[w].time_s(x[w]) for w in workers) <= 1.03 * optimum


def test_managers_check_caps():
    with pytest.raises(ValueError, match="caps add up"):
        GPUBatchManager(2, 100, caps=[10, 10])
