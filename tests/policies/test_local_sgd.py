from hetsync.policies.base import Apply, Compute, Pull, Push, WorkerLeaving, WorkerLeft
from hetsync.policies.local_sgd import LocalSGD
from tests.policies.helpers import arrived, ctx, done


def local(w, push=None):
    return Compute(worker=w, batch_size=8, local_lr=0.3, push=push)


def test_h_local_steps_then_delta_push_then_average():
    p = LocalSGD(ctx(2, lr=0.3), H=2)
    assert p.start(0.0) == [local(0), local(1)]
    assert p.on_event(done(0)) == [local(0, push="delta")]  # the H-th step pushes its delta
    assert p.on_event(done(0)) == []
    assert p.on_event(done(1)) == [local(1, push="delta")]
    assert p.on_event(done(1)) == []
    a = arrived(0, kind="delta", steps=2)
    assert p.on_event(a) == []
    b = arrived(1, kind="delta", steps=2)
    cmds = p.on_event(b)
    assert cmds == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=0, then=local(0)),
        Pull(worker=1, then=local(1)),
    ]


def test_h_one_pushes_every_step():
    p = LocalSGD(ctx(2, lr=0.3), H=1)
    assert p.start(0.0) == [local(0, push="delta"), local(1, push="delta")]


def test_a_worker_whose_loop_ends_mid_round_pushes_the_steps_it_took_in_it():
    p = LocalSGD(ctx(2, lr=0.3), H=4)
    p.start(0.0)
    for _ in range(2):  # worker 0: steps 1 and 2 done, step 3 given
        p.on_event(done(0))
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=0)) == [Push(worker=0, kind="delta")]
    flushed = arrived(0, kind="delta", steps=2)
    assert p.on_event(flushed) == []  # worker 1 has not pushed yet
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=1)) == []  # its first step was given, none done: nothing
    assert p.on_event(WorkerLeft(now_s=1.0, worker=1)) == [Apply(contributions=((flushed.push_id, 1.0),))]


def test_a_loop_that_ends_when_its_rounds_last_step_was_given_pushes_the_h_minus_1_before_it():
    """(A user's loop under auto ended 3 steps into a round of 4, its 4th step
    given with the push and withdrawn: the 3 steps were never pushed.)"""
    p = LocalSGD(ctx(1, lr=0.3), H=4)
    p.start(0.0)
    for _ in range(2):
        p.on_event(done(0))
    assert p.on_event(done(0)) == [local(0, push="delta")]  # steps 1-3 done, the 4th given
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=0)) == [Push(worker=0, kind="delta")]
    flushed = arrived(0, kind="delta", steps=3)
    assert p.on_event(flushed) == [Apply(contributions=((flushed.push_id, 1.0),))]


def test_a_worker_that_leaves_after_its_round_push_has_nothing_more_to_push():
    p = LocalSGD(ctx(2, lr=0.3), H=2)
    p.start(0.0)
    assert p.on_event(done(0)) == [local(0, push="delta")]
    assert p.on_event(done(0)) == []  # the H-th pushed with its step
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=0)) == []
