"""SELMCAST's fairness floor: ``select_receivers(min_in=...)`` (phase 1 with
lower bounds on every receiver's copies) and the deficit counter
(``floor_demand`` / ``floor_owed``) that turns a per-round floor into them."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hetsync.algos import selmcast
from hetsync.algos.selmcast import floor_demand, floor_owed, select_receivers
from tests.algos.test_selmcast import (
    RTOL,
    as_plan,
    assert_well_formed,
    edges,
    eligible_of,
    instances,
    makespan,
    select,
    senders_of,
)

INF = math.inf


def in_degree(plan, n: int) -> list[int]:
    got = [0] * n
    for r in plan:
        for j in r:
            got[j] += 1
    return got


@st.composite
def floored(draw, max_n=10):
    """An instance and a min_in every plan can meet: drawn from floor_demand
    with a random floor and random debts, as the policy builds them."""
    inst = draw(instances(max_n=max_n))
    n = len(inst["up"])
    snd, elig = senders_of(inst), eligible_of(inst)
    assume(snd)
    floor = draw(st.integers(0, inst["p"]))
    owed = draw(st.lists(st.sampled_from([0.0, 0.0, 0.4, 1.0, 2.5]), min_size=n, max_size=n))
    need, _ = floor_demand(owed, floor, inst["p"], senders=snd, eligible=elig)
    return inst, need


# ------------------------------------------------------------ hand-computed


def test_bandwidth_alone_starves_a_slow_receiver_and_the_floor_feeds_it():
    """Three fast workers and a slow one (its uplink 10x, its downlink 20x
    slower): by bandwidth alone nobody sends to the slow one, whose model then
    mixes with nobody. A floor of one copy per round gives it exactly one, and
    the round lasts that copy's time."""
    up, down = [10.0, 10.0, 10.0, 1.0], [10.0, 10.0, 10.0, 0.5]
    inst = {**inst_of(up), "down": down}
    plain = select_receivers(up, down, 10.0, 1)
    assert in_degree(plain, 4)[3] == 0
    assert makespan(plain, inst) == 10.0  # the slow uplink's one copy
    fair = select_receivers(up, down, 10.0, 1, min_in=[1, 1, 1, 1])
    assert min(in_degree(fair, 4)) == 1 and in_degree(fair, 4)[3] == 1
    assert makespan(fair, inst) == 20.0


def inst_of(bw, nbytes=10.0):
    n = len(bw)
    return {"up": bw, "down": bw, "nbytes": nbytes, "busy_up": [0.0] * n, "busy_down": [0.0] * n}


def test_the_floor_costs_what_it_must_and_no_more():
    """Equal uplinks, one slow downlink: feeding it lengthens the round to
    its one copy's time, and exactly one sender pays for it."""
    up = [100.0] * 4
    down = [100.0, 100.0, 100.0, 5.0]
    plain = select_receivers(up, down, 10.0, 1, extra=False)
    assert makespan(plain, {**inst_of(up), "down": down}) == pytest.approx(0.2)  # four copies, three fast downlinks
    fair = select_receivers(up, down, 10.0, 1, min_in=[0, 0, 0, 1], extra=False)
    assert in_degree(fair, 4)[3] == 1
    assert makespan(fair, {**inst_of(up), "down": down}) == pytest.approx(2.0)


# ------------------------------------------------------------ properties


@settings(max_examples=100, deadline=None, derandomize=True)
@given(inst=instances())
def test_floor_zero_is_the_plan_without_a_floor(inst):
    n = len(inst["up"])
    snd, elig = senders_of(inst), eligible_of(inst)
    need, _ = floor_demand([0.0] * n, 0, inst["p"], senders=snd, eligible=elig)
    assert need == [0] * n
    for extra in (False, True):
        assert select(inst, extra=extra, min_in=need) == select(inst, extra=extra)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(inst=instances(), data=st.data())
def test_every_worker_gets_the_floor_in_a_round_planned_at_once(inst, data):
    """A BSP exchange: every eligible worker sends and every one receives at
    least ``floor`` copies, with or without extras."""
    n = len(inst["up"])
    elig = eligible_of(inst)
    inst = {**inst, "senders": elig, "p": min(inst["p"], len(elig) - 1)}
    floor = data.draw(st.integers(0, inst["p"]))
    need, _ = floor_demand([0.0] * n, floor, inst["p"], senders=elig, eligible=elig)
    assert need == [floor if j in elig else 0 for j in range(n)]
    for extra in (False, True):
        plan = select(inst, extra=extra, min_in=need)
        assert_well_formed(plan, inst, exact=not extra)
        got = in_degree(plan, n)
        assert all(got[j] >= floor for j in elig)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(case=floored())
def test_plans_meet_every_bound(case):
    inst, need = case
    for extra in (False, True):
        plan = select(inst, extra=extra, min_in=need)
        assert_well_formed(plan, inst, exact=not extra)
        got = in_degree(plan, len(need))
        assert all(g >= k for g, k in zip(got, need, strict=True))


def brute_force_floored(inst, need) -> float:
    n, p = len(inst["up"]), inst["p"]
    elig = eligible_of(inst)
    choices = [list(itertools.combinations([j for j in elig if j != i], p)) for i in senders_of(inst)]
    best = INF
    for combo in itertools.product(*choices):
        plan = [()] * n
        for i, r in zip(senders_of(inst), combo, strict=True):
            plan[i] = r
        if all(g >= k for g, k in zip(in_degree(plan, n), need, strict=True)):
            best = min(best, makespan(plan, inst))
    return best


@settings(max_examples=100, deadline=None, derandomize=True)
@given(case=floored(max_n=5))
def test_phase1_with_a_floor_is_optimal_by_enumeration(case):
    inst, need = case
    elig = eligible_of(inst)
    snd = senders_of(inst)
    assume(math.prod(math.comb(len(elig) - (i in elig), inst["p"]) for i in snd) <= 1500)
    plan = select(inst, extra=False, min_in=need)
    expected = brute_force_floored(inst, need)
    got = makespan(plan, inst)
    assert got == pytest.approx(expected, rel=RTOL, abs=0.0) or got == expected


@settings(max_examples=100, deadline=None, derandomize=True)
@given(case=floored())
def test_extras_with_a_floor_never_lengthen_and_are_maximal(case):
    inst, need = case
    n = len(inst["up"])
    plan1, plan2 = select(inst, extra=False, min_in=need), select(inst, min_in=need)
    m1 = makespan(plan1, inst)
    assert makespan(plan2, inst) == m1
    assert edges(plan1) <= edges(plan2)
    have = edges(plan2)
    for i in senders_of(inst):
        for j in eligible_of(inst):
            if j != i and (i, j) not in have:
                assert makespan(as_plan(have | {(i, j)}, n), inst) > m1, f"edge {i}->{j} fits"


@settings(max_examples=100, deadline=None, derandomize=True)
@given(case=floored())
def test_single_sender_shortcut_matches_the_general_path_with_a_floor(case):
    inst, _ = case
    n = len(inst["up"])
    elig = eligible_of(inst)
    i = senders_of(inst)[0]
    assume(inst["p"] <= len(elig) - (i in elig))
    owed = [1.0 if j % 2 else 0.0 for j in range(n)]
    need, _ = floor_demand(owed, 1, inst["p"], senders=[i], eligible=elig)
    one = {**inst, "senders": [i]}
    x = selmcast._inputs(
        one["up"], one["down"], one["nbytes"], one["p"], [i], one["eligible"], one["busy_up"], one["busy_down"]
    )
    for extra in (False, True):
        general = selmcast._select_many(x, extra, selmcast._need(need, x))
        assert select(one, extra=extra, min_in=need) == general


# ------------------------------------------------------------ the deficit counter


def run_ssp(n: int, p: int, floor: int, order, bw) -> list[list[int]]:
    """Plan one sender at a time (SSP without a window) with the floor's
    counter; returns the plans' in-degrees."""
    owed = [0.0] * n
    everyone = list(range(n))
    out = []
    for i in order:
        need, want = floor_demand(owed, floor, p, senders=[i], eligible=everyone)
        plan = select_receivers(bw, bw, 1.0, p, senders=[i], min_in=need)
        owed = floor_owed(want, plan, eligible=everyone)
        assert max(owed) < 2.0  # the debts stay bounded
        out.append(in_degree(plan, n))
    return out


@pytest.mark.parametrize("floor", [1, 2])
def test_one_sender_at_a_time_every_worker_gets_the_floor_every_round(floor):
    """p2p-bw's links (100 Mb/s to 10 Gb/s): by bandwidth alone the
    fastest downlinks take every copy. With the counter, over every round
    (each worker sending once, in turn) after the first, every worker
    receives at least ``floor`` copies."""
    n, p = 16, 2
    bw = [1.0, 2.5, 10.0, 100.0] * 4
    order = list(range(n)) * 6
    plain = np.sum(run_ssp(n, p, 0, order, bw), axis=0)
    assert np.count_nonzero(plain == 0) >= 12  # the 10 Gb/s downlinks take every copy
    got = np.array(run_ssp(n, p, floor, order, bw))
    for start in range(n, len(order) - n + 1):
        assert got[start : start + n].sum(axis=0).min() >= floor, start


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    n=st.integers(3, 9),
    p=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    floor=st.integers(1, 3),
)
def test_any_sending_order_keeps_every_worker_within_one_copy_of_its_due(n, p, seed, floor):
    """Senders in any order, alone or in groups: a worker's copies never fall
    more than one short of ``floor`` per n − 1 multicasts by the others."""
    assume(p <= n - 1 and floor <= p)
    rng = np.random.default_rng(seed)
    bw = rng.choice([1.0, 10.0, 100.0], size=n).tolist()
    everyone = list(range(n))
    owed = [0.0] * n
    due = np.zeros(n)
    got = np.zeros(n)
    for _ in range(4 * n):
        snd = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
        need, want = floor_demand(owed, floor, p, senders=snd, eligible=everyone)
        plan = select_receivers(bw, bw, 1.0, p, senders=snd, min_in=need)
        owed = floor_owed(want, plan, eligible=everyone)
        for j in everyone:
            due[j] += floor * (len(snd) - (j in snd)) / (n - 1)
        got += in_degree(plan, n)
        assert np.all(got >= due - 1 - 1e-9)


def test_demand_is_the_whole_copies_owed_most_owed_first_within_the_budget():
    # one sender, p = 1: of three workers owed a copy, the most owed gets it
    need, want = floor_demand([1.0, 0.9, 0.0, 1.5], 1, 1, senders=[2], eligible=[0, 1, 2, 3])
    assert need == [0, 0, 0, 1]
    assert want == pytest.approx([1 + 1 / 3, 0.9 + 1 / 3, 0.0, 1.5 + 1 / 3])
    # ... and what was not delivered stays owed; a surplus is not banked
    assert floor_owed(want, [(), (), (3, 0), ()], eligible=[0, 1, 2, 3]) == pytest.approx(
        [1 / 3, 0.9 + 1 / 3, 0.0, 0.5 + 1 / 3]
    )
    # a worker that is not eligible is owed nothing and asked nothing
    need, want = floor_demand([5.0, 0.0, 0.0], 1, 1, senders=[1, 2], eligible=[1, 2])
    assert need == [0, 1, 1] and want[0] == 0.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"owed_copies": [0.0, -1.0, 0.0]}, "owed_copies"),
        ({"owed_copies": [0.0, math.nan, 0.0]}, "owed_copies"),
        ({"floor": 3}, "floor must be in"),
        ({"floor": -1}, "floor must be in"),
        ({"p": 0}, "p must be"),
        ({"senders": [3]}, "senders"),
    ],
)
def test_floor_demand_refuses_bad_input(kwargs, match):
    args = {"owed_copies": [0.0] * 3, "floor": 1, "p": 2, "senders": [0, 1, 2], "eligible": [0, 1, 2]}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        floor_demand(**args)


@pytest.mark.parametrize(
    "min_in,kw,match",
    [
        ([1, 1], {}, "min_in must hold 3 values"),
        ([1, -1, 0], {}, "min_in must be >= 0"),
        ([1, 0, 0], {"eligible": [1, 2]}, "not eligible"),
        ([2, 0, 0], {"senders": [0, 1]}, "more copies than there are other senders"),
        ([0, 1, 1], {"senders": [0]}, "2 copies in all"),
        (["a", 0, 0], {}, "integers"),
    ],
)
def test_select_refuses_a_floor_no_plan_can_meet(min_in, kw, match):
    with pytest.raises(ValueError, match=match):
        select_receivers([1.0] * 3, [1.0] * 3, 1.0, 1, min_in=min_in, **kw)
