import itertools

import pytest

from hetsync.policies.base import Apply, Compute, Pull, Push, WorkerLeft
from hetsync.policies.wbsp_overlap import WBSPOverlap
from tests.policies.helpers import arrived, ctx, done, pulled

PUSH = {w: Push(worker=w, kind="delta") for w in range(4)}


def delta(w, t=1.0, base=0, steps=1):
    return arrived(w, t=t, base=base, kind="delta", steps=steps)


def step(w, lr=0.1):
    return Compute(worker=w, batch_size=8, local_lr=lr, continuous=True)


def test_compute_never_stops_and_one_push_is_in_flight_at_most():
    p = WBSPOverlap(ctx(2, lr=0.2))
    assert p.start(0.0) == [step(0, 0.2), step(1, 0.2)]  # continuous: each step starts the next
    assert p.step_gap_bound() is None
    assert p.on_event(done(0)) == [PUSH[0]]  # idle channel: push at once
    assert p.on_event(done(0)) == []  # a push is in flight: accumulate
    assert p.on_event(done(0)) == []
    assert p.on_event(delta(0)) == [PUSH[0]]  # answered: push the two accumulated steps as one delta
    assert p.on_event(delta(0, steps=2)) == []  # nothing accumulated: the channel idles
    assert p.on_event(done(0)) == [PUSH[0]]


def test_the_closing_push_flags_its_worker_which_pushes_first_then_pulls():
    p = WBSPOverlap(ctx(2))
    p.on_event(done(0))
    a0 = delta(0)
    assert p.on_event(a0) == []
    p.on_event(done(1))
    p.on_event(done(1))  # one more step finished while worker 1's push was in flight
    a1 = delta(1)
    assert p.on_event(a1) == [
        Apply(contributions=((a0.push_id, 0.5), (a1.push_id, 0.5))),
        PUSH[1],  # keeps the step finished during the push ...
        Pull(worker=1),  # ... and downloads version 1 at the same instant
    ]
    assert p.version == 1 and p.closers == [1]


def test_a_flagged_worker_with_nothing_accumulated_just_pulls():
    p = WBSPOverlap(ctx(2))
    p.on_event(delta(0))
    cmds = p.on_event(delta(1))
    assert isinstance(cmds[0], Apply) and cmds[1:] == [Pull(worker=1)]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_closing_worker_is_whoever_completes_the_round(order):
    p = WBSPOverlap(ctx(3))
    *early, last = order
    for w in (*early, *early):
        assert p.on_event(delta(w)) == []
    cmds = p.on_event(delta(last))
    assert isinstance(cmds[0], Apply) and len(cmds[0].contributions) == 5
    assert cmds[1:] == [Pull(worker=last)]
    assert p.closers == [last]


def test_late_deltas_go_to_the_next_round_and_pushing_continues_during_the_pull():
    p = WBSPOverlap(ctx(2))
    p.on_event(delta(0))
    p.on_event(delta(1))  # round 1 closed by worker 1, which pulls
    assert p.on_event(pulled(1, version=1)) == []
    assert p.on_event(done(0)) == [PUSH[0]]  # the push that will carry the flag
    assert p.on_event(done(0)) == []  # accumulates meanwhile
    late0 = delta(0, t=2.0)  # computed on the old model; its reply carries the flag
    assert p.on_event(late0) == [PUSH[0], Pull(worker=0)]
    assert p.on_event(done(0)) == []  # finished while that push and the pull are in flight
    with_pull = delta(0, t=2.5)  # the push sent with the pull lands first
    assert p.on_event(with_pull) == [PUSH[0]]  # keep pushing: the step is saved, not overwritten
    assert p.on_event(pulled(0, t=2.6, version=1)) == []
    one = delta(1, t=3.0, base=1)
    cmds = p.on_event(one)  # round 2 = the late deltas of worker 0 plus worker 1's
    assert cmds[0] == Apply(contributions=((late0.push_id, 0.5), (with_pull.push_id, 0.5), (one.push_id, 0.5)))


def test_steps_overwritten_by_the_pull_are_not_pushed_afterwards():
    p = WBSPOverlap(ctx(2))
    p.on_event(delta(0))
    p.on_event(delta(1))
    assert p.on_event(delta(0)) == [Pull(worker=0)]
    assert p.on_event(done(0)) == [PUSH[0]]
    p.on_event(done(0))  # finished after that push started: unpushed when the pull lands
    assert p.on_event(pulled(0, version=1)) == []
    assert p.on_event(delta(0)) == []  # the driver dropped it; nothing left to push


def test_a_flag_raised_during_a_pull_is_served_after_it():
    p = WBSPOverlap(ctx(2))
    p.on_event(delta(0))
    p.on_event(delta(1))  # round 1 closes; worker 1 pulls
    assert p.on_event(delta(0)) == [Pull(worker=0)]  # worker 0 pulls version 1
    assert p.on_event(pulled(1, version=1)) == []
    p.on_event(done(0))
    cmds = p.on_event(delta(1, base=1))  # round 2 closes while worker 0's pull is in flight
    assert isinstance(cmds[0], Apply) and cmds[1:] == [Pull(worker=1)]
    assert p.on_event(delta(0)) == []  # flagged, but a pull is in flight: no second one
    assert p.on_event(pulled(0, version=1)) == []
    p.on_event(done(0))
    assert p.on_event(delta(0)) == [Pull(worker=0)]  # served now: version 2


def test_a_worker_that_leaves_is_not_waited_for():
    p = WBSPOverlap(ctx(3))
    a0 = delta(0)
    p.on_event(a0)
    a1 = delta(1)
    p.on_event(a1)
    assert p.on_event(WorkerLeft(now_s=2.0, worker=2)) == [Apply(contributions=((a0.push_id, 0.5), (a1.push_id, 0.5)))]
