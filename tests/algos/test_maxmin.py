"""Max–min fair rates: hand-computed cases and the defining properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hetsync.algos.maxmin import maxmin_rates

INF = math.inf
RTOL = 1e-9


def reference_rates(capacity: list[float], flows: list[list[int]]) -> list[float]:
    """Textbook progressive filling in plain Python: one bottleneck link per round."""
    remaining = list(capacity)
    rates = [INF] * len(flows)
    unfrozen = set(range(len(flows)))
    while unfrozen:
        best, link = INF, None
        for lk in range(len(capacity)):
            n = sum(flows[f].count(lk) for f in unfrozen)
            if n and remaining[lk] / n < best:
                best, link = remaining[lk] / n, lk
        if link is None:
            break  # only flows on unlimited links are left
        for f in sorted(unfrozen):
            if link in flows[f]:
                unfrozen.discard(f)
                rates[f] = best
                for lk in flows[f]:
                    remaining[lk] -= best
    return rates


# ------------------------------------------------------------ hand-computed


def padded(flows: list[list[int]], spare: int, k: int) -> np.ndarray:
    """Flows of fewer than k links, padded with an unlimited spare link."""
    return np.array([f + [spare] * (k - len(f)) for f in flows])


def test_classic_three_link_example():
    # L0 (cap 1): f0, f1 -> 1/2 each. L1 (cap 2) then has 1.5 for f2, f4 ->
    # 0.75 each. L2 (cap 3) then has 2.25 for f3 alone.
    cap = np.array([1.0, 2.0, 3.0, INF])
    links = padded([[0, 1], [0], [1, 2], [2], [1]], spare=3, k=2)
    assert maxmin_rates(cap, links) == pytest.approx([0.5, 0.5, 0.75, 2.25, 0.75], rel=RTOL)


def test_parking_lot():
    # one long flow over three unit links, one short flow on each link
    cap = np.array([1.0, 1.0, 1.0, INF])
    links = padded([[0, 1, 2], [0], [1], [2]], spare=3, k=3)
    assert maxmin_rates(cap, links) == pytest.approx([0.5] * 4, rel=RTOL)


def test_a_link_listed_twice_is_used_twice():
    # both flows use L0 twice: 4 r <= 3
    assert maxmin_rates(np.array([3.0]), np.array([[0, 0], [0, 0]])) == pytest.approx([0.75, 0.75])
    # f0 twice, f1 once: 2 r + r <= 3
    assert maxmin_rates(np.array([3.0, INF]), np.array([[0, 0], [0, 1]])) == pytest.approx([1.0, 1.0])


def test_unlimited_and_dead_links_across_rounds():
    # L4 (cap 0) freezes f3 at 0, L2 freezes f0 at 1; f4 only crosses
    # unlimited links, one of which f0 and f2 also cross; f1, f2 then split L5.
    cap = np.array([INF, INF, 1.0, 3.0, 0.0, 5.0])
    links = np.array([[1, 2], [5, 3], [5, 1], [4, 5], [0, 1]])
    assert maxmin_rates(cap, links).tolist() == [1.0, 2.5, 2.5, 0.0, INF]


@pytest.mark.parametrize("k", [1, 2, 7, 100])
def test_incast_shares_the_receiver_downlink(k):
    # links 0..k-1: senders' uplinks (fast); link k: the receiver's downlink
    cap = np.array([10.0] * k + [3.0])
    links = np.array([[i, k] for i in range(k)])
    assert maxmin_rates(cap, links) == pytest.approx([min(10.0, 3.0 / k)] * k, rel=RTOL)


def test_flow_bottlenecked_elsewhere_leaves_more_for_the_others():
    # three flows into a 10 B/s downlink; the first sender's uplink gives 1 B/s
    cap = np.array([1.0, 100.0, 100.0, 10.0])
    links = np.array([[0, 3], [1, 3], [2, 3]])
    assert maxmin_rates(cap, links) == pytest.approx([1.0, 4.5, 4.5], rel=RTOL)


def test_unlimited_links():
    cap = np.array([INF, INF, 4.0])
    links = np.array([[0, 1], [0, 2], [1, 2]])
    assert maxmin_rates(cap, links).tolist() == [INF, 2.0, 2.0]


def test_zero_capacity_link_carries_nothing_and_costs_nobody():
    cap = np.array([0.0, 6.0, 6.0])
    links = np.array([[0, 1], [2, 1]])
    assert maxmin_rates(cap, links).tolist() == [0.0, 6.0]


def test_no_flows():
    assert maxmin_rates(np.array([1.0, INF]), np.zeros((0, 2), dtype=int)).shape == (0,)
    assert maxmin_rates(np.zeros(0), np.zeros((0, 3), dtype=int)).shape == (0,)


def test_lists_are_accepted_and_k1_and_k3_work():
    assert maxmin_rates([2.0], [[0], [0]]).tolist() == [1.0, 1.0]
    assert maxmin_rates([4.0, 1.0, 9.0], [[0, 1, 2], [0, 2, 2]]) == pytest.approx([1.0, 3.0], rel=RTOL)


@pytest.mark.parametrize(
    ("cap", "links", "match"),
    [
        ([[1.0]], [[0]], "capacity_Bps must be 1-D"),
        ([1.0], [0], r"flow_links must have shape \[F, K\]"),
        ([1.0], np.zeros((2, 0), dtype=int), r"flow_links must have shape \[F, K\]"),
        ([1.0], [[0.5]], "integer link indices"),
        ([-1.0], [[0]], "nonnegative"),
        ([math.nan], [[0]], "nonnegative"),
        ([1.0], [[1]], r"outside \[0, 1\)"),
        ([1.0], [[-1]], r"outside \[0, 1\)"),
    ],
)
def test_bad_input(cap, links, match):
    with pytest.raises(ValueError, match=match):
        maxmin_rates(np.asarray(cap), np.asarray(links))


def test_large_star():
    # 1024 workers half pushing into, half pulling from one server
    m = 1025
    cap = np.full(2 * m, 1.25e9)
    workers = np.arange(1, m)
    push = workers % 2 == 0
    links = np.stack([np.where(push, workers, 0), m + np.where(push, 0, workers)], axis=1)
    rates = maxmin_rates(cap, links)
    assert rates[push] == pytest.approx(1.25e9 / push.sum(), rel=1e-12)
    assert rates[~push] == pytest.approx(1.25e9 / (~push).sum(), rel=1e-12)


# --------------------------------------------------------------- properties

capacities = st.one_of(
    st.sampled_from([0.0, 1.0, 2.0, 3.0, 6.0, INF]),
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
)


@st.composite
def instances(draw):
    n_links = draw(st.integers(1, 8))
    cap = draw(st.lists(capacities, min_size=n_links, max_size=n_links))
    k = draw(st.integers(1, 3))
    n_flows = draw(st.integers(0, 14))
    flows = draw(
        st.lists(
            st.lists(st.integers(0, n_links - 1), min_size=k, max_size=k),
            min_size=n_flows,
            max_size=n_flows,
        )
    )
    return np.array(cap, dtype=float), np.array(flows, dtype=np.int64).reshape(n_flows, k)


def link_loads(cap: np.ndarray, links: np.ndarray, rates: np.ndarray) -> np.ndarray:
    finite = np.isfinite(rates)
    return np.bincount(links[finite].ravel(), np.repeat(rates[finite], links.shape[1]), cap.size)


@settings(max_examples=300, deadline=None)
@given(instances())
def test_feasible(inst):
    cap, links = inst
    rates = maxmin_rates(cap, links)
    assert rates.shape == (links.shape[0],)
    assert (rates >= 0).all()
    assert (link_loads(cap, links, rates) <= cap * (1 + RTOL)).all()
    # infinite rates exactly for flows whose links are all unlimited
    all_inf = np.isinf(cap)[links].all(axis=1) if links.size else np.zeros(0, bool)
    assert (np.isinf(rates) == all_inf).all()


@settings(max_examples=300, deadline=None)
@given(instances())
def test_every_flow_has_a_bottleneck(inst):
    cap, links = inst
    rates = maxmin_rates(cap, links)
    load = link_loads(cap, links, rates)
    for f, rate in enumerate(rates):
        if rate == INF:
            continue
        ok = False
        for lk in set(links[f].tolist()):
            crossing = (links == lk).any(axis=1)
            saturated = load[lk] >= cap[lk] * (1 - RTOL)
            if saturated and rate >= rates[crossing].max() * (1 - RTOL):
                ok = True
        assert ok, f"flow {f} (rate {rate}) has no bottleneck"


@settings(max_examples=300, deadline=None)
@given(instances(), st.randoms(use_true_random=False))
def test_permutation_invariant(inst, rnd):
    cap, links = inst
    rates = maxmin_rates(cap, links)
    flow_perm = np.array(rnd.sample(range(links.shape[0]), links.shape[0]), dtype=int)
    link_perm = np.array(rnd.sample(range(cap.size), cap.size), dtype=int)  # new label of each link
    col_perm = np.array(rnd.sample(range(links.shape[1]), links.shape[1]), dtype=int)
    relabelled_cap = np.empty_like(cap)
    relabelled_cap[link_perm] = cap
    relabelled = link_perm[links[flow_perm][:, col_perm]]
    other = maxmin_rates(relabelled_cap, relabelled)
    np.testing.assert_allclose(other, rates[flow_perm], rtol=RTOL, atol=0)


@settings(max_examples=300, deadline=None)
@given(instances())
def test_matches_textbook_progressive_filling(inst):
    cap, links = inst
    expected = reference_rates(cap.tolist(), links.tolist())
    np.testing.assert_allclose(maxmin_rates(cap, links), expected, rtol=RTOL, atol=1e-12)


@st.composite
def two_link_instances(draw):
    n_links = draw(st.integers(2, 6))
    cap = draw(st.lists(capacities, min_size=n_links, max_size=n_links))
    flows = draw(
        st.lists(
            st.lists(st.integers(0, n_links - 1), min_size=2, max_size=2, unique=True),
            min_size=1,
            max_size=12,
        )
    )
    return np.array(cap, dtype=float), np.array(flows, dtype=np.int64)


@settings(max_examples=500, deadline=None)
@given(two_link_instances())
def test_one_round_when_every_link_is_pure(inst):
    # The fluid network's fast path (hetsync.sim.network): with two links per
    # flow, if on every link all flows or none have a smaller share (by more
    # than the tie tolerance) on their other link, progressive filling gives
    # every flow the smaller share of its two links, to the bit.
    cap, links = inst
    count = np.bincount(links.ravel(), minlength=cap.size).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = cap / count
    for lk in range(cap.size):
        on = (links == lk).any(axis=1)
        other = np.where(links[on, 0] == lk, links[on, 1], links[on, 0])
        beats = share[lk] > share[other] * (1.0 + 1e-12)
        assume(beats.all() or not beats.any())
    expected = np.minimum(share[links[:, 0]], share[links[:, 1]])
    assert maxmin_rates(cap, links).tobytes() == expected.tobytes()
