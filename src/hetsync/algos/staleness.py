"""Remedies for stale gradients, as pure functions (no torch: the delay
compensation is written with arithmetic operators only, so it takes numpy
arrays in tests and torch tensors in the server's stepping code alike).

Staleness τ of a contribution: the server's version when it is applied minus
the version it was computed on (docs/architecture.md §10, glossary), so a gradient applied
to the model it was computed on has τ = 0.

- **Staleness-dependent learning rate** (Zhang, Gupta, Lian, Liu,
  "Staleness-Aware Async-SGD for Distributed Deep Learning", IJCAI 2016,
  arXiv 1511.05950): a gradient of staleness τ is applied at the learning
  rate divided by τ; here the factor is 1/max(1, τ), so a fresh gradient
  (τ = 0) keeps the full rate — :func:`staleness_lr_scale` with
  ``"inverse"``, a factor on the rate the policy already gives the
  contribution (ASP's 1/N share: lr/(N·max(1, τ)) in all). ``"zhang"`` is
  the paper's rule as written: the contribution moves the model at α₀/τ,
  α₀ the synchronous rate, *instead of* the policy's share (ASP: lr/max(1,
  τ) in all; with τ ≈ N the same step as plain ASP's lr/N, the paper's
  average-staleness form α₀/⟨τ⟩). ``"sqrt"``, 1/√max(1, τ), is a milder
  variant (not from the paper).
- **Delay compensation** (Zheng, Meng, Wang, Chen, Yu, Ma, Liu,
  "Asynchronous Stochastic Gradient Descent with Delay Compensation",
  ICML 2017, arXiv 1609.08326; DC-ASGD): a gradient g computed on the model
  w_then and applied to w_now is corrected with a cheap approximation of the
  Hessian by the outer product of the gradient (its diagonal, g⊙g):
  g + λ·g⊙g⊙(w_now − w_then) — :func:`delay_compensated`. This is the
  paper's constant-λ variant (DC-ASGD-c); its adaptive variant
  (DC-ASGD-a, λ divided by a running root mean square of g) is not here.
- **Momentum corrected for asynchrony** (Mitliagkas, Zhang, Hadjis, Ré,
  "Asynchrony begets Momentum, with an Application to Deep Learning",
  Allerton 2016, arXiv 1605.09774): under their queueing model, M
  asynchronous workers make SGD behave in expectation like momentum SGD
  with an implicit momentum 1 − 1/M (:func:`implicit_momentum`). The
  paper's advice is to tune the explicit momentum down as asynchrony grows
  (its best explicit momentum falls with M, even below 0); the rule here
  takes the explicit momentum that keeps the total at the recipe's:
  max(0, μ − (1 − 1/M)) (:func:`corrected_momentum`; clamped at 0, where
  the paper would sometimes go negative).
"""

from __future__ import annotations

import math
from typing import TypeVar

LR_SCALES = ("none", "inverse", "sqrt")  # (factors on any contribution's rate: gradients and deltas)
GRADIENT_LR_SCALES = (*LR_SCALES, "zhang")  # (and one that replaces a gradient's share: Zhang et al. as written)

T = TypeVar("T")


def staleness_lr_scale(rule: str, staleness: int, share: float = 1.0) -> float:
    """The factor on a contribution's learning rate at ``staleness`` τ
    (versions), given the ``share`` of the rate the policy gives it (ASP:
    1/N): ``"none"`` 1; ``"inverse"`` 1/max(1, τ); ``"sqrt"`` 1/√max(1, τ);
    ``"zhang"`` 1/(share·max(1, τ)), so that the contribution moves at the
    full rate over max(1, τ) whatever its share (Zhang et al.'s α₀/τ).
    ValueError for a negative τ, a share not > 0, or another rule."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if rule == "zhang":
        if not share > 0:
            raise ValueError(f"share must be > 0, got {share}")
        return 1.0 / (share * max(1, staleness))
    if rule == "none":
        return 1.0
    if rule == "inverse":
        return 1.0 / max(1, staleness)
    if rule == "sqrt":
        return 1.0 / math.sqrt(max(1, staleness))
    raise ValueError(f"lr_scale must be one of {', '.join(GRADIENT_LR_SCALES)}, got {rule!r}")


def delay_compensated(grad: T, model_now: T, model_then: T, lam: float) -> T:
    """DC-ASGD's gradient: ``grad + lam · grad ⊙ grad ⊙ (model_now − model_then)``
    (elementwise), for ``grad`` computed on ``model_then`` and applied to
    ``model_now``. New values; the arguments are not modified."""
    if not (lam >= 0 and math.isfinite(lam)):
        raise ValueError(f"compensate (lambda) must be a finite number >= 0, got {lam!r}")
    return grad + lam * grad * grad * (model_now - model_then)  # type: ignore[operator,no-any-return]


def implicit_momentum(workers: int) -> float:
    """The momentum that ``workers`` asynchronous workers imply (Mitliagkas
    et al.): 1 − 1/M; 0 for one worker."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return 1.0 - 1.0 / workers


def corrected_momentum(target: float, implicit: float) -> float:
    """The explicit momentum that, with ``implicit`` momentum from asynchrony,
    adds up to the recipe's ``target``: max(0, target − implicit)."""
    if not 0.0 <= target < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {target!r}")
    if not 0.0 <= implicit < 1.0:
        raise ValueError(f"implicit momentum must be in [0, 1), got {implicit!r}")
    return max(0.0, target - implicit)
