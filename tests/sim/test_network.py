"""Fluid network: closed-form transfer times, sharing, determinism, invariants."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.algos.maxmin import maxmin_rates
from hetsync.sim.network import Network
from hetsync.sim.network import flows as network_module

INF = math.inf
C = 1e6  # bytes/s
B = 250_000.0  # bytes


def drive(net: Network, starts: list[tuple[float, int, int, float, object]]) -> dict[object, float]:
    """Run the usual driver loop; return each token's delivery time.

    ``starts`` are (time, src, dst, nbytes, token), sorted by time. A flow
    starts before the network is advanced to its start time's deliveries.
    """
    delivered: dict[object, float] = {}
    pending = list(starts)
    while True:
        t_net = net.next_event_s()
        if pending and pending[0][0] <= t_net:
            t, src, dst, nbytes, token = pending.pop(0)
            net.start_flow(t, src, dst, nbytes, token)
        elif t_net < INF:
            for token in net.advance(t_net):
                assert token not in delivered
                delivered[token] = t_net
        else:
            return delivered


def uniform(m: int, up: float = C, down: float = C, latency: float = 0.0) -> Network:
    return Network([up] * m, [down] * m, latency)


# ------------------------------------------------------------ closed forms


@pytest.mark.parametrize("latency", [0.0, 0.003])
def test_one_flow_takes_size_over_capacity_plus_latency(latency):
    net = uniform(2, latency=latency)
    assert drive(net, [(1.0, 1, 0, B, "a")]) == {"a": pytest.approx(1.0 + B / C + latency, rel=1e-12)}
    assert net.active_flows == 0
    assert net.bytes_delivered == B


def test_slower_of_uplink_and_downlink_limits():
    net = Network([C, 4 * C], [C / 2, C], 0.0)
    assert drive(net, [(0.0, 1, 0, B, "a")])["a"] == pytest.approx(2 * B / C)


def test_latency_is_the_larger_endpoint_latency():
    net = Network([C] * 3, [C] * 3, [0.5, 0.1, 0.2])
    got = drive(net, [(0.0, 1, 2, B, "a"), (0.0, 2, 0, B, "b")])
    assert got == {"a": pytest.approx(B / C + 0.2), "b": pytest.approx(B / C + 0.5)}


def test_two_senders_share_the_receivers_downlink():
    net = uniform(3)
    got = drive(net, [(0.0, 1, 0, B, "a"), (0.0, 2, 0, B, "b")])
    assert got == {"a": pytest.approx(2 * B / C), "b": pytest.approx(2 * B / C)}


def test_when_one_flow_ends_the_other_speeds_up():
    # a (B) and b (3B) share C: both at C/2 until a is done at 2B/C; b has
    # 2B left, at full speed: done at 2B/C + 2B/C.
    net = uniform(3, latency=0.01)
    got = drive(net, [(0.0, 1, 0, B, "a"), (0.0, 2, 0, 3 * B, "b")])
    assert got == {"a": pytest.approx(2 * B / C + 0.01), "b": pytest.approx(4 * B / C + 0.01)}


def test_late_joiner_slows_the_first_flow():
    # a alone at C for 0.1 s (0.1 C bytes), then a and b share at C/2.
    net = uniform(3)
    size = 0.5 * C
    got = drive(net, [(0.0, 1, 0, size, "a"), (0.1, 2, 0, size, "b")])
    t_a = 0.1 + (size - 0.1 * C) / (C / 2)  # 0.9
    t_b = t_a + (size - (t_a - 0.1) * C / 2) / C  # b has 0.1 C left, at C
    assert got == {"a": pytest.approx(t_a), "b": pytest.approx(t_b)}


@pytest.mark.parametrize("k", [1, 4, 33])
def test_broadcast_costs_k_transfers_of_the_server_uplink(k):
    net = Network([C] + [INF] * k, [INF] * (k + 1), 0.001)
    got = drive(net, [(0.0, 0, w, B, w) for w in range(1, k + 1)])
    assert got == {w: pytest.approx(k * B / C + 0.001) for w in range(1, k + 1)}


def test_incast_with_a_slow_sender():
    # server downlink 3C shared by 3 senders; sender 1's uplink gives C/2
    net = Network([INF, C / 2, INF, INF], [3 * C, INF, INF, INF], 0.0)
    got = drive(net, [(0.0, w, 0, B, w) for w in (1, 2, 3)])
    # 2, 3 get 1.25 C each until done at B / 1.25C; then 1 continues at C/2
    assert got[2] == got[3] == pytest.approx(B / (1.25 * C))
    assert got[1] == pytest.approx(2 * B / C)


def test_unlimited_links_deliver_after_the_latency_only():
    net = Network([INF] * 3, [INF] * 3, [0.0, 0.25, 0.5])
    got = drive(net, [(2.0, 1, 0, 1e12, "a"), (2.0, 1, 2, 1.0, "b")])
    assert got == {"a": 2.25, "b": 2.5}
    assert net.bytes_delivered == 1e12 + 1.0


def test_zero_bytes_cost_latency_only_and_share_nothing():
    net = uniform(3, latency=0.125)
    got = drive(net, [(0.0, 1, 0, B, "big"), (0.5, 2, 0, 0, "empty")])
    assert got == {"empty": 0.625, "big": pytest.approx(B / C + 0.125)}


def test_zero_capacity_link_never_delivers():
    net = Network([C, 0.0, C], [C, C, C], 0.0)
    net.start_flow(0.0, 1, 0, B, "stuck")
    net.start_flow(0.0, 2, 0, B, "fine")
    assert net.next_event_s() == pytest.approx(B / C)
    assert net.advance(net.next_event_s()) == ["fine"]
    assert net.next_event_s() == INF
    assert net.advance(1e9) == []
    assert net.active_flows == 1


def test_same_time_deliveries_come_in_start_order():
    net = uniform(4, latency=0.0)
    for token, src in (("x", 3), ("y", 1), ("z", 2)):
        net.start_flow(0.0, src, 0, B, token)
    assert net.advance(net.next_event_s()) == ["x", "y", "z"]


def test_advance_past_several_finishes_resolves_each_in_order():
    net = uniform(4)
    net.start_flow(0.0, 1, 0, B, "a")
    net.start_flow(0.0, 2, 0, 2 * B, "b")
    net.start_flow(0.0, 3, 0, 3 * B, "c")
    assert net.advance(100.0) == ["a", "b", "c"]  # all at once, still in order
    assert net.bytes_delivered == 6 * B
    again = uniform(4)
    expected = drive(again, [(0.0, 1, 0, B, "a"), (0.0, 2, 0, 2 * B, "b"), (0.0, 3, 0, 3 * B, "c")])
    assert expected == {"a": pytest.approx(3 * B / C), "b": pytest.approx(5 * B / C), "c": pytest.approx(6 * B / C)}


def test_next_event_with_unequal_latencies_never_skips_a_delivery():
    # a finishes first but has a long latency; b finishes later and arrives first
    net = Network([C] * 3, [INF] * 3, [0.0, 1.0, 0.0])
    got = drive(net, [(0.0, 1, 0, B, "a"), (0.0, 2, 0, 2 * B, "b")])
    assert got == {"a": pytest.approx(B / C + 1.0), "b": pytest.approx(2 * B / C)}


def test_counters_and_idle_state():
    net = uniform(3)
    assert net.next_event_s() == INF
    assert net.advance(5.0) == []
    net.start_flow(5.0, 1, 0, B, "a")
    net.start_flow(5.0, 2, 0, B, "b")
    assert net.active_flows == 2
    assert net.bytes_delivered == 0.0
    t = net.next_event_s()
    assert t == pytest.approx(5.0 + 2 * B / C)
    assert net.advance(t) == ["a", "b"]
    assert net.active_flows == 0
    assert net.bytes_delivered == 2 * B
    assert net.next_event_s() == INF


def test_deterministic_bit_for_bit():
    rng = np.random.default_rng(7)
    m = 40
    up = rng.uniform(0.5, 2.0, m) * C
    down = rng.uniform(0.5, 2.0, m) * C
    lat = rng.uniform(0.0, 0.01, m)
    starts = []
    t = 0.0
    for i in range(400):
        t += float(rng.exponential(0.01))
        src, dst = rng.choice(m, 2, replace=False)
        starts.append((t, int(src), int(dst), float(rng.uniform(1, 3e5)), i))
    runs = [drive(Network(up.tolist(), down.tolist(), lat.tolist()), starts) for _ in range(2)]
    assert list(runs[0].items()) == list(runs[1].items())  # same order, same floats
    assert len(runs[0]) == 400


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("up", "down", "lat", "match"),
    [
        ([1.0, -1.0], [1.0, 1.0], 0.0, r"uplink_Bps\[1\]"),
        ([1.0, 1.0], [1.0, math.nan], 0.0, r"downlink_Bps\[1\]"),
        ([1.0, 1.0], [1.0], 0.0, "downlink_Bps has 1 entries"),
        ([], [], 0.0, "uplink_Bps is empty"),
        ([1.0, 1.0], [1.0, 1.0], -0.1, "latency_s"),
        ([1.0, 1.0], [1.0, 1.0], INF, "latency_s"),
        ([1.0, 1.0], [1.0, 1.0], [0.0], "latency_s has 1 entries"),
        ([1.0, 1.0], [1.0, 1.0], [0.0, "x"], "latency_s"),
    ],
)
def test_bad_network(up, down, lat, match):
    with pytest.raises(ValueError, match=match):
        Network(up, down, lat)


def test_bad_flows_and_times():
    net = uniform(3)
    with pytest.raises(ValueError, match="same node"):
        net.start_flow(0.0, 1, 1, B, "x")
    with pytest.raises(ValueError, match="node indices"):
        net.start_flow(0.0, 1, 3, B, "x")
    with pytest.raises(ValueError, match="node indices"):
        net.start_flow(0.0, -1, 0, B, "x")
    with pytest.raises(ValueError, match="nbytes"):
        net.start_flow(0.0, 1, 0, -1.0, "x")
    with pytest.raises(ValueError, match="nbytes"):
        net.start_flow(0.0, 1, 0, INF, "x")
    net.advance(2.0)
    with pytest.raises(ValueError, match="now_s"):
        net.start_flow(1.0, 1, 0, B, "x")
    with pytest.raises(ValueError, match="now_s"):
        net.advance(1.5)
    with pytest.raises(ValueError, match="now_s"):
        net.advance(math.nan)
    assert net.active_flows == 0


# --------------------------------------------------------------- properties

caps = st.one_of(st.sampled_from([INF, 1e6, 2e6]), st.floats(1e4, 1e7))


@st.composite
def scenarios(draw):
    m = draw(st.integers(2, 6))
    up = draw(st.lists(caps, min_size=m, max_size=m))
    down = draw(st.lists(caps, min_size=m, max_size=m))
    lat = draw(st.lists(st.sampled_from([0.0, 1e-3, 0.02]), min_size=m, max_size=m))
    n = draw(st.integers(1, 25))
    starts = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 1e-3, 0.01, 0.1, 0.37]))
        src = draw(st.integers(0, m - 1))
        dst = draw(st.integers(0, m - 2))
        dst += dst >= src
        nbytes = draw(st.one_of(st.just(0.0), st.floats(1.0, 1e6), st.sampled_from([1e5, 3e5])))
        starts.append((t, src, dst, nbytes, i))
    return up, down, lat, starts


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_conservation_and_speed_limit(sc):
    up, down, lat, starts = sc
    net = Network(up, down, lat)
    got = drive(net, starts)
    assert sorted(got) == list(range(len(starts)))
    assert net.active_flows == 0
    assert net.bytes_delivered == pytest.approx(sum(s[3] for s in starts), rel=1e-12)
    for t0, src, dst, nbytes, i in starts:
        fastest = nbytes / min(up[src], down[dst]) + max(lat[src], lat[dst])
        assert got[i] >= t0 + fastest * (1 - 1e-9) - 1e-12, (i, got[i], t0, fastest)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_extra_advance_calls_change_nothing(sc):
    up, down, lat, starts = sc
    plain = drive(Network(up, down, lat), starts)
    net = Network(up, down, lat)
    got: dict[object, float] = {}
    for t0, src, dst, nbytes, i in starts:
        # advance in small steps up to each start, then start the flow
        t = net.next_event_s()
        while t <= t0:
            for token in net.advance(t):
                got[token] = t
            t = net.next_event_s()
        for token in net.advance(t0):
            got[token] = t0
        net.start_flow(t0, src, dst, nbytes, i)
    while (t := net.next_event_s()) < INF:
        for token in net.advance(t):
            got[token] = t
    assert got.keys() == plain.keys()
    for token, t in plain.items():
        assert got[token] == pytest.approx(t, rel=1e-9, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_first_delivery_matches_maxmin_rates(sc):
    up, down, lat, starts = sc
    m = len(up)
    flows = [(s[1], s[2], s[3]) for s in starts]
    net = Network(up, down, 0.0)
    for i, (src, dst, nbytes) in enumerate(flows):
        net.start_flow(0.0, src, dst, nbytes, i)
    links = np.array([[src, m + dst] for src, dst, _ in flows])
    rates = maxmin_rates(np.array(up + down), links)
    sizes = np.array([nbytes for _, _, nbytes in flows])
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(sizes == 0, 0.0, sizes / rates).min()
    t = net.next_event_s()
    assert t == pytest.approx(first, rel=1e-9, abs=1e-12)
    assert net.advance(t)


# -------------------------------------------------------------- fast paths
#
# The network skips the full progressive fill when its one-round test shows
# that the fill would stop after its first round, and keeps a few flows in
# Python lists instead of numpy arrays. Neither may change a single bit: the
# networks below are compared with one that always runs the full fill on
# arrays, after every call, down to the rates and remaining bytes.

FLOW_LAYOUTS = {
    "default": {},
    "arrays": {"_to_arrays_above": 0, "_to_lists_below": 0},
    "lists": {"_to_arrays_above": 10**9, "_to_lists_below": 0},
    "switching": {"_to_arrays_above": 3, "_to_lists_below": 2},
    "blocks": {"_to_arrays_above": 0, "_to_lists_below": 0, "_blocks_every": 1, "_block_min": 2, "_loose_max": 2},
    "blocks-loose": {"_to_arrays_above": 0, "_to_lists_below": 0, "_blocks_every": 3, "_block_min": 2},
    "blocks-switching": {"_to_arrays_above": 4, "_to_lists_below": 3, "_blocks_every": 2, "_block_min": 3},
}


def configured(up, down, lat, *, one_round_test: bool = True, layout: str = "default") -> Network:
    net = Network(up, down, lat)
    net._one_round_test = one_round_test
    for name, value in FLOW_LAYOUTS[layout].items():
        setattr(net, name, value)
    return net


def reference(up, down, lat) -> Network:
    """The full progressive fill at every re-share, flows in arrays."""
    return configured(up, down, lat, one_round_test=False, layout="arrays")


def bits(values) -> list[str]:
    return [float(v).hex() for v in values]


def flow_state(net: Network) -> tuple[list[str], list[str]]:
    """Rates and remaining bytes of the flows in transfer, slot by slot, as exact bits."""
    rates, remaining = net._slot_state()
    return bits(rates), bits(remaining)


# Once a network has grouped flows in blocks, their remaining bytes are finish
# levels less the block's clock: the same sums as the reference's, rounded in
# another order. Rates stay bit for bit the reference's, deliveries the same
# tokens in the same order; remaining bytes within this much of the largest
# flow, times within this much (relative, and absolute near 0).
BLOCK_RTOL = 1e-12


def assert_same_state(fast: Network, ref: Network, exact: bool, size: float) -> None:
    """The flows' rates bit for bit, and their remaining bytes bit for bit
    (``exact``) or within BLOCK_RTOL of ``size``."""
    if exact:
        assert flow_state(fast) == flow_state(ref)
        return
    (rates, remaining), (ref_rates, ref_remaining) = fast._slot_state(), ref._slot_state()
    assert bits(rates) == bits(ref_rates)
    assert len(remaining) == len(ref_remaining)
    for x, y in zip(remaining, ref_remaining, strict=True):
        assert x == y or abs(x - y) <= BLOCK_RTOL * size, (x, y)


def assert_same_deliveries(got: dict[object, float], ref: dict[object, float]) -> None:
    """The same tokens delivered in the same order, at the reference's times within BLOCK_RTOL (blocks)."""
    assert list(got) == list(ref)
    for token, t in got.items():
        assert same_time(t, ref[token], exact=False), (token, t, ref[token])


def same_time(t: float, ref: float, exact: bool) -> bool:
    """``t`` is the reference time ``ref``: bit for bit, or within BLOCK_RTOL."""
    if exact or t == ref:
        return t.hex() == ref.hex()
    return abs(t - ref) <= BLOCK_RTOL * max(1.0, abs(ref))


def check_blocks(net: Network) -> None:
    """In the blocks layout, every flow is in one block, whose summaries are right."""
    loose = net._loose
    if net._layout != network_module._BLOCKS:
        assert not net._blocks and not net._loc and not net._idx and not loose.slots
        return
    n = net._n
    assert len(net._loc) == len(net._idx) == n
    assert len(loose.rem) == len(loose.done) == len(loose.lat) == len(loose.slots) <= net._loose_max
    for j, s in enumerate(loose.slots):
        assert net._loc[s] is None and net._idx[s] == j
    seen = len(loose.slots)
    for link, block in net._blocks.items():
        k = block.k
        assert block.link == link and len(block.slots) == k
        for j, s in enumerate(block.slots):
            assert net._loc[s] is block and net._idx[s] == j
            assert link in (net._up[s], net._down[s])
        seen += k
        if k:
            assert block.min_val == block.rem[block.min_i] == block.rem[:k].min()
            assert len(block.done) == len(block.lat) == k
            assert block.max_done >= max(block.done)
    assert seen == n


def check_bookkeeping(net: Network) -> None:
    """The one-round test's per-link state equals a recomputation from the flows."""
    n_links = 2 * net._m
    flows = list(zip(net._up, net._down, strict=True))
    assert len(flows) == net._n
    count = [0] * n_links
    partners: list[Counter[int]] = [Counter() for _ in range(n_links)]
    for u, d in flows:
        count[u] += 1
        count[d] += 1
        partners[u][d] += 1
        partners[d][u] += 1
    assert net._count == count
    for lk in range(n_links):
        if count[lk]:
            assert net._share[lk] == net._cap[lk] / count[lk]
    tracked = {lk for lk in range(n_links) if count[lk] >= 2}
    assert net._tracked == [{p: k for p, k in partners[lk].items() if p in tracked} for lk in range(n_links)]
    expected_sorted = {lk: sorted(net._share[p] for p in partners[lk].elements()) for lk in tracked}
    assert net._sorted == expected_sorted
    impure = set()
    for lk in tracked:
        beats = [net._share[lk] > net._share[p] * (1.0 + 1e-12) for p in partners[lk].elements()]
        if any(beats) and not all(beats):
            impure.add(lk)
    assert net._impure == impure


def run_side_by_side(up, down, lat, program, layout: str, deep: bool = True) -> None:
    """Drive a fast network and the reference with ``program``; compare after every call.

    ``program``: (kind, value, a, b, nbytes) with kind "start" (start a flow
    from node a to node b, ``value`` seconds after the latest time), "cap"
    (set node a's capacities to b = (uplink, downlink) ``value`` seconds after
    the latest time; nbytes unused), "next" (advance to the next event) or
    "part" (advance a fraction ``value`` of the way to it).
    ``deep``: also compare the flows' rates and remaining bytes after every
    call, and check the fast network's bookkeeping.
    """
    fast = configured(up, down, lat, layout=layout)
    ref = reference(up, down, lat)
    now = 0.0
    token = 0
    size = max([1.0, *(op[4] for op in program if op[0] == "start")])
    exact = True  # until the fast network groups flows in blocks
    ops = [*program, *[("next", 0.0, 0, 0, 0.0)] * (2 * len(program) + 2)]
    for kind, value, a, b, nbytes in ops:
        t_ref, t_fast = ref.next_event_s(), fast.next_event_s()
        exact = exact and fast._layout != network_module._BLOCKS
        assert same_time(t_fast, t_ref, exact), (t_fast, t_ref)
        if deep:
            assert_same_state(fast, ref, exact, size)
            check_bookkeeping(fast)
            check_blocks(fast)
        if kind == "start":
            now += value
            fast.start_flow(now, a, b, nbytes, token)
            ref.start_flow(now, a, b, nbytes, token)
            token += 1
        elif kind == "cap":
            now += value
            fast.set_capacity(now, a, uplink_Bps=b[0], downlink_Bps=b[1])
            ref.set_capacity(now, a, uplink_Bps=b[0], downlink_Bps=b[1])
        elif t_ref < INF:
            t = t_ref if kind == "next" else now + value * (t_ref - now)
            now = max(now, t)
            if kind == "next" and not exact:
                now = max(now, t_fast)  # the later of the two next events (within BLOCK_RTOL): both deliver
            assert fast.advance(now) == ref.advance(now)
        assert fast.active_flows == ref.active_flows
        assert fast._cap == ref._cap
    assert fast.bytes_delivered == ref.bytes_delivered
    check_bookkeeping(fast)


fast_caps = st.one_of(st.sampled_from([INF, 1e6, 2e6, 4e6]), st.floats(1e4, 1e7), st.just(0.0))
gaps = st.sampled_from([0.0, 0.0, 0.0, 1e-3, 0.01, 0.1, 0.37])
sizes = st.one_of(st.sampled_from([1e5, 3e5]), st.floats(1.0, 1e6), st.just(0.0))


@st.composite
def general_programs(draw):
    m = draw(st.integers(2, 6))
    up = draw(st.lists(fast_caps, min_size=m, max_size=m))
    down = draw(st.lists(fast_caps, min_size=m, max_size=m))
    lat = draw(st.lists(st.sampled_from([0.0, 1e-3, 0.02]), min_size=m, max_size=m))
    program = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["start", "start", "start", "next", "part"]))
        src = draw(st.integers(0, m - 1))
        dst = draw(st.integers(0, m - 2))
        dst += dst >= src
        value = draw(gaps) if kind == "start" else draw(st.sampled_from([0.0, 0.3, 0.999]))
        program.append((kind, value, src, dst, draw(sizes)))
    return up, down, lat, program


@st.composite
def star_programs(draw):
    """A parameter server (node 0) and workers pushing to it and pulling from it.

    Server capacities from far below to far above the workers' sum, so the
    server's links are saturated (many flows at cap / count) or not (each
    flow at its worker's capacity), with ties between the two, and workers
    of equal or unequal capacities.
    """
    k = draw(st.integers(1, 12))
    worker_caps = st.one_of(st.sampled_from([1e6, 2e6]), st.floats(5e5, 4e6)) if draw(st.booleans()) else st.just(1e6)
    workers = draw(st.lists(worker_caps, min_size=k, max_size=k))
    server = draw(st.sampled_from([1e6, 2e6, 3e6, 4e6, 1e7, 1e8, INF]))
    up = [server, *workers]
    down = [server, *draw(st.lists(worker_caps, min_size=k, max_size=k))]
    program = []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["start"] * 4 + ["next", "part"]))
        w = draw(st.integers(1, k))
        src, dst = (w, 0) if draw(st.booleans()) else (0, w)
        value = draw(st.sampled_from([0.0, 0.0, 1e-3, 0.05])) if kind == "start" else draw(st.sampled_from([0.0, 0.5]))
        program.append((kind, value, src, dst, draw(st.sampled_from([1e5, 1e5, 2.5e5]))))
    return up, down, draw(st.sampled_from([0.0, 2e-4])), program


@pytest.mark.parametrize("layout", list(FLOW_LAYOUTS))
@settings(max_examples=150, deadline=None)
@given(general_programs())
def test_fast_paths_match_full_fill_general(layout, prog):
    up, down, lat, program = prog
    run_side_by_side(up, down, lat, program, layout)


@pytest.mark.parametrize("layout", list(FLOW_LAYOUTS))
@settings(max_examples=150, deadline=None)
@given(star_programs())
def test_fast_paths_match_full_fill_star(layout, prog):
    up, down, lat, program = prog
    run_side_by_side(up, down, lat, program, layout)


@pytest.mark.parametrize("layout", ["default", "blocks", "blocks-loose"])
@settings(max_examples=100, deadline=None)
@given(star_programs())
def test_fast_paths_match_full_fill_star_undisturbed(layout, prog):
    # only the delivery times compared, no looking inside between calls
    up, down, lat, program = prog
    run_side_by_side(up, down, lat, program, layout, deep=False)


def count_full_fills(monkeypatch) -> list[int]:
    calls = [0]
    real = network_module.progressive_fill

    def counting(*args):
        calls[0] += 1
        real(*args)

    monkeypatch.setattr(network_module, "progressive_fill", counting)
    return calls


@pytest.mark.parametrize(("server", "pull_server"), [(C, C), (100 * C, 100 * C), (C, 1000 * C)])
def test_star_of_equal_workers_never_runs_the_full_fill(monkeypatch, server, pull_server):
    # 150 workers push and pull at once: a saturated server (C), or not (100 C),
    # or a saturated downlink and a free uplink
    calls = count_full_fills(monkeypatch)
    k = 150
    up = [pull_server] + [C] * k
    down = [server] + [C] * k
    starts = [(0.001 * i, w, 0, B, ("push", w)) for i, w in enumerate(range(1, k + 1))]
    starts += [(0.0005 + 0.001 * i, 0, w, B, ("pull", w)) for i, w in enumerate(range(1, k + 1))]
    starts.sort(key=lambda s: s[0])
    net = Network(up, down, 1e-4)
    layouts = set()

    class Watched:  # the driver's calls, noting the layout after each
        def __getattr__(self, name):
            def call(*args):
                out = getattr(net, name)(*args)
                layouts.add(net._layout)
                return out

            return call

    got = drive(Watched(), starts)  # type: ignore[arg-type]
    assert calls[0] == 0
    if server == C:
        assert network_module._BLOCKS in layouts
    full = drive(reference(up, down, 1e-4), starts)
    assert calls[0] > 0
    assert_same_deliveries(got, full)


def test_a_block_flow_done_by_its_bytes_behind_one_not_done():
    # Link 3 (node 0's downlink, 3 B/s) carries j (1e9 B, alone at 3 B/s until
    # T0), then i (1 B) and h (1.6 B) too, 1 B/s each. When i finishes at
    # T0 + 1, h has 0.6 B left (not done) and j 0.8 B (done: within 1e-9 of
    # its size); j is not next by remaining bytes, so the block must look at
    # all its flows.
    up, down = [INF] * 3, [3.0, INF, INF]
    t0 = (1e9 - 1.8) / 3.0
    program = [("start", 0.0, 1, 0, 1e9), ("start", t0, 2, 0, 1.0), ("start", 0.0, 1, 0, 1.6)]
    for layout in FLOW_LAYOUTS:
        run_side_by_side(up, down, 0.0, program, layout)
    net = configured(up, down, 0.0, layout="blocks")
    net.start_flow(0.0, 1, 0, 1e9, "j")
    net.advance(net.next_event_s() if net.next_event_s() < t0 else t0)
    net.start_flow(t0, 2, 0, 1.0, "i")
    net.start_flow(t0, 1, 0, 1.6, "h")
    t = net.next_event_s()
    assert net._layout == network_module._BLOCKS
    assert t == pytest.approx(t0 + 1.0)
    assert net.advance(t) == ["j", "i"]
    assert net.active_flows == 1


def test_a_flow_bottlenecked_elsewhere_takes_the_full_fill(monkeypatch):
    # the slow sender's flow and the fast ones disagree on the server's downlink
    calls = count_full_fills(monkeypatch)
    net = Network([INF, C / 2, INF, INF], [3 * C, INF, INF, INF], 0.0)
    for w in (1, 2, 3):
        net.start_flow(0.0, w, 0, B, w)
    net.next_event_s()
    assert net._impure == {4}
    assert calls[0] == 1
