"""Fluid network: capacity changes (``Network.set_capacity``) in mid-transfer."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsync.algos.maxmin import progressive_fill
from hetsync.sim.network import Network
from hetsync.sim.network import flows as network_module
from tests.sim.test_network import (
    FLOW_LAYOUTS,
    assert_same_deliveries,
    configured,
    fast_caps,
    flow_state,
    gaps,
    reference,
    run_side_by_side,
    sizes,
)

INF = math.inf
C = 1e6  # bytes/s
B = 250_000.0  # bytes

# An event of the driver: (time, "start", (src, dst, nbytes, token)) or
# (time, "cap", (node, uplink_Bps, downlink_Bps)), sorted by time.
Event = tuple[float, str, tuple]


def drive(net: Network, events: list[Event]) -> dict[object, float]:
    """Run the usual driver loop with flow starts and capacity changes; return delivery times.

    An event happens before the network is advanced to its time's deliveries;
    the events at one time happen with no look at the clock in between.
    """
    delivered: dict[object, float] = {}
    pending = list(events)
    while True:
        t_net = net.next_event_s()
        if pending and pending[0][0] <= t_net:
            t0 = pending[0][0]
            while pending and pending[0][0] == t0:
                t, kind, args = pending.pop(0)
                if kind == "start":
                    net.start_flow(t, *args)
                else:
                    node, up, down = args
                    net.set_capacity(t, node, uplink_Bps=up, downlink_Bps=down)
        elif t_net < INF:
            for token in net.advance(t_net):
                assert token not in delivered
                delivered[token] = t_net
        else:
            return delivered


def start(t: float, src: int, dst: int, nbytes: float, token: object) -> Event:
    return (t, "start", (src, dst, nbytes, token))


def cap(t: float, node: int, up: float | None = None, down: float | None = None) -> Event:
    return (t, "cap", (node, up, down))


def exact(times: dict[object, float]) -> list[tuple[object, str]]:
    return [(token, t.hex()) for token, t in times.items()]


# ------------------------------------------------------------ closed forms


@pytest.mark.parametrize("latency", [0.0, 0.003])
@pytest.mark.parametrize(("c1", "c2"), [(C, 3 * C), (C, C / 4), (2.5e5, 7e6), (3 * C, 1.5 * C)])
@pytest.mark.parametrize("side", ["uplink", "downlink"])
def test_one_flow_through_a_change_of_capacity(latency, c1, c2, side):
    t = 0.05
    up, down = [INF, INF], [INF, INF]
    # flow 1 -> 0: node 1's uplink or node 0's downlink is the only finite link
    node = 1 if side == "uplink" else 0
    (up if side == "uplink" else down)[node] = c1
    change = cap(t, node, up=c2) if side == "uplink" else cap(t, node, down=c2)
    got = drive(Network(up, down, latency), [start(0.0, 1, 0, B, "a"), change])
    assert got == {"a": pytest.approx(t + (B - c1 * t) / c2 + latency, rel=1e-12)}


def test_change_in_the_middle_of_two_shares():
    # a (B) and b (3B) share node 0's downlink C from 0; at 0.1 it becomes 2C.
    # Each has B - 0.05 C left at 0.1, then 2C / 2 = C each: a done at
    # 0.1 + (B - 0.05 C) / C; b then has 2B left, alone at 2C.
    net = Network([INF] * 3, [C, INF, INF], 0.0)
    got = drive(net, [start(0.0, 1, 0, B, "a"), start(0.0, 2, 0, 3 * B, "b"), cap(0.1, 0, down=2 * C)])
    t_a = 0.1 + (B - 0.05 * C) / C
    assert got == {"a": pytest.approx(t_a, rel=1e-12), "b": pytest.approx(t_a + 2 * B / (2 * C), rel=1e-12)}


def test_change_of_both_links_of_a_node_at_once():
    # flow 1 -> 0 at min(up1, down0); flow 0 -> 2 at min(up0, down2)
    net = Network([C, C, INF], [C, INF, INF], 0.0)
    events = [start(0.0, 1, 0, B, "in"), start(0.0, 0, 2, B, "out"), cap(0.1, 0, up=C / 2, down=2 * C)]
    got = drive(net, events)
    # "in": C until 0.1 (0.1 C), then min(C, 2C) = C; "out": C, then C/2
    assert got == {"in": pytest.approx(B / C), "out": pytest.approx(0.1 + (B - 0.1 * C) / (C / 2))}


def test_a_transfer_done_before_the_change_finishes_at_its_own_time():
    net = Network([C, C], [C, C], 0.01)
    net.start_flow(0.0, 1, 0, B, "a")
    net.set_capacity(10.0, 1, uplink_Bps=C / 100)  # a finished at B / C
    assert net.active_flows == 0
    assert net.next_event_s() == 10.0  # delivered at B / C + 0.01, not yet collected
    assert net.advance(10.0) == ["a"]


def test_changes_after_all_flows_finished_change_nothing():
    up, down, lat = [C, 2 * C, C], [C, C, 3 * C], [0.0, 0.001, 0.002]
    starts = [start(0.0, 1, 0, B, "a"), start(0.01, 2, 0, 2 * B, "b"), start(0.02, 0, 2, B, "c")]
    plain = drive(Network(up, down, lat), starts)
    late = max(plain.values()) + 1.0
    changes = [cap(late, 0, up=INF, down=0.0), cap(late + 1, 1, up=5.0), cap(late + 2, 2, down=INF)]
    assert exact(drive(Network(up, down, lat), starts + changes)) == exact(plain)
    # and a flow started after the changes sees the new capacities
    net = Network(up, down, lat)
    drive(net, starts + changes)
    net.start_flow(late + 3, 1, 2, B, "d")  # node 1's uplink now 5 B/s, node 2's downlink inf
    assert net.next_event_s() == pytest.approx(late + 3 + B / 5.0 + 0.002)


def test_a_change_on_links_without_flows_changes_no_bits():
    up, down = [C] * 4, [C] * 4
    starts = [start(0.0, 1, 0, B, "a"), start(0.01, 2, 0, 2 * B, "b"), start(0.02, 0, 2, B, "c")]
    plain = drive(Network(up, down, 0.0), starts)
    changes = [cap(0.005, 3, up=INF, down=0.0), cap(0.015, 1, down=2.0), cap(0.03, 3, up=7.0)]
    events = sorted(starts + changes, key=lambda e: e[0])
    assert exact(drive(Network(up, down, 0.0), events)) == exact(plain)


def test_a_no_op_change_keeps_everything():
    up, down = [C, 2 * C, C], [C, C, 3 * C]
    starts = [start(0.0, 1, 0, B, "a"), start(0.01, 2, 0, 2 * B, "b"), start(0.02, 0, 2, B, "c")]
    plain = drive(Network(up, down, 0.001), starts)
    net = Network(up, down, 0.001)
    for e in starts:
        net.start_flow(e[0], *e[2])
    before = net.next_event_s()
    state = flow_state(net)
    # same values, given as other types or -0.0 for 0.0
    net.set_capacity(0.03, 1, uplink_Bps=2 * C, downlink_Bps=C)
    net.set_capacity(0.03, 2, uplink_Bps=int(C), downlink_Bps=np.float32(3 * C))
    net.set_capacity(0.04, 0)
    assert not net._dirty
    assert net.next_event_s().hex() == before.hex()
    assert flow_state(net) == state
    noops = [cap(0.03, 1, 2 * C, C), cap(0.035, 0), cap(0.05, 2, down=3 * C), cap(0.05, 0, up=C, down=C)]
    events = sorted(starts + noops, key=lambda e: e[0])
    assert exact(drive(Network(up, down, 0.001), events)) == exact(plain)


def test_zero_capacity_stops_a_flow_until_it_comes_back():
    net = Network([C, C, C], [C, INF, INF], 0.0)
    net.start_flow(0.0, 1, 0, B, "stuck")
    net.start_flow(0.0, 2, 0, B, "other")
    net.set_capacity(0.1, 1, uplink_Bps=0.0)  # both at C/2 until 0.1: 0.05 C done each
    # "other" gets the whole downlink: done at 0.1 + (B - 0.05 C) / C
    t_other = 0.1 + (B - 0.05 * C) / C
    assert net.next_event_s() == pytest.approx(t_other)
    assert net.advance(net.next_event_s()) == ["other"]
    assert net.next_event_s() == INF
    assert net.advance(100.0) == []
    assert net.active_flows == 1
    net.set_capacity(100.0, 1, uplink_Bps=C / 2)
    assert net.next_event_s() == pytest.approx(100.0 + (B - 0.05 * C) / (C / 2))
    assert net.advance(net.next_event_s()) == ["stuck"]
    assert net.active_flows == 0
    assert net.bytes_delivered == 2 * B


@pytest.mark.parametrize("layout", ["lists", "arrays"])
def test_zero_capacity_raises_no_warnings(layout):
    net = configured([C] * 3, [C] * 3, 0.0, layout=layout)
    net.start_flow(0.0, 1, 0, B, "a")
    net.start_flow(0.0, 2, 0, B, "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.set_capacity(0.1, 1, uplink_Bps=0.0)
        assert net.advance(net.next_event_s()) == ["b"]
        net.set_capacity(1.0, 1, uplink_Bps=C)
        assert net.advance(net.next_event_s()) == ["a"]


def test_the_whole_network_at_zero_then_back():
    events = [start(0.0, 1, 0, B, "a"), cap(0.1, 0, down=0.0), cap(2.0, 0, down=C)]
    got = drive(Network([INF, INF], [C, INF], 0.0), events)
    assert got == {"a": pytest.approx(2.0 + (B - 0.1 * C) / C)}


def test_capacity_raised_to_unlimited():
    # "a" 1 -> 0 crosses node 1's uplink (C) and node 0's downlink (inf): made
    # unlimited at 0.1, it is delivered after its latency. "b" 2 -> 0 crosses
    # node 2's uplink (C) and node 0's downlink too: it goes on at C.
    net = Network([INF, C, C], [INF, INF, INF], [0.0, 0.02, 0.0])
    net.start_flow(0.0, 1, 0, B, "a")
    net.start_flow(0.0, 2, 0, B, "b")
    net.set_capacity(0.1, 1, uplink_Bps=INF)
    assert net.active_flows == 1
    assert net.next_event_s() == 0.1 + 0.02
    assert net.advance(0.1 + 0.02) == ["a"]
    assert net.advance(net.next_event_s()) == ["b"]
    assert net.next_event_s() == INF
    assert net.bytes_delivered == 2 * B


def test_unlimited_to_finite_makes_a_flow_share_again():
    # flows 1 -> 0 and 2 -> 0, at C each (the senders' uplinks) until node 0's
    # downlink goes from inf to C at 0.1; then they share it, C/2 each
    net = Network([INF, C, C], [INF, INF, INF], 0.0)
    got = drive(net, [start(0.0, 1, 0, B, "a"), start(0.0, 2, 0, B, "b"), cap(0.1, 0, down=C)])
    t = 0.1 + (B - 0.1 * C) / (C / 2)
    assert got == {"a": pytest.approx(t), "b": pytest.approx(t)}


def test_a_flow_started_on_unlimited_links_is_not_affected_by_later_changes():
    net = Network([INF, INF], [INF, INF], 0.25)
    net.start_flow(0.0, 1, 0, 1e12, "a")
    net.set_capacity(0.1, 1, uplink_Bps=1.0)
    assert net.advance(0.25) == ["a"]


# -------------------------------------------------------------- validation


def test_bad_capacity_changes_name_the_argument():
    net = Network([C] * 3, [C] * 3, 0.0)
    net.start_flow(1.0, 1, 0, B, "a")
    t = net.next_event_s()
    for kwargs, match in [
        ({"now_s": 0.5, "node": 1, "uplink_Bps": 1.0}, "now_s"),
        ({"now_s": math.nan, "node": 1, "uplink_Bps": 1.0}, "now_s"),
        ({"now_s": INF, "node": 1, "uplink_Bps": 1.0}, "now_s"),
        ({"now_s": 1.0, "node": 3, "uplink_Bps": 1.0}, "node"),
        ({"now_s": 1.0, "node": -1, "uplink_Bps": 1.0}, "node"),
        ({"now_s": 1.0, "node": 1.0, "uplink_Bps": 1.0}, "node"),
        ({"now_s": 1.0, "node": "1", "uplink_Bps": 1.0}, "node"),
        ({"now_s": 1.0, "node": 1, "uplink_Bps": -1.0}, "uplink_Bps"),
        ({"now_s": 1.0, "node": 1, "uplink_Bps": math.nan}, "uplink_Bps"),
        ({"now_s": 1.0, "node": 1, "uplink_Bps": "fast"}, "uplink_Bps"),
        ({"now_s": 1.0, "node": 1, "uplink_Bps": C, "downlink_Bps": -INF}, "downlink_Bps"),
        ({"now_s": 1.0, "node": 0, "downlink_Bps": math.nan}, "downlink_Bps"),
        ({"now_s": 1.0, "node": 0, "downlink_Bps": [1.0]}, "downlink_Bps"),
    ]:
        with pytest.raises(ValueError, match=match):
            net.set_capacity(**kwargs)
    # nothing changed, not even the clock
    assert net.next_event_s() == t
    assert net._cap == [C] * 6
    net.set_capacity(1.0, 1)  # the network's time is still 1.0
    net.advance(2.0)
    with pytest.raises(ValueError, match="now_s"):
        net.set_capacity(1.5, 1)
    net.set_capacity(3.0, 1)  # a no-op moves the clock too
    with pytest.raises(ValueError, match="now_s"):
        net.advance(2.5)


# --------------------------------------------------------------- properties
#
# A brute-force reference: the flows in transfer are re-shared by the full
# progressive fill at every event (flow start, flow finish, capacity change)
# and the bytes integrated between events at those rates.


def brute_force(up: list[float], down: list[float], lat: list[float], events: list[Event]) -> dict[object, float]:
    m = len(up)
    capacity = np.array(up + down, dtype=np.float64)
    flows: list[dict] = []  # in transfer: links, remaining bytes, size, latency, token
    delivered: dict[object, float] = {}
    t = 0.0
    pending = list(events)

    def rates() -> np.ndarray:
        links = np.array([f["links"] for f in flows], dtype=np.intp).T.copy()
        out = np.empty(len(flows))
        link_flows = np.bincount(links.ravel(), minlength=2 * m).astype(np.float64)
        progressive_fill(capacity, links, link_flows, out)
        return out

    while True:
        rate = rates() if flows else np.empty(0)
        with np.errstate(divide="ignore"):
            left = np.array([f["rem"] for f in flows]) / rate
        t_finish = t + float(left.min()) if flows else INF
        t_event = pending[0][0] if pending else INF
        if t_finish == INF and t_event == INF:
            return delivered
        t_next = min(t_finish, t_event)
        dt = t_next - t
        for f, x in zip(flows, rate, strict=True):
            if x == INF:
                f["rem"] = 0.0
            else:
                f["rem"] -= x * dt
        t = t_next
        tol = 1e-12 + 1e-15 * abs(t)
        still = []
        for f, tl in zip(flows, left, strict=True):
            if f["rem"] <= 1e-9 * f["size"] or tl - dt <= tol:
                delivered[f["token"]] = t + f["latency"]
            else:
                still.append(f)
        flows = still
        # one event at a time, in order, as the network takes them: a flow
        # through infinite links is delivered at its start, before a
        # capacity change of the same instant (which the next pass applies)
        if pending and pending[0][0] <= t:
            _, kind, args = pending.pop(0)
            if kind == "start":
                src, dst, nbytes, token = args
                latency = max(lat[src], lat[dst])
                if nbytes == 0.0:
                    delivered[token] = t + latency
                else:
                    flows.append(
                        {"links": (src, m + dst), "rem": nbytes, "size": nbytes, "latency": latency, "token": token}
                    )
            else:
                node, new_up, new_down = args
                if new_up is not None:
                    capacity[node] = new_up
                if new_down is not None:
                    capacity[m + node] = new_down


varying_caps = st.one_of(st.sampled_from([INF, 0.0, 1e6, 2e6]), st.floats(1e4, 1e7))
maybe_cap = st.one_of(st.none(), varying_caps)


@st.composite
def scenarios(draw):
    m = draw(st.integers(2, 6))
    up = draw(st.lists(varying_caps, min_size=m, max_size=m))
    down = draw(st.lists(varying_caps, min_size=m, max_size=m))
    lat = draw(st.lists(st.sampled_from([0.0, 1e-3, 0.02]), min_size=m, max_size=m))
    events: list[Event] = []
    t = 0.0
    token = 0
    for _ in range(draw(st.integers(1, 30))):
        t += draw(st.sampled_from([0.0, 0.0, 1e-3, 0.01, 0.1, 0.37]))
        if draw(st.integers(0, 2)):
            src = draw(st.integers(0, m - 1))
            dst = draw(st.integers(0, m - 2))
            dst += dst >= src
            nbytes = draw(st.one_of(st.just(0.0), st.floats(1.0, 1e6), st.sampled_from([1e5, 3e5])))
            events.append(start(t, src, dst, nbytes, token))
            token += 1
        else:
            events.append(cap(t, draw(st.integers(0, m - 1)), draw(maybe_cap), draw(maybe_cap)))
    # at the end, every link back to a positive capacity (some flows may be
    # stuck at rate 0 before that)
    t += draw(st.sampled_from([0.0, 0.01, 1.0]))
    events += [cap(t, node, C, C) for node in range(m)]
    return up, down, lat, events


@settings(max_examples=250, deadline=None, derandomize=True)
@given(scenarios())
def test_matches_brute_force_progressive_fill(sc):
    up, down, lat, events = sc
    net = Network(up, down, lat)
    got = drive(net, events)
    want = brute_force(up, down, lat, events)
    assert got.keys() == want.keys()
    assert net.active_flows == 0
    for token, t in want.items():
        assert got[token] == pytest.approx(t, rel=1e-9, abs=1e-12), token
    sizes = {e[2][3]: e[2][2] for e in events if e[1] == "start"}
    assert net.bytes_delivered == pytest.approx(sum(sizes.values()), rel=1e-12)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(scenarios())
def test_stuck_flows_stay_stuck(sc):
    # without the final changes back to positive capacities, the flows left in
    # transfer are exactly those the reference never finishes
    up, down, lat, events = sc
    events = events[: -len(up)]
    net = Network(up, down, lat)
    got = drive(net, events)
    want = brute_force(up, down, lat, events)
    assert got.keys() == want.keys()
    assert net.active_flows == sum(e[1] == "start" for e in events) - len(got)
    for token, t in want.items():
        assert got[token] == pytest.approx(t, rel=1e-9, abs=1e-12), token


# ------------------------------------------------------------ fast paths
#
# After capacity changes the fast paths (one-round test, flow layouts) still
# give the very bits of the full progressive fill over the flows in arrays.


@st.composite
def general_programs(draw):
    m = draw(st.integers(2, 6))
    up = draw(st.lists(fast_caps, min_size=m, max_size=m))
    down = draw(st.lists(fast_caps, min_size=m, max_size=m))
    lat = draw(st.lists(st.sampled_from([0.0, 1e-3, 0.02]), min_size=m, max_size=m))
    program = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["start", "start", "start", "cap", "next", "part"]))
        if kind == "cap":
            node = draw(st.integers(0, m - 1))
            new_caps = st.one_of(st.none(), st.just(INF), fast_caps)
            new = (draw(new_caps), draw(new_caps))
            program.append((kind, draw(gaps), node, new, 0.0))
            continue
        src = draw(st.integers(0, m - 1))
        dst = draw(st.integers(0, m - 2))
        dst += dst >= src
        value = draw(gaps) if kind == "start" else draw(st.sampled_from([0.0, 0.3, 0.999]))
        program.append((kind, value, src, dst, draw(sizes)))
    program += [("cap", 0.0, node, (1e6, 1e6), 0.0) for node in range(m)]
    return up, down, lat, program


@st.composite
def star_programs(draw):
    """A parameter server (node 0) and workers whose links (and the server's) switch."""
    k = draw(st.integers(1, 12))
    worker_caps = st.one_of(st.sampled_from([1e6, 2e6]), st.floats(5e5, 4e6)) if draw(st.booleans()) else st.just(1e6)
    switched = st.sampled_from([5e5, 1e6, 2e6, 0.0, INF])
    workers = draw(st.lists(worker_caps, min_size=k, max_size=k))
    server_caps = st.sampled_from([1e6, 2e6, 3e6, 4e6, 1e7, 1e8, INF])
    server = draw(server_caps)
    up = [server, *workers]
    down = [server, *draw(st.lists(worker_caps, min_size=k, max_size=k))]
    program = []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["start"] * 4 + ["cap", "next", "part"]))
        if kind == "cap":
            node = draw(st.integers(0, k))
            caps = server_caps if node == 0 else st.one_of(worker_caps, switched)
            which = draw(st.sampled_from(["up", "down", "both"]))
            new = (
                draw(caps) if which != "down" else None,
                draw(caps) if which != "up" else None,
            )
            program.append((kind, draw(st.sampled_from([0.0, 1e-3, 0.05])), node, new, 0.0))
            continue
        w = draw(st.integers(1, k))
        src, dst = (w, 0) if draw(st.booleans()) else (0, w)
        value = draw(st.sampled_from([0.0, 0.0, 1e-3, 0.05])) if kind == "start" else draw(st.sampled_from([0.0, 0.5]))
        program.append((kind, value, src, dst, draw(st.sampled_from([1e5, 1e5, 2.5e5]))))
    program += [("cap", 0.0, node, (1e6, 1e6), 0.0) for node in range(k + 1)]
    return up, down, draw(st.sampled_from([0.0, 2e-4])), program


@pytest.mark.parametrize("layout", list(FLOW_LAYOUTS))
@settings(max_examples=40, deadline=None, derandomize=True)
@given(general_programs())
def test_fast_paths_match_full_fill_general(layout, prog):
    up, down, lat, program = prog
    run_side_by_side(up, down, lat, program, layout)


@pytest.mark.parametrize("layout", list(FLOW_LAYOUTS))
@settings(max_examples=40, deadline=None, derandomize=True)
@given(star_programs())
def test_fast_paths_match_full_fill_star(layout, prog):
    up, down, lat, program = prog
    run_side_by_side(up, down, lat, program, layout)


@pytest.mark.parametrize("layout", list(FLOW_LAYOUTS))
@pytest.mark.parametrize("direction", ["pull", "push"])
def test_flows_made_unlimited_in_every_layout(layout, direction):
    # 12 flows through the server's uplink (pull) or downlink (push), 10C
    # shared; then the server's link and two workers' links become unlimited
    # at once: those two flows leave the sharing, the others go on at their
    # workers' 2C
    k = 12
    up, down = [10 * C] + [2 * C] * k, [10 * C] + [2 * C] * k
    pairs = [(0, w) if direction == "pull" else (w, 0) for w in range(1, k + 1)]
    program = [("start", 0.0, src, dst, B * (1 + 0.1 * j)) for j, (src, dst) in enumerate(pairs)]
    program += [("part", 0.3, 0, 0, 0.0)] * 3
    server, worker = ((INF, None), (None, INF)) if direction == "pull" else ((None, INF), (INF, None))
    program += [("cap", 0.01, 0, server, 0.0), ("cap", 0.0, 3, worker, 0.0), ("cap", 0.0, 7, worker, 0.0)]
    program += [("part", 0.5, 0, 0, 0.0), ("cap", 0.0, 0, (C, C), 0.0)]
    run_side_by_side(up, down, 2e-4, program, layout)
    net = configured(up, down, 2e-4, layout=layout)
    for token, (_, _, src, dst, nbytes) in enumerate(program[:k]):
        net.start_flow(0.0, src, dst, nbytes, token)
    net.advance(0.01)
    net.set_capacity(0.02, 0, uplink_Bps=server[0], downlink_Bps=server[1])
    net.set_capacity(0.02, 3, uplink_Bps=worker[0], downlink_Bps=worker[1])
    net.set_capacity(0.02, 7, uplink_Bps=worker[0], downlink_Bps=worker[1])
    assert net.active_flows == k - 2
    assert net.advance(0.02 + 2e-4) == [2, 6]
    rates, _ = net._slot_state()
    assert rates == [2 * C] * (k - 2)


@pytest.mark.parametrize("switching", ["all", "some"])
def test_star_with_switching_links_keeps_the_fast_paths(monkeypatch, switching):
    # 64 workers push and pull through a server, three rounds; every 0.05 s
    # workers' links switch between C and C/2 (background traffic): all of
    # them at once, so that they stay equal, or a few of them, along with
    # the server's links. The same bits as the full fill, the blocks layout
    # in use after the changes, and with equal workers no full fill at all.
    calls = [0]
    real = network_module.progressive_fill

    def counting(*args):
        calls[0] += 1
        real(*args)

    monkeypatch.setattr(network_module, "progressive_fill", counting)
    k = 64
    up, down = [8 * C] + [C] * k, [8 * C] + [C] * k
    events: list[Event] = []
    for r in range(3):
        base = 2.0 * r
        events += [start(base + 0.001 * i, w, 0, B, ("push", r, w)) for i, w in enumerate(range(1, k + 1))]
        events += [start(base + 0.0005 + 0.001 * i, 0, w, B, ("pull", r, w)) for i, w in enumerate(range(1, k + 1))]
    for j in range(100):
        t = 0.05 * j + 0.0123
        workers = range(1, k + 1) if switching == "all" else (1 + (5 * j) % k, 1 + (5 * j + 17) % k)
        for w in workers:
            events.append(cap(t, w, up=C if j % 2 else C / 2, down=C / 2 if j % 2 else C))
        if switching == "some" and j % 10 == 0:
            events.append(cap(t, 0, up=(8 + 8 * (j // 10 % 2)) * C, down=(16 - 8 * (j // 10 % 2)) * C))
    events.sort(key=lambda e: e[0])
    net = Network(up, down, 1e-4)
    layouts_after_a_change = set()

    class Watched:  # the driver's calls, noting the layout after each
        def __getattr__(self, name):
            def call(*args, **kwargs):
                out = getattr(net, name)(*args, **kwargs)
                if net._now > 0.0123:
                    layouts_after_a_change.add(net._layout)
                return out

            return call

    got = drive(Watched(), events)  # type: ignore[arg-type]
    assert len(got) == 6 * k
    assert network_module._BLOCKS in layouts_after_a_change
    fast_calls = calls[0]
    full = drive(reference(up, down, 1e-4), events)
    assert_same_deliveries(got, full)
    if switching == "all":
        assert fast_calls == 0
    else:  # some links are impure at times: the full fill runs then
        assert 0 < fast_calls < (calls[0] - fast_calls) / 2
