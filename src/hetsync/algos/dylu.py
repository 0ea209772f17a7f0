"""Dynamic Local Updates (DyLU): local steps per push proportional to speed.

Liu, Chhaparia, Douillard, Kale, Rusu, Shen, Szlam, Ranzato, "Asynchronous
Local-SGD Training for Language Modeling" (arXiv:2401.09135, 2024): in
asynchronous local SGD a worker w runs H_w local steps, then sends its
update. With equal H a slow worker's update arrives after many others have
moved the global model (it is stale) and counts as much as a fast worker's
fresher one. DyLU sets H_w = ⌊H · v_w / max_u v_u⌋ with v the workers'
speeds in steps per second, so the fastest worker runs H steps and every
worker needs about the same wall time per update. hetsync keeps at least one
step (a push must carry a step).

The speeds come from measured step durations (:func:`ema`), so the step
counts follow a worker whose load changes during the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ema(previous_s: float | None, sample_s: float, alpha: float) -> float:
    """An exponential moving average of step durations: the first sample as
    it is, then ``(1 − alpha)·previous + alpha·sample``."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    if previous_s is None:
        return sample_s
    return (1.0 - alpha) * previous_s + alpha * sample_s


def dylu_steps(step_s: float | None, fastest_step_s: float | None, H: int) -> int:
    """Local steps for a worker whose steps take ``step_s`` when the fastest
    live worker's take ``fastest_step_s``: ⌊H · fastest_step_s / step_s⌋
    (speed is 1 / step time), at least 1 and at most H. H when either is
    unknown (nothing measured yet) or not positive (a zero-time step: no
    speed to compare)."""
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H!r}")
    if step_s is None or fastest_step_s is None or not (step_s > 0 and fastest_step_s > 0):
        return H
    # (a small tolerance: a worker as fast as the fastest gets H, not H − 1 from rounding)
    return max(1, min(H, math.floor(H * fastest_step_s / step_s + 1e-9)))


def fastest(step_s: Sequence[float | None]) -> float | None:
    """The shortest measured step time of ``step_s`` (None: nothing measured)."""
    measured = [s for s in step_s if s is not None]
    return min(measured) if measured else None
