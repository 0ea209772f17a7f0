"""The _FLAT layout: the flows in transfer in numpy arrays indexed by slot, grown by doubling.

From _TO_ARRAYS flows in transfer until they drop below _TO_LISTS; the
switches to and from the _LISTS layout live here. The _BLOCKS layout
(:mod:`.blocks`) is formed from this one and dissolves back into it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsync.sim.network.flows import _DONE_RTOL, _FLAT, _INITIAL_SLOTS, _LISTS
from hetsync.sim.network.oneround import _OneRoundTest


class _FlatLayout(_OneRoundTest):
    """The network's operations on the flows in transfer in the _FLAT layout."""

    def _start_flat(self, n: int, src: int, downlink: int, size: float, latency: float) -> None:
        """Store a new flow's numbers in slot ``n`` (the caller books its links and meta)."""
        if n == self._rate.shape[0]:
            self._grow()
        self._up_np[n] = src
        self._down_np[n] = downlink
        self._remaining[n] = size
        self._done_bytes[n] = size * _DONE_RTOL
        self._flow_latency[n] = latency

    def _reshare_flat(self, n: int) -> None:
        rate = self._rate[:n]
        if self._impure or not self._one_round_test:
            rate[:] = self._full_fill(self._links[:, :n])
        else:
            # What progressive_fill returns after its first round (see .oneround).
            share = self._share_np
            np.minimum(share[self._up_np[:n]], share[self._down_np[:n]], out=rate)  # type: ignore[index]  # (set in _FLAT)
        time_left = self._time_left[:n]
        if self._has_dead_link:
            with np.errstate(divide="ignore"):  # rate 0: never finishes
                np.divide(self._remaining[:n], rate, out=time_left)
        else:
            np.divide(self._remaining[:n], rate, out=time_left)
        self._next_finish = self._t_ref + float(time_left[time_left.argmin()])
        if self._uniform_latency is None:
            latency = self._flow_latency[:n]
            self._min_latency = float(latency[latency.argmin()])
        else:
            self._min_latency = self._uniform_latency

    def _move_remaining_flat(self, dt: float) -> None:
        """Take ``dt`` seconds of transfer at the current rates off the remaining bytes."""
        n = self._n
        self._remaining[:n] -= self._rate[:n] * dt

    def _finish_flat(self, n: int, dt: float, limit: float) -> list[int]:
        """Move the remaining bytes of the ``n`` flows by ``dt``; return the slots of those done, ascending.

        Done: the time left at the last re-share is at most ``limit``, or the
        new remaining bytes are at most the flow's done bytes."""
        remaining = self._remaining[:n]
        remaining -= self._rate[:n] * dt
        done_mask = (self._time_left[:n] <= limit) | (remaining <= self._done_bytes[:n])
        done: list[int] = done_mask.nonzero()[0].tolist()
        return done

    def _columns_flat(self) -> tuple[tuple[list[Any], ...], tuple[np.ndarray, ...]]:
        """The per-slot lists and arrays a flow's removal moves, in this layout."""
        return (
            (self._up, self._down, self._meta),
            (self._remaining, self._done_bytes, self._flow_latency, self._up_np, self._down_np),
        )

    def _flat_arrays(self) -> int:
        """Allocate the _FLAT layout's arrays with the links filled in; the
        per-flow values are the caller's to fill. Returns the slot count."""
        n = self._n
        slots = max(_INITIAL_SLOTS, 2 * n)
        self._links = np.zeros((2, slots), dtype=np.intp)
        self._up_np, self._down_np = self._links
        self._up_np[:n] = self._up
        self._down_np[:n] = self._down
        self._rate = np.zeros(slots)
        self._time_left = np.zeros(slots)
        self._share_np = np.array(self._share, dtype=np.float64)
        self._since_blocks_tried = 0
        return slots

    def _to_arrays(self) -> None:
        """Switch from _LISTS to _FLAT."""
        n = self._n
        slots = self._flat_arrays()
        for name in ("_remaining", "_done_bytes", "_flow_latency"):
            arr = np.zeros(slots)
            arr[:n] = getattr(self, name)
            setattr(self, name, arr)
        self._layout = _FLAT

    def _to_lists(self) -> None:
        """Switch from _FLAT to _LISTS."""
        n = self._n
        for name in ("_remaining", "_done_bytes", "_flow_latency"):
            setattr(self, name, getattr(self, name)[:n].tolist())
        self._links = np.zeros((2, 0), dtype=np.intp)
        self._up_np = self._down_np = self._links[0]
        self._rate = []
        self._time_left = []
        self._share_np = None
        self._layout = _LISTS

    def _grow(self) -> None:
        """Double the number of slots of the _FLAT arrays."""
        for name in ("_links", "_remaining", "_done_bytes", "_flow_latency", "_rate", "_time_left"):
            old = getattr(self, name)
            slots = old.shape[-1]
            new = np.zeros((*old.shape[:-1], 2 * slots), dtype=old.dtype)
            new[..., :slots] = old
            setattr(self, name, new)
        self._up_np, self._down_np = self._links
