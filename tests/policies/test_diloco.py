import pytest

from hetsync.errors import BadInput
from hetsync.policies import make_policy
from hetsync.policies.base import Apply, Compute, Pull, WorkerLeft
from hetsync.policies.diloco import DiLoCo
from hetsync.recipe import parse_optimizer
from tests.policies.helpers import arrived, ctx, done


def inner(w, push=None):
    return Compute(worker=w, batch_size=8, local_lr=0.001, push=push)


def run_round(p, workers, h):
    """Finish H inner steps on each worker; the H-th pushes its delta."""
    for w in workers:
        for _ in range(h - 2):
            assert p.on_event(done(w)) == [inner(w)]
        assert p.on_event(done(w)) == [inner(w, push="delta")]
        assert p.on_event(done(w)) == []  # waits at the barrier


def test_h_inner_steps_then_one_outer_step_on_the_average_delta():
    p = DiLoCo(ctx(3, lr=0.001), H=3)
    assert p.start(0.0) == [inner(0), inner(1), inner(2)]
    run_round(p, [0, 1, 2], h=3)
    a, b = arrived(1, kind="delta", steps=3), arrived(0, kind="delta", steps=3)
    assert p.on_event(a) == []
    assert p.on_event(b) == []
    c = arrived(2, kind="delta", steps=3)
    third = 1.0 / 3.0
    assert p.on_event(c) == [
        Apply(contributions=((a.push_id, third), (b.push_id, third), (c.push_id, third))),
        Pull(worker=0, then=inner(0)),
        Pull(worker=1, then=inner(1)),
        Pull(worker=2, then=inner(2)),
    ]
    # the next round counts H steps again from the chained compute
    run_round(p, [0], h=3)


def test_h_one_pushes_every_step():
    p = DiLoCo(ctx(2, lr=0.001), H=1)
    assert p.start(0.0) == [inner(0, push="delta"), inner(1, push="delta")]
    assert p.on_event(done(0)) == []
    a, b = arrived(0, kind="delta"), arrived(1, kind="delta")
    assert p.on_event(a) == []
    assert p.on_event(b) == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=0, then=inner(0, push="delta")),
        Pull(worker=1, then=inner(1, push="delta")),
    ]


def test_worker_leaving_mid_round_closes_it_without_it():
    p = DiLoCo(ctx(3, lr=0.001), H=2)
    p.start(0.0)
    run_round(p, [0, 1], h=2)
    a, b = arrived(0, kind="delta", steps=2), arrived(1, kind="delta", steps=2)
    assert p.on_event(a) == []
    assert p.on_event(b) == []  # worker 2 has not pushed yet
    assert p.on_event(WorkerLeft(now_s=2.0, worker=2)) == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=0, then=inner(0)),
        Pull(worker=1, then=inner(1)),
    ]


def test_delta_of_a_worker_that_left_stays_in_the_round():
    p = DiLoCo(ctx(2, lr=0.001), H=1)
    p.start(0.0)
    a = arrived(0, kind="delta")
    assert p.on_event(a) == []
    assert p.on_event(WorkerLeft(now_s=2.0, worker=0)) == []  # still waits for worker 1
    b = arrived(1, kind="delta")
    assert p.on_event(b) == [
        Apply(contributions=((a.push_id, 0.5), (b.push_id, 0.5))),
        Pull(worker=1, then=inner(1, push="delta")),
    ]


def test_optimizer_hooks_name_the_recipe():
    p = DiLoCo(ctx(2), H=5)
    assert p.outer_optimizer() == {"name": "sgd", "lr": 0.7, "momentum": 0.9, "nesterov": True}
    assert p.local_optimizer() == {"name": "adamw", "weight_decay": 0.1}
    assert p.step_gap_bound() == 4
    q = make_policy("diloco:outer_lr=0.5:outer_momentum=0:inner_wd=0", ctx(2))
    assert q.outer_optimizer() == {"name": "sgd", "lr": 0.5, "momentum": 0.0, "nesterov": False}
    assert q.local_optimizer() == {"name": "adamw", "weight_decay": 0.0}
    assert q.label == "diloco(H=10,outer_lr=0.5,outer_momentum=0.0,inner_wd=0.0)"
    assert p.label == "diloco(H=5)"


@pytest.mark.parametrize("spec", ["diloco", "diloco:outer_momentum=0:inner_wd=0", "diloco:outer_momentum=0.99"])
def test_hooks_are_valid_optimizer_configs(spec):
    p = make_policy(spec, ctx(2))
    server = parse_optimizer("outer_optimizer", p.outer_optimizer(), outer=True)
    worker = parse_optimizer("local_optimizer", p.local_optimizer())
    assert (server.name, server.lr, server.momentum) == ("sgd", p.config.outer_lr, p.config.outer_momentum)
    assert server.nesterov == (p.config.outer_momentum > 0)
    assert (worker.name, worker.weight_decay) == ("adamw", p.config.inner_wd)


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ("diloco:H=0", "H"),
        ("diloco:H=2.5", "H"),
        ("diloco:outer_lr=0", "outer_lr"),
        ("diloco:outer_lr=-1", "outer_lr"),
        ("diloco:outer_momentum=1", "outer_momentum"),
        ("diloco:outer_momentum=-0.1", "outer_momentum"),
        ("diloco:inner_wd=-0.01", "inner_wd"),
        ("diloco:inner_wd=lots", "inner_wd"),
    ],
)
def test_bad_params_name_the_parameter(spec, param):
    with pytest.raises(BadInput, match=f"'{param}'"):
        make_policy(spec, ctx(2))


def test_inner_lr_defaults_to_the_scenario_lr():
    assert make_policy("diloco", ctx(2)).start(0.0)[0].local_lr == ctx(2).lr
    assert make_policy("diloco:inner_lr=0.003", ctx(2)).start(0.0)[0].local_lr == 0.003
