from hetsync.policies.asp import ASP
from hetsync.policies.base import Apply, Compute, Pull
from tests.policies.helpers import arrived, ctx, done, pulled


def test_every_push_applied_at_once_with_weight_one_over_n():
    p = ASP(ctx(4, lr=0.2))
    assert p.start(0.0)[3] == Compute(worker=3, batch_size=8, push="grad")
    assert p.on_event(done(3)) == []
    ev = arrived(3, base=7)
    nxt = Compute(worker=3, batch_size=8, push="grad")
    assert p.on_event(ev) == [Apply(contributions=((ev.push_id, 0.25),), lr=0.2), Pull(worker=3, then=nxt)]
    assert p.on_event(pulled(3)) == []


def test_no_barrier():
    assert ASP(ctx(4)).step_gap_bound() is None
