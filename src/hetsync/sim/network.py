"""Fluid model of a cluster network with max–min fair bandwidth sharing.

Every node has an uplink and a downlink (bytes/s, ``inf`` for unlimited) and
a latency. A flow from ``src`` to ``dst`` crosses ``src``'s uplink and
``dst``'s downlink; the flows in transfer share links max–min fairly
(:mod:`hetsync.algos.maxmin`), re-shared whenever one starts or finishes its
bytes. A flow that has transferred its bytes leaves the sharing at once and is
*delivered* ``max(latency[src], latency[dst])`` later. This is the fluid flow
model of SimGrid and similar simulators: no packets, no slow start.

The state of the flows in transfer lives in numpy arrays (remaining bytes,
links, rates, finish times) grown by doubling and compacted by moving the last
flow into the hole a finished one leaves, so starting or finishing a flow
costs O(1) Python work plus one vectorized re-share over the flows in
transfer. Rates are recomputed lazily, once per change of the flow set that
time actually passes over (several flows started at one instant are shared
once). Deliveries waiting out their latency sit in a heap ordered by delivery
time, then start order, which is also the order ``advance`` reports them in.
Nothing depends on hashing or randomness: the same calls give bit-identical
results.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from hetsync.algos.maxmin import progressive_fill

# A flow counts as done when its remaining bytes are at most this fraction of
# its size, or when its finish time is within _DONE_S (+ a few ulps of the
# clock) of now: floating-point leftovers must not create extra events.
_DONE_RTOL = 1e-9
_DONE_S = 1e-12
_CLOCK_RTOL = 1e-15

_INITIAL_SLOTS = 64


def _node_values(values: Sequence[float], name: str, finite: bool) -> list[float]:
    """Return ``values`` as a list of floats, each nonnegative (and finite if asked)."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of numbers ({exc})") from None
    for i, v in enumerate(out):
        if not v >= 0.0 or (finite and v == math.inf):
            kind = "finite and nonnegative" if finite else "nonnegative (inf allowed)"
            raise ValueError(f"{name}[{i}] = {v!r}: must be {kind}")
    return out


def _time_tol(t: float) -> float:
    return _DONE_S + _CLOCK_RTOL * abs(t)


class Network:
    """Flows between nodes sharing uplinks and downlinks max–min fairly.

    Times are absolute virtual seconds and must never go backwards across
    calls. The usual driver loop is: call ``start_flow`` for new transfers,
    ask ``next_event_s``, and call ``advance`` at that time (or at an earlier
    time of the driver's own) to collect the delivered tokens.
    """

    def __init__(
        self,
        uplink_Bps: Sequence[float],
        downlink_Bps: Sequence[float],
        latency_s: Sequence[float] | float,
    ) -> None:
        """Build a network of ``M = len(uplink_Bps)`` nodes.

        Args:
            uplink_Bps: uplink capacity of each node, bytes/s (``inf`` allowed).
            downlink_Bps: downlink capacity of each node, same length.
            latency_s: one latency for every node, or one per node (seconds).

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
        if np.ndim(latency_s) == 0:
            lat = _node_values([latency_s], "latency_s", finite=True) * m
        else:
            lat = _node_values(latency_s, "latency_s", finite=True)
            if len(lat) != m:
                raise ValueError(f"latency_s has {len(lat)} entries, uplink_Bps has {m}")

        self._m = m
        self._latency = lat
        self._up_inf = [c == math.inf for c in up]
        self._down_inf = [c == math.inf for c in down]
        # Link i is node i's uplink, link m + i node i's downlink.
        self._capacity = np.array(up + down, dtype=np.float64)
        self._link_flows = np.zeros(2 * m, dtype=np.float64)

        # Flows in transfer occupy slots [0, n) of these arrays.
        self._n = 0
        slots = _INITIAL_SLOTS
        self._up = np.zeros(slots, dtype=np.intp)
        self._down = np.zeros(slots, dtype=np.intp)
        self._remaining = np.zeros(slots)  # bytes left at time self._t_ref
        self._done_bytes = np.zeros(slots)  # remaining bytes that count as done
        self._rate = np.zeros(slots)
        self._finish = np.zeros(slots)  # absolute finish time at current rates
        self._flow_latency = np.zeros(slots)
        self._meta: list[tuple[float, int, float, object]] = []  # latency, seq, nbytes, token

        self._now = -math.inf  # latest time seen by start_flow or advance
        self._t_ref = -math.inf  # time at which _remaining is exact
        self._dirty = False  # flow set changed since the rates were computed
        self._next_finish = math.inf  # earliest _finish
        self._min_latency = math.inf  # smallest latency among flows in transfer
        self._seq = 0
        self._deliveries: list[tuple[float, int, float, object]] = []
        self._bytes_delivered = 0.0

    # ------------------------------------------------------------ public

    @property
    def active_flows(self) -> int:
        """Flows still transferring bytes (as of the latest call)."""
        return self._n

    @property
    def bytes_delivered(self) -> float:
        """Bytes of all flows returned by ``advance`` so far."""
        return self._bytes_delivered

    def start_flow(
        self, now_s: float, src: int, dst: int, nbytes: int | float, token: object
    ) -> None:
        """Start sending ``nbytes`` from node ``src`` to node ``dst`` at ``now_s``.

        ``token`` comes back from ``advance`` once the flow is delivered.
        Flows finishing at or before ``now_s`` are settled first; their
        tokens wait for the next ``advance``.

        Raises:
            ValueError: if ``now_s`` is earlier than a previous call's time,
                a node index is out of range, ``src == dst``, or ``nbytes``
                is negative or not finite.
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
            # Bring the others' remaining bytes to now: the rates change here.
            self._remaining[:n] -= self._rate[:n] * (now_s - self._t_ref)
        self._t_ref = now_s
        if n == self._up.shape[0]:
            self._grow()
        down = m + dst
        self._up[n] = src
        self._down[n] = down
        self._remaining[n] = size
        self._done_bytes[n] = size * _DONE_RTOL
        self._flow_latency[n] = latency
        self._meta.append((latency, seq, size, token))
        self._link_flows[src] += 1.0
        self._link_flows[down] += 1.0
        self._n = n + 1
        self._dirty = True

    def next_event_s(self) -> float:
        """Time up to which ``advance`` has nothing to report; ``inf`` if idle.

        This is the next delivery time whenever the next flow to finish its
        bytes has the smallest latency among the flows in transfer (always
        so with one latency for all nodes). With unequal latencies it may be
        earlier than the next delivery, since a later-finishing flow with a
        shorter latency could be delivered first; ``advance`` to it then
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
        """Move the network to ``now_s`` and return the tokens delivered by then.

        Tokens come in delivery order, ties broken by start order; each is
        returned once. Any ``now_s`` at or after the previous call's time is
        handled exactly: transfers finishing in between re-share the links at
        their own finish times.

        Raises:
            ValueError: if ``now_s`` is earlier than a previous call's time.
        """
        self._settle(now_s)
        heap = self._deliveries
        out: list[object] = []
        while heap and heap[0][0] <= now_s:
            _, _, size, token = heapq.heappop(heap)
            self._bytes_delivered += size
            out.append(token)
        return out

    # ----------------------------------------------------------- private

    def _settle(self, now_s: float) -> None:
        """Finish every transfer done by ``now_s``, each at its own time."""
        if not now_s >= self._now or not math.isfinite(now_s):
            raise ValueError(
                f"now_s = {now_s!r}: must be finite and not before the network's time {self._now!r}"
            )
        self._now = now_s
        if self._dirty and now_s == self._t_ref:
            return  # no time passes: share once, after all the flows of this instant
        tol = _time_tol(now_s)
        while True:
            if self._dirty:
                self._reshare()
            t = self._next_finish
            if t > now_s + tol:
                return
            self._finish_transfers(t if t < now_s else now_s)

    def _reshare(self) -> None:
        """Recompute the rates and finish times of the flows in transfer."""
        self._dirty = False
        n = self._n
        if n == 0:
            self._next_finish = math.inf
            self._min_latency = math.inf
            return
        rate = self._rate[:n]
        progressive_fill(self._capacity, (self._up[:n], self._down[:n]), self._link_flows, rate)
        finish = self._finish[:n]
        with np.errstate(divide="ignore"):  # rate 0 on a zero-capacity link: never
            np.divide(self._remaining[:n], rate, out=finish)
        finish += self._t_ref
        self._next_finish = float(finish.min())
        self._min_latency = float(self._flow_latency[:n].min())

    def _finish_transfers(self, t: float) -> None:
        """Remove the flows done at time ``t`` and queue their deliveries."""
        n = self._n
        remaining = self._remaining[:n]
        remaining -= self._rate[:n] * (t - self._t_ref)
        self._t_ref = t
        done = np.flatnonzero(
            (self._finish[:n] <= t + _time_tol(t)) | (remaining <= self._done_bytes[:n])
        )
        meta = self._meta
        for i in done[::-1].tolist():
            latency, seq, size, token = meta[i]
            heapq.heappush(self._deliveries, (t + latency, seq, size, token))
            self._link_flows[self._up[i]] -= 1.0
            self._link_flows[self._down[i]] -= 1.0
            n -= 1
            if i != n:  # move the last flow into the hole
                for arr in (
                    self._up,
                    self._down,
                    self._remaining,
                    self._done_bytes,
                    self._flow_latency,
                ):
                    arr[i] = arr[n]
                meta[i] = meta[n]
            meta.pop()
        self._n = n
        self._dirty = True

    def _grow(self) -> None:
        """Double the capacity of the flow arrays."""
        for name in (
            "_up",
            "_down",
            "_remaining",
            "_done_bytes",
            "_rate",
            "_finish",
            "_flow_latency",
        ):
            old = getattr(self, name)
            new = np.zeros(2 * old.shape[0], dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
