"""Fluid model of a cluster network with max–min fair bandwidth sharing.

Every node has an uplink and a downlink (bytes/s, ``inf`` for unlimited) and
a latency. A flow from ``src`` to ``dst`` crosses ``src``'s uplink and
``dst``'s downlink; the flows in transfer share links max–min fairly
(:mod:`hetsync.algos.maxmin`), re-shared whenever one starts or finishes its
bytes. A flow that has transferred its bytes leaves the sharing at once and is
*delivered* ``max(latency[src], latency[dst])`` later. A flow of zero bytes,
or one whose two links are both unlimited, is delivered after the latency
alone. This is the fluid flow model of SimGrid and similar simulators: no
packets, no slow start. The parameter server is a node like any other, so an
incast into it or a broadcast from it costs what its links allow.

Capacities may change in virtual time (``set_capacity``: background traffic
switched on and off on a worker's links, say): the flows transfer at the old
rates up to the change and share the links at the new capacities from then
on, as if the change were a flow start. A flow in transfer whose two links
become unlimited leaves the sharing then and is delivered its latency later;
one crossing a link of capacity 0 waits at rate 0 until it comes back. A
change updates the per-link state of the fast paths below just as a flow
start does, so they stay in use after it, with the same exactness.

Cost: the rates are recomputed whenever the set of flows in transfer has
changed, the next time the clock is read (flows started at one instant with
no look at the clock in between are shared once), but rarely by the full
progressive fill. The network keeps, per link, what the fill's first round
would decide; when that round settles every flow (always so in a parameter
server's star of equal workers, saturated or not) the rates are each flow's
smaller link share, cap / count, the very floats the fill returns. The flows
in transfer live in Python lists while they are few, in numpy arrays while
they are many, and then, in that one-round regime, grouped by a shared
bottleneck link whose share is their common rate and which keeps a virtual
clock (the bytes each of its flows has transferred), so that moving the
clock costs one addition per group and finding the next finish none.
Starting or finishing a flow, or changing a capacity, costs O(1) Python
work, O(log F) for the per-link bookkeeping and a few operations over the F
flows in transfer.
Deliveries waiting out their latency sit in a heap keyed by (delivery time,
start order), which is also the order ``advance`` reports them in. Nothing
depends on hashing or randomness: the same calls give bit-identical results.
The rates are bit for bit those of the full progressive fill over the flows
in the original implementation's order; so are the remaining bytes and the
finish times in the lists and arrays layouts, and within a few ulps of them
in the grouped one, where a flow's remaining bytes are its finish level less
the group's clock rather than its size less each step's bytes in turn (the
same deliveries, in the same order: tests/sim/test_network.py checks this,
tests/sim/test_network_capacity.py with capacity changes).
"""

from __future__ import annotations

import heapq
import math
import operator
from bisect import bisect_right, insort
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from hetsync.algos.maxmin import TIE_RTOL, progressive_fill

# A flow counts as done once its remaining bytes are at most _DONE_RTOL of its
# size, or once its finish time is within _DONE_S + _CLOCK_RTOL * |now| (a
# few ulps of the clock) of now, so that floating-point leftovers make no
# extra events.
_DONE_RTOL = 1e-9
_DONE_S = 1e-12
_CLOCK_RTOL = 1e-15

_TIE = 1.0 + TIE_RTOL  # the factor of progressive_fill's tie test

# The flows in transfer live in Python lists up to _TO_ARRAYS of them (numpy's
# per-call cost dominates below that), in numpy arrays from there until they
# drop below _TO_LISTS. Both hold the same floats.
_TO_ARRAYS = 40
_TO_LISTS = 20
_INITIAL_SLOTS = 64
# Every _BLOCKS_EVERY re-shares, try the _BLOCKS layout (in _FLAT) or move
# loose flows into blocks (in _BLOCKS), with block links carrying at least
# _BLOCK_MIN flows; _BLOCKS keeps at most _LOOSE_MAX flows outside blocks.
_BLOCKS_EVERY = 8
_BLOCK_MIN = 8
_LOOSE_MAX = 32
_LISTS, _FLAT, _BLOCKS = 0, 1, 2
# A block rebases its finish levels once it has served this many times the
# done bytes of its smallest flow (a thousand times its size).
_REBASE_PER_DONE = 1e3 / _DONE_RTOL


def _node_values(values: Iterable[float], name: str, finite: bool) -> list[float]:
    """Return ``values`` as floats, checking each is nonnegative (and finite if asked)."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of numbers, one per node ({exc})") from None
    for i, v in enumerate(out):
        if not v >= 0.0 or (finite and v == math.inf):
            kind = "finite and nonnegative" if finite else "nonnegative (inf allowed)"
            raise ValueError(f"{name}[{i}] = {v!r}: must be {kind}")
    return out


def _capacity_value(value: float | None, name: str) -> float | None:
    """``value`` as a capacity (+ 0.0: no -0.0), or None; checks it is nonnegative."""
    if value is None:
        return None
    try:
        c = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r}: must be a number") from None
    if not c >= 0.0:
        raise ValueError(f"{name} = {value!r}: must be nonnegative (inf allowed)")
    return c + 0.0


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


class Network:
    """Flows between nodes sharing uplinks and downlinks max–min fairly.

    Times are absolute virtual seconds and never go backwards across calls.
    A driver starts transfers with ``start_flow`` (and may change capacities
    with ``set_capacity``), reads ``next_event_s`` and calls ``advance`` at
    that time, or earlier when it has an event of its own first, to collect
    the tokens of the delivered flows.
    """

    def __init__(
        self,
        uplink_Bps: Sequence[float],
        downlink_Bps: Sequence[float],
        latency_s: Sequence[float] | float,
    ) -> None:
        """Build a network of ``M = len(uplink_Bps)`` nodes, numbered from 0.

        Args:
            uplink_Bps: each node's uplink capacity in bytes/s (``inf`` allowed).
            downlink_Bps: each node's downlink capacity, same length.
            latency_s: one latency in seconds for every node, or one per node.

        Raises:
            ValueError: naming the argument, on a negative or NaN capacity, a
                negative, NaN or infinite latency, or mismatched lengths.
        """
        up = _node_values(uplink_Bps, "uplink_Bps", finite=False)
        down = _node_values(downlink_Bps, "downlink_Bps", finite=False)
        m = len(up)
        if m == 0:
            raise ValueError("uplink_Bps is empty: the network needs at least one node")
        if len(down) != m:
            raise ValueError(f"downlink_Bps has {len(down)} entries, uplink_Bps has {m}")
        if isinstance(latency_s, (Sequence, np.ndarray)):
            lat = _node_values(latency_s, "latency_s", finite=True)
            if len(lat) != m:
                raise ValueError(f"latency_s has {len(lat)} entries, uplink_Bps has {m}")
        else:
            try:
                lat = [float(latency_s)] * m
            except (TypeError, ValueError):
                raise ValueError(f"latency_s = {latency_s!r}: must be a number or one per node") from None
            if not 0.0 <= lat[0] < math.inf:
                raise ValueError(f"latency_s = {lat[0]!r}: must be finite and nonnegative")

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

        # Per-link state of the one-round test (see "One-round test" below).
        self._count = [0] * n_links  # flows in transfer per link
        self._share = [0.0] * n_links  # cap / count, valid where count > 0
        self._share_np: np.ndarray | None = None  # the same as an array, in _FLAT
        self._tracked: list[dict[int, int]] = [{} for _ in range(n_links)]  # tracked partner: flows to it
        self._sorted: dict[int, list[float]] = {}  # tracked link: its flows' partner shares, sorted
        self._impure: set[int] = set()  # tracked links that fail the test
        self._one_round_test = True  # False: always run the full progressive fill (tests)
        self._to_arrays_above = _TO_ARRAYS  # (tests change these two)
        self._to_lists_below = _TO_LISTS

        # The flows in transfer occupy slots [0, n) (see "Flow layouts" below).
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
        self._blocks: dict[int, _Block] = {}  # _BLOCKS: block link -> block
        self._loose = _Loose()  # _BLOCKS: the flows in no block
        self._loc: list[_Block | None] = []  # _BLOCKS: each slot's block (None: loose)
        self._idx: list[int] = []  # _BLOCKS: each slot's index in its block or in _loose
        self._since_blocks_tried = 0  # re-shares since _FLAT or _loose last tried blocks
        self._blocks_every = _BLOCKS_EVERY  # (tests change these three)
        self._block_min = _BLOCK_MIN
        self._loose_max = _LOOSE_MAX

        self._now = -math.inf  # latest time given to start_flow or advance
        self._t_ref = -math.inf  # time at which _remaining is exact
        self._dirty = False  # flow set changed since the rates were computed
        self._next_finish = math.inf  # earliest finish time at the current rates
        self._min_latency = math.inf  # smallest latency among the flows in transfer
        self._seq = 0
        self._deliveries: list[tuple[float, int, float, object]] = []  # heap
        self._bytes_delivered = 0.0

    @property
    def active_flows(self) -> int:
        """Flows still transferring bytes, as of the latest call's time."""
        return self._n

    @property
    def bytes_delivered(self) -> float:
        """Bytes of all the flows whose tokens ``advance`` has returned."""
        return self._bytes_delivered

    def start_flow(self, now_s: float, src: int, dst: int, nbytes: int | float, token: object) -> None:
        """Start sending ``nbytes`` from node ``src`` to node ``dst`` at ``now_s``.

        ``advance`` returns ``token`` once the flow is delivered. Transfers
        finishing at or before ``now_s`` are settled first; their tokens wait
        for the next ``advance``.

        Raises:
            ValueError: if ``now_s`` is earlier than a previous call's time or
                not finite, a node index is out of range, ``src == dst``, or
                ``nbytes`` is negative or not finite.
        """
        m = self._m
        if not (0 <= src < m and 0 <= dst < m):
            raise ValueError(f"flow {src}->{dst}: node indices must be in [0, {m})")
        if src == dst:
            raise ValueError(f"flow {src}->{dst}: source and destination are the same node")
        size = float(nbytes)
        if not 0.0 <= size < math.inf:
            raise ValueError(f"nbytes = {nbytes!r}: must be finite and nonnegative")
        self._settle(now_s)

        seq = self._seq
        self._seq = seq + 1
        latency = self._latency[src]
        if self._latency[dst] > latency:
            latency = self._latency[dst]
        if size == 0.0 or (self._up_inf[src] and self._down_inf[dst]):
            heapq.heappush(self._deliveries, (now_s + latency, seq, size, token))
            return

        n = self._n
        downlink = m + dst
        if n and not self._dirty:
            # The rates change now: bring the remaining bytes up to now first.
            self._move_remaining(now_s - self._t_ref)
        self._t_ref = now_s
        layout = self._layout
        if layout == _BLOCKS:
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
                    layout = _FLAT
            else:
                self._idx.append(block.add(size, size * _DONE_RTOL, latency, n))
                self._loc.append(block)
        if layout == _FLAT:
            if n == self._rate.shape[0]:
                self._grow()
            self._up_np[n] = src
            self._down_np[n] = downlink
            self._remaining[n] = size
            self._done_bytes[n] = size * _DONE_RTOL
            self._flow_latency[n] = latency
        elif layout == _LISTS:
            self._remaining.append(size)
            self._done_bytes.append(size * _DONE_RTOL)
            self._flow_latency.append(latency)
        self._attach(src, downlink)
        self._up.append(src)
        self._down.append(downlink)
        self._meta.append((latency, seq, size, token))
        self._n = n + 1
        self._dirty = True

    def next_event_s(self) -> float:
        """Time of the next delivery; ``inf`` if nothing is in flight.

        Exact whenever the next transfer to finish has the smallest latency
        among the transfers in progress, which is always the case when all
        nodes have one latency. Otherwise a later-finishing transfer with a
        shorter latency could arrive first, so this returns a lower bound:
        the next finish plus the smallest latency in play; ``advance`` to it
        settles at least one transfer and may return no tokens. Never earlier
        than the latest call's time.
        """
        if self._dirty:
            self._reshare()
        t = self._next_finish + self._min_latency
        if self._deliveries and self._deliveries[0][0] < t:
            t = self._deliveries[0][0]
        return t if t > self._now else self._now

    def advance(self, now_s: float) -> list[object]:
        """Move the network to ``now_s``; return the tokens delivered by then.

        Tokens come in order of delivery time, then start order, each once.
        Any ``now_s`` at or after the previous call's time is handled exactly:
        transfers finishing in between re-share the links at their own
        finish times.

        Raises:
            ValueError: if ``now_s`` is earlier than a previous call's time or
                not finite.
        """
        self._settle(now_s)
        heap = self._deliveries
        out: list[object] = []
        while heap and heap[0][0] <= now_s:
            _, _, size, token = heapq.heappop(heap)
            self._bytes_delivered += size
            out.append(token)
        return out

    def set_capacity(
        self,
        now_s: float,
        node: int,
        *,
        uplink_Bps: float | None = None,
        downlink_Bps: float | None = None,
    ) -> None:
        """Change node ``node``'s uplink and/or downlink capacity at ``now_s``.

        Every flow transfers at the old rates up to ``now_s`` (transfers done
        by then are settled at their own times, as ``advance`` settles them;
        their tokens wait for the next ``advance``), and from ``now_s`` on the
        flows in transfer share the links at the new capacities, max–min
        fairly. A capacity of ``inf`` or 0 is allowed, as in the constructor:
        a flow crossing a link of capacity 0 gets rate 0 and waits until the
        capacity comes back; a flow in transfer whose two links are now both
        unlimited leaves the sharing at ``now_s`` and is delivered its latency
        later. Latencies do not change. ``None`` leaves that link as it is.

        A capacity equal to the current one changes nothing: the call then
        only moves the network's clock to ``now_s``, as ``advance`` would
        (cheap unless transfers finish by then). So does a change of links
        that no flow in transfer crosses, apart from the capacities new flows
        will see. Otherwise the remaining bytes are brought up to ``now_s``
        and the flows re-shared the next time the clock is read, by the same
        fast paths as after a flow start (the per-link state of the one-round
        test is updated for the new shares): the rates are bit for bit those
        of the full progressive fill over the flows at the new capacities.

        Raises:
            ValueError: naming the argument, if ``now_s`` is earlier than a
                previous call's time or not finite, ``node`` is not a node
                index, or a capacity is negative or NaN.
        """
        m = self._m
        try:
            i = operator.index(node)
        except TypeError:
            raise ValueError(f"node = {node!r}: must be a node index in [0, {m})") from None
        if not 0 <= i < m:
            raise ValueError(f"node = {node!r}: must be a node index in [0, {m})")
        up = _capacity_value(uplink_Bps, "uplink_Bps")
        down = _capacity_value(downlink_Bps, "downlink_Bps")
        self._settle(now_s)

        cap = self._cap
        changes = []
        if up is not None and up != cap[i]:
            changes.append((i, up))
            self._up_inf[i] = up == math.inf
        if down is not None and down != cap[m + i]:
            changes.append((m + i, down))
            self._down_inf[i] = down == math.inf
        if not changes:
            return
        count = self._count
        if any(count[link] for link, _ in changes):
            # The rates change now: bring the remaining bytes up to now first
            # (if still dirty after _settle, they are at _t_ref == now_s).
            if not self._dirty:
                self._move_remaining(now_s - self._t_ref)
            self._t_ref = now_s
            self._dirty = True
        share, share_np, tracked = self._share, self._share_np, self._tracked
        for link, c in changes:
            cap[link] = c
            self._capacity[link] = c
            k = count[link]
            if k:
                # As in _attach and _detach: the new share goes into the
                # sorted partner shares of the tracked links across.
                old = share[link]
                new = c / k
                share[link] = new
                if share_np is not None:
                    share_np[link] = new
                if new != old and tracked[link]:
                    self._move_share(link, old, new)
                if k > 1:
                    self._check(link)
        self._has_dead_link = 0.0 in cap
        if any(c == math.inf and count[link] for link, c in changes):
            self._drop_unlimited(now_s)

    def _drop_unlimited(self, t: float) -> None:
        """Queue and remove the flows in transfer whose two links are unlimited, at ``t``.

        Such a flow would get rate inf; like one started on two unlimited
        links, it is delivered after its latency alone. (Only set_capacity
        makes these: rare, so the _BLOCKS layout is dissolved first.)
        """
        cap, up, down = self._cap, self._up, self._down
        inf = math.inf
        done = [i for i, (u, d) in enumerate(zip(up, down, strict=True)) if cap[u] == inf and cap[d] == inf]
        if not done:
            return
        if self._layout == _BLOCKS:
            self._dissolve_blocks()
        meta = self._meta
        if self._layout == _FLAT:
            lists: tuple[list[Any], ...] = (up, down, meta)
            arrays: tuple[np.ndarray, ...] = (
                self._remaining,
                self._done_bytes,
                self._flow_latency,
                self._up_np,
                self._down_np,
            )
        else:
            lists = (up, down, meta, self._remaining, self._done_bytes, self._flow_latency)
            arrays = ()
        self._remove_done(done, t, lists, arrays)

    def _settle(self, now_s: float) -> None:
        """Finish every transfer done by ``now_s``, each at its own time."""
        if not now_s >= self._now or not math.isfinite(now_s):
            raise ValueError(f"now_s = {now_s!r}: must be finite and not before the network's time {self._now!r}")
        self._now = now_s
        if self._dirty and now_s == self._t_ref:
            return  # no time passes: no transfer can finish
        limit = now_s + (_DONE_S + _CLOCK_RTOL * abs(now_s))
        while True:
            if self._dirty:
                self._reshare()
            t = self._next_finish
            if t > limit:
                return
            self._finish_transfers(t if t < now_s else now_s)

    # ------------------------------------------------------------ re-sharing

    def _reshare(self) -> None:
        """Recompute the rates and the time left of the flows in transfer."""
        self._dirty = False
        n = self._n
        if n == 0:
            self._next_finish = math.inf
            self._min_latency = math.inf
            return
        layout = self._layout
        if layout == _BLOCKS:
            if n >= self._to_lists_below and self._reshare_blocks():
                return
            self._dissolve_blocks()
            layout = _FLAT
        if layout == _LISTS and n > self._to_arrays_above:
            self._to_arrays()
            layout = _FLAT
        if layout == _FLAT:
            if n < self._to_lists_below:
                self._to_lists()
                layout = _LISTS
            elif not self._impure and self._one_round_test and self._try_blocks():
                layout = _BLOCKS
        if layout == _BLOCKS:
            self._reshare_blocks()  # holds: the blocks were just formed
        elif layout == _FLAT:
            self._reshare_flat(n)
        else:
            self._reshare_lists()

    def _reshare_lists(self) -> None:
        if self._impure or not self._one_round_test:
            rate = self._full_fill(np.array((self._up, self._down), dtype=np.intp)).tolist()
        else:
            # What progressive_fill returns after its first round (see below).
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

    def _reshare_flat(self, n: int) -> None:
        rate = self._rate[:n]
        if self._impure or not self._one_round_test:
            rate[:] = self._full_fill(self._links[:, :n])
        else:
            # What progressive_fill returns after its first round (see below).
            share = self._share_np
            np.minimum(share[self._up_np[:n]], share[self._down_np[:n]], out=rate)
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

    def _reshare_blocks(self) -> bool:
        """Re-share in the _BLOCKS layout; False if it no longer holds (see below)."""
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

    def _full_fill(self, links: np.ndarray) -> np.ndarray:
        """The max–min rates of flows with links ``links`` [2, F], by progressive filling."""
        link_flows = np.bincount(links.ravel(), minlength=self._n_links).astype(np.float64)
        rate = np.empty(links.shape[1])
        progressive_fill(self._capacity, links, link_flows, rate)
        return rate

    def _move_remaining(self, dt: float) -> None:
        """Take ``dt`` seconds of transfer at the current rates off the remaining bytes."""
        layout = self._layout
        if layout == _BLOCKS:
            for block in self._blocks.values():
                k = block.k
                if k:
                    block.serve(block.rate * dt)
            loose = self._loose
            if loose.rem:
                rem = loose.rem
                for j, x in enumerate(loose.rate):
                    rem[j] -= x * dt
        elif layout == _FLAT:
            n = self._n
            self._remaining[:n] -= self._rate[:n] * dt
        else:
            self._remaining = [r - x * dt for r, x in zip(self._remaining, self._rate, strict=True)]

    def _finish_transfers(self, t: float) -> None:
        """Move the clock of the transfers to ``t``; queue and remove those done."""
        n = self._n
        dt = t - self._t_ref
        self._t_ref = t
        limit = dt + (_DONE_S + _CLOCK_RTOL * abs(t))
        up, down, meta = self._up, self._down, self._meta
        layout = self._layout
        if layout == _BLOCKS:
            done = self._finish_in_blocks(dt, limit)
            loc, idx = self._loc, self._idx
            lists: tuple[list[Any], ...] = (up, down, meta, loc, idx)
            arrays: tuple[np.ndarray, ...] = ()
        elif layout == _FLAT:
            remaining = self._remaining[:n]
            remaining -= self._rate[:n] * dt
            done_mask = (self._time_left[:n] <= limit) | (remaining <= self._done_bytes[:n])
            done = done_mask.nonzero()[0].tolist()
            lists = (up, down, meta)
            arrays = (self._remaining, self._done_bytes, self._flow_latency, self._up_np, self._down_np)
        else:
            rem = [r - x * dt for r, x in zip(self._remaining, self._rate, strict=True)]
            self._remaining = rem
            done_bytes = self._done_bytes
            done = [
                i
                for i, (left, r, d) in enumerate(zip(self._time_left, rem, done_bytes, strict=True))
                if left <= limit or r <= d
            ]
            lists = (up, down, meta, rem, done_bytes, self._flow_latency)
            arrays = ()
        self._remove_done(done, t, lists, arrays)

    def _remove_done(
        self, done: list[int], t: float, lists: tuple[list[Any], ...], arrays: tuple[np.ndarray, ...]
    ) -> None:
        """Queue the flows in slots ``done`` (ascending) for delivery after
        their latency from ``t`` and remove them from every per-slot list and
        array. The flows leave in decreasing slot order, the last flow moving
        into each hole. Rates are recomputed: they are not moved."""
        up, down, meta, deliveries = self._up, self._down, self._meta, self._deliveries
        n = self._n
        if self._layout == _BLOCKS:
            # As below, with lists == (up, down, meta, loc, idx) written out.
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
            return
        for i in reversed(done):
            latency, seq, size, token = meta[i]
            heapq.heappush(deliveries, (t + latency, seq, size, token))
            self._detach(i, up[i], down[i])
            n -= 1
            if i == n:
                for lst in lists:
                    lst.pop()
            else:
                for lst in lists:
                    lst[i] = lst.pop()
                for arr in arrays:
                    arr[i] = arr[n]
        self._n = n
        self._dirty = True

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
            done, left, slots = loose.done, loose.left, loose.slots
            for j, x in enumerate(loose.rate):
                r = rem_list[j] - x * dt
                rem_list[j] = r
                if left[j] <= limit or r <= done[j]:
                    done_slots.append(slots[j])
        done_slots.sort()
        return done_slots

    # ---------------------------------------------------------- flow layouts
    #
    # The flows in transfer occupy slots [0, n), in the order of the original
    # implementation: a new flow takes slot n, and the flows done at one
    # time leave in decreasing slot order, the last flow moving into each
    # hole. The order matters to the full progressive fill (it sums in slot
    # order); _up, _down and _meta always follow it. The numbers live in one
    # of three layouts:
    #   _LISTS: Python lists indexed by slot (few flows);
    #   _FLAT:  numpy arrays indexed by slot, grown by doubling;
    #   _BLOCKS: in the one-round regime, flows are grouped by a *block link*
    #     that they all cross and whose share is at most the share of every
    #     link across from any flow on it: their rate is that share, one
    #     float for the block. A block keeps a virtual clock, `served` (the
    #     bytes each of its flows has transferred since it was formed or
    #     rebased), its flows' finish levels (remaining bytes + served) in an
    #     array (done bytes, latencies and slots in lists), and the index and
    #     value of the smallest level (the next to finish). Moving the clock
    #     adds rate * dt to `served`, O(1), where _FLAT subtracts it from
    #     every flow's remaining bytes; a flow's remaining bytes, its level
    #     less `served`, are within a few ulps of _FLAT's (the same sum,
    #     rounded in another order), so within about 1e-15 s of its finish
    #     time. Up to _loose_max flows crossing no block link are
    #     *loose*, in Python lists with rates of their own (in a parameter
    #     server's star: the few flows of an unsaturated server link, while
    #     the other is saturated). _loc and _idx give each slot's block (None
    #     if loose) and index there. Too many loose flows, or leaving the
    #     one-round regime, turns the layout back to _FLAT.

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
        loose_slots = []
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

    def _slot_state(self) -> tuple[list[float], list[float]]:
        """The rates and remaining bytes of the flows in transfer, by slot (for tests)."""
        n = self._n
        if self._layout == _BLOCKS:
            loose = self._loose
            rates = [loose.rate[j] if b is None else b.rate for b, j in zip(self._loc, self._idx, strict=True)]
            remaining = [
                loose.rem[j] if b is None else float(b.rem[j] - b.served)
                for b, j in zip(self._loc, self._idx, strict=True)
            ]
            return rates, remaining
        return [float(x) for x in self._rate[:n]], [float(x) for x in self._remaining[:n]]

    # -------------------------------------------------------- one-round test
    #
    # progressive_fill's first round computes every link's share
    # cap / count and every flow's path_min = min(share[up], share[down]); it
    # calls a link *beaten* when a flow crossing it has a share smaller by
    # more than the tie factor _TIE on its other link, and if every flow
    # crosses an unbeaten link it stops there and returns path_min. A flow g
    # crossing link l, with partner link o, beats l exactly when
    # share[l] > share[o] * _TIE (when share[o] >= share[l], path_min is
    # share[l] and neither test holds).
    #
    # Claim: if every link is *pure* (all of its flows beat it, or none do),
    # every flow crosses an unbeaten link, so progressive_fill returns
    # path_min: these very floats, from the same divisions and minimums.
    # Proof: a flow f never beats the link l where its path_min is taken
    # (share[l] <= share[o] <= share[o] * _TIE). If l carries f alone, it is
    # unbeaten; otherwise l is pure and has a flow, f, that does not beat it,
    # so none does. A link carrying one flow is always pure, so only the
    # *tracked* links (two flows or more) can be impure; and since
    # x -> share[l] > x * _TIE is monotone, a tracked link is pure iff its
    # flows' smallest and largest partner shares give the same answer.
    # With an impure link the full progressive fill runs (it may well stop
    # after one round too): it is the reference either way.
    #
    # Bookkeeping: per tracked link, its flows' partner shares in a sorted
    # list (_sorted: insort appends after equal values and a removal takes
    # the last of equal values, so a link whose partners all have one share
    # moves no memory); per link, the number of flows to each tracked partner
    # (_tracked). A flow start or finish changes two counts and shares, and
    # costs O(1) plus O(log F) per flow between one of its links and a
    # tracked link (plus a scan of the flows' links when a link starts or
    # stops being tracked). In a parameter server's star that is just the
    # server's own links: a worker's link carries a flow or two, the
    # server's links carry the many, and their partners are untracked.

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


def _divide_by_zero(r: float) -> float:
    """``r / 0.0`` as numpy computes it."""
    return math.inf if r > 0.0 else -math.inf if r < 0.0 else math.nan
