"""The _BLOCKS layout: in the one-round regime, flows grouped by a shared bottleneck link.

In the one-round regime, flows are grouped by a *block link*
that they all cross and whose share is at most the share of every
link across from any flow on it: their rate is that share, one
float for the block. A block keeps a virtual clock, `served` (the
bytes each of its flows has transferred since it was formed or
rebased), its flows' finish levels (remaining bytes + served) in an
array (done bytes, latencies and slots in lists), and the index and
value of the smallest level (the next to finish). Moving the clock
adds rate * dt to `served`, O(1), where _FLAT subtracts it from
every flow's remaining bytes; a flow's remaining bytes, its level
less `served`, are within a few ulps of _FLAT's (the same sum,
rounded in another order), so within about 1e-15 s of its finish
time. Up to _loose_max flows crossing no block link are
*loose*, in Python lists with rates of their own (in a parameter
server's star: the few flows of an unsaturated server link, while
the other is saturated). _loc and _idx give each slot's block (None
if loose) and index there. Too many loose flows, or leaving the
one-round regime, turns the layout back to _FLAT.

The layout is formed from _FLAT (``_try_blocks``, every _BLOCKS_EVERY
re-shares) and dissolves back into it (``_dissolve_blocks``), so its mixin
builds on :class:`~hetsync.sim.network.flat._FlatLayout`.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from hetsync.sim.network.flat import _FlatLayout
from hetsync.sim.network.flows import _BLOCKS, _DONE_RTOL, _FLAT, _INITIAL_SLOTS, _divide_by_zero

# Every _BLOCKS_EVERY re-shares, try the _BLOCKS layout (in _FLAT) or move
# loose flows into blocks (in _BLOCKS), with block links carrying at least
# _BLOCK_MIN flows; _BLOCKS keeps at most _LOOSE_MAX flows outside blocks.
_BLOCKS_EVERY = 8
_BLOCK_MIN = 8
_LOOSE_MAX = 32
# A block rebases its finish levels once it has served this many times the
# done bytes of its smallest flow (a thousand times its size).
_REBASE_PER_DONE = 1e3 / _DONE_RTOL


class _Block:
    """Flows in transfer sharing one block link, whose share is their rate."""

    __slots__ = (
        "link",
        "k",
        "rem",
        "done",
        "lat",
        "slots",
        "rate",
        "min_i",
        "min_val",
        "max_done",
        "served",
        "rebase_at",
    )

    def __init__(self, link: int, size: int) -> None:
        self.link = link
        self.k = 0  # flows, at indices [0, k)
        # finish levels: each flow's remaining bytes at _t_ref plus `served` (beyond k: garbage)
        self.rem = np.zeros(size)
        self.done: list[float] = []  # remaining bytes that count as done
        self.lat: list[float] = []
        self.slots: list[int] = []  # slot of each flow
        self.rate = 0.0  # the link's share at the last re-share
        self.min_i = -1  # index of the smallest finish level (any one of equals)
        self.min_val = math.inf  # and its value
        self.max_done = 0.0  # at least the largest done bytes
        self.served = 0.0  # bytes each flow has transferred since the levels were based (a virtual clock)
        self.rebase_at = math.inf  # served beyond this: rebase the levels (see serve)

    def grow(self) -> None:
        old = self.rem
        self.rem = np.zeros(2 * old.shape[0])
        self.rem[: old.shape[0]] = old

    def add(self, rem: float, done: float, latency: float, slot: int) -> int:
        """Add a flow; return its index."""
        i = self.k
        if i == self.rem.shape[0]:
            self.grow()
        rem = rem + self.served
        self.rem[i] = rem
        if done * _REBASE_PER_DONE < self.rebase_at:
            self.rebase_at = done * _REBASE_PER_DONE
        self.done.append(done)
        self.lat.append(latency)
        self.slots.append(slot)
        self.k = i + 1
        if rem < self.min_val:
            self.min_i = i
            self.min_val = rem
        if done > self.max_done:
            self.max_done = done
        return i

    def remove(self, i: int, idx: list[int]) -> None:
        """Take out the flow at index ``i``, moving the last one into its place."""
        last = self.k - 1
        self.k = last
        moved = self.slots.pop()
        done = self.done.pop()
        latency = self.lat.pop()
        if i != last:
            self.rem[i] = self.rem[last]
            self.done[i] = done
            self.lat[i] = latency
            self.slots[i] = moved
            idx[moved] = i
            if self.min_i == last:
                self.min_i = i
        if not last:
            self.max_done = 0.0
            self.served = 0.0
            self.rebase_at = math.inf

    def serve(self, c: float) -> None:
        """Every flow of the block has transferred ``c`` more bytes: O(1).

        Once ``served`` is a thousand times the smallest flow's size the
        levels are rebased (one subtraction over the block), so that a
        remaining byte count, a level minus ``served``, keeps all but the
        last ~10 bits of its precision: within 1e-13 of its flow's size."""
        served = self.served + c
        if served > self.rebase_at:
            k = self.k
            rem = self.rem[:k]
            np.subtract(rem, served, out=rem)
            self.min_val -= served
            served = 0.0
        self.served = served


class _Loose:
    """The flows of the _BLOCKS layout outside any block: each has its own rate."""

    __slots__ = ("rem", "done", "lat", "slots", "rate", "left")

    def __init__(self) -> None:
        self.rem: list[float] = []  # remaining bytes at _t_ref
        self.done: list[float] = []
        self.lat: list[float] = []
        self.slots: list[int] = []
        self.rate: list[float] = []  # at the last re-share (not moved by remove)
        self.left: list[float] = []  # time left at the last re-share (not moved by remove)

    def remove(self, i: int, idx: list[int]) -> None:
        """Take out the flow at index ``i``, moving the last one into its place."""
        moved = self.slots.pop()
        if i == len(self.slots):
            self.rem.pop()
            self.done.pop()
            self.lat.pop()
        else:
            self.rem[i] = self.rem.pop()
            self.done[i] = self.done.pop()
            self.lat[i] = self.lat.pop()
            self.slots[i] = moved
            idx[moved] = i


class _BlocksLayout(_FlatLayout):
    """The network's operations on the flows in transfer in the _BLOCKS layout."""

    def _init_blocks(self) -> None:
        """No blocks, no loose flows."""
        self._blocks: dict[int, _Block] = {}  # _BLOCKS: block link -> block
        self._loose = _Loose()  # _BLOCKS: the flows in no block
        self._loc: list[_Block | None] = []  # _BLOCKS: each slot's block (None: loose)
        self._idx: list[int] = []  # _BLOCKS: each slot's index in its block or in _loose
        self._since_blocks_tried = 0  # re-shares since _FLAT or _loose last tried blocks
        self._blocks_every = _BLOCKS_EVERY  # (tests change these three)
        self._block_min = _BLOCK_MIN
        self._loose_max = _LOOSE_MAX

    def _start_blocks(self, n: int, src: int, downlink: int, size: float, latency: float) -> int:
        """Store a new flow's numbers in a block or loose, as slot ``n`` (the caller books its
        links and meta); return _BLOCKS, or _FLAT if too many flows would be loose: then the
        blocks are dissolved and the flow is the _FLAT layout's to store."""
        block = self._blocks.get(src) or self._blocks.get(downlink)
        if block is None:
            loose = self._loose
            if len(loose.slots) < self._loose_max:
                self._idx.append(len(loose.slots))
                self._loc.append(None)
                loose.rem.append(size)
                loose.done.append(size * _DONE_RTOL)
                loose.lat.append(latency)
                loose.slots.append(n)
            else:
                self._dissolve_blocks()
                return _FLAT
        else:
            self._idx.append(block.add(size, size * _DONE_RTOL, latency, n))
            self._loc.append(block)
        return _BLOCKS

    def _reshare_blocks(self) -> bool:
        """Re-share in the _BLOCKS layout; False if it no longer holds (see the module header)."""
        if self._impure or not self._one_round_test:
            return False
        loose = self._loose
        if loose.slots:  # now and then, move loose flows into blocks
            self._since_blocks_tried += 1
            if self._since_blocks_tried >= self._blocks_every:
                self._since_blocks_tried = 0
                self._tighten()
        # Every flow of a block has its link's share as its rate while the
        # share is at most that of every link across from a flow on the link.
        # Since x -> x / rate is monotone, the smallest time left in a block
        # is its smallest remaining bytes over the rate: the same float as
        # the smallest of the flows' own quotients.
        count, share, sorted_ = self._count, self._share, self._sorted
        best = math.inf
        bad = []
        for link, block in self._blocks.items():
            if not block.k:
                continue
            rate = share[link]
            if count[link] >= 2:
                if rate > sorted_[link][0]:
                    bad.append(block)
                    continue
            else:  # one flow: its other link
                s = block.slots[0]
                if rate > share[self._down[s] if self._up[s] == link else self._up[s]]:
                    bad.append(block)
                    continue
            block.rate = rate
            v = block.min_val - block.served
            t = v / rate if rate else _divide_by_zero(v)
            if t < best:
                best = t
        if bad:  # their flows become loose
            if len(loose.slots) + sum(block.k for block in bad) > self._loose_max:
                return False
            for block in bad:
                self._loosen(block)
        if loose.slots:
            # What progressive_fill returns after its first round, as for _LISTS
            # (a plain loop: there are few loose flows, often one).
            up, down = self._up, self._down
            rate_list = []
            left = []
            for s, r in zip(loose.slots, loose.rem, strict=True):
                a = share[up[s]]
                b = share[down[s]]
                x = a if a < b else b
                rate_list.append(x)
                left.append(r / x if x else _divide_by_zero(r))
            loose.rate = rate_list
            loose.left = left
            t = min(left)  # (min's own rule for NaN, as before)
            if t < best:
                best = t
        self._next_finish = self._t_ref + best
        if self._uniform_latency is None:
            lat = [min(b.lat) for b in self._blocks.values() if b.k]
            self._min_latency = min(lat + loose.lat)
        else:
            self._min_latency = self._uniform_latency
        return True

    def _move_remaining_blocks(self, dt: float) -> None:
        """Take ``dt`` seconds of transfer at the current rates off the remaining bytes."""
        for block in self._blocks.values():
            k = block.k
            if k:
                block.serve(block.rate * dt)
        loose = self._loose
        if loose.rem:
            rem = loose.rem
            for j, x in enumerate(loose.rate):
                rem[j] -= x * dt

    def _finish_in_blocks(self, dt: float, limit: float) -> list[int]:
        """Move the blocks' clock by ``dt``; return the slots of the flows done, ascending.

        The tests are the flat layout's, flow by flow: done when the time left
        computed at the last re-share (remaining / rate) is at most ``limit``
        or the new remaining bytes are at most the flow's done bytes. Both
        quantities grow with the old remaining bytes (rounding is monotone),
        so the flows are tested from the smallest remaining bytes up, found
        by argmin with the done ones masked by inf, until one is not done;
        unless that one's new remaining bytes are within the block's largest
        done bytes, no other flow can be done either, and otherwise every
        flow of the block is tested.
        """
        inf = math.inf
        done_slots: list[int] = []
        for block in self._blocks.values():
            k = block.k
            if not k:
                continue
            rate = block.rate
            c = rate * dt
            rem = block.rem
            served = block.served
            i = block.min_i
            v = block.min_val - served
            found = 0
            while True:
                left = v / rate if rate else _divide_by_zero(v)
                if left <= limit or v - c <= block.done[i]:
                    done_slots.append(block.slots[i])
                    rem[i] = inf
                    found += 1
                    if found == k:
                        i = -1
                        break
                    i = int(rem[:k].argmin())
                    v = float(rem[i]) - served
                    continue
                if v - c <= block.max_done:  # a later flow may have larger done bytes
                    with np.errstate(divide="ignore"):
                        left_bytes = rem[:k] - served
                        scan = (left_bytes / rate <= limit) | (left_bytes - c <= np.array(block.done))
                    done_slots.extend(block.slots[j] for j in scan.nonzero()[0].tolist())
                    rem[:k][scan] = inf
                break
            block.min_i = i
            block.min_val = float(rem[i]) if i >= 0 else inf
            block.serve(c)
        loose = self._loose
        if loose.rem:
            rem_list = loose.rem
            loose_done, loose_left, loose_slots = loose.done, loose.left, loose.slots
            for j, x in enumerate(loose.rate):
                r = rem_list[j] - x * dt
                rem_list[j] = r
                if loose_left[j] <= limit or r <= loose_done[j]:
                    done_slots.append(loose_slots[j])
        done_slots.sort()
        return done_slots

    def _remove_done_blocks(self, done: list[int], t: float) -> None:
        """Queue the flows in slots ``done`` (ascending) for delivery after
        their latency from ``t`` and remove them from their blocks (or the
        loose flows) and the per-slot lists, as _remove_done does in the
        other layouts with lists == (up, down, meta, loc, idx) written out."""
        up, down, meta, deliveries = self._up, self._down, self._meta, self._deliveries
        n = self._n
        loc, idx, loose = self._loc, self._idx, self._loose
        for i in reversed(done):
            latency, seq, size, token = meta[i]
            heapq.heappush(deliveries, (t + latency, seq, size, token))
            self._detach(i, up[i], down[i])
            holder = loc[i]
            (loose if holder is None else holder).remove(idx[i], idx)
            n -= 1
            if i == n:
                up.pop()
                down.pop()
                meta.pop()
                loc.pop()
                idx.pop()
            else:
                up[i] = up.pop()
                down[i] = down.pop()
                meta[i] = meta.pop()
                holder = loc[i] = loc.pop()
                j = idx[i] = idx.pop()
                (loose if holder is None else holder).slots[j] = i
        self._n = n
        self._dirty = True

    def _block_links(self) -> set[int]:
        """The links that may be block links now."""
        count, share, minimum = self._count, self._share, self._block_min
        return {link for link, shares in self._sorted.items() if count[link] >= minimum and share[link] <= shares[0]}

    def _loosen(self, block: _Block) -> None:
        """Make the flows of ``block`` loose, and drop it."""
        loose, loc, idx = self._loose, self._loc, self._idx
        k = block.k
        base = len(loose.slots)
        loose.rem += (block.rem[:k] - block.served).tolist()
        loose.done += block.done
        loose.lat += block.lat
        for j, s in enumerate(block.slots):
            loc[s] = None
            idx[s] = base + j
        loose.slots += block.slots
        del self._blocks[block.link]

    def _tighten(self) -> None:
        """Move the loose flows that cross a block link into its block."""
        candidates = self._block_links()
        if not candidates:
            return
        loose, loc, idx, up, down = self._loose, self._loc, self._idx, self._up, self._down
        stay = []
        for j, s in enumerate(loose.slots):
            u = up[s]
            link = u if u in candidates else down[s] if down[s] in candidates else -1
            if link < 0:
                stay.append(j)
                continue
            block = self._blocks.get(link)
            if block is None:
                block = self._blocks[link] = _Block(link, _INITIAL_SLOTS)
            loc[s] = block
            idx[s] = block.add(loose.rem[j], loose.done[j], loose.lat[j], s)
        if len(stay) < len(loose.slots):
            loose.rem = [loose.rem[j] for j in stay]
            loose.done = [loose.done[j] for j in stay]
            loose.lat = [loose.lat[j] for j in stay]
            loose.slots = [loose.slots[j] for j in stay]
            for j, s in enumerate(loose.slots):
                idx[s] = j

    def _try_blocks(self) -> bool:
        """Switch from _FLAT to _BLOCKS if few flows would be loose (now and then)."""
        self._since_blocks_tried += 1
        if self._since_blocks_tried < self._blocks_every:
            return False
        self._since_blocks_tried = 0
        candidates = self._block_links()
        n = self._n
        if not candidates or sum(self._count[link] for link in candidates) + self._loose_max < n:
            return False
        slots_of: dict[int, list[int]] = {}
        loose_slots: list[int] = []
        for s, (u, d) in enumerate(zip(self._up, self._down, strict=True)):
            link = u if u in candidates else d if d in candidates else -1
            if link >= 0:
                slots_of.setdefault(link, []).append(s)
            elif len(loose_slots) < self._loose_max:
                loose_slots.append(s)
            else:
                return False
        blocks: dict[int, _Block] = {}
        loc: list[_Block | None] = [None] * n
        idx = [0] * n
        for link, slots in slots_of.items():
            k = len(slots)
            block = _Block(link, max(_INITIAL_SLOTS, 2 * k))
            where = np.array(slots, dtype=np.intp)
            block.rem[:k] = self._remaining[where]
            block.done = self._done_bytes[where].tolist()
            block.lat = self._flow_latency[where].tolist()
            block.k = k
            block.slots = slots
            block.min_i = int(block.rem[:k].argmin())
            block.min_val = float(block.rem[block.min_i])
            block.max_done = max(block.done)
            block.rebase_at = min(block.done) * _REBASE_PER_DONE
            blocks[link] = block
            for j, s in enumerate(slots):
                loc[s] = block
                idx[s] = j
        loose = _Loose()
        for j, s in enumerate(loose_slots):
            loose.rem.append(float(self._remaining[s]))
            loose.done.append(float(self._done_bytes[s]))
            loose.lat.append(float(self._flow_latency[s]))
            loose.slots.append(s)
            idx[s] = j
        self._blocks, self._loose, self._loc, self._idx = blocks, loose, loc, idx
        self._share_np = None  # not needed in _BLOCKS
        self._layout = _BLOCKS
        return True

    def _dissolve_blocks(self) -> None:
        """Switch from _BLOCKS to _FLAT."""
        slots = self._flat_arrays()
        self._remaining = np.zeros(slots)
        self._done_bytes = np.zeros(slots)
        self._flow_latency = np.zeros(slots)
        for block in self._blocks.values():
            k = block.k
            if k:
                where = np.array(block.slots, dtype=np.intp)
                self._remaining[where] = block.rem[:k] - block.served
                self._done_bytes[where] = block.done
                self._flow_latency[where] = block.lat
        loose = self._loose
        if loose.slots:
            where = np.array(loose.slots, dtype=np.intp)
            self._remaining[where] = loose.rem
            self._done_bytes[where] = loose.done
            self._flow_latency[where] = loose.lat
        self._blocks, self._loose, self._loc, self._idx = {}, _Loose(), [], []
        self._layout = _FLAT

    def _slot_state_blocks(self) -> tuple[list[float], list[float]]:
        """The rates and remaining bytes of the flows in transfer, by slot (for tests)."""
        loose = self._loose
        rates = [loose.rate[j] if b is None else b.rate for b, j in zip(self._loc, self._idx, strict=True)]
        remaining = [
            loose.rem[j] if b is None else float(b.rem[j] - b.served) for b, j in zip(self._loc, self._idx, strict=True)
        ]
        return rates, remaining
