from hetsync.policies.base import Apply, Compute, Pull, Push
from hetsync.policies.local_sgd import LocalSGD
from tests.policies.helpers import arrived, ctx, done


def test_h_local_steps_then_delta_push_then_average():
    p = LocalSGD(ctx(2, lr=0.3), H=2)
    assert p.start(0.0) == [Compute(worker=w, batch_size=8, local_lr=0.3) for w in range(2)]
    assert p.on_event(done(0)) == [Compute(worker=0, batch_size=8, local_lr=0.3)]
    assert p.on_event(done(0)) == [Push(worker=0, kind="delta")]
    a = arrived(0, kind="delta", steps=2)
    assert p.on_event(a) == []
    b = arrived(1, kind="delta", steps=2)
    cmds = p.on_event(b)
    assert cmds == [Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))), Pull(worker=0), Pull(worker=1)]
