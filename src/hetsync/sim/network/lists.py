"""The _LISTS layout: the flows in transfer in Python lists indexed by slot (few flows).

Below _TO_ARRAYS flows numpy's per-call cost dominates, so the network starts
here and comes back here once the flows drop below _TO_LISTS (the switches
to and from numpy arrays live in :mod:`.flat`). The lists hold the same
floats the arrays would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsync.sim.network.flows import _DONE_RTOL, _divide_by_zero
from hetsync.sim.network.oneround import _OneRoundTest


class _ListsLayout(_OneRoundTest):
    """The network's operations on the flows in transfer in the _LISTS layout."""

    def _start_lists(self, size: float, latency: float) -> None:
        """Store a new flow's numbers in slot n (the caller books its links and meta)."""
        self._remaining.append(size)
        self._done_bytes.append(size * _DONE_RTOL)
        self._flow_latency.append(latency)

    def _reshare_lists(self) -> None:
        if self._impure or not self._one_round_test:
            rate = self._full_fill(np.array((self._up, self._down), dtype=np.intp)).tolist()
        else:
            # What progressive_fill returns after its first round (see .oneround).
            get = self._share.__getitem__
            rate = [a if a < b else b for a, b in zip(map(get, self._up), map(get, self._down), strict=True)]
        self._rate = rate
        try:
            time_left = [r / x for r, x in zip(self._remaining, rate, strict=True)]
        except ZeroDivisionError:  # rate 0: never finishes, as numpy's r / 0
            time_left = [r / x if x else _divide_by_zero(r) for r, x in zip(self._remaining, rate, strict=True)]
        self._time_left = time_left
        self._next_finish = self._t_ref + min(time_left)
        self._min_latency = self._uniform_latency if self._uniform_latency is not None else min(self._flow_latency)

    def _move_remaining_lists(self, dt: float) -> None:
        """Take ``dt`` seconds of transfer at the current rates off the remaining bytes."""
        self._remaining = [r - x * dt for r, x in zip(self._remaining, self._rate, strict=True)]

    def _finish_lists(self, dt: float, limit: float) -> list[int]:
        """Move the remaining bytes by ``dt``; return the slots of the flows done, ascending.

        Done: the time left at the last re-share is at most ``limit``, or the
        new remaining bytes are at most the flow's done bytes."""
        rem = [r - x * dt for r, x in zip(self._remaining, self._rate, strict=True)]
        self._remaining = rem
        return [
            i
            for i, (left, r, d) in enumerate(zip(self._time_left, rem, self._done_bytes, strict=True))
            if left <= limit or r <= d
        ]

    def _columns_lists(self) -> tuple[tuple[list[Any], ...], tuple[np.ndarray, ...]]:
        """The per-slot lists (and no arrays) a flow's removal moves, in this layout."""
        return (self._up, self._down, self._meta, self._remaining, self._done_bytes, self._flow_latency), ()
