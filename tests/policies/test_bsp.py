from hetsync.policies.base import Apply, Compute, Pull, WorkerLeft
from hetsync.policies.bsp import BSP
from tests.policies.helpers import arrived, ctx, done, pulled


def step(w):
    return Compute(worker=w, batch_size=8, push="grad")


def test_start_computes_everyone_and_each_step_pushes_its_gradient():
    assert BSP(ctx(3)).start(0.0) == [step(w) for w in range(3)]


def test_compute_done_and_pull_done_need_no_answer():
    # the push is chained to the step, the next step to the pull
    p = BSP(ctx(3))
    assert p.on_event(done(1)) == []
    assert p.on_event(pulled(2)) == []


def test_round_closes_only_when_all_pushed_with_batch_weights():
    p = BSP(ctx(3, lr=0.5))
    a, b, c = arrived(0, samples=8), arrived(2, samples=8), arrived(1, samples=16)
    assert p.on_event(a) == []
    assert p.on_event(b) == []
    cmds = p.on_event(c)
    apply = cmds[0]
    assert isinstance(apply, Apply) and apply.lr == 0.5
    assert dict(apply.contributions) == {a.push_id: 0.25, b.push_id: 0.25, c.push_id: 0.5}
    assert cmds[1:] == [Pull(worker=w, then=step(w)) for w in range(3)]


def test_worker_left_closes_round_without_it():
    p = BSP(ctx(3))
    p.on_event(arrived(0))
    p.on_event(arrived(1))
    cmds = p.on_event(WorkerLeft(now_s=2.0, worker=2))
    assert isinstance(cmds[0], Apply) and len(cmds[0].contributions) == 2
    assert cmds[1:] == [Pull(worker=0, then=step(0)), Pull(worker=1, then=step(1))]


def test_gradient_of_a_worker_that_left_after_pushing_is_still_applied():
    p = BSP(ctx(3))
    a = arrived(2)
    p.on_event(a)
    assert p.on_event(WorkerLeft(now_s=2.0, worker=2)) == []  # 0 and 1 have not pushed yet
    p.on_event(arrived(0))
    cmds = p.on_event(arrived(1))
    assert a.push_id in dict(cmds[0].contributions)
    assert cmds[1:] == [Pull(worker=0, then=step(0)), Pull(worker=1, then=step(1))]
