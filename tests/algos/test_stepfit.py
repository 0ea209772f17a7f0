"""The step-time fits (hetsync.algos.stepfit): one code for hetsync profile and auto.

The fits themselves are exercised on synthetic clusters in tests/advise/test_profile.py
(through hetsync.advise.profile, which re-exports them) and tests/test_steptime.py
(fit_step_cost); here, that the two users agree on the same steps."""

from __future__ import annotations

import numpy as np
import pytest

from hetsync.algos.stepfit import fit_jitter, fit_step_cost, fit_transients, fit_worker
from hetsync.policies.auto import fixed_share
from hetsync.sim.forecast import fitted_scenario
from tests.sim.conftest import make_scenario
from tests.sim.test_forecast import _ask


def test_auto_s_fixed_share_is_the_profile_s_fit_of_the_same_steps():
    # a worker's probe rounds: B ± B/8 around B = 16, a step of 20 ms plus 1 ms a sample, a little noise
    rng = np.random.default_rng(0)
    batches = np.array([14, 16, 18] * 8)
    seconds = (0.02 + 0.001 * batches) * np.exp(rng.normal(0, 0.01, batches.size))
    fit = fit_worker(0, [[0.0, int(b), float(s), float(s)] for b, s in zip(batches, seconds, strict=True)])
    medians = {int(b): float(np.median(seconds[batches == b])) for b in (14, 16, 18)}
    share = fixed_share(np.array(list(medians)), np.array(list(medians.values())), 16)
    assert share == pytest.approx(fit.fixed_s / fit.step_s(16), rel=1e-6)
    assert share == pytest.approx(0.02 / 0.036, rel=0.15)
    assert fit_step_cost(list(medians.items())) == pytest.approx((fit.fixed_s, fit.per_sample_s))


def test_a_forecast_plays_the_noise_and_stragglers_the_profile_fits_on_its_window():
    noise = np.exp(np.random.default_rng(1).normal(0, 0.05, (2, 8)))
    rows = tuple(tuple(float(t) for t in typical * noise[w]) for w, typical in enumerate((0.1, 0.2)))
    rows = ((*rows[0][:4], 0.3, *rows[0][5:]), rows[1])  # one straggling step: 3 times the median
    sc = fitted_scenario(make_scenario(), _ask(step_s=rows, fixed=(0.0, 0.0)), seed=0)
    B = sc.job.batch_size
    per_worker = [[(0.0, B, t, t) for t in r] for r in rows]
    assert sc.timing.jitter == pytest.approx(fit_jitter(per_worker, [0.0, 0.0])) and sc.timing.jitter > 0
    prob, factor, outliers, steps = fit_transients(per_worker, [0.0, 0.0])
    assert (outliers, steps) == (1, 16) and sc.timing.straggler_prob == pytest.approx(prob)
    assert sc.timing.straggler_factor == pytest.approx(factor) and factor == pytest.approx(3.0, rel=0.05)
