"""What every layout of the network shares: the flows in transfer, their slots, the clock.

:class:`_Flows` is the base of the network's mixins (see the package's
header): it sets up the state that is neither one layout's nor the
one-round test's, and holds the full progressive fill, the reference rates
the lists and arrays layouts fall back on.

Flow layouts
------------

The flows in transfer occupy slots [0, n), in the order of the original
implementation: a new flow takes slot n, and the flows done at one
time leave in decreasing slot order, the last flow moving into each
hole. The order matters to the full progressive fill (it sums in slot
order); _up, _down and _meta always follow it. The numbers live in one
of three layouts:

- _LISTS: Python lists indexed by slot (few flows; :mod:`.lists`);
- _FLAT:  numpy arrays indexed by slot, grown by doubling (:mod:`.flat`);
- _BLOCKS: in the one-round regime, flows grouped by a *block link* that
  they all cross, whose share is their common rate (:mod:`.blocks`).

:meth:`Network._reshare <hetsync.sim.network.core.Network._reshare>` picks
the layout at every re-share.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hetsync.algos.maxmin import progressive_fill

# A flow counts as done once its remaining bytes are at most _DONE_RTOL of its
# size, or once its finish time is within _DONE_S + _CLOCK_RTOL * |now| (a
# few ulps of the clock) of now, so that floating-point leftovers make no
# extra events.
_DONE_RTOL = 1e-9
_DONE_S = 1e-12
_CLOCK_RTOL = 1e-15

# The flows in transfer live in Python lists up to _TO_ARRAYS of them (numpy's
# per-call cost dominates below that), in numpy arrays from there until they
# drop below _TO_LISTS. Both hold the same floats.
_TO_ARRAYS = 40
_TO_LISTS = 20
_INITIAL_SLOTS = 64
_LISTS, _FLAT, _BLOCKS = 0, 1, 2


class _Flows:
    """The network's state that every layout shares, and the full progressive fill."""

    def _init_flows(self, up: list[float], down: list[float], lat: list[float]) -> None:
        """Set up ``M = len(up)`` nodes with these (checked) capacities and latencies, no flows."""
        m = len(up)
        self._m = m
        self._latency = lat
        # With one latency everywhere the next delivery is the next finish plus
        # that latency; otherwise the smallest latency in transfer is looked up.
        self._uniform_latency = lat[0] if min(lat) == max(lat) else None
        self._up_inf = [c == math.inf for c in up]
        self._down_inf = [c == math.inf for c in down]
        # Link i is node i's uplink, link m + i node i's downlink. (+ 0.0 turns
        # a capacity of -0.0 into 0.0, so no rate or time left takes a sign.)
        cap = [c + 0.0 for c in up + down]
        n_links = 2 * m
        self._n_links = n_links
        self._cap = cap
        self._capacity = np.array(cap, dtype=np.float64)
        self._has_dead_link = 0.0 in cap  # rates of 0 possible
        self._to_arrays_above = _TO_ARRAYS  # (tests change these two)
        self._to_lists_below = _TO_LISTS

        # The flows in transfer occupy slots [0, n) (see "Flow layouts" in the module header).
        self._n = 0
        self._layout = _LISTS
        self._up: list[int] = []  # uplink index per slot (every layout)
        self._down: list[int] = []  # downlink index per slot (every layout)
        self._meta: list[tuple[float, int, float, object]] = []  # latency, seq, nbytes, token (every layout)
        self._links = np.zeros((2, 0), dtype=np.intp)  # _FLAT: _up and _down as rows
        self._up_np = self._down_np = self._links[0]  # _FLAT: the rows
        # _LISTS (lists) and _FLAT (arrays), by slot:
        self._remaining: Any = []  # bytes left at time _t_ref
        self._done_bytes: Any = []  # remaining bytes that count as done
        self._flow_latency: Any = []
        self._rate: Any = []  # max–min rates, valid unless _dirty
        self._time_left: Any = []  # from _t_ref to the finish, at those rates

        self._now = -math.inf  # latest time given to start_flow or advance
        self._t_ref = -math.inf  # time at which _remaining is exact
        self._dirty = False  # flow set changed since the rates were computed
        self._next_finish = math.inf  # earliest finish time at the current rates
        self._min_latency = math.inf  # smallest latency among the flows in transfer
        self._seq = 0
        self._deliveries: list[tuple[float, int, float, object]] = []  # heap
        self._bytes_delivered = 0.0

    def _full_fill(self, links: np.ndarray) -> np.ndarray:
        """The max–min rates of flows with links ``links`` [2, F], by progressive filling."""
        link_flows = np.bincount(links.ravel(), minlength=self._n_links).astype(np.float64)
        rate = np.empty(links.shape[1])
        progressive_fill(self._capacity, links, link_flows, rate)
        return rate


def _divide_by_zero(r: float) -> float:
    """``r / 0.0`` as numpy computes it."""
    return math.inf if r > 0.0 else -math.inf if r < 0.0 else math.nan
