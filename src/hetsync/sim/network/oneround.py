"""The one-round test: per-link bookkeeping that lets most re-shares skip the full fill.

progressive_fill's first round computes every link's share
cap / count and every flow's path_min = min(share[up], share[down]); it
calls a link *beaten* when a flow crossing it has a share smaller by
more than the tie factor _TIE on its other link, and if every flow
crosses an unbeaten link it stops there and returns path_min. A flow g
crossing link l, with partner link o, beats l exactly when
share[l] > share[o] * _TIE (when share[o] >= share[l], path_min is
share[l] and neither test holds).

Claim: if every link is *pure* (all of its flows beat it, or none do),
every flow crosses an unbeaten link, so progressive_fill returns
path_min: these very floats, from the same divisions and minimums.
Proof: a flow f never beats the link l where its path_min is taken
(share[l] <= share[o] <= share[o] * _TIE). If l carries f alone, it is
unbeaten; otherwise l is pure and has a flow, f, that does not beat it,
so none does. A link carrying one flow is always pure, so only the
*tracked* links (two flows or more) can be impure; and since
x -> share[l] > x * _TIE is monotone, a tracked link is pure iff its
flows' smallest and largest partner shares give the same answer.
With an impure link the full progressive fill runs (it may well stop
after one round too): it is the reference either way.

Bookkeeping: per tracked link, its flows' partner shares in a sorted
list (_sorted: insort appends after equal values and a removal takes
the last of equal values, so a link whose partners all have one share
moves no memory); per link, the number of flows to each tracked partner
(_tracked). A flow start or finish changes two counts and shares, and
costs O(1) plus O(log F) per flow between one of its links and a
tracked link (plus a scan of the flows' links when a link starts or
stops being tracked). In a parameter server's star that is just the
server's own links: a worker's link carries a flow or two, the
server's links carry the many, and their partners are untracked.

Every layout reads this state: with no impure link (``not _impure``) the
rates are each flow's smaller link share, cap / count.
"""

from __future__ import annotations

from bisect import bisect_right, insort

import numpy as np

from hetsync.algos.maxmin import TIE_RTOL
from hetsync.sim.network.flows import _Flows

_TIE = 1.0 + TIE_RTOL  # the factor of progressive_fill's tie test


class _OneRoundTest(_Flows):
    """Per-link state of the one-round test, kept up to date at every flow start, finish and capacity change."""

    def _init_one_round_test(self) -> None:
        """No flows: every link's count 0, nothing tracked, nothing impure."""
        n_links = self._n_links
        self._count = [0] * n_links  # flows in transfer per link
        self._share = [0.0] * n_links  # cap / count, valid where count > 0
        self._share_np: np.ndarray | None = None  # the same as an array, in _FLAT
        self._tracked: list[dict[int, int]] = [{} for _ in range(n_links)]  # tracked partner: flows to it
        self._sorted: dict[int, list[float]] = {}  # tracked link: its flows' partner shares, sorted
        self._impure: set[int] = set()  # tracked links that fail the test
        self._one_round_test = True  # False: always run the full progressive fill (tests)

    def _attach(self, up: int, down: int) -> None:
        """Book a new flow from link ``up`` to link ``down`` (not yet in the slot lists)."""
        count, share, cap, tracked = self._count, self._share, self._cap, self._tracked
        cu = count[up] + 1
        cd = count[down] + 1
        count[up] = cu
        count[down] = cd
        su = cap[up] / cu
        sd = cap[down] / cd
        old_u = share[up]
        old_d = share[down]
        share[up] = su
        share[down] = sd
        if self._share_np is not None:
            self._share_np[up] = su
            self._share_np[down] = sd
        if cu > 1 and su != old_u and tracked[up]:
            self._move_share(up, old_u, su)
        if cd > 1 and sd != old_d and tracked[down]:
            self._move_share(down, old_d, sd)
        if cu > 1:
            if cu == 2:  # up becomes tracked, with the partner share of its first flow
                p = self._down[self._up.index(up)]
                self._sorted[up] = [share[p]]
                tp = tracked[p]
                tp[up] = tp.get(up, 0) + 1
            insort(self._sorted[up], sd)
            tp = tracked[down]
            tp[up] = tp.get(up, 0) + 1
        if cd > 1:
            if cd == 2:
                p = self._up[self._down.index(down)]
                self._sorted[down] = [share[p]]
                tp = tracked[p]
                tp[down] = tp.get(down, 0) + 1
            insort(self._sorted[down], su)
            tp = tracked[up]
            tp[down] = tp.get(down, 0) + 1
        # _check(up) and _check(down), inline (this runs once per flow start)
        if cu > 1:
            shares = self._sorted[up]
            if su > shares[-1] * _TIE or not su > shares[0] * _TIE:
                self._impure.discard(up)
            else:
                self._impure.add(up)
        if cd > 1:
            shares = self._sorted[down]
            if sd > shares[-1] * _TIE or not sd > shares[0] * _TIE:
                self._impure.discard(down)
            else:
                self._impure.add(down)

    def _detach(self, i: int, up: int, down: int) -> None:
        """Book the end of the flow in slot ``i``, from link ``up`` to link ``down``."""
        count, share, cap, tracked, sorted_ = self._count, self._share, self._cap, self._tracked, self._sorted
        cu = count[up]
        cd = count[down]
        if cu > 1:
            shares = sorted_[up]
            del shares[bisect_right(shares, share[down]) - 1]
            _decrement(tracked[down], up)
            if cu == 2:  # up is left with one flow: no longer tracked
                del sorted_[up]
                self._impure.discard(up)
                links = self._up
                j = links.index(up)
                if j == i:
                    j = links.index(up, i + 1)
                _decrement(tracked[self._down[j]], up)
        if cd > 1:
            shares = sorted_[down]
            del shares[bisect_right(shares, share[up]) - 1]
            _decrement(tracked[up], down)
            if cd == 2:
                del sorted_[down]
                self._impure.discard(down)
                links = self._down
                j = links.index(down)
                if j == i:
                    j = links.index(down, i + 1)
                _decrement(tracked[self._up[j]], down)
        cu -= 1
        cd -= 1
        count[up] = cu
        count[down] = cd
        if cu:
            old_u = share[up]
            su = cap[up] / cu
            share[up] = su
            if self._share_np is not None:
                self._share_np[up] = su
            if su != old_u and tracked[up]:
                self._move_share(up, old_u, su)
        if cd:
            old_d = share[down]
            sd = cap[down] / cd
            share[down] = sd
            if self._share_np is not None:
                self._share_np[down] = sd
            if sd != old_d and tracked[down]:
                self._move_share(down, old_d, sd)
        if cu > 1:
            self._check(up)
        if cd > 1:
            self._check(down)

    def _move_share(self, x: int, old: float, new: float) -> None:
        """Link ``x``'s share went from ``old`` to ``new``: update its tracked partners."""
        sorted_ = self._sorted
        for p, k in self._tracked[x].items():
            shares = sorted_[p]
            for _ in range(k):
                del shares[bisect_right(shares, old) - 1]
                insort(shares, new)
            self._check(p)

    def _check(self, x: int) -> None:
        """Record whether tracked link ``x`` is impure."""
        shares = self._sorted[x]
        s = self._share[x]
        if s > shares[-1] * _TIE or not s > shares[0] * _TIE:
            self._impure.discard(x)
        else:
            self._impure.add(x)


def _decrement(counts: dict[int, int], key: int) -> None:
    """Take one off ``counts[key]``, dropping the key at zero."""
    k = counts[key] - 1
    if k:
        counts[key] = k
    else:
        del counts[key]
