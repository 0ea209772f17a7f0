import itertools

import pytest

from hetsync.policies import make_policy
from hetsync.policies.base import Apply, Compute, Pull, Push, WorkerLeft
from hetsync.policies.wbsp import WBSP
from tests.policies.helpers import arrived, ctx, done, pulled


def delta(w, t=1.0, base=0, steps=1):
    return arrived(w, t=t, base=base, kind="delta", steps=steps)


def step(w, lr=0.1):
    return Compute(worker=w, batch_size=8, local_lr=lr)


def test_local_steps_at_lr_then_a_delta_push_after_every_step():
    p = WBSP(ctx(3, lr=0.3))
    assert p.start(0.0) == [step(w, 0.3) for w in range(3)]
    assert p.on_event(done(1)) == [Push(worker=1, kind="delta")]
    assert p.step_gap_bound() is None  # nobody waits: no barrier on steps
    assert make_policy("wbsp", ctx(4)).label == "wbsp"


def test_fast_workers_keep_stepping_until_the_slowest_pushes():
    p = WBSP(ctx(3))
    a0 = delta(0)
    assert p.on_event(a0) == [step(0)]  # not flagged: carry on from the local model
    a1 = delta(1)
    assert p.on_event(a1) == [step(1)]
    b0 = delta(0)  # worker 0 is fast: a second step in the same round
    assert p.on_event(b0) == [step(0)]
    assert p.version == 0
    c2 = delta(2)  # the last worker to push closes the round and pulls at once
    w = 1 / 3
    assert p.on_event(c2) == [
        Apply(contributions=((a0.push_id, w), (a1.push_id, w), (b0.push_id, w), (c2.push_id, w))),
        Pull(worker=2),
    ]
    assert p.version == 1
    assert p.closers == [2]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_closing_worker_is_whoever_completes_the_round(order):
    p = WBSP(ctx(3))
    first, second, last = order
    for w in (first, second, first, second):  # the two faster ones push twice
        assert p.on_event(delta(w)) == [step(w)]
    cmds = p.on_event(delta(last))
    assert isinstance(cmds[0], Apply) and len(cmds[0].contributions) == 5
    assert cmds[1:] == [Pull(worker=last)]
    assert p.closers == [last]


def test_flagged_workers_pull_at_their_next_push_and_that_delta_goes_to_the_next_round():
    p = WBSP(ctx(3))
    for w in (0, 1):
        p.on_event(delta(w))
    close1 = p.on_event(delta(2))
    assert isinstance(close1[0], Apply) and close1[1:] == [Pull(worker=2)]
    assert p.on_event(pulled(2, version=1)) == [step(2)]
    # workers 0 and 1 were mid-step on the old model; their next push is
    # answered with the flag, and both pull the same version 1
    late0 = delta(0, t=2.0)
    assert p.on_event(late0) == [Pull(worker=0)]
    late1 = delta(1, t=2.1)
    assert p.on_event(late1) == [Pull(worker=1)]
    assert p.version == 1  # no update between the pulls of round 1: all get version 1
    assert p.on_event(pulled(0, version=1)) == [step(0)]
    # the late deltas count as round 2 pushes; worker 2 completes round 2
    fresh2 = delta(2, t=3.0, base=1)
    cmds = p.on_event(fresh2)
    assert cmds == [
        Apply(contributions=((late0.push_id, 1 / 3), (late1.push_id, 1 / 3), (fresh2.push_id, 1 / 3))),
        Pull(worker=2),
    ]
    assert p.closers == [2, 2]


def test_a_flag_is_answered_once_per_round():
    p = WBSP(ctx(2))
    p.on_event(delta(0))
    p.on_event(delta(1))  # closes round 1, worker 1 pulls
    assert p.on_event(delta(0)) == [Pull(worker=0)]  # flag served
    assert p.on_event(pulled(0)) == [step(0)]
    assert p.on_event(delta(0, base=1)) == [step(0)]  # round 2 still open: no second pull


def test_the_slowest_can_change_from_round_to_round():
    p = WBSP(ctx(2))
    p.on_event(delta(0))
    p.on_event(delta(1))  # round 1 closed by worker 1
    p.on_event(delta(1, base=1))  # worker 1 pulled and pushed again (round 2)
    p.on_event(delta(1, base=1))
    cmds = p.on_event(delta(0))  # worker 0's late push completes round 2
    assert isinstance(cmds[0], Apply) and cmds[1:] == [Pull(worker=0)]
    assert p.closers == [1, 0]


def test_a_worker_that_leaves_is_not_waited_for_and_its_deltas_stay():
    p = WBSP(ctx(3))
    a2 = delta(2)
    p.on_event(a2)
    a0 = delta(0)
    p.on_event(a0)
    assert p.on_event(WorkerLeft(now_s=2.0, worker=1)) == [Apply(contributions=((a2.push_id, 0.5), (a0.push_id, 0.5)))]
    assert p.closers == [None]
    late0 = delta(0)
    assert p.on_event(late0) == [Pull(worker=0)]
    assert p.on_event(WorkerLeft(now_s=3.0, worker=0)) == []  # round 2 still waits for worker 2
    b2 = delta(2)
    assert p.on_event(b2) == [Apply(contributions=((late0.push_id, 1.0), (b2.push_id, 1.0))), Pull(worker=2)]


def test_when_the_last_worker_leaves_the_open_round_closes_on_what_it_holds():
    """Every worker's own loop has ended (hetsync.loop): nobody is left to
    wait for, and the deltas pushed in the open round are applied, weighted
    by the workers that pushed them, instead of being lost."""
    p2 = WBSP(ctx(2))
    c0 = delta(0, steps=2)
    p2.on_event(c0)
    assert p2.on_event(WorkerLeft(now_s=2.0, worker=1)) == [Apply(contributions=((c0.push_id, 1.0),))]
    assert p2.on_event(WorkerLeft(now_s=3.0, worker=0)) == []  # nothing held: nothing to apply
    p3 = WBSP(ctx(2))
    d1 = delta(1)
    p3.on_event(d1)  # worker 1 pushed, worker 0 did not; both then leave, 1 first
    assert p3.on_event(WorkerLeft(now_s=2.0, worker=1)) == []  # still waits for worker 0
    assert p3.on_event(WorkerLeft(now_s=3.0, worker=0)) == [Apply(contributions=((d1.push_id, 1.0),))]
    assert p3.closers == [None]
