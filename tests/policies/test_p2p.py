"""Scripted-event tests of the peer-to-peer round machinery and the three
p2p policies (no driver, no torch)."""

from __future__ import annotations

import math

import pytest

from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.policies.base import (
    AllReduce,
    AllReduceDone,
    Compute,
    ComputeDone,
    ModelArrived,
    Multicast,
    PolicyContext,
    SetTimer,
    TimerFired,
    WorkerLeft,
)
from tests.policies.helpers import ctx


def done(w: int, t: float = 1.0, up: float = math.inf, down: float = math.inf) -> ComputeDone:
    return ComputeDone(
        now_s=t, worker=w, step=0, batch_size=8, base_version=0, duration_s=1.0, uplink_Bps=up, downlink_Bps=down
    )


def arrive(sender: int, receiver: int, t: float = 2.0) -> ModelArrived:
    return ModelArrived(now_s=t, worker=receiver, sender=sender)


def computes(cmds) -> list[int]:
    assert all(isinstance(c, Compute) and c.local_lr is not None for c in cmds), cmds
    return [c.worker for c in cmds]


def arrivals(cmds) -> list[ModelArrived]:
    return [arrive(m.worker, r) for m in cmds for r in m.receivers]


@pytest.mark.parametrize("name", ["p2p-random", "selmcast"])
def test_bsp_round_is_steps_then_one_exchange(name):
    pol = make_policy(name, ctx(workers=4))  # p = 2
    assert computes(pol.start(0.0)) == [0, 1, 2, 3]
    assert pol.on_event(done(0)) == []
    assert pol.on_event(done(1)) == []
    assert pol.on_event(done(3)) == []
    plan = pol.on_event(done(2))
    assert [m.worker for m in plan] == [0, 1, 2, 3]
    for m in plan:
        assert isinstance(m, Multicast)
        assert len(m.receivers) >= 2 and m.worker not in m.receivers
    *first, last = arrivals(plan)
    for ev in first:
        assert pol.on_event(ev) == []  # the round waits for every copy
    assert computes(pol.on_event(last)) == [0, 1, 2, 3]


def test_random_sends_to_exactly_p():
    pol = make_policy("p2p-random:p=3", ctx(workers=6))
    pol.start(0.0)
    plan = [c for w in range(6) for c in pol.on_event(done(w))]
    assert [len(m.receivers) for m in plan] == [3] * 6


def test_allreduce_bsp_is_one_collective_per_round():
    pol = make_policy("p2p-allreduce", ctx(workers=3))
    pol.start(0.0)
    pol.on_event(done(0))
    pol.on_event(done(1))
    (cmd,) = pol.on_event(done(2))
    assert cmd == AllReduce(workers=(0, 1, 2))
    assert pol.on_event(AllReduceDone(now_s=2.0, workers=(0, 2))) == []  # not the one in flight
    assert computes(pol.on_event(AllReduceDone(now_s=2.0, workers=(0, 1, 2)))) == [0, 1, 2]


def test_allreduce_ssp_multicasts_to_everyone():
    pol = make_policy("p2p-allreduce:sync=ssp", ctx(workers=4))
    pol.start(0.0)
    (m,) = pol.on_event(done(2))
    assert m == Multicast(worker=2, receivers=(0, 1, 3))


def test_ssp_bounds_the_round_gap_and_releases():
    pol = make_policy("p2p-random:sync=ssp:s=1:p=1", ctx(workers=3))
    pol.start(0.0)
    assert pol.step_gap_bound() == 1

    def round_of(w: int) -> list:
        (m,) = pol.on_event(done(w))
        assert len(m.receivers) == 1
        return pol.on_event(arrive(w, m.receivers[0]))

    assert computes(round_of(0)) == [0]  # round 1 may start: 1 - 0 <= 1
    assert round_of(0) == []  # round 2 would be 2 ahead of workers 1 and 2
    assert computes(round_of(1)) == [1]  # one ahead of the slowest (2, at 0) is allowed
    assert computes(round_of(2)) == [0, 2]  # the slowest is now at 1: worker 0 (at 2) is released


def test_ssp_sender_waits_for_its_own_multicast():
    pol = make_policy("p2p-random:sync=ssp:s=5:p=2", ctx(workers=4))
    pol.start(0.0)
    (m,) = pol.on_event(done(1))
    first, second = m.receivers
    assert pol.on_event(arrive(1, first)) == []
    assert computes(pol.on_event(arrive(1, second))) == [1]


def test_worker_leaving_before_the_barrier_lets_the_rest_exchange():
    pol = make_policy("p2p-random:p=1", ctx(workers=3))
    pol.start(0.0)
    pol.on_event(done(0))
    pol.on_event(done(1))
    plan = pol.on_event(WorkerLeft(now_s=1.5, worker=2))
    assert [m.worker for m in plan] == [0, 1]
    assert all(2 not in m.receivers for m in plan)


def test_worker_leaving_during_the_exchange_cancels_its_copies():
    pol = make_policy("p2p-allreduce:sync=ssp:s=0", ctx(workers=3))
    pol.start(0.0)
    (m0,) = pol.on_event(done(0))
    assert m0.receivers == (1, 2)
    assert pol.on_event(arrive(0, 1)) == []
    # the copy to 2 never comes: 2 left; 0's round completes, but s=0 holds it for 1
    assert pol.on_event(WorkerLeft(now_s=2.0, worker=2)) == []
    (m1,) = pol.on_event(done(1))
    assert m1.receivers == (0,)
    assert computes(pol.on_event(arrive(1, 0))) == [0, 1]


def test_selmcast_gives_slow_links_fewer_copies():
    c = PolicyContext(workers=4, batch_size=8, lr=0.1, model_bytes=1_000_000)
    pol = make_policy("selmcast:p=1", c)
    pol.start(0.0)
    fast, slow = 1e9, 1e6
    for w in range(3):
        pol.on_event(done(w, up=fast, down=fast))
    plan = pol.on_event(done(3, up=slow, down=slow))
    by_sender = {m.worker: m.receivers for m in plan}
    assert len(by_sender[3]) == 1  # the slow uplink sends only what it must
    into_slow = sum(3 in rs for rs in by_sender.values())
    assert into_slow <= 1  # and the slow downlink takes at most one copy
    assert all(len(by_sender[w]) >= 2 for w in range(3))  # fast senders get extras


def test_labels_and_bad_params():
    assert make_policy("selmcast", ctx()).label == "selmcast(sync=bsp,p=2,bandwidth=worst,floor=1.0)"
    assert make_policy("p2p-random:sync=ssp:s=4:p=1", ctx()).label == "p2p-random(sync=ssp,s=4,p=1)"
    assert make_policy("p2p-allreduce", ctx()).label == "p2p-allreduce(sync=bsp)"
    with pytest.raises(BadInput, match="'sync' must be one of bsp, ssp"):
        make_policy("selmcast:sync=asp", ctx())
    with pytest.raises(BadInput, match="'bandwidth' must be one of latest, worst"):
        make_policy("selmcast:bandwidth=best", ctx())
    with pytest.raises(BadInput, match="'p' must be >= 1"):
        make_policy("p2p-random:p=0", ctx())
    # the window shows where it acts: ssp, non-zero
    assert make_policy("selmcast:sync=ssp:window_s=0.5", ctx()).label == (
        "selmcast(sync=ssp,s=3,p=2,bandwidth=worst,window_s=0.5,floor=1.0)"
    )
    assert make_policy("selmcast:sync=ssp:window_s=0", ctx()).label == (
        "selmcast(sync=ssp,s=3,p=2,bandwidth=worst,floor=1.0)"
    )
    assert make_policy("selmcast:window_s=0.5", ctx()).label == "selmcast(sync=bsp,p=2,bandwidth=worst,floor=1.0)"
    with pytest.raises(BadInput, match="'window_s' must be >= 0"):
        make_policy("selmcast:sync=ssp:window_s=-1", ctx())


def test_selmcast_plans_on_the_worst_bandwidth_it_has_seen():
    c = PolicyContext(workers=3, batch_size=8, lr=0.1, model_bytes=1_000_000)
    plans = {}
    for choice in ("worst", "latest"):
        pol = make_policy(f"selmcast:p=1:bandwidth={choice}", c)
        pol.start(0.0)
        pol.on_event(done(0, up=1e9, down=1e9))
        pol.on_event(done(1, up=1e9, down=1e9))
        pol.on_event(done(2, up=1e6, down=1e6))  # worker 2's link was slow once ...
        pol.on_event(done(2, t=3.0, up=1e9, down=1e9))  # ... and is fast now
        plans[choice] = pol.receivers([0, 1, 2], 5.0)
    # planned as slow: its one copy sets a long makespan that the others fill with extras,
    # and its downlink still takes one copy at most
    assert sum(2 in rs for rs in plans["worst"].values()) == 1
    assert sum(map(len, plans["worst"].values())) == 4
    # planned as fast: equal links, no room for extras
    assert sum(map(len, plans["latest"].values())) == 3


# ------------------------------------------------------------ selmcast's ssp window
def window_ctx(workers: int) -> PolicyContext:
    return PolicyContext(workers=workers, batch_size=8, lr=0.1, model_bytes=1_000_000)


def test_selmcast_ssp_window_plans_the_senders_that_end_within_it_together():
    pol = make_policy("selmcast:sync=ssp:s=5:p=1:window_s=0.5", window_ctx(4))
    pol.start(0.0)
    fast, slow = 1e9, 1e6
    (timer,) = pol.on_event(done(3, t=1.0, up=slow, down=slow))  # a slow sender opens the window
    assert isinstance(timer, SetTimer) and timer.at_s == 1.5
    assert pol.on_event(done(0, t=1.2, up=fast, down=fast)) == []  # joins it: no second timer
    assert pol.on_event(TimerFired(now_s=1.4, tag="another")) == []  # not this window's timer
    plan = pol.on_event(TimerFired(now_s=1.5, tag=timer.tag))
    by_sender = {m.worker: m.receivers for m in plan}
    assert sorted(by_sender) == [0, 3]  # one plan for both
    assert len(by_sender[3]) == 1  # the slow uplink sends only what it must ...
    assert len(by_sender[0]) == 3  # ... and the fast sender fills its makespan with extras
    assert pol.on_event(TimerFired(now_s=1.5, tag=timer.tag)) == []  # fired once: nothing more


def test_selmcast_ssp_window_alone_matches_no_window():
    """A sender whose window nobody joins gets the plan it gets without one."""
    plans = []
    for spec in ("selmcast:sync=ssp:p=1", "selmcast:sync=ssp:p=1:window_s=2"):
        pol = make_policy(spec, window_ctx(4))
        pol.start(0.0)
        cmds = pol.on_event(done(2, t=1.0, up=1e8, down=1e7))
        if cmds and isinstance(cmds[0], SetTimer):
            cmds = pol.on_event(TimerFired(now_s=cmds[0].at_s, tag=cmds[0].tag))
        plans.append(cmds)
    assert plans[0] == plans[1] and len(plans[0]) == 1


def test_selmcast_ssp_window_closes_early_when_nobody_is_computing():
    pol = make_policy("selmcast:sync=ssp:s=5:p=1:window_s=10", window_ctx(3))
    pol.start(0.0)
    (timer,) = pol.on_event(done(0, t=1.0))
    assert pol.on_event(done(1, t=1.1)) == []
    plan = pol.on_event(done(2, t=1.2))  # the last one computing: nobody else can join
    assert sorted(m.worker for m in plan) == [0, 1, 2]
    assert pol.on_event(TimerFired(now_s=11.0, tag=timer.tag)) == []  # the stale timer does nothing
    # the rounds go on: each sender steps again once its own copies have landed
    stepped = [w for ev in arrivals(plan) for w in computes(pol.on_event(ev))]
    assert sorted(stepped) == [0, 1, 2]


def test_selmcast_ssp_window_survives_its_senders_leaving():
    pol = make_policy("selmcast:sync=ssp:s=5:p=1:window_s=1", window_ctx(3))
    pol.start(0.0)
    (timer,) = pol.on_event(done(0, t=1.0))
    # the only sender held leaves: the window closes with nothing to send
    assert pol.on_event(WorkerLeft(now_s=1.2, worker=0)) == []
    assert pol.on_event(TimerFired(now_s=2.0, tag=timer.tag)) == []
    (timer,) = pol.on_event(done(1, t=3.0))  # a new window
    # the last worker still computing leaves: the window closes at once, and with
    # nobody left to send to, 1's round is its step alone
    assert computes(pol.on_event(WorkerLeft(now_s=3.1, worker=2))) == [1]
    assert pol.on_event(TimerFired(now_s=4.0, tag=timer.tag)) == []
