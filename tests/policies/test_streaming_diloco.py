import pytest

from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.policies.base import Apply, Compute, Fragment, PolicyContext, Pull, Push, WorkerLeaving, WorkerLeft
from hetsync.policies.streaming_diloco import StreamingDiLoCo
from hetsync.recipe import parse_optimizer
from tests.policies.helpers import arrived, done, pulled

MLP = (4096, 64, 640, 10)  # digits-mlp's tensors: fragments [0, 4096) and [4096, 4810) at P=2
F0, F1 = Fragment(lo=0, hi=4096, bits=4), Fragment(lo=4096, hi=4810, bits=4)


def ctx(workers=2, sizes=MLP):
    return PolicyContext(workers=workers, batch_size=8, lr=0.001, param_sizes=sizes)


def step(w, merge=False):
    return Compute(worker=w, batch_size=8, local_lr=0.001, merge=merge)


def push(w, fragment):
    return Push(worker=w, kind="delta", fragment=fragment)


def steps(p, w, count):
    """``count`` plain inner steps of worker w, each answered by the next one."""
    for _ in range(count):
        assert p.on_event(done(w)) == [step(w)]


def test_fragments_sync_in_turn_and_overlap_tau_steps():
    p = StreamingDiLoCo(ctx(), H=6, P=2, tau=2)  # fragment 1 after steps 3, 9, ...; fragment 0 after 6, 12, ...
    assert p.fragments == [F0, F1]
    assert p.start(0.0) == [step(0), step(1)]
    steps(p, 0, 2)
    assert p.on_event(done(0)) == [push(0, F1), step(0)]  # step 3: fragment 1 leaves; worker 0 goes on
    assert p.on_event(done(0)) == [step(0)]  # step 4: the first of tau = 2 overlapped steps
    assert p.on_event(done(0)) == []  # step 5: its merge point, the fragment has not arrived: it waits
    steps(p, 1, 2)
    assert p.on_event(done(1)) == [push(1, F1), step(1)]
    a, b = arrived(0, kind="delta", steps=3), arrived(1, kind="delta", steps=3)
    assert p.on_event(a) == []
    assert p.on_event(b) == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=0, fragment=F1, keep=0.5),
        Pull(worker=1, fragment=F1, keep=0.5),
    ]
    assert p.on_event(pulled(0)) == [step(0, merge=True)]  # worker 0 was waiting: it merges and goes on
    assert p.on_event(pulled(1)) == []  # worker 1 has not reached its merge point: it holds the fragment
    assert p.on_event(done(1)) == [step(1)]  # step 4
    assert p.on_event(done(1)) == [step(1, merge=True)]  # step 5: merged as step 6 starts
    assert p.on_event(done(0)) == [push(0, F0), step(0)]  # step 6: fragment 0's turn


def test_tau_zero_waits_for_each_fragment_at_once():
    p = StreamingDiLoCo(ctx(1), H=2, P=2, tau=0)
    p.start(0.0)
    assert p.on_event(done(0)) == [push(0, F1)]  # step 1: push fragment 1 and wait for it
    a = arrived(0, kind="delta")
    assert p.on_event(a) == [Apply(contributions=((a.push_id, 1.0),)), Pull(worker=0, fragment=F1, keep=0.5)]
    assert p.on_event(pulled(0)) == [step(0, merge=True)]
    assert p.on_event(done(0)) == [push(0, F0)]  # step 2: fragment 0


def test_a_worker_that_leaves_is_not_waited_for():
    p = StreamingDiLoCo(ctx(3), H=4, P=2, tau=1)
    p.start(0.0)
    for w in (0, 1):
        steps(p, w, 1)
        assert p.on_event(done(w)) == [push(w, F1), step(w)]
    a, b = arrived(0, kind="delta", steps=2), arrived(1, kind="delta", steps=2)
    assert p.on_event(a) == [] and p.on_event(b) == []
    assert p.on_event(WorkerLeft(now_s=2.0, worker=2)) == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=0, fragment=F1, keep=0.5),
        Pull(worker=1, fragment=F1, keep=0.5),
    ]


def test_a_leaver_pushes_its_last_steps_into_the_next_fragments_round():
    """A worker whose loop ends with unpushed steps pushes the fragment due
    next at once; its push waits, parked, while another fragment's round is
    open, and that fragment's round then waits for it. It pulls nothing."""
    p = StreamingDiLoCo(ctx(2), H=4, P=2, tau=1)  # fragment 1 after steps 2, 6, ...; fragment 0 after 4, 8, ...
    p.start(0.0)
    steps(p, 0, 1)
    assert p.on_event(done(0)) == [push(0, F1), step(0)]  # step 2
    assert p.on_event(done(0)) == []  # step 3: its merge point; fragment 1's round waits for worker 1
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=0)) == [push(0, F0)]  # step 3 goes with fragment 0
    a, early = arrived(0, kind="delta", steps=2), arrived(0, kind="delta", steps=1)
    assert p.on_event(a) == []  # its push of fragment 1, sent before it left, joins that round...
    assert p.on_event(early) == []  # ...and its last, fragment 0's, is parked: fragment 1's round is open
    steps(p, 1, 1)
    assert p.on_event(done(1)) == [push(1, F1), step(1)]
    b = arrived(1, kind="delta", steps=2)
    assert p.on_event(b) == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=1, fragment=F1, keep=0.5),  # the leaver pulls nothing
    ]
    assert p.on_event(pulled(1)) == []
    assert p.on_event(done(1)) == [step(1, merge=True)]  # step 3
    c = arrived(1, kind="delta", steps=2)
    assert p.on_event(done(1)) == [push(1, F0), step(1)]  # step 4: fragment 0, with the leaver's parked push
    assert p.on_event(c) == [
        Apply(contributions=((c.push_id, 0.5), (early.push_id, 0.5))),
        Pull(worker=1, fragment=F0, keep=0.5),
    ]


def test_leavers_with_no_one_going_on_close_their_own_rounds():
    p = StreamingDiLoCo(ctx(2), H=4, P=2, tau=1)
    p.start(0.0)
    for w in (0, 1):
        assert p.on_event(done(w)) == [step(w)]  # step 1: nothing due
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=0)) == [push(0, F1)]
    assert p.on_event(WorkerLeaving(now_s=1.0, worker=1)) == [push(1, F1)]
    a, b = arrived(0, kind="delta", steps=1), arrived(1, kind="delta", steps=1)
    assert p.on_event(a) == []
    assert p.on_event(b) == [Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5)))]
    assert p.on_event(WorkerLeaving(now_s=2.0, worker=0)) == []  # (nothing unpushed: nothing more)


def test_parameters_are_checked_naming_them():
    assert StreamingDiLoCo(ctx(), H=100, P=4, tau=5, bits=8).step_gap_bound() == 25 + 5 - 1
    assert StreamingDiLoCo(ctx(), H=10, P=1, tau=0).step_gap_bound() == 9  # DiLoCo's H − 1
    assert StreamingDiLoCo(ctx(), H=10, P=3, tau=2).step_gap_bound() == 4 + 2 - 1
    with pytest.raises(BadInput, match="parameter 'bits' must be 32, 8 or 4, got 16"):
        StreamingDiLoCo(ctx(), bits=16)
    with pytest.raises(BadInput, match="parameter 'P' must be <= H=3"):
        StreamingDiLoCo(ctx(), H=3, P=4)
    with pytest.raises(BadInput, match="parameter 'tau' must be < 5"):
        StreamingDiLoCo(ctx(), H=10, P=2, tau=5)
    with pytest.raises(
        BadInput, match=r"parameter 'P': the model has 4 parameter tensors, fewer than P=5.*split=equal"
    ):
        StreamingDiLoCo(ctx(), H=10, P=5, tau=0)
    equal = StreamingDiLoCo(ctx(), H=10, P=5, tau=0, split="equal")
    assert [f.size for f in equal.fragments] == [962] * 5
    with pytest.raises(BadInput, match="alpha"):
        make_policy("streaming-diloco:alpha=1.5", ctx())


def test_the_layout_is_needed_only_to_push():
    p = StreamingDiLoCo(PolicyContext(workers=2, batch_size=8, lr=0.001), H=2, P=2, tau=0)  # no param_sizes
    assert p.start(0.0) == [step(0), step(1)]  # (the contract and the CLI's validation build it so)
    with pytest.raises(BadInput, match="param_sizes"):
        p.on_event(done(0))


def test_label_optimizers_and_bits_on_the_fragments():
    p = make_policy("streaming-diloco:H=100:P=4:tau=5:bits=4", ctx())
    assert p.label == "streaming-diloco(H=100,P=4,tau=5,bits=4)"
    assert make_policy("streaming-diloco:alpha=0", ctx()).label == "streaming-diloco(H=10,P=2,tau=1,bits=4,alpha=0.0)"
    assert {f.bits for f in make_policy("streaming-diloco:bits=32", ctx()).fragments} == {32}
    outer = parse_optimizer("outer", p.outer_optimizer(), outer=True)
    assert (outer.name, outer.lr, outer.momentum, outer.nesterov) == ("sgd", 0.7, 0.9, True)
    assert p.local_optimizer() == {"name": "adamw", "weight_decay": 0.1}
    assert p.fragmented and not p.simulator_only and not make_policy("diloco", ctx()).fragmented
