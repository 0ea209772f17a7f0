"""The staleness remedies' maths (hetsync.algos.staleness), by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hetsync.algos.staleness import (
    corrected_momentum,
    delay_compensated,
    implicit_momentum,
    staleness_lr_scale,
)


@pytest.mark.parametrize(
    ("rule", "staleness", "scale"),
    [
        ("none", 0, 1.0),
        ("none", 9, 1.0),
        ("inverse", 0, 1.0),  # a fresh gradient keeps the full rate
        ("inverse", 1, 1.0),
        ("inverse", 4, 0.25),
        ("inverse", 15, 1 / 15),
        ("sqrt", 0, 1.0),
        ("sqrt", 4, 0.5),
        ("sqrt", 9, 1 / 3),
    ],
)
def test_staleness_lr_scale(rule: str, staleness: int, scale: float) -> None:
    assert staleness_lr_scale(rule, staleness) == pytest.approx(scale, rel=1e-12)
    assert staleness_lr_scale(rule, staleness, share=0.25) == pytest.approx(scale, rel=1e-12)  # (a factor)


@pytest.mark.parametrize(
    ("staleness", "share", "moved"), [(0, 0.25, 1.0), (1, 0.25, 1.0), (4, 0.25, 0.25), (8, 0.5, 1 / 8)]
)
def test_zhangs_rule_replaces_the_share(staleness: int, share: float, moved: float) -> None:
    """As the paper writes it: the contribution moves at α₀/max(1, τ) whatever
    share of the rate the policy gave it (factor × share = 1/max(1, τ))."""
    assert staleness_lr_scale("zhang", staleness, share=share) * share == pytest.approx(moved, rel=1e-12)
    with pytest.raises(ValueError, match="share must be > 0"):
        staleness_lr_scale("zhang", staleness, share=0.0)


def test_staleness_lr_scale_refuses_a_negative_staleness_and_an_unknown_rule() -> None:
    with pytest.raises(ValueError, match="staleness must be >= 0, got -1"):
        staleness_lr_scale("inverse", -1)
    with pytest.raises(ValueError, match="lr_scale must be one of none, inverse, sqrt, zhang, got 'cube'"):
        staleness_lr_scale("cube", 2)


def test_delay_compensation_by_hand() -> None:
    g = np.array([1.0, -2.0, 0.5, 3.0])
    now = np.array([1.0, 1.0, 1.0, -1.0])
    then = np.array([0.0, 2.0, 1.0, 1.0])
    # g + λ g² (now − then) with λ = 0.5: [1 + .5·1·1, −2 + .5·4·(−1), .5 + 0, 3 + .5·9·(−2)]
    want = np.array([1.5, -4.0, 0.5, -6.0])
    np.testing.assert_allclose(delay_compensated(g, now, then, 0.5), want)
    # the same operators on torch tensors (the server's), and nothing modified in place
    gt, nt, tt = (torch.tensor(a, dtype=torch.float64) for a in (g, now, then))
    out = delay_compensated(gt, nt, tt, 0.5)
    np.testing.assert_allclose(out.numpy(), want)
    np.testing.assert_array_equal(gt.numpy(), g)
    # λ = 0, or the model the gradient was computed on: the gradient as it is
    np.testing.assert_array_equal(delay_compensated(g, now, then, 0.0), g)
    np.testing.assert_array_equal(delay_compensated(g, now, now, 0.5), g)


@pytest.mark.parametrize("lam", [-0.1, math.inf, math.nan])
def test_delay_compensation_refuses_a_bad_lambda(lam: float) -> None:
    with pytest.raises(ValueError, match="compensate"):
        delay_compensated(np.ones(2), np.ones(2), np.zeros(2), lam)


@pytest.mark.parametrize(("workers", "mu"), [(1, 0.0), (2, 0.5), (4, 0.75), (16, 0.9375)])
def test_implicit_momentum_is_one_minus_one_over_m(workers: int, mu: float) -> None:
    assert implicit_momentum(workers) == pytest.approx(mu)


def test_implicit_momentum_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        implicit_momentum(0)


@pytest.mark.parametrize(
    ("target", "implicit", "explicit"),
    [
        (0.9, 0.0, 0.9),  # no asynchrony: the recipe's momentum
        (0.9, 0.75, 0.15),  # 4 workers
        (0.9, 0.875, 0.025),  # 8 workers
        (0.9, 0.9375, 0.0),  # 16 workers: asynchrony alone is more than the recipe's momentum
        (0.0, 0.5, 0.0),  # plain SGD stays plain
    ],
)
def test_corrected_momentum(target: float, implicit: float, explicit: float) -> None:
    assert corrected_momentum(target, implicit) == pytest.approx(explicit, abs=1e-12)


def test_corrected_momentum_bounds() -> None:
    with pytest.raises(ValueError, match="momentum must be in"):
        corrected_momentum(1.0, 0.5)
    with pytest.raises(ValueError, match="implicit momentum must be in"):
        corrected_momentum(0.9, -0.1)
