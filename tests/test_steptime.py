"""Step cost from the model: the non-negative line fit on synthetic numbers,
the measurement's hygiene (RNG, threads) and the per-process cache."""

import pytest
import torch

from hetsync import steptime
from hetsync.scenario import StepCost, scenario_from_dict
from hetsync.steptime import (
    batch_sizes_for,
    describe_measured,
    fit_step_cost,
    measure_step_times,
    resolve_measured,
)
from hetsync.workloads import make_workload


def table(fixed_s, per_sample_s, sizes=(16, 32, 64)):
    return [(b, fixed_s + per_sample_s * b) for b in sizes]


def test_fit_recovers_known_coefficients():
    assert fit_step_cost(table(4e-4, 1.2e-5)) == pytest.approx((4e-4, 1.2e-5))
    assert fit_step_cost(table(0.0, 3e-5, sizes=(1, 2))) == pytest.approx((0.0, 3e-5), abs=1e-12)
    assert fit_step_cost(table(2e-3, 0.0)) == pytest.approx((2e-3, 0.0), abs=1e-12)


def test_fit_is_least_squares_on_noisy_points():
    # residuals (+e, -e, -e, +e) are orthogonal to 1 and to b: the fit is the line
    rows = [(10, 2.1), (20, 2.9), (30, 3.9), (40, 5.1)]
    assert fit_step_cost(rows) == pytest.approx((1.0, 0.1))
    rows = [(b, t - 1.0) for b, t in rows]
    assert fit_step_cost(rows) == pytest.approx((0.0, 0.1), abs=1e-9)


def test_fit_keeps_coefficients_non_negative():
    # times falling with the batch: the best line has a negative slope; the
    # best non-negative one is flat at the mean
    assert fit_step_cost([(16, 3.0), (32, 2.0), (64, 1.0)]) == pytest.approx((2.0, 0.0))
    # steep line through negative intercept: clamped to a line through 0
    fixed_s, per_sample_s = fit_step_cost([(10, 0.0), (20, 1.0), (30, 2.0)])
    assert fixed_s == 0.0 and per_sample_s == pytest.approx((20 + 60) / (100 + 400 + 900))


def test_fit_with_one_coefficient_given_fits_only_the_other():
    rows = table(4e-4, 1.2e-5)
    assert fit_step_cost(rows, fixed_s=4e-4) == pytest.approx((4e-4, 1.2e-5))
    assert fit_step_cost(rows, per_sample_s=1.2e-5) == pytest.approx((4e-4, 1.2e-5))
    assert fit_step_cost(rows, fixed_s=1.0) == (1.0, 0.0)  # more than every step: nothing left per sample
    assert fit_step_cost(rows, fixed_s=0.0)[1] > 1.2e-5  # the fixed part goes into the slope
    with pytest.raises(ValueError):
        fit_step_cost([])


def test_batch_sizes_are_half_one_and_two_times_the_batch():
    assert batch_sizes_for(32) == (16, 32, 64)
    assert batch_sizes_for(3) == (1, 3, 6)
    assert batch_sizes_for(1) == (1, 2)  # always at least two distinct sizes


def test_measuring_leaves_the_rng_and_threads_as_found():
    wl = make_workload("digits-logreg")
    threads = torch.get_num_threads()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    rows = measure_step_times(wl, (4, 8), budget_s=0.05)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads
    assert [b for b, _ in rows] == [4, 8] and all(s > 0 for _, s in rows)


def scenario(**keys):
    return scenario_from_dict({"workers": 2, "max_steps": 5, "workload": "digits-logreg", "batch_size": 8, **keys})


@pytest.fixture
def counted(monkeypatch):
    """Fresh cache, fake timings (fixed 1 ms + 0.1 ms/sample), calls counted."""
    calls = []

    def fake(workload, sizes, **_):
        calls.append((workload.name, sizes))
        return tuple((b, 1e-3 + 1e-4 * b) for b in sizes)

    monkeypatch.setattr(steptime, "_CACHE", {})
    monkeypatch.setattr(steptime, "measure_step_times", fake)
    return calls


def test_resolve_replaces_only_the_measured_keys(counted):
    wl = make_workload("digits-logreg")
    sc = resolve_measured(scenario(per_sample_s="measured", fixed_s=0.002), wl)
    cost = sc.step_cost
    assert (cost.fixed_s, cost.measured) == (0.002, ("per_sample_s",))
    assert cost.per_sample_s > 0 and sc.timing.resolved
    assert sc.with_workers(3).step_cost == cost  # the resolved cost survives another worker count
    assert sc.with_workers(3).source["per_sample_s"] == cost.per_sample_s  # and a re-parse of the source
    sc = resolve_measured(scenario(per_sample_s="measured", fixed_s="measured"), wl)
    cost = sc.step_cost
    assert (cost.fixed_s, cost.per_sample_s) == pytest.approx((1e-3, 1e-4))
    assert cost.table == ((4, 1.4e-3), (8, 1.8e-3), (16, 2.6e-3))
    assert cost.to_dict() == {
        "fixed_s": cost.fixed_s,
        "per_sample_s": cost.per_sample_s,
        "table": [[4, 1.4e-3], [8, 1.8e-3], [16, 2.6e-3]],
        "fitted": ["fixed_s", "per_sample_s"],
    }
    plain = scenario()
    assert resolve_measured(plain, wl) is plain
    assert len(counted) == 1  # one measurement per workload and batch sizes


def test_the_cache_is_per_workload_arguments_and_batch_sizes(counted):
    mlp16 = scenario(workload="digits-mlp", workload_args={"hidden": 16}, per_sample_s="measured")
    mlp32 = scenario(workload="digits-mlp", workload_args={"hidden": 32}, per_sample_s="measured")
    wl16, wl32 = make_workload("digits-mlp", hidden=16), make_workload("digits-mlp", hidden=32)
    for sc, wl in ((mlp16, wl16), (mlp16, make_workload("digits-mlp", hidden=16)), (mlp32, wl32)):
        resolve_measured(sc, wl)
    resolve_measured(mlp16.with_step_cost(StepCost(fixed_s=0.0, per_sample_s=0.0)), wl16)  # nothing to measure
    import dataclasses

    resolve_measured(dataclasses.replace(mlp16, job=dataclasses.replace(mlp16.job, batch_size=9)), wl16)
    assert len(counted) == 3


def test_describe_names_the_figures_and_warns_when_a_given_key_swallows_the_step():
    line = describe_measured(StepCost(fixed_s=4e-4, per_sample_s=1.2e-5, table=((32, 8e-4),)).to_dict(), "mlp")
    assert (
        line
        == "measured step cost on this machine (mlp): fixed 0.4 ms + 0.012 ms/sample (median per step at batch 32: 0.8 ms)"
    )
    swallowed = StepCost(fixed_s=0.02, per_sample_s=0.0, table=((32, 8e-4),), measured=("per_sample_s",))
    assert "--set fixed_s=0" in describe_measured(swallowed.to_dict(), "mlp")
