"""DSSP's synchronization controller: how many extra iterations to grant.

Zhao, An, Liu, Chen, "Dynamic Stale Synchronous Parallel Distributed
Training for Deep Learning", ICDCS 2019 (arXiv 1908.11848).

When a fast worker reaches the lower staleness bound s_L, the controller
simulates its next pushes from its last push time and last interval,
``t_f + r·I_f`` for r = 0..r_max (r = 0: it stops now), and the slowest
worker's next push ``t_s + I_s``, and grants the r whose push lands closest
to the slowest worker's: the fast worker then reaches its (raised) threshold
about when the slowest worker's push lets it go on, so it waits least. Ties
go to the smaller r (less staleness). O(1): the best r is the rounded
quotient, checked against its neighbours.

Standard library only, like all of ``hetsync.algos``.
"""

from __future__ import annotations

import math

__all__ = ["dssp_extra_iterations"]


def dssp_extra_iterations(
    fast_last_push_s: float,
    fast_interval_s: float,
    slow_last_push_s: float,
    slow_interval_s: float,
    r_max: int,
) -> int:
    """The r in [0, r_max] minimizing ``|t_f + r·I_f − (t_s + I_s)|``, smallest on ties.

    ``t_f, I_f``: the fast worker's last push time and last interval;
    ``t_s, I_s``: the slowest worker's. A slow push predicted before
    ``t_f`` gives r = 0, as does a zero fast interval.
    """
    for name, value in (
        ("fast_last_push_s", fast_last_push_s),
        ("fast_interval_s", fast_interval_s),
        ("slow_last_push_s", slow_last_push_s),
        ("slow_interval_s", slow_interval_s),
    ):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if fast_interval_s < 0 or slow_interval_s < 0:
        raise ValueError("intervals must be >= 0")
    if int(r_max) != r_max or r_max < 0:
        raise ValueError(f"r_max must be an integer >= 0, got {r_max!r}")
    r_max = int(r_max)
    target = slow_last_push_s + slow_interval_s
    if fast_interval_s == 0 or target <= fast_last_push_s:
        return 0
    guess = min(r_max, max(0, round((target - fast_last_push_s) / fast_interval_s)))
    best_r, best_gap = 0, math.inf
    for r in range(max(0, guess - 1), min(r_max, guess + 1) + 1):
        gap = abs(fast_last_push_s + r * fast_interval_s - target)
        if gap < best_gap:
            best_r, best_gap = r, gap
    return best_r
