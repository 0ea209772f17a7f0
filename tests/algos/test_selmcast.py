"""SELMCAST receiver selection: hand-computed plans, optimality by brute force,
the min-cut test against a textbook max-flow, and the validation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.algos import selmcast
from hetsync.algos.selmcast import plan_makespan_s, random_receivers, select_receivers

INF = math.inf
RTOL = 1e-9


# ------------------------------------------------------------ helpers


def makespan(plan, inst) -> float:
    return plan_makespan_s(
        plan, inst["up"], inst["down"], inst["nbytes"], busy_up_s=inst["busy_up"], busy_down_s=inst["busy_down"]
    )


def select(inst, **kw):
    return select_receivers(
        inst["up"],
        inst["down"],
        inst["nbytes"],
        inst["p"],
        senders=inst["senders"],
        eligible=inst["eligible"],
        busy_up_s=inst["busy_up"],
        busy_down_s=inst["busy_down"],
        **kw,
    )


def senders_of(inst) -> list[int]:
    n = len(inst["up"])
    return list(range(n)) if inst["senders"] is None else sorted(inst["senders"])


def eligible_of(inst) -> list[int]:
    n = len(inst["up"])
    return list(range(n)) if inst["eligible"] is None else sorted(inst["eligible"])


def assert_well_formed(plan, inst, exact: bool) -> None:
    n, p = len(inst["up"]), inst["p"]
    snd, elig = set(senders_of(inst)), set(eligible_of(inst))
    assert len(plan) == n
    for i, r in enumerate(plan):
        assert isinstance(r, tuple)
        if i not in snd:
            assert r == ()
            continue
        assert list(r) == sorted(set(r)), "sorted and distinct"
        assert i not in r
        assert set(r) <= elig
        assert len(r) == p if exact else len(r) >= p


def edges(plan) -> set[tuple[int, int]]:
    return {(i, j) for i, r in enumerate(plan) for j in r}


def as_plan(edge_set, n: int):
    return tuple(tuple(sorted(j for i2, j in edge_set if i2 == i)) for i in range(n))


def max_flow(cap: dict[tuple[str, int], dict[tuple[str, int], int]], s, t) -> int:
    """Textbook Ford–Fulkerson with depth-first augmenting paths (reference)."""
    res = {u: dict(vs) for u, vs in cap.items()}
    for u, vs in cap.items():
        for v in vs:
            res.setdefault(v, {}).setdefault(u, 0)
    total = 0
    while True:
        stack, parent = [s], {s: None}
        while stack and t not in parent:
            u = stack.pop()
            for v, c in res[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    stack.append(v)
        if t not in parent:
            return total
        v = t
        while parent[v] is not None:
            u = parent[v]
            res[u][v] -= 1
            res[v][u] += 1
            v = u
        total += 1


# ------------------------------------------------------------ strategies

BANDWIDTH = st.sampled_from([INF, 1e-3, 0.5, 1.0, 2.0, 3.0, 7.5, 100.0]) | st.floats(0.01, 1000.0)
BUSY = st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0]) | st.floats(0.0, 10.0)


@st.composite
def instances(draw, min_n=2, max_n=10):
    n = draw(st.integers(min_n, max_n))
    elig = sorted(draw(st.sets(st.integers(0, n - 1), min_size=2)))
    snd = sorted(draw(st.sets(st.integers(0, n - 1))))
    room = min((len(elig) - (i in elig) for i in snd), default=len(elig) - 1)
    # half the time uplinks are unlimited, so the downlinks decide the makespan
    up_bw = st.just(INF) if draw(st.booleans()) else BANDWIDTH
    return {
        "up": draw(st.lists(up_bw, min_size=n, max_size=n)),
        "down": draw(st.lists(BANDWIDTH, min_size=n, max_size=n)),
        "busy_up": draw(st.lists(BUSY, min_size=n, max_size=n)),
        "busy_down": draw(st.lists(BUSY, min_size=n, max_size=n)),
        "nbytes": draw(st.sampled_from([1.0, 1.0, 4.0, 10.0, 0.0])),
        "p": draw(st.integers(1, room)),
        "senders": None if len(snd) == n and draw(st.booleans()) else snd,
        "eligible": None if len(elig) == n and draw(st.booleans()) else elig,
    }


# ------------------------------------------------------------ hand-computed


def test_worked_example_slow_uplink_sends_p_fast_ones_send_more():
    # 1 MB models; worker 0's uplink is 1 MB/s (1 s per copy), everyone else
    # has 100 MB/s up and down (0.01 s per copy). With p = 1 the round takes
    # 1 s whatever the others do, so each fast sender can reach all three
    # others (0.03 s of uplink, at most 4 copies = 0.04 s on a downlink).
    up, down = [1e6, 1e8, 1e8, 1e8], [1e8] * 4
    phase1 = select_receivers(up, down, 1e6, 1, extra=False)
    # most room first, then cheapest next copy, then lower index: 0->1, 1->0,
    # then 0 and 1 have less room, so 2->3 and 3->2
    assert phase1 == ((1,), (0,), (3,), (2,))
    plan = select_receivers(up, down, 1e6, 1)
    assert plan == ((1,), (0, 2, 3), (0, 1, 3), (0, 1, 2))
    assert plan_makespan_s(phase1, up, down, 1e6) == plan_makespan_s(plan, up, down, 1e6) == 1.0
    # a second copy from worker 0 would take 2 s
    assert plan_makespan_s(((1, 2), *plan[1:]), up, down, 1e6) == 2.0


def test_worked_example_busy_and_slow_receivers_are_avoided():
    # 10 MB models, p = 2, worker 3 busy for 5 s, worker 4 has a 1 MB/s downlink
    up = [INF] * 5
    down = [1e7, 1e7, 1e7, 1e8, 1e6]
    busy_down = [0.0, 0.5, 0.0, 5.0, 0.0]
    # single sender (the SSP case): first-copy times 1 s, 1.5 s, 1 s, 5.1 s, 10 s
    plan = select_receivers(up, down, 1e7, 2, senders=[0], busy_down_s=busy_down)
    assert plan == ((1, 2), (), (), (), ())  # 1.5 s; worker 3 (5.1 s) would lengthen it
    assert plan_makespan_s(plan, up, down, 1e7, busy_down_s=busy_down) == 1.5
    # all five send, ten copies. Downlinks 0 and 2 finish 1, 2, 3, 4 copies at
    # 1, 2, 3, 4 s, downlink 1 at 1.5, 2.5, 3.5 s, 3 not before 5.1 s, 4 not
    # before 10 s. Within 3 s workers 0, 1, 2 take 3 + 2 + 3 = 8 copies, within
    # 3.5 s 9, within 4 s 4 + 3 + 4 = 11: the optimum is 4 s, 3 and 4 get none.
    plan1 = select_receivers(up, down, 1e7, 2, busy_down_s=busy_down, extra=False)
    assert plan_makespan_s(plan1, up, down, 1e7, busy_down_s=busy_down) == 4.0
    loads = [sum(j in r for r in plan1) for j in range(5)]
    assert sum(loads) == 10 and loads[3] == loads[4] == 0
    # phase 2 adds the eleventh copy that still fits in 4 s
    plan2 = select_receivers(up, down, 1e7, 2, busy_down_s=busy_down)
    loads2 = [sum(j in r for r in plan2) for j in range(5)]
    assert loads2 == [4, 3, 4, 0, 0]
    assert plan_makespan_s(plan2, up, down, 1e7, busy_down_s=busy_down) == plan_makespan_s(
        plan1, up, down, 1e7, busy_down_s=busy_down
    )


def test_tight_threshold_example():
    # p = 2, five senders, ten copies, unlimited uplinks, 1-byte models. Every
    # downlink is busy 0.5 s except 4 (unlimited, busy 1 s): k copies take
    # 0.5 + k/3 s on 1, 0.5 + k/2 s on 2, 0.5 + k/7.5 s on 3, 1000 s a copy on
    # 0. Within 31/30 s (= 0.5 + 4/7.5) workers 4, 3, 2, 1 take 4 + 4 + 1 + 1
    # copies, exactly ten; any earlier and 3 takes only three. At the next
    # candidate time, 7/6 s, worker 1 could take a second copy and 3 a fifth,
    # and the greedy (most room first) would use that room: the search must
    # stop at 31/30 s exactly.
    up, down, busy_down = [INF] * 5, [1e-3, 3.0, 2.0, 7.5, INF], [0.5, 0.5, 0.5, 0.5, 1.0]
    plan = select_receivers(up, down, 1.0, 2, busy_down_s=busy_down, extra=False)
    assert plan == ((3, 4), (3, 4), (3, 4), (1, 4), (2, 3))
    assert plan_makespan_s(plan, up, down, 1.0, busy_down_s=busy_down) == 0.5 + 4 / 7.5
    # nothing more fits in 31/30 s: phase 2 adds no edge
    assert select_receivers(up, down, 1.0, 2, busy_down_s=busy_down) == plan


def test_tie_rule_most_room_then_earliest_next_copy_then_lowest_index():
    # 1-byte models, senders 0, 1, 2 with 0.5 B/s uplinks: the round takes 2 s
    # whatever they pick (p = 1). Receiver 3 is unlimited but busy 1.5 s (room
    # for all three copies), receiver 4 takes k copies in k s (room for two).
    # 0 takes 3 (more room, though 4 would finish first); then both have room
    # for two and 1 takes 4 (1 s before 1.5 s); then 3 has more room again.
    up, down, busy_down = [0.5, 0.5, 0.5, 1.0, 1.0], [1.0, 1.0, 1.0, INF, 1.0], [0.0, 0.0, 0.0, 1.5, 0.0]
    kw = {"senders": [0, 1, 2], "eligible": [3, 4], "busy_down_s": busy_down}
    plan = select_receivers(up, down, 1.0, 1, extra=False, **kw)
    assert plan == ((3,), (4,), (3,), (), ())
    # equal room and equal times: the lowest index
    assert select_receivers([1.0] * 4, [1.0] * 4, 1.0, 1, extra=False) == ((1,), (0,), (3,), (2,))


def test_plan_is_built_at_the_optimal_threshold():
    # 1-byte models, unlimited uplinks, p = 1; downlinks 2, 1, 3 B/s. The
    # optimum is 2/3 s: 0 -> 2, 1 -> 2, 2 -> 0 (0.5 s). The search must end
    # at exactly 2/3 s: at the next candidate, 1 s, receiver 0 has room for
    # two copies and the greedy would send 1 -> 0 (0.5 s, before 2's 2/3 s)
    # and then 2 -> 0 (1 s).
    up, down = [INF] * 3, [2.0, 1.0, 3.0]
    plan = select_receivers(up, down, 1.0, 1, extra=False)
    assert plan == ((2,), (2,), (0,))
    assert plan_makespan_s(plan, up, down, 1.0) == 2 / 3


def test_greedy_dead_end_is_repaired_by_an_augmenting_path():
    # 1-byte models, unlimited uplinks, p = 1. Downlink 0 takes k copies in
    # k/2 s, 1 is unlimited but busy 1 s, 2 takes k copies in k/4 s. The
    # optimum is 0.5 s (0 -> 2, 1 -> 2, 2 -> 0): receiver 0 has room for one
    # copy, 1 for none, 2 for two. The greedy: 0 takes 2 (most room); for 1,
    # receivers 0 and 2 both have room for one, both would finish at 0.5 s,
    # so the lower index 0 wins; 2 is then left with no receiver, and the
    # augmenting path 2 -> 0 <- 1 -> 2 repairs it.
    up, down, busy_down = [INF] * 3, [2.0, INF, 4.0], [0.0, 1.0, 0.0]
    plan = select_receivers(up, down, 1.0, 1, busy_down_s=busy_down, extra=False)
    assert plan == ((2,), (2,), (0,))
    assert plan_makespan_s(plan, up, down, 1.0, busy_down_s=busy_down) == 0.5


def test_extras_are_a_maximum_not_just_maximal():
    # 1-byte models, p = 1, every uplink busy 1 s: sender 0 (1 B/s) needs 2 s
    # for its one copy, so M = 2 s. Uplinks 1 and 3 are unlimited, uplink 2
    # (2 B/s) fits two copies. Downlinks 0 and 3 take k copies in k s,
    # downlink 1 in k/4 s, 2 is unlimited (busy 1 s). Phase 1 (most room
    # first): 0 -> 1, 1 -> 2, 2 -> 1, 3 -> 2. Within 2 s senders 1, 2, 3 can
    # add 2, 1, 2 copies and receivers 0 and 3 take two each: five extras
    # (1 -> 0, 3; 2 -> 3; 3 -> 0, 1). The greedy gives 1 both 0 and 3, then
    # 2's tie (0 and 3 have one copy of room, both finish at 2 s) to 0, which
    # leaves 3 only 1: four. The augmenting path 3 -> 0 <- 2 -> 3 makes five.
    up, down = [1.0, INF, 2.0, INF], [1.0, 4.0, INF, 1.0]
    busy_up, busy_down = [1.0] * 4, [0.0, 0.0, 1.0, 0.0]
    plan1 = select_receivers(up, down, 1.0, 1, busy_up_s=busy_up, busy_down_s=busy_down, extra=False)
    assert plan1 == ((1,), (2,), (1,), (2,))
    plan = select_receivers(up, down, 1.0, 1, busy_up_s=busy_up, busy_down_s=busy_down)
    assert plan == ((1,), (0, 2, 3), (1, 3), (0, 1, 2))
    assert plan_makespan_s(plan, up, down, 1.0, busy_up_s=busy_up, busy_down_s=busy_down) == 2.0


def test_plan_makespan_counts_only_used_links():
    up, down = [1.0, 2.0, INF], [4.0, 1.0, 0.0]
    # worker 2 is busy 100 s on both links but takes no part
    busy = [0.0, 1.0, 100.0]
    assert plan_makespan_s([(1,), (0,), ()], up, down, 2.0, busy_up_s=busy, busy_down_s=busy) == 3.0
    assert plan_makespan_s([(), (), ()], up, down, 2.0, busy_up_s=busy, busy_down_s=busy) == 0.0
    # two copies up from 0 (4 s); a used zero-bandwidth link takes forever
    assert plan_makespan_s([(1, 2), (), ()], up, [4.0, 8.0, 1.0], 2.0) == 4.0
    assert plan_makespan_s([(2,), (), ()], up, down, 2.0) == INF


def test_no_senders_and_inf_everywhere():
    assert select_receivers([1.0, 1.0], [1.0, 1.0], 1.0, 1, senders=[]) == ((), ())
    plan = select_receivers([INF] * 4, [INF] * 4, 5.0, 2)
    assert plan == ((1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2))


# ------------------------------------------------------------ properties


@settings(max_examples=100, deadline=None, derandomize=True)
@given(inst=instances())
def test_plans_are_well_formed(inst):
    assert_well_formed(select(inst, extra=False), inst, exact=True)
    assert_well_formed(select(inst), inst, exact=False)
    rng = np.random.default_rng(0)
    n = len(inst["up"])
    rand = random_receivers(n, inst["p"], rng, senders=inst["senders"], eligible=inst["eligible"])
    assert_well_formed(rand, inst, exact=True)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(inst=instances())
def test_never_worse_than_random_receivers(inst):
    best = makespan(select(inst), inst)
    n = len(inst["up"])
    for seed in range(4):
        rng = np.random.default_rng(seed)
        rand = random_receivers(n, inst["p"], rng, senders=inst["senders"], eligible=inst["eligible"])
        assert best <= makespan(rand, inst) * (1 + RTOL)


def brute_force_min(inst) -> float:
    """The smallest makespan over every plan with exactly p receivers per sender."""
    n, p = len(inst["up"]), inst["p"]
    elig = eligible_of(inst)
    choices = [list(itertools.combinations([j for j in elig if j != i], p)) for i in senders_of(inst)]
    best = INF
    for combo in itertools.product(*choices):
        plan = [()] * n
        for i, r in zip(senders_of(inst), combo, strict=True):
            plan[i] = r
        best = min(best, makespan(plan, inst))
    return best


def few_plans(inst, limit: int = 1500):
    """Drop senders from the end until brute force has at most ``limit`` plans."""
    elig = eligible_of(inst)
    snd = senders_of(inst)
    while snd and math.prod(math.comb(len(elig) - (i in elig), inst["p"]) for i in snd) > limit:
        snd = snd[:-1]
    return {**inst, "senders": snd}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(inst=instances(max_n=5))
def test_phase1_is_optimal_by_enumeration(inst):
    inst = few_plans(inst)
    plan = select(inst, extra=False)
    assert_well_formed(plan, inst, exact=True)
    expected = brute_force_min(inst)
    got = makespan(plan, inst)
    assert got == pytest.approx(expected, rel=RTOL, abs=0.0) or got == expected


def link_s(busy: float, copies: int, nbytes: float, bandwidth: float) -> float:
    """The cost model as documented: backlog plus copies * nbytes / bandwidth."""
    return busy if bandwidth == INF else busy + (copies * nbytes) / bandwidth


def reference_optimum(inst) -> float:
    """Phase 1's optimum the slow way: the smallest candidate time at which a
    textbook max-flow places every sender's p copies (bisection: feasibility
    only grows with the time), never below the fixed uplink times."""
    p, b = inst["p"], inst["nbytes"]
    snd, elig = senders_of(inst), eligible_of(inst)
    t_up = max(link_s(inst["busy_up"][i], p, b, inst["up"][i]) for i in snd)
    down = {(j, k): link_s(inst["busy_down"][j], k, b, inst["down"][j]) for j in elig for k in range(1, len(snd) + 1)}
    cands = sorted({t_up} | {t for t in down.values() if t > t_up})

    def feasible(limit: float) -> bool:
        graph: dict = {("s", 0): {("a", i): p for i in snd}}
        for i in snd:
            graph[("a", i)] = {("b", j): 1 for j in elig if j != i}
        for j in elig:
            graph[("b", j)] = {("t", 0): sum(down[j, k] <= limit for k in range(1, len(snd) + 1))}
        return max_flow(graph, ("s", 0), ("t", 0)) == len(snd) * p

    lo, hi = 0, len(cands) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(cands[mid]) else (mid + 1, hi)
    return cands[lo]


@settings(max_examples=120, deadline=None, derandomize=True)
@given(inst=instances(max_n=8))
def test_phase1_matches_a_max_flow_reference(inst):
    if not senders_of(inst):
        return
    got = makespan(select(inst, extra=False), inst)
    assert got == pytest.approx(reference_optimum(inst), rel=RTOL, abs=0.0)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(inst=instances())
def test_extras_never_lengthen_and_are_maximal(inst):
    n = len(inst["up"])
    plan1, plan2 = select(inst, extra=False), select(inst)
    m1 = makespan(plan1, inst)
    assert makespan(plan2, inst) == m1  # exact: phase 2 compares link times with M itself
    assert edges(plan1) <= edges(plan2)  # phase-1 edges are kept
    have = edges(plan2)
    for i in senders_of(inst):
        for j in eligible_of(inst):
            if j != i and (i, j) not in have:
                assert makespan(as_plan(have | {(i, j)}, n), inst) > m1, f"edge {i}->{j} fits"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(inst=instances(max_n=4))
def test_extras_are_a_maximum_by_enumeration(inst):
    n = len(inst["up"])
    plan1, plan2 = select(inst, extra=False), select(inst)
    m1 = makespan(plan1, inst)
    base = edges(plan1)
    missing = [(i, j) for i in senders_of(inst) for j in eligible_of(inst) if j != i and (i, j) not in base]
    best = 0
    for mask in range(1 << len(missing)):
        added = {e for b, e in enumerate(missing) if mask >> b & 1}
        if len(added) > best and makespan(as_plan(base | added, n), inst) <= m1:
            best = len(added)
    assert len(edges(plan2)) - len(base) == best


@settings(max_examples=80, deadline=None, derandomize=True)
@given(inst=instances())
def test_single_sender_shortcut_matches_the_general_path(inst):
    snd = senders_of(inst) or [0]
    i = snd[0]
    one = {**inst, "senders": [i]}
    if inst["p"] > len(eligible_of(inst)) - (i in eligible_of(inst)):
        return
    x = selmcast._inputs(
        one["up"], one["down"], one["nbytes"], one["p"], [i], one["eligible"], one["busy_up"], one["busy_down"]
    )
    for extra in (False, True):
        general = selmcast._select_many(x, extra)
        assert select(one, extra=extra) == general


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data())
def test_min_cut_test_matches_max_flow(data):
    n = data.draw(st.integers(1, 7))
    elig = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    snd = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    m = len(snd)
    caps = data.draw(st.lists(st.integers(0, m), min_size=len(elig), max_size=len(elig)))
    p = data.draw(st.integers(1, max(1, len(elig))))
    graph: dict = {("s", 0): {("a", i): p for i in snd}}
    for i in snd:
        graph[("a", i)] = {("b", j): 1 for j in elig if j != i}
    for j, c in zip(elig, caps, strict=True):
        graph[("b", j)] = {("t", 0): c}
    expected = max_flow(graph, ("s", 0), ("t", 0)) == m * p
    is_sender = np.array([j in snd for j in elig])
    assert selmcast._feasible(np.array(caps), is_sender, m, p) == expected


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data())
def test_augment_reaches_the_maximum_flow(data):
    # arbitrary bipartite graphs and capacities, from an arbitrary greedy start
    n = data.draw(st.integers(1, 7))
    addable = np.array(data.draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))).reshape(n, n)
    out_cap = np.array(data.draw(st.lists(st.integers(0, n), min_size=n, max_size=n)))
    in_cap = np.array(data.draw(st.lists(st.integers(0, n), min_size=n, max_size=n)))
    graph: dict = {("s", 0): {("a", i): int(out_cap[i]) for i in range(n)}}
    for i in range(n):
        graph[("a", i)] = {("b", j): 1 for j in range(n) if addable[i, j]}
        graph[("b", i)] = {("t", 0): int(in_cap[i])}
    expected = max_flow(graph, ("s", 0), ("t", 0))
    flow = np.zeros((n, n), dtype=bool)
    out_spare, in_spare, load = out_cap.copy(), in_cap.copy(), np.zeros(n, dtype=np.int64)
    if data.draw(st.booleans()):
        selmcast._greedy(flow, addable, list(range(n)), out_spare, in_spare, load, np.zeros(n), np.ones(n), 1.0)
    selmcast._augment(flow, addable, out_spare, in_spare)
    assert int(flow.sum()) == expected
    assert not np.any(flow & ~addable)
    assert np.all(flow.sum(axis=1) <= out_cap) and np.all(flow.sum(axis=0) <= in_cap)


# ------------------------------------------------------------ random baseline


def test_random_receivers_is_uniform_and_seeded():
    rng = np.random.default_rng(7)
    counts = np.zeros((5, 5))
    for _ in range(3000):
        plan = random_receivers(5, 2, rng, senders=[0, 3], eligible=[0, 1, 2, 3])
        assert plan[1] == plan[2] == plan[4] == ()
        for i in (0, 3):
            assert len(plan[i]) == 2
            counts[i, list(plan[i])] += 1
    # each of the 3 eligible others is drawn with probability 2/3
    for i in (0, 3):
        others = [j for j in (0, 1, 2, 3) if j != i]
        assert counts[i, others] == pytest.approx([2000.0] * 3, rel=0.08)
        assert counts[i, i] == 0 and counts[i, 4] == 0
    a = random_receivers(6, 3, np.random.default_rng(1))
    b = random_receivers(6, 3, np.random.default_rng(1))
    assert a == b


# ------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"p": 0}, "p"),
        ({"p": 4}, "p=4 is more than the 3"),
        ({"p": 2, "eligible": [0, 1]}, "p=2 is more than the 1"),
        ({"p": 1.5}, "p must be an integer"),
        ({"uplink_Bps": [1.0, 1.0, 1.0]}, "downlink_Bps"),
        ({"uplink_Bps": [1.0, -1.0, 1.0, 1.0]}, "uplink_Bps"),
        ({"downlink_Bps": [1.0, math.nan, 1.0, 1.0]}, "downlink_Bps"),
        ({"uplink_Bps": [0.0, 1.0, 1.0, 1.0]}, "uplink_Bps must be > 0"),
        ({"downlink_Bps": [0.0, 1.0, 1.0, 1.0]}, "downlink_Bps must be > 0"),
        ({"nbytes": -1.0}, "nbytes"),
        ({"nbytes": INF}, "nbytes"),
        ({"busy_up_s": [0.0, -1.0, 0.0, 0.0]}, "busy_up_s"),
        ({"busy_down_s": [0.0, 0.0, 0.0]}, "busy_down_s"),
        ({"busy_down_s": [0.0, math.nan, 0.0, 0.0]}, "busy_down_s"),
        ({"senders": [0, 4]}, "senders"),
        ({"senders": [1, 1]}, "senders"),
        ({"eligible": [-1, 0, 1]}, "eligible"),
        ({"eligible": [0.5]}, "eligible"),
    ],
)
def test_bad_input_is_refused(kwargs, match):
    args = {"uplink_Bps": [1.0] * 4, "downlink_Bps": [1.0] * 4, "nbytes": 1.0, "p": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        select_receivers(args.pop("uplink_Bps"), args.pop("downlink_Bps"), args.pop("nbytes"), args.pop("p"), **args)


def test_zero_bandwidth_is_fine_where_it_is_never_used():
    # worker 3 neither sends nor may receive
    up, down = [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]
    plan = select_receivers(up, down, 1.0, 1, senders=[0, 1, 2], eligible=[0, 1, 2])
    assert plan[3] == () and all(3 not in r for r in plan)


def test_bad_plans_and_random_arguments_are_refused():
    up = down = [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="receivers must hold one set per worker"):
        plan_makespan_s([(1,)], up, down, 1.0)
    with pytest.raises(ValueError, match=r"receivers\[1\] holds 1"):
        plan_makespan_s([(), (1,), ()], up, down, 1.0)
    with pytest.raises(ValueError, match="receivers"):
        plan_makespan_s([(3,), (), ()], up, down, 1.0)
    with pytest.raises(ValueError, match="receivers"):
        plan_makespan_s([(1, 1), (), ()], up, down, 1.0)
    with pytest.raises(ValueError, match="busy_up_s"):
        plan_makespan_s([(), (), ()], up, down, 1.0, busy_up_s=[0.0, -2.0, 0.0])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="p=3 is more than the 2"):
        random_receivers(3, 3, rng)
    with pytest.raises(ValueError, match="n must be"):
        random_receivers(-1, 1, rng)
    with pytest.raises(ValueError, match="eligible"):
        random_receivers(3, 1, rng, eligible=[0, 3])


# ------------------------------------------------------------- fluid check
def test_fluid_makespan_of_one_multicast_is_the_uplink_time():
    # 3 copies through a 2 B/s uplink into fast downlinks: 3 * 4 / 2
    plan = ((1, 2, 3), (), (), ())
    assert selmcast.fluid_makespan_s(plan, [2.0, 9.0, 9.0, 9.0], [9.0] * 4, 4.0) == pytest.approx(6.0)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(inst=instances(max_n=8))
def test_extras_do_not_lengthen_the_fluid_makespan_either(inst):
    """The plan is made on the bottleneck bound; on the fluid max–min network
    the simulator runs (all copies starting together, no backlog) the bound
    is never beaten and phase 2's extras do not lengthen the exchange."""
    if inst["nbytes"] == 0:
        return
    args = (inst["up"], inst["down"], inst["nbytes"])
    free = {"senders": inst["senders"], "eligible": inst["eligible"]}
    exact = select_receivers(*args, inst["p"], **free, extra=False)
    full = select_receivers(*args, inst["p"], **free)
    for plan in (exact, full):
        assert selmcast.fluid_makespan_s(plan, *args) >= plan_makespan_s(plan, *args) * (1 - RTOL)
    assert selmcast.fluid_makespan_s(full, *args) <= selmcast.fluid_makespan_s(exact, *args) * (1 + 1e-9)
