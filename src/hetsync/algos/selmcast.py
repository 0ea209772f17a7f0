"""SELMCAST's receiver selection: bandwidth-aware peer-to-peer model multicast.

Luo, Fan, Li, Xing, Luo, Yu, "SELMCAST", *IEEE Transactions on Services
Computing* (2024), doi 10.1109/TSC.2024.3506480.

The problem
-----------
In peer-to-peer data-parallel training every *sender* ``i`` multicasts its
model (``nbytes``) to a set of receivers ``R_i``, and every receiver averages
its model with what it got. The usual scheme draws exactly ``p`` receivers per
sender uniformly at random (:func:`random_receivers`), blind to bandwidth.
SELMCAST's coordinator knows every worker's available uplink and downlink
bandwidth and picks sets with ``|R_i| >= p`` that minimize the round's
communication makespan, then adds receivers wherever that does not lengthen
it (a larger average fan-out converges faster).

The cost model
--------------
A multicast is ``|R_i|`` unicast copies through the sender's uplink. Every
link has a backlog ``busy_s`` already committed on it (seconds), and its time
is ``busy_s + copies · nbytes / bandwidth``, computed in float64 exactly as
``busy + (copies * nbytes) / bandwidth`` everywhere in this module (so the
planner and :func:`plan_makespan_s` agree to the last bit). Sender ``i``'s
uplink carries ``|R_i|`` copies; receiver ``j``'s downlink carries ``|S_j|``
copies, ``S_j = {i : j in R_i}``. The plan's *makespan* is the largest time
over the links the plan uses: uplinks of senders with a nonempty set and
downlinks of receivers with at least one sender (an unused link's backlog
does not count). Bandwidth ``inf`` makes a link's transfer time 0 (its time is
its backlog); bandwidth 0 on a used link makes it ``inf``, and is refused by
:func:`select_receivers` for a sender's uplink or an eligible worker's
downlink.

This is the bottleneck bound of a fluid max–min network
(:mod:`hetsync.algos.maxmin`): every copy crosses exactly one uplink and one
downlink, and no link can move its bytes faster than its bandwidth, so no
schedule finishes before this bound. Fair sharing can only finish later: a
flow slowed by the downlink it shares leaves its uplink partly idle, so the
two bottlenecks do not overlap perfectly. The simulator measures the true
fluid makespan; this module optimizes the bound.

Phase 1: the optimal plan with exactly ``p`` receivers per sender
-----------------------------------------------------------------
With ``|R_i| = p`` every sender's uplink time ``U_i = busy_up_i + p·nbytes /
up_i`` is fixed; the optimum is ``T* = max(max_i U_i, D*)`` where ``D*`` is the
smallest achievable receiver-side maximum. The receiver side is a
degree-constrained bipartite assignment: at a threshold ``T``, receiver ``j``
can take ``c_j(T) = #{1 <= k <= m : busy_down_j + k·nbytes/down_j <= T}``
copies (0 when its backlog alone exceeds ``T``; no receiver can use more than
``m``), every sender needs ``p`` distinct
receivers among the eligible workers other than itself. As a flow network
(source → sender, capacity ``p``; sender → receiver, capacity 1, no self
edges; receiver → sink, capacity ``c_j``) the threshold is feasible iff the
max flow is ``m·p`` for ``m`` senders. By max-flow/min-cut that is a closed
form: a cut keeps a set ``A`` of senders on the source side and pays, for
each eligible receiver ``j``, the cheaper of ``c_j`` and the ``|A \\ {j}|`` unit edges
into it, so the threshold is feasible iff for every ``A``:
``Σ_j min(c_j, |A \\ {j}|) >= p·|A|``. For ``|A| = k`` the left side is
``Σ_j min(c_j, k)`` minus one for each ``j ∈ A`` that is eligible with
``c_j >= k`` (only those lose a unit by excluding themselves), so the worst
``A`` of size ``k`` has ``min(k, q_k)`` of them, ``q_k = #{j ∈ S ∩ E : c_j >=
k}``, and the test is::

    for k = 1..m:  Σ_j min(c_j, k) − min(k, q_k) >= k·p

O(m·|E|) vectorized. Feasibility is monotone in ``T``, and the optimum's
makespan is the largest used link time, so ``T*`` lies in the finite set
``{max_i U_i} ∪ {busy_down_j + k·nbytes/down_j : j ∈ E, 1 <= k <= m}``
(above ``max U_i``); a binary search over the sorted candidates finds it with
O(log(m·|E|)) tests. Times equal within a relative ``1e-12`` count as equal
in this search (``TIE_RTOL``), so the realized phase-1 makespan is within
that of the exact optimum.

The plan at ``T*`` is then built (the tie rule): senders in increasing index
order each take ``p`` allowed receivers, preferring the most spare copies
``c_j(T*) − load_j``, then the earliest finish of the *next* copy
(``busy_down_j + (load_j + 1)·nbytes/down_j``), then the lower index. Taking
the most room first is the Gale–Ryser construction, which never gets stuck
on a complete bipartite graph; here the self-exclusion can still leave a
sender short (rarely), and augmenting paths complete it: a breadth-first
search from all short senders at once over the residual graph (sender →
receiver it does not send to yet; receiver → sender that sends to it),
shortest path first, lowest indices first. That is an exact max-flow, so it
always completes when the test above says ``T*`` is feasible. (With one
sender every spare count is 1, so the rule is "the ``p`` cheapest first
copies, lower index on ties".)

Phase 2: extra receivers that do not lengthen the round
-------------------------------------------------------
With ``M`` the realized phase-1 makespan, sender ``i`` may carry up to
``k_i = #{k : busy_up_i + k·nbytes/up_i <= M}`` copies (at most the number of
eligible workers other than itself, which also caps an unlimited uplink) and
receiver ``j`` up to ``c_j(M)``, both compared exactly (no tolerance), so the
result's makespan is exactly ``M``: every link stays within ``M`` and the link
that attained ``M`` only gained load. The phase-1 edges are kept as they are;
the extra edges are a maximum flow in the remaining capacities (source →
sender ``k_i − p``, receiver → sink ``c_j(M) − load_j``, edges not yet in the
plan), built by the same greedy (most spare copies, then cheapest next copy,
then lower index, with the spare counted within ``M``) and completed by the
same augmenting paths, which only ever reroute extra edges.
So the plan is a superset of phase 1 with the most edges any such superset
can have within ``M``, and in particular no single edge can be added without
raising the makespan.

The fairness floor (``min_in``)
-------------------------------
Choosing receivers by bandwidth alone gives the fast downlinks most copies
and the slow ones none: with equal-weight mixing the models of workers that
never receive drift on their own shards, and on label-skewed shards the
average suffers (docs/results-p2p-mixing.md). ``min_in[j]`` is a lower bound
on receiver ``j``'s copies in the plan; phase 1 is then optimal among
exactly-``p`` plans that meet every bound. At a threshold ``T`` the test is
a flow with lower bounds, found in two stages: a maximum flow into receiver
capacities ``min(min_in_j, c_j(T))`` (the greedy, ranking receivers by the
most copies still owed, then the cheapest next copy, then augmenting
paths), which must saturate every bound; then the capacities are raised to
``c_j(T)`` and the flow is completed to ``m·p`` (greedy, then augmenting
paths, which never lower a receiver's count). If any flow meets the bounds,
the first stage saturates them, and a maximum flow can be reached from any
flow, so the test is exact; the binary search over the same candidates
finds ``T*`` and the plan at ``T*`` is the flow that test built. Phase 2 is
unchanged. All bounds 0 (or ``None``) is the plan above, bit for bit.

:func:`floor_demand` turns a per-round floor into these bounds with a
deficit counter that works for any planning pattern: every eligible worker
is owed ``floor`` copies per round (``n_E − 1`` multicasts by the others),
so a plan for senders ``S`` adds ``floor·|S \\ {j}| / (n_E − 1)`` to what
``j`` is owed; the plan must deliver the whole copies owed (at most one per
other sender, at most ``p·|S|`` in all, the most-owed first), and
:func:`floor_owed` keeps what was not delivered for the next plan (a surplus
is not banked). A BSP round plans every sender at once and so demands
exactly ``floor`` copies of every worker; under SSP one sender's multicast
adds ``floor / (n_E − 1)``, and a worker is promoted into a sender's plan
once it is owed a whole copy.

Cost, for ``n`` workers, ``m`` senders and ``|E|`` eligible receivers:
building and sorting the ``|E|·m`` candidate times, O(m·|E|·log(m·|E|)); the
binary search, O(log(m·|E|)) cut tests of O(m·|E|) each; the greedy, ``m``
numpy steps of O(n log n); each augmenting path a breadth-first search of a
few O(n²) vectorized steps per layer, and at most one per edge the greedy
could not place (none in most instances; a failed search ends phase 2). A
single sender (``senders=[i]``, as under SSP) takes a pure-Python path,
O(n log n): the ``p`` receivers with the cheapest first copy, then the next
cheapest while they and the uplink fit in ``M`` — the same result.

Standard library and numpy only, like all of ``hetsync.algos``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hetsync.algos.maxmin import maxmin_rates

__all__ = ["TIE_RTOL", "floor_demand", "floor_owed", "plan_makespan_s", "random_receivers", "select_receivers"]

# Times within this relative distance count as equal in phase 1's search.
TIE_RTOL = 1e-12


# ---------------------------------------------------------------- validation


def _floats(name: str, values: Sequence[float], n: int) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name} must hold {n} values (one per worker), got shape {a.shape}")
    return a


def _bandwidths(uplink_Bps: Sequence[float], downlink_Bps: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    up = np.asarray(uplink_Bps, dtype=np.float64)
    if up.ndim != 1:
        raise ValueError(f"uplink_Bps must be 1-D (one value per worker), got shape {up.shape}")
    down = _floats("downlink_Bps", downlink_Bps, up.shape[0])
    for name, a in (("uplink_Bps", up), ("downlink_Bps", down)):
        if np.any(np.isnan(a)) or np.any(a < 0):
            raise ValueError(f"{name} must be >= 0 (inf allowed, NaN not), got {a.tolist()}")
    return up, down


def _busy(name: str, values: Sequence[float] | None, n: int) -> np.ndarray:
    if values is None:
        return np.zeros(n)
    a = _floats(name, values, n)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be finite and >= 0, got {a.tolist()}")
    return a


def _nbytes(nbytes: float) -> float:
    b = float(nbytes)
    if not math.isfinite(b) or b < 0:
        raise ValueError(f"nbytes must be finite and >= 0, got {nbytes!r}")
    return b


def _workers(name: str, idx: Sequence[int] | None, n: int) -> list[int]:
    """Sorted distinct worker indices in [0, n); all workers when None."""
    if idx is None:
        return list(range(n))
    try:
        out = [operator.index(i) for i in idx]
    except TypeError:
        raise ValueError(f"{name} must hold integer worker indices, got {idx!r}") from None
    bad = [i for i in out if not 0 <= i < n]
    if bad:
        raise ValueError(f"{name} holds worker indices outside [0, {n}): {bad}")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} holds a worker index twice: {out}")
    return sorted(out)


def _int_at_least(name: str, value: int, minimum: int) -> int:
    try:
        q = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if q < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return q


def _check_p(p: int, senders: list[int], eligible: list[int]) -> int:
    q = _int_at_least("p", p, 1)
    elig = set(eligible)
    for i in senders:
        room = len(eligible) - (i in elig)
        if q > room:
            raise ValueError(
                f"p={q} is more than the {room} eligible receivers sender {i} has "
                f"({len(eligible)} eligible workers; a sender never sends to itself)"
            )
    return q


class _Inputs(NamedTuple):
    up: np.ndarray  # uplink_Bps
    down: np.ndarray  # downlink_Bps
    n: int
    nbytes: float
    senders: list[int]  # sorted
    eligible: list[int]  # sorted
    p: int
    busy_up: np.ndarray
    busy_down: np.ndarray


def _inputs(
    uplink_Bps: Sequence[float],
    downlink_Bps: Sequence[float],
    nbytes: float,
    p: int,
    senders: Sequence[int] | None,
    eligible: Sequence[int] | None,
    busy_up_s: Sequence[float] | None,
    busy_down_s: Sequence[float] | None,
) -> _Inputs:
    up, down = _bandwidths(uplink_Bps, downlink_Bps)
    n = up.shape[0]
    b = _nbytes(nbytes)
    snd = _workers("senders", senders, n)
    elig = _workers("eligible", eligible, n)
    q = _check_p(p, snd, elig)
    bu = _busy("busy_up_s", busy_up_s, n)
    bd = _busy("busy_down_s", busy_down_s, n)
    if snd and np.any(up[snd] == 0):
        raise ValueError(f"uplink_Bps must be > 0 for every sender, got 0 for senders {[i for i in snd if up[i] == 0]}")
    if elig and np.any(down[elig] == 0):
        raise ValueError(
            f"downlink_Bps must be > 0 for every eligible worker, got 0 for {[j for j in elig if down[j] == 0]}"
        )
    return _Inputs(up, down, n, b, snd, elig, q, bu, bd)


def _need(min_in: Sequence[int] | None, x: _Inputs) -> np.ndarray | None:
    """``min_in`` as an int64 array, or None when it asks for nothing (the
    plan without a floor, bit for bit)."""
    if min_in is None:
        return None
    try:
        values = [operator.index(v) for v in min_in]
    except TypeError:
        raise ValueError(f"min_in must hold integers >= 0 (copies per worker), got {min_in!r}") from None
    if len(values) != x.n:
        raise ValueError(f"min_in must hold {x.n} values (one per worker), got {len(values)}")
    need = np.array(values, dtype=np.int64)
    if np.any(need < 0):
        raise ValueError(f"min_in must be >= 0, got {values}")
    if not np.any(need):
        return None
    elig = set(x.eligible)
    outside = [j for j in range(x.n) if need[j] and j not in elig]
    if outside:
        raise ValueError(f"min_in asks copies for workers that are not eligible: {outside}")
    snd = set(x.senders)
    over = [j for j in x.eligible if need[j] > len(snd - {j})]
    if over:
        raise ValueError(
            f"min_in asks more copies than there are other senders for workers {over} "
            f"({len(snd)} senders; a sender never sends to itself)"
        )
    if int(need.sum()) > x.p * len(snd):
        raise ValueError(
            f"min_in asks {int(need.sum())} copies in all, more than the {x.p * len(snd)} "
            f"that {len(snd)} senders with p={x.p} send"
        )
    return need


# ---------------------------------------------------------------- cost model


def _link_s(busy_s: float, copies: int, nbytes: float, bandwidth_Bps: float) -> float:
    """One link's time: backlog plus ``copies`` transfers (``inf`` bandwidth: none)."""
    if copies == 0 or nbytes == 0 or bandwidth_Bps == math.inf:
        return float(busy_s)
    if bandwidth_Bps == 0:
        return math.inf
    return float(busy_s) + (copies * nbytes) / float(bandwidth_Bps)


def plan_makespan_s(
    receivers: Sequence[Sequence[int]],
    uplink_Bps: Sequence[float],
    downlink_Bps: Sequence[float],
    nbytes: float,
    *,
    busy_up_s: Sequence[float] | None = None,
    busy_down_s: Sequence[float] | None = None,
) -> float:
    """The modelled makespan of a plan: the largest time over the links it uses.

    Args:
        receivers: one sequence per worker, ``receivers[i] = R_i`` (empty for a
            worker that sends nothing); distinct indices, never ``i`` itself.
        uplink_Bps, downlink_Bps: each worker's available bandwidth, bytes/s
            (``inf`` allowed; 0 on a used link gives ``inf``).
        nbytes: the model size each copy carries.
        busy_up_s, busy_down_s: backlog already committed on each link
            (seconds, default 0).

    Returns:
        ``max`` over senders with ``R_i`` nonempty of ``busy_up_i + |R_i|·nbytes
        / up_i`` and over receivers with ``|S_j| >= 1`` of ``busy_down_j +
        |S_j|·nbytes / down_j``; 0.0 for a plan that uses no link.

    Raises:
        ValueError: on lengths that do not match, a negative or NaN bandwidth,
            a negative busy time, or a malformed plan.
    """
    up, down = _bandwidths(uplink_Bps, downlink_Bps)
    n = up.shape[0]
    b = _nbytes(nbytes)
    bu = _busy("busy_up_s", busy_up_s, n)
    bd = _busy("busy_down_s", busy_down_s, n)
    if len(receivers) != n:
        raise ValueError(f"receivers must hold one set per worker ({n}), got {len(receivers)}")
    copies_in = [0] * n
    worst = 0.0
    for i, r_i in enumerate(receivers):
        r = _workers("receivers", r_i, n)
        if i in r:
            raise ValueError(f"receivers[{i}] holds {i}: a sender never sends to itself")
        if r:
            worst = max(worst, _link_s(bu[i], len(r), b, up[i]))
        for j in r:
            copies_in[j] += 1
    for j, c in enumerate(copies_in):
        if c:
            worst = max(worst, _link_s(bd[j], c, b, down[j]))
    return worst


# ---------------------------------------------------------------- phase 1 test


def _feasible(caps: np.ndarray, is_sender: np.ndarray, m: int, p: int) -> bool:
    """Can ``m`` senders each get ``p`` distinct receivers within ``caps``?

    ``caps`` (one per eligible receiver, each <= m) and ``is_sender`` (whether
    that receiver is itself a sender, which may not send to itself). The
    min-cut test of the module docstring: for every k = 1..m,
    ``Σ_j min(c_j, k) − min(k, #{senders j with c_j >= k}) >= k·p``.
    """
    ks = np.arange(1, m + 1)
    summin = np.minimum(caps[:, None], ks[None, :]).sum(axis=0)
    q = (caps[is_sender][:, None] >= ks[None, :]).sum(axis=0)
    return bool(np.all(summin - np.minimum(ks, q) >= p * ks))


# ---------------------------------------------------------------- flows


def _augment(
    flow: np.ndarray,
    addable: np.ndarray,
    out_spare: np.ndarray,
    in_spare: np.ndarray,
) -> None:
    """Complete a bipartite b-matching to a maximum flow, in place.

    ``flow[i, j]``: sender ``i`` sends to ``j`` (reroutable); ``addable[i, j]``:
    the edge may be used; ``out_spare``/``in_spare``: what each sender may
    still send and each receiver still take. Repeats a breadth-first search
    from all senders with spare capacity at once (shortest augmenting path,
    lowest indices first) until none reaches a receiver with spare capacity.
    Augmenting never changes an intermediate node's count.
    """
    n = flow.shape[0]
    while True:
        sources = np.flatnonzero(out_spare > 0)
        if sources.size == 0:
            return
        s_seen = np.zeros(n, dtype=bool)
        r_seen = np.zeros(n, dtype=bool)
        s_seen[sources] = True
        parent_of_r = np.full(n, -1)
        parent_of_s = np.full(n, -1)
        frontier = sources
        found = -1
        while frontier.size:
            fwd = addable[frontier] & ~flow[frontier] & ~r_seen[None, :]
            new_r = np.flatnonzero(fwd.any(axis=0))
            if new_r.size == 0:
                break
            parent_of_r[new_r] = frontier[fwd[:, new_r].argmax(axis=0)]
            r_seen[new_r] = True
            free = new_r[in_spare[new_r] > 0]
            if free.size:
                found = int(free[0])
                break
            back = flow[:, new_r] & ~s_seen[:, None]
            new_s = np.flatnonzero(back.any(axis=1))
            parent_of_s[new_s] = new_r[back[new_s].argmax(axis=1)]
            s_seen[new_s] = True
            frontier = new_s
        if found < 0:
            return  # no augmenting path: the flow is maximum
        in_spare[found] -= 1
        j = found
        while True:
            i = int(parent_of_r[j])
            flow[i, j] = True
            j = int(parent_of_s[i])
            if j < 0:
                out_spare[i] -= 1
                break
            flow[i, j] = False


def _greedy(
    flow: np.ndarray,
    addable: np.ndarray,
    senders: list[int],
    out_spare: np.ndarray,
    in_spare: np.ndarray,
    load: np.ndarray,
    busy_down: np.ndarray,
    down: np.ndarray,
    nbytes: float,
) -> None:
    """The tie rule: senders in index order take the receivers with the most
    spare copies, then the earliest next copy, then the lowest index."""
    for i in senders:
        want = int(out_spare[i])
        if want <= 0:
            continue
        cand = np.flatnonzero(addable[i] & (in_spare > 0))
        if cand.size == 0:
            continue
        if cand.size > want:
            nxt = busy_down[cand] + ((load[cand] + 1) * nbytes) / down[cand]
            cand = cand[np.lexsort((cand, nxt, -in_spare[cand]))[:want]]
        pick = cand
        flow[i, pick] = True
        load[pick] += 1
        in_spare[pick] -= 1
        out_spare[i] -= pick.size


def _floored_flow(
    addable: np.ndarray,
    senders: list[int],
    p: int,
    elig_a: np.ndarray,
    caps: np.ndarray,
    need_e: np.ndarray,
    busy_down: np.ndarray,
    down: np.ndarray,
    nbytes: float,
) -> np.ndarray | None:
    """Phase 1 with lower bounds: every sender ``p`` receivers, eligible
    receiver ``elig_a[e]`` between ``need_e[e]`` and ``caps[e]`` copies; None
    when no such plan exists. First a maximum flow into the bounds alone
    (the greedy ranks by the most copies still owed), which must saturate
    them; then the rest up to ``caps`` (augmenting never lowers a receiver's
    count, so the bounds stay met)."""
    if np.any(need_e > caps):
        return None
    n = addable.shape[0]
    flow = np.zeros((n, n), dtype=bool)
    load = np.zeros(n, dtype=np.int64)
    out_spare = np.zeros(n, dtype=np.int64)
    out_spare[senders] = p
    in_spare = np.zeros(n, dtype=np.int64)
    in_spare[elig_a] = need_e
    _greedy(flow, addable, senders, out_spare, in_spare, load, busy_down, down, nbytes)
    if np.any(in_spare > 0):
        _augment(flow, addable, out_spare, in_spare)
        if np.any(in_spare > 0):
            return None
        load = flow.sum(axis=0)
    in_spare[elig_a] = caps - need_e
    _greedy(flow, addable & ~flow, senders, out_spare, in_spare, load, busy_down, down, nbytes)
    if np.any(out_spare > 0):
        _augment(flow, addable, out_spare, in_spare)
        if np.any(out_spare > 0):
            return None
    return flow


# ---------------------------------------------------------------- selection


def select_receivers(
    uplink_Bps: Sequence[float],
    downlink_Bps: Sequence[float],
    nbytes: float,
    p: int,
    *,
    senders: Sequence[int] | None = None,
    eligible: Sequence[int] | None = None,
    busy_up_s: Sequence[float] | None = None,
    busy_down_s: Sequence[float] | None = None,
    extra: bool = True,
    min_in: Sequence[int] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """SELMCAST's plan: receiver sets of minimum modelled makespan.

    Args:
        uplink_Bps, downlink_Bps: each worker's available bandwidth, bytes/s
            (``inf`` allowed; must be > 0 for a sender's uplink and an
            eligible worker's downlink).
        nbytes: the model size each copy carries (finite, >= 0).
        p: the fewest receivers per sender; ``1 <= p <=`` the number of
            eligible workers other than the sender, for every sender.
        senders: the workers that multicast (default all).
        eligible: the workers that may receive (default all).
        busy_up_s, busy_down_s: backlog already committed on each link.
        extra: add phase 2's receivers (default); ``False`` returns the
            optimal plan with exactly ``p`` receivers per sender.
        min_in: the fairness floor, the fewest copies each worker must
            receive in the plan (default none; see the module docstring and
            :func:`floor_demand`). Only eligible workers may ask; each at
            most one copy per other sender, ``p·len(senders)`` in all.

    Returns:
        One sorted tuple of receivers per worker (``()`` for non-senders).
        Phase 1 is optimal among exactly-``p`` plans (see the module
        docstring, with its tie rule); phase 2 keeps it and adds the most
        edges possible without raising the makespan.

    Raises:
        ValueError: on bad lengths, negative/NaN bandwidths or busy times,
            zero bandwidth on a link that may be used, indices out of range,
            ``p`` outside its range, or a ``min_in`` no plan can meet.
    """
    x = _inputs(uplink_Bps, downlink_Bps, nbytes, p, senders, eligible, busy_up_s, busy_down_s)
    need = _need(min_in, x)
    if len(x.senders) == 1:
        return _select_one(x, extra, need)
    return _select_many(x, extra, need)


def _select_one(x: _Inputs, extra: bool, need: np.ndarray | None = None) -> tuple[tuple[int, ...], ...]:
    """One sender: the receivers the floor asks for, then the cheapest first
    copies up to p, then more while they fit."""
    up, down, n, b, (i,), elig, p, bu, bd = x
    pool = sorted((_link_s(bd[j], 1, b, down[j]), j) for j in elig if j != i)
    if need is not None:  # the floor's receivers first, the others by cost (each list stays sorted)
        pool = [c for c in pool if need[c[1]]] + [c for c in pool if not need[c[1]]]
    chosen = [j for _, j in pool[:p]]
    if extra:
        makespan = max(_link_s(bu[i], p, b, up[i]), max(t for t, _ in pool[:p]))
        k = p
        while k < len(pool) and pool[k][0] <= makespan and _link_s(bu[i], k + 1, b, up[i]) <= makespan:
            chosen.append(pool[k][1])
            k += 1
    plan: list[tuple[int, ...]] = [()] * n
    plan[i] = tuple(sorted(chosen))
    return tuple(plan)


def _select_many(x: _Inputs, extra: bool, need: np.ndarray | None = None) -> tuple[tuple[int, ...], ...]:
    """Any number of senders: the binary search, the greedy, the flows."""
    up, down, n, b, snd, elig, p, bu, bd = x
    m = len(snd)
    plan: list[tuple[int, ...]] = [()] * n
    if m == 0:
        return tuple(plan)
    snd_a = np.array(snd)
    elig_a = np.array(elig)
    is_sender = np.zeros(n, dtype=bool)
    is_sender[snd_a] = True
    is_elig = np.zeros(n, dtype=bool)
    is_elig[elig_a] = True
    # non-eligible downlinks are never read; keep the arithmetic finite and quiet
    down_e = np.where(is_elig, down, np.inf)

    up_s = bu[snd_a] + (p * b) / up[snd_a]
    t_up = float(up_s.max())
    ks = np.arange(1, m + 1)
    # t[e, k-1]: eligible receiver e's downlink time with k copies (nondecreasing in k)
    t = bd[elig_a][:, None] + (ks[None, :] * b) / down_e[elig_a][:, None]
    elig_sender = is_sender[elig_a]

    def caps_at(limit: float) -> np.ndarray:
        caps: np.ndarray = (t <= limit).sum(axis=1)
        return caps

    addable = np.zeros((n, n), dtype=bool)
    addable[np.ix_(snd_a, elig_a)] = True
    np.fill_diagonal(addable, False)

    def floored(limit: float) -> np.ndarray | None:
        """The floor's flow within ``limit`` (None: the bounds cannot be met)."""
        assert need is not None
        return _floored_flow(addable, snd, p, elig_a, caps_at(limit), need[elig_a], bd, down_e, b)

    def ok(time_s: float) -> bool:
        if need is not None:
            return floored(time_s * (1 + TIE_RTOL)) is not None
        return _feasible(caps_at(time_s * (1 + TIE_RTOL)), elig_sender, m, p)

    if need is not None and not ok(math.inf):
        raise ValueError(f"min_in {need.tolist()} cannot be met by senders {snd} with p={p}")
    best = t_up
    if not ok(t_up):
        cand = np.unique(t[t > t_up])  # the largest candidate is always feasible
        lo, hi = 0, cand.size - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if ok(float(cand[mid])):
                hi = mid
            else:
                lo = mid + 1
        best = float(cand[lo])

    out_spare = np.zeros(n, dtype=np.int64)
    in_spare = np.zeros(n, dtype=np.int64)
    if need is not None:
        built = floored(best * (1 + TIE_RTOL))
        assert built is not None  # the search's answer is feasible
        flow = built
        load = flow.sum(axis=0)
    else:
        flow = np.zeros((n, n), dtype=bool)
        out_spare[snd_a] = p
        in_spare[elig_a] = caps_at(best * (1 + TIE_RTOL))
        load = np.zeros(n, dtype=np.int64)
        _greedy(flow, addable, snd, out_spare, in_spare, load, bd, down_e, b)
        if np.any(out_spare > 0):
            _augment(flow, addable, out_spare, in_spare)
            if np.any(out_spare > 0):  # pragma: no cover - the min-cut test says it cannot happen
                raise AssertionError("selmcast: phase-1 threshold passed the cut test but the flow fell short")
            load = flow.sum(axis=0)

    if extra:
        used = load > 0
        makespan = max(t_up, float(np.max(bd[used] + (load[used] * b) / down_e[used])))
        # phase 2: capacities at the realized makespan, compared exactly
        room = len(elig) - is_elig[snd_a]  # eligible receivers other than the sender
        kk = np.arange(1, len(elig) + 1)
        up_t = bu[snd_a][:, None] + (kk[None, :] * b) / up[snd_a][:, None]
        out_spare[snd_a] = np.minimum((up_t <= makespan).sum(axis=1), room) - p
        in_spare[:] = 0
        in_spare[elig_a] = caps_at(makespan) - load[elig_a]
        more = np.zeros((n, n), dtype=bool)
        addable &= ~flow
        _greedy(more, addable, snd, out_spare, in_spare, load, bd, down_e, b)
        if np.any(out_spare > 0):
            _augment(more, addable, out_spare, in_spare)
        flow |= more

    for i in snd:
        plan[i] = tuple(int(j) for j in np.flatnonzero(flow[i]))
    return tuple(plan)


def random_receivers(
    n: int,
    p: int,
    rng: np.random.Generator,
    *,
    senders: Sequence[int] | None = None,
    eligible: Sequence[int] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """The bandwidth-blind baseline: exactly ``p`` receivers per sender, uniformly.

    Senders draw in increasing index order, each ``p`` distinct receivers
    from the eligible workers other than itself (``rng.choice`` without
    replacement). Returns one sorted tuple per worker, ``()`` for
    non-senders. Same ``p``/index validation as :func:`select_receivers`.
    """
    size = _int_at_least("n", n, 0)
    snd = _workers("senders", senders, size)
    elig = _workers("eligible", eligible, size)
    q = _check_p(p, snd, elig)
    pool = np.array(elig, dtype=np.int64)
    plan: list[tuple[int, ...]] = [()] * size
    for i in snd:
        others = pool[pool != i]
        plan[i] = tuple(sorted(int(j) for j in rng.choice(others, size=q, replace=False)))
    return tuple(plan)


# ---------------------------------------------------------------- the floor
# owed + accrual within this of a whole copy counts as the whole copy (sums of
# floor / (n_E - 1) over a round land a few ulps short of floor)
FLOOR_EPS = 1e-9


def floor_demand(
    owed_copies: Sequence[float],
    floor: float,
    p: int,
    *,
    senders: Sequence[int],
    eligible: Sequence[int],
) -> tuple[list[int], list[float]]:
    """The fairness floor for one plan: the copies each worker must receive.

    Every eligible worker is owed ``floor`` copies per round, a round being
    one multicast by each of the other ``n_E − 1`` eligible workers. A plan
    for ``senders`` S therefore adds ``floor · |S \\ {j}| / (n_E − 1)`` to
    receiver ``j``'s ``owed_copies[j]`` (what earlier plans left undelivered,
    see :func:`floor_owed`); the plan must deliver the whole copies owed, at
    most one per other sender and ``p·|S|`` in all. When they are more than
    that, copies are granted one at a time to the worker still owed the most
    (lower index on ties). A plan for every eligible worker at once (a BSP
    round) with nothing owed demands exactly ``floor`` copies of each.

    Args:
        owed_copies: per worker (``n`` values), >= 0.
        floor: copies per round, ``0 <= floor <= p``.
        p: receivers per sender (>= 1).
        senders, eligible: the plan's senders and receivers (worker indices).

    Returns:
        ``(min_in, want)``: the demand to pass as ``select_receivers(min_in=...)``
        and what each worker is owed with this plan counted, for
        :func:`floor_owed`.
    """
    owed = np.asarray(owed_copies, dtype=np.float64)
    n = owed.shape[0]
    if owed.ndim != 1 or np.any(~np.isfinite(owed)) or np.any(owed < 0):
        raise ValueError(f"owed_copies must be finite and >= 0, one per worker, got {owed.tolist()}")
    q = _int_at_least("p", p, 1)
    f = float(floor)
    if not 0 <= f <= q:
        raise ValueError(f"floor must be in [0, p={q}] copies per round, got {floor!r}")
    snd = _workers("senders", senders, n)
    elig = _workers("eligible", eligible, n)
    want = [0.0] * n
    demand = [0] * n
    if len(elig) < 2 or not snd:
        return demand, [float(owed[j]) if j in elig else 0.0 for j in range(n)]
    in_snd = set(snd)
    room = {j: len(snd) - (j in in_snd) for j in elig}
    for j in elig:
        want[j] = float(owed[j]) + f * room[j] / (len(elig) - 1)
    whole = {j: min(math.floor(want[j] + FLOOR_EPS), room[j]) for j in elig}
    budget = q * len(snd)
    if sum(whole.values()) <= budget:
        for j, k in whole.items():
            demand[j] = k
        return demand, want
    for _ in range(budget):  # the most owed first, one copy at a time
        j = max((j for j in elig if demand[j] < whole[j]), key=lambda j: (want[j] - demand[j], -j))
        demand[j] += 1
    return demand, want


def floor_owed(want: Sequence[float], receivers: Sequence[Sequence[int]], *, eligible: Sequence[int]) -> list[float]:
    """What each eligible worker is still owed after a plan: its ``want``
    (from :func:`floor_demand`) less the copies ``receivers`` sends it, never
    below 0 (copies beyond the floor are not banked); 0 for the others."""
    n = len(want)
    if len(receivers) != n:
        raise ValueError(f"receivers must hold one set per worker ({n}), got {len(receivers)}")
    got = [0] * n
    for r in receivers:
        for j in r:
            got[j] += 1
    elig = set(_workers("eligible", eligible, n))
    return [max(0.0, float(want[j]) - got[j]) if j in elig else 0.0 for j in range(n)]


# ---------------------------------------------------------------- fluid check
def fluid_makespan_s(
    receivers: Sequence[Sequence[int]], uplink_Bps: Sequence[float], downlink_Bps: Sequence[float], nbytes: float
) -> float:
    """When the last copy of a plan arrives if every copy starts at once and
    the copies share the links max–min fairly (the simulator's fluid model,
    without latency or backlog). At least :func:`plan_makespan_s`, and equal
    to it when no copy is slowed by a link other than its bottleneck."""
    n = len(uplink_Bps)
    up, down = _bandwidths(uplink_Bps, downlink_Bps)
    src = [i for i, rs in enumerate(receivers) for _ in rs]
    dst = [j for rs in receivers for j in rs]
    if not src or nbytes <= 0:
        return 0.0
    capacity = np.concatenate([up, down])
    links = np.array([src, [n + j for j in dst]], dtype=np.intp).T
    left = np.full(len(src), float(nbytes))
    now = 0.0
    while links.shape[0]:
        rates = maxmin_rates(capacity, links)
        if not np.any(rates > 0):
            return math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = float(np.min(np.where(rates > 0, left / rates, np.inf)))
            # a copy between two unlimited links is done at once (inf * 0)
            left = np.where(np.isinf(rates), 0.0, left - rates * dt)
        now += dt
        keep = left > nbytes * 1e-9
        links, left = links[keep], left[keep]
    return now
