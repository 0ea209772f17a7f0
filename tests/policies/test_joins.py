"""WorkerJoined, policy by policy, on scripted events (no driver): when a
worker that left (or had not started) is back, the round policies take it
from the next round on, never the round in flight; the asynchronous ones
give it work at once, SSP's and DSSP's clocks placing it at the slowest live
worker's; the peer-to-peer ones put it back into their peer sets."""

from __future__ import annotations

import pytest

from hetsync.policies import REGISTRY, make_policy
from hetsync.policies.base import (
    Apply,
    Compute,
    Multicast,
    Pull,
    WorkerJoined,
    WorkerLeft,
    admit,
    slowest_clock,
    take_joiners,
)
from tests.policies.helpers import arrived, ctx, done, pulled


def left(w: int, t: float = 1.0) -> WorkerLeft:
    return WorkerLeft(now_s=t, worker=w)


def joined(w: int, t: float = 2.0) -> WorkerJoined:
    return WorkerJoined(now_s=t, worker=w)


def steps_of(cmds: list) -> set[int]:
    """The workers the commands set computing (directly or after a pull)."""
    out = set()
    for c in cmds:
        if isinstance(c, Compute) or isinstance(c, Pull) and c.then is not None:
            out.add(c.worker)
    return out


# ----------------------------------------------------------------- helpers
def test_admit_waits_for_the_round_in_flight_and_starts_at_once_with_nobody_live():
    alive, joining = {0, 1}, set()
    assert not admit(alive, joining, 2) and joining == {2} and alive == {0, 1}
    take_joiners(alive, joining)
    assert alive == {0, 1, 2} and joining == set()
    alive, joining = set(), {3}
    assert admit(alive, joining, 1) and alive == {1}
    assert not admit(alive, joining, 1)  # already live: nothing to do


def test_a_joiner_takes_the_slowest_live_clock():
    assert slowest_clock([5, 9, 0], {0, 1}, 2) == 5
    assert slowest_clock([5, 9, 0], {2}, 2) == 0  # nobody else live: its own


def test_every_policy_but_streaming_diloco_takes_joins():
    refusing = {name for name, cls in REGISTRY.items() if not getattr(cls, "takes_joins", False)}
    assert refusing == {"streaming-diloco"}


# ------------------------------------------------------------- round ones
def test_bsp_joiner_is_not_waited_for_in_the_round_in_flight_and_is_in_the_next():
    p = make_policy("bsp", ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    assert p.on_event(arrived(0)) == []
    assert p.on_event(joined(2)) == []  # the round in flight neither waits for it nor gives it work
    cmds = p.on_event(arrived(1))  # 0 and 1 close the round
    assert isinstance(cmds[0], Apply) and len(cmds[0].contributions) == 2
    assert steps_of(cmds) == {0, 1, 2}  # all three pull and compute the next round
    assert p.on_event(arrived(0)) == [] and p.on_event(arrived(1)) == []  # now it waits for 2 as well
    assert isinstance(p.on_event(arrived(2))[0], Apply)


def test_bsp_joiner_with_nobody_live_starts_a_round_of_its_own():
    p = make_policy("bsp", ctx(2))
    p.start(0.0)
    p.on_event(left(0))
    p.on_event(left(1))
    assert steps_of(p.on_event(joined(1))) == {1}
    assert isinstance(p.on_event(arrived(1))[0], Apply)


def test_a_joiner_that_leaves_again_before_its_round_is_not_given_work():
    p = make_policy("bsp", ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    p.on_event(joined(2))
    p.on_event(left(2, 3.0))
    p.on_event(arrived(0))
    assert steps_of(p.on_event(arrived(1))) == {0, 1}


@pytest.mark.parametrize("spec", ["backup:b=1", "lb-bsp", "lb-bsp-static", "local-sgd:H=1", "diloco:H=1"])
def test_round_policies_take_the_joiner_from_the_next_round(spec):
    p = make_policy(spec, ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    kind = "delta" if "sgd" in spec or "diloco" in spec else "grad"
    assert p.on_event(joined(2)) == []
    cmds = p.on_event(arrived(0, kind=kind))
    cmds += p.on_event(arrived(1, kind=kind))
    assert any(isinstance(c, Apply) for c in cmds)
    assert 2 in steps_of(cmds)


def test_elastic_bsp_plans_the_joiner_in_at_the_next_barrier():
    p = make_policy("elastic-bsp:R=5", ctx(2))
    p.start(0.0)
    p.on_event(left(1))
    assert p.on_event(joined(1)) == []
    cmds = p.on_event(arrived(0))  # worker 0's quota of 1 ends the superstep: the barrier
    assert {c.worker for c in cmds if isinstance(c, Pull)} == {0, 1}
    assert 1 in p.last_quota


def test_elastic_bsp_local_takes_the_joiner_at_the_next_aggregation():
    p = make_policy("elastic-bsp:within=local", ctx(2))
    p.start(0.0)
    p.on_event(left(1))
    assert p.on_event(joined(1)) == []
    cmds = p.on_event(arrived(0, kind="delta"))
    assert isinstance(cmds[0], Apply) and steps_of(cmds) == {0, 1}


@pytest.mark.parametrize("spec", ["wbsp", "wbsp-overlap"])
def test_wbsp_joiner_pulls_the_close_it_waited_for(spec):
    p = make_policy(spec, ctx(2))
    p.start(0.0)
    p.on_event(left(1))
    assert p.on_event(joined(1)) == []  # the open round does not wait for it
    cmds = p.on_event(arrived(0, kind="delta"))  # closes the round (0 is the only live worker)
    assert isinstance(cmds[0], Apply)
    pulls = [c for c in cmds if isinstance(c, Pull) and c.worker == 1]
    assert len(pulls) == 1
    if spec == "wbsp":
        assert p.on_event(pulled(1)) == [Compute(worker=1, batch_size=8, local_lr=0.1)]
    else:
        assert pulls[0].then is not None and pulls[0].then.continuous
    assert 1 in p.alive  # waited for from the next round on


# --------------------------------------------------------- asynchronous ones
@pytest.mark.parametrize("spec", ["asp", "async-local-sgd:H=2"])
def test_asynchronous_policies_give_the_joiner_work_at_once(spec):
    p = make_policy(spec, ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    assert steps_of(p.on_event(joined(2))) == {2}


def test_ssp_joiner_takes_the_slowest_live_clock_and_holds_nobody_back():
    p = make_policy("ssp:s=1", ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    for _ in range(4):  # 0 and 1 run ahead of the absent 2
        p.on_event(arrived(0))
        p.on_event(arrived(1))
    assert p.clock[:2] == [4, 4]
    assert steps_of(p.on_event(joined(2))) == {2}
    assert p.clock[2] == 4  # not 0: a clock of 0 would block 0 and 1 until it caught up
    assert steps_of(p.on_event(arrived(0))) == {0}  # 0 goes on (5 − 4 ≤ s)


def test_dssp_joiner_takes_the_slowest_live_clock_with_no_grant():
    p = make_policy("dssp:s_L=1:r_max=2", ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    for t in (1.0, 2.0, 3.0):
        for w in (0, 1):
            p.on_event(done(w, t))
            p.on_event(arrived(w, t))
            p.on_event(pulled(w, t))
    cmds = p.on_event(joined(2, 4.0))
    assert cmds == [Compute(worker=2, batch_size=8)]
    assert p.clock[2] == min(p.clock[0], p.clock[1]) and p.threshold[2] == 1


# ----------------------------------------------------------- peer to peer
def test_p2p_bsp_joiner_is_a_peer_from_the_next_round():
    p = make_policy(
        "p2p-allreduce",
        ctx(
            3,
        ),
    )
    p.start(0.0)
    p.on_event(left(2))
    p.on_event(joined(2))
    p.on_event(done(0))
    cmds = p.on_event(done(1))  # the round's exchange: among 0 and 1 only
    assert all(2 not in (c.worker, *c.receivers) for c in cmds if isinstance(c, Multicast))
    assert 2 in p.joining


def test_p2p_ssp_joiner_steps_at_once_at_the_slowest_round():
    p = make_policy("p2p-random:sync=ssp:s=1:p=1", ctx(3))
    p.start(0.0)
    p.on_event(left(2))
    p.rounds[0], p.rounds[1] = 3, 5
    assert steps_of(p.on_event(joined(2))) == {2}
    assert p.rounds[2] == 3 and 2 in p.alive
