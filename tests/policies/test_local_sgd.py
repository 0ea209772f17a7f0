from hetsync.policies.base import Apply, Compute, Pull
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
