"""The simulator's forecasts (hetsync.sim.forecast): the cluster a run
measured, as a scenario; each candidate simulated from the run's model."""

from __future__ import annotations

import math

import pytest

from hetsync.policies.base import Forecast
from hetsync.sim.engine import Simulation
from hetsync.sim.forecast import fitted_scenario, forecast
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario


def _ask(**kw: object) -> Forecast:
    given: dict = {
        "ask": 3,
        "candidates": ("bsp", "local-sgd:H=2"),
        "step_s": ((0.1, 0.1, 0.1, 0.1), (0.3, 0.3, 0.3, 0.3)),
        "fixed": (0.0, 0.5),
        "overhead_s": 0.02,
        "horizon_s": 1.0,
    }
    return Forecast(**(given | kw))


def test_the_fitted_cluster_plays_each_workers_measured_step_and_its_fixed_share():
    sc = fitted_scenario(make_scenario(workers=4, background_load=None), _ask(), seed=7)
    assert sc.cluster.workers == 2 and sc.job.seed == 7 and sc.stop.max_time_s == 1.0
    B = sc.job.batch_size
    assert sc.nominal_step_s(0, B) == pytest.approx(0.1) and sc.nominal_step_s(1, B) == pytest.approx(0.3)
    assert sc.nominal_step_s(0, 2 * B) == pytest.approx(0.2)  # all of it grows with the batch
    assert sc.nominal_step_s(1, 2 * B) == pytest.approx(0.3 * (0.5 + 0.5 * 2))  # half of it does not
    assert sc.cluster.latency_s == pytest.approx(0.01)  # a round's push and pull: the overhead once
    assert sc.timing.jitter == 0.0 and sc.timing.straggler_prob == 0.0  # (steps that never varied)
    # the noise as hetsync profile fits it: 1.4826 × the median absolute deviation of the log ratios
    spread = fitted_scenario(make_scenario(), _ask(step_s=((0.1, 0.2), (0.1, 0.2)), fixed=(0.0, 0.0)), seed=0)
    assert spread.timing.jitter == pytest.approx(1.4826 * math.log(2) / 2)
    # and a step 3 times its worker's median: a transient straggler, as the profile counts them
    rows = ((0.1,) * 9 + (0.3,), (0.1,) * 10)
    straggled = fitted_scenario(make_scenario(), _ask(step_s=rows, fixed=(0.0, 0.0)), seed=0)
    assert straggled.timing.straggler_prob == pytest.approx(1 / 20)
    assert straggled.timing.straggler_factor == pytest.approx(3.0) and straggled.timing.jitter == 0.0


def test_each_candidate_is_simulated_from_the_given_model_and_scored_by_its_loss():
    sc = make_scenario(workers=2, max_steps=None, max_time_s=1.0)
    workload = make_workload(sc.job.workload)
    trained = Simulation(make_scenario(workers=2, max_steps=60), "bsp", workload=workload).run()
    assert trained.params is not None
    fresh = forecast(sc, workload, workload.init_params(0), _ask(), now_s=5.0, simulation=Simulation)
    on = forecast(sc, workload, trained.params, _ask(), now_s=5.0, simulation=Simulation)
    assert fresh.ask == on.ask == 3 and fresh.now_s == 5.0 and on.metric == "loss"
    assert [spec for spec, _ in on.scores] == ["bsp", "local-sgd:H=2"]
    assert all(len(losses) == 2 and all(math.isfinite(v) for v in losses) for _, losses in on.scores)
    # from a trained model the horizon ends lower than from a fresh one: it went on from the model given
    for (_, from_fresh), (_, from_trained) in zip(fresh.scores, on.scores, strict=True):
        assert max(from_trained) < min(from_fresh)
    assert (
        forecast(sc, workload, trained.params, _ask(), now_s=5.0, simulation=Simulation) == on
    )  # (seeded: the same answer)
    assert forecast(sc, workload, None, _ask(), now_s=5.0, simulation=Simulation).scores is None


def test_a_forecast_job_answers_the_request_a_run_wrote_and_says_why_when_it_cannot(tmp_path):
    """``python -m hetsync.sim.forecast_job`` (the runtime's forecasts, in a
    process of their own): a pickled request in, a pickled answer out."""
    import pickle

    from hetsync.sim import forecast_job

    sc = make_scenario(workers=2, max_steps=None, max_time_s=1.0)
    theta = make_workload(sc.job.workload).init_params(0).numpy()
    request = {"scenario": sc, "cmd": _ask(), "theta": theta, "now_s": 2.0}
    (tmp_path / "request.pkl").write_bytes(pickle.dumps(request))
    assert forecast_job.main([str(tmp_path / "request.pkl"), str(tmp_path / "answer.pkl")]) == 0
    done = pickle.loads((tmp_path / "answer.pkl").read_bytes())
    assert done.ask == 3 and [spec for spec, _ in done.scores] == ["bsp", "local-sgd:H=2"]
    assert not (tmp_path / "answer.pkl.part").exists()
    unknown = forecast_job.answer({**request, "scenario": make_scenario(workload="nosuch")})
    assert unknown.scores is None and unknown.why.startswith("the forecast failed: BadInput")
