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

Cost: the flows in transfer live in numpy arrays (link indices, remaining
bytes, rates, time left), grown by doubling and compacted by moving the last
flow into the hole a finished one leaves. Starting or finishing a flow costs
O(1) Python work, an O(F) update of the remaining bytes, and one re-share (a
vectorized max–min computation over the F flows in transfer) the next time
the clock is read; flows started at one instant with no look at the clock in
between are shared once. Deliveries waiting out their latency sit in a heap
keyed by (delivery time, start order), which is also the order ``advance``
reports them in. Nothing depends on hashing or randomness: the same calls give
bit-identical results.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

import numpy as np

from hetsync.algos.maxmin import progressive_fill

# A flow counts as done once its remaining bytes are at most _DONE_RTOL of its
# size, or once its finish time is within _DONE_S (plus a few ulps of the
# clock) of now, so that floating-point leftovers make no extra events.
_DONE_RTOL = 1e-9
_DONE_S = 1e-12
_CLOCK_RTOL = 1e-15

_INITIAL_SLOTS = 64


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


def _time_tol(t: float) -> float:
    """How close to ``t`` a finish time counts as reached at ``t``."""
    return _DONE_S + _CLOCK_RTOL * abs(t)


class Network:
    """Flows between nodes sharing uplinks and downlinks max–min fairly.

    Times are absolute virtual seconds and never go backwards across calls.
    A driver starts transfers with ``start_flow``, reads ``next_event_s`` and
    calls ``advance`` at that time, or earlier when it has an event of its own
    first, to collect the tokens of the delivered flows.
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
        # that latency; otherwise the flows' latencies are kept in an array.
        self._uniform_latency = lat[0] if min(lat) == max(lat) else None
        self._up_inf = [c == math.inf for c in up]
        self._down_inf = [c == math.inf for c in down]
        # Link i is node i's uplink, link m + i node i's downlink.
        self._capacity = np.array(up + down, dtype=np.float64)
        self._has_dead_link = bool((self._capacity == 0.0).any())  # rates of 0 possible
        self._link_flows = np.zeros(2 * m, dtype=np.float64)  # flows in transfer per link

        # The flows in transfer occupy slots [0, n) of these arrays.
        self._n = 0
        slots = _INITIAL_SLOTS
        self._links = np.zeros((2, slots), dtype=np.intp)  # uplink, downlink index
        self._remaining = np.zeros(slots)  # bytes left at time _t_ref
        self._done_bytes = np.zeros(slots)  # remaining bytes that count as done
        self._flow_latency = np.zeros(slots)
        self._rate = np.zeros(slots)  # max–min rates, valid unless _dirty
        self._time_left = np.zeros(slots)  # from _t_ref to the finish, at those rates
        self._meta: list[tuple[float, int, float, object]] = []  # latency, seq, nbytes, token

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
        latency = max(self._latency[src], self._latency[dst])
        if size == 0.0 or (self._up_inf[src] and self._down_inf[dst]):
            heapq.heappush(self._deliveries, (now_s + latency, seq, size, token))
            return

        n = self._n
        if n and not self._dirty:
            # The rates change now: bring the remaining bytes up to now.
            self._remaining[:n] -= self._rate[:n] * (now_s - self._t_ref)
        self._t_ref = now_s
        if n == self._rate.shape[0]:
            self._grow()
        downlink = m + dst
        self._links[0, n] = src
        self._links[1, n] = downlink
        self._remaining[n] = size
        self._done_bytes[n] = size * _DONE_RTOL
        self._flow_latency[n] = latency
        self._meta.append((latency, seq, size, token))
        self._link_flows[src] += 1.0
        self._link_flows[downlink] += 1.0
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

    def _settle(self, now_s: float) -> None:
        """Finish every transfer done by ``now_s``, each at its own time."""
        if not now_s >= self._now or not math.isfinite(now_s):
            raise ValueError(f"now_s = {now_s!r}: must be finite and not before the network's time {self._now!r}")
        self._now = now_s
        if self._dirty and now_s == self._t_ref:
            return  # no time passes: no transfer can finish
        limit = now_s + _time_tol(now_s)
        while True:
            if self._dirty:
                self._reshare()
            t = self._next_finish
            if t > limit:
                return
            self._finish_transfers(t if t < now_s else now_s)

    def _reshare(self) -> None:
        """Recompute the rates and the time left of the flows in transfer."""
        self._dirty = False
        n = self._n
        if n == 0:
            self._next_finish = math.inf
            self._min_latency = math.inf
            return
        rate = self._rate[:n]
        progressive_fill(self._capacity, self._links[:, :n], self._link_flows, rate)
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

    def _finish_transfers(self, t: float) -> None:
        """Move the clock of the transfers to ``t``; queue and remove those done."""
        n = self._n
        dt = t - self._t_ref
        remaining = self._remaining[:n]
        remaining -= self._rate[:n] * dt
        self._t_ref = t
        done = (self._time_left[:n] <= dt + _time_tol(t)) | (remaining <= self._done_bytes[:n])
        meta = self._meta
        links = self._links
        link_flows = self._link_flows
        moved = (self._remaining, self._done_bytes, self._flow_latency)  # rates are recomputed
        for i in done.nonzero()[0][::-1].tolist():
            latency, seq, size, token = meta[i]
            heapq.heappush(self._deliveries, (t + latency, seq, size, token))
            link_flows[links[0, i]] -= 1.0
            link_flows[links[1, i]] -= 1.0
            n -= 1
            if i != n:  # move the last flow into the hole
                links[:, i] = links[:, n]
                for arr in moved:
                    arr[i] = arr[n]
                meta[i] = meta[n]
            meta.pop()
        self._n = n
        self._dirty = True

    def _grow(self) -> None:
        """Double the number of slots of the flow arrays."""
        for name in ("_links", "_remaining", "_done_bytes", "_flow_latency", "_rate", "_time_left"):
            old = getattr(self, name)
            slots = old.shape[-1]
            new = np.zeros((*old.shape[:-1], 2 * slots), dtype=old.dtype)
            new[..., :slots] = old
            setattr(self, name, new)
