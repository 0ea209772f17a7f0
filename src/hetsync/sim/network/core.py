"""The :class:`Network`: its public calls, and the choice of layout at every re-share.

The network's operations that depend on how the flows in transfer are laid
out (start one, re-share, move the clock, finish those done) each come in
one method per layout, in the layout's mixin (:mod:`.lists`, :mod:`.flat`,
:mod:`.blocks`); the methods here do what every layout shares and call the
current layout's. :meth:`Network._reshare` is where the layout changes.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from hetsync.sim.network.blocks import _BlocksLayout
from hetsync.sim.network.flat import _FlatLayout
from hetsync.sim.network.flows import _BLOCKS, _CLOCK_RTOL, _DONE_S, _FLAT, _LISTS
from hetsync.sim.network.lists import _ListsLayout


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


class Network(_ListsLayout, _BlocksLayout, _FlatLayout):
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

        self._init_flows(up, down, lat)
        self._init_one_round_test()
        self._init_blocks()

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
            layout = self._start_blocks(n, src, downlink, size, latency)
        if layout == _FLAT:
            self._start_flat(n, src, downlink, size, latency)
        elif layout == _LISTS:
            self._start_lists(size, latency)
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
        if self._layout == _FLAT:
            lists, arrays = self._columns_flat()
        else:
            lists, arrays = self._columns_lists()
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

    def _move_remaining(self, dt: float) -> None:
        """Take ``dt`` seconds of transfer at the current rates off the remaining bytes."""
        layout = self._layout
        if layout == _BLOCKS:
            self._move_remaining_blocks(dt)
        elif layout == _FLAT:
            self._move_remaining_flat(dt)
        else:
            self._move_remaining_lists(dt)

    def _finish_transfers(self, t: float) -> None:
        """Move the clock of the transfers to ``t``; queue and remove those done."""
        n = self._n
        dt = t - self._t_ref
        self._t_ref = t
        limit = dt + (_DONE_S + _CLOCK_RTOL * abs(t))
        layout = self._layout
        if layout == _BLOCKS:
            self._remove_done_blocks(self._finish_in_blocks(dt, limit), t)
            return
        if layout == _FLAT:
            done = self._finish_flat(n, dt, limit)
            lists, arrays = self._columns_flat()
        else:
            done = self._finish_lists(dt, limit)  # (a new _remaining list: the columns after it)
            lists, arrays = self._columns_lists()
        self._remove_done(done, t, lists, arrays)

    def _remove_done(
        self, done: list[int], t: float, lists: tuple[list[Any], ...], arrays: tuple[np.ndarray, ...]
    ) -> None:
        """Queue the flows in slots ``done`` (ascending) for delivery after
        their latency from ``t`` and remove them from every per-slot list and
        array. The flows leave in decreasing slot order, the last flow moving
        into each hole. Rates are recomputed: they are not moved. (The _BLOCKS
        layout has its own, _remove_done_blocks.)"""
        up, down, meta, deliveries = self._up, self._down, self._meta, self._deliveries
        n = self._n
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

    def _slot_state(self) -> tuple[list[float], list[float]]:
        """The rates and remaining bytes of the flows in transfer, by slot (for tests)."""
        n = self._n
        if self._layout == _BLOCKS:
            return self._slot_state_blocks()
        return [float(x) for x in self._rate[:n]], [float(x) for x in self._remaining[:n]]
