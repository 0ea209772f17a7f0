import json

import pytest
import torch

from hetsync.errors import BadInput
from hetsync.optim import DelayedNesterov, outer_stepper
from hetsync.policies import make_policy
from hetsync.policies.async_local_sgd import SPEED_EMA, AsyncLocalSGD
from hetsync.policies.base import Apply, Compute, ComputeDone, Pull, Push, PushArrived, WorkerLeaving, WorkerLeft
from hetsync.recipe import parse_optimizer
from hetsync.sim.engine import Simulation
from tests.policies.helpers import arrived, ctx
from tests.sim.conftest import make_scenario

LR = 0.001


def local(w, push=None, lr=LR):
    return Compute(worker=w, batch_size=8, local_lr=lr, push=push)


def stepped(w: int, duration_s: float, t: float = 1.0) -> ComputeDone:
    """Worker w's local step, ``duration_s`` long as the driver timed it."""
    return ComputeDone(now_s=t, worker=w, step=0, batch_size=8, base_version=0, duration_s=duration_s)


def stale(w: int, staleness: int) -> PushArrived:
    return PushArrived(
        now_s=2.0, worker=w, push_id=1000 + w, kind="delta", base_version=0, steps=3, samples=24,
        server_version=staleness,
    )  # fmt: skip


def measured(p: AsyncLocalSGD, durations_s: list[float]) -> None:
    """Each worker's first step, of the given duration (nothing pushes yet with H > 1)."""
    for w, d in enumerate(durations_s):
        assert p.on_event(stepped(w, d)) == [local(w)]


# ------------------------------------------------------------------ DyLU
def test_h_per_worker_is_proportional_to_the_measured_speed():
    p = AsyncLocalSGD(ctx(4, lr=LR), H=12)
    assert p.start(0.0) == [local(w) for w in range(4)]  # nothing measured: everyone starts a window of H
    measured(p, [1.0, 2.0, 3.0])
    # the 12× slower worker: its window is one step, which it has done: it pushes at once
    assert p.on_event(stepped(3, 12.0)) == [Push(worker=3, kind="delta")]
    # ⌊12 · 1/1⌋, ⌊12 · 1/2⌋, ⌊12 · 1/3⌋, and at least one for the 12× slower worker
    assert [p.steps_for(w) for w in range(4)] == [12, 6, 4, 1]


def test_the_step_completing_h_w_pushes_the_delta_then_the_worker_waits():
    p = AsyncLocalSGD(ctx(2, lr=LR), H=4)
    p.start(0.0)
    measured(p, [1.0])
    # worker 1 gets ⌊4 · 1/2⌋ = 2 steps: its second step pushes
    assert p.on_event(stepped(1, 2.0)) == [local(1, push="delta")]
    assert p.on_event(stepped(1, 2.0)) == []  # that step pushed itself: it waits for its pull
    assert p.on_event(stepped(0, 1.0)) == [local(0)]  # step 2 of 4
    assert p.on_event(stepped(0, 1.0)) == [local(0, push="delta")]  # step 4 of 4 pushes


def test_a_window_shrinks_when_a_worker_slows_down_and_pushes_at_once_if_it_is_done():
    p = AsyncLocalSGD(ctx(2, lr=LR), H=4)
    p.start(0.0)
    measured(p, [1.0, 1.0])  # equal: both run 4 steps
    assert p.on_event(stepped(1, 1.0)) == [local(1)]  # worker 1: step 2 done, step 3 given
    # its step 3 takes 11 s: its average moves by SPEED_EMA of the excess
    slow = p.step_s[1] + SPEED_EMA * (11.0 - p.step_s[1])
    assert p.on_event(stepped(1, 11.0)) == [Push(worker=1, kind="delta")]  # H_1 = ⌊4 / 3⌋ = 1 < 3 done
    assert p.step_s[1] == pytest.approx(slow) and p.steps_for(1) == 1


def test_dylu_off_gives_every_worker_h_steps():
    p = make_policy("async-local-sgd:H=3:dylu=off", ctx(2, lr=LR))
    p.start(0.0)
    measured(p, [1.0, 5.0])
    assert [p.steps_for(w) for w in range(2)] == [3, 3]
    assert p.on_event(stepped(1, 5.0)) == [local(1, push="delta")]


def test_h_one_pushes_every_step():
    p = AsyncLocalSGD(ctx(2, lr=LR), H=1)
    assert p.start(0.0) == [local(0, push="delta"), local(1, push="delta")]


# ------------------------------------------------------ pushes on arrival
def test_each_delta_is_applied_on_arrival_with_weight_one_over_n_and_the_pusher_pulls():
    p = AsyncLocalSGD(ctx(4, lr=LR), H=2)
    p.start(0.0)
    a = arrived(2, kind="delta", steps=2)
    # no barrier: applied alone, at once; only the pusher pulls, and starts its next window on arrival
    assert p.on_event(a) == [Apply(contributions=((a.push_id, 0.25),)), Pull(worker=2, then=local(2))]
    b = arrived(0, kind="delta", steps=2)
    assert p.on_event(b) == [Apply(contributions=((b.push_id, 0.25),)), Pull(worker=0, then=local(0))]


def test_lr_scale_weights_a_delta_by_its_staleness():
    p = make_policy("async-local-sgd:lr_scale=inverse", ctx(2, lr=LR))
    p.start(0.0)
    assert p.on_event(stale(0, 4))[0] == Apply(contributions=((1000, 0.5 / 4),))
    q = make_policy("async-local-sgd", ctx(2, lr=LR))
    q.start(0.0)
    assert q.on_event(stale(0, 4))[0] == Apply(contributions=((1000, 0.5),))  # off by default


# ---------------------------------------------------- delayed Nesterov
def test_the_outer_optimizer_is_delayed_nesterov_with_period_n_by_default():
    p = AsyncLocalSGD(ctx(8, lr=LR))
    outer = p.outer_optimizer()
    assert outer == {"name": "sgd", "lr": 0.7, "momentum": 0.9, "nesterov": True, "momentum_period": 8}
    assert p.local_optimizer() == {"name": "adamw", "weight_decay": 0.1}
    cfg = parse_optimizer("outer_optimizer", outer, outer=True)
    assert cfg.momentum_period == 8 and cfg.nesterov
    every = make_policy("async-local-sgd:momentum_period=1", ctx(8, lr=LR)).outer_optimizer()
    assert every["momentum_period"] == 1  # Nesterov at every arrival (torch's SGD)
    plain = make_policy("async-local-sgd:outer_momentum=0:outer_lr=1", ctx(8, lr=LR)).outer_optimizer()
    assert plain == {"name": "sgd", "lr": 1.0, "momentum": 0.0, "nesterov": False}
    assert parse_optimizer("outer_optimizer", plain, outer=True).plain  # plain asynchronous averaging


def test_delayed_momentum_schedule_gradient_part_every_arrival_momentum_every_nth():
    """Through the server's outer stepper, as a run builds it: 3 workers, so the
    momentum term comes at arrivals 3 and 6; the others move by −ε·g/N only."""
    sc = make_scenario(workers=3)
    p = AsyncLocalSGD(ctx(3, lr=LR), outer_lr=0.5, outer_momentum=0.8)
    stepper = outer_stepper(sc, p)
    eps, beta, n = 0.5, 0.8, 3
    theta = torch.zeros(4)
    m, pending = torch.zeros(4), torch.zeros(4)
    torch.manual_seed(0)
    for arrival in range(1, 7):
        delta = torch.randn(4)
        g = -delta / n  # the ledger's pseudo-gradient of an Apply with weight 1/N
        new = stepper.descend(theta, g, stepper.cfg.lr, clip=False)
        expected = theta - eps * g  # the plain gradient part, at every arrival
        pending += g
        if arrival % n == 0:  # the momentum part, every N-th arrival
            m = beta * m + pending
            expected = expected - eps * beta * m
            pending = torch.zeros(4)
        assert torch.allclose(new, expected, atol=1e-6), arrival
        theta = new
    assert isinstance(stepper._opt, DelayedNesterov)


def test_n_arrivals_move_the_model_as_one_synchronous_nesterov_step_on_their_mean():
    torch.manual_seed(1)
    dn = outer_stepper(make_scenario(workers=4), AsyncLocalSGD(ctx(4, lr=LR)))
    sync = outer_stepper(make_scenario(workers=4), make_policy("diloco", ctx(4, lr=LR)))  # Nesterov 0.7 / 0.9
    a = b = torch.randn(6)
    for _ in range(4):
        grads = [torch.randn(6) for _ in range(4)]
        for g in grads:
            a = dn.descend(a, g / 4, dn.cfg.lr, clip=False)
        b = sync.descend(b, sum(grads) / 4, sync.cfg.lr, clip=False)
        assert torch.allclose(a, b, atol=1e-5)


# ------------------------------------------------------------- leaving
def test_a_worker_that_left_is_no_longer_expected_and_no_longer_sets_the_pace():
    p = AsyncLocalSGD(ctx(3, lr=LR), H=6)
    p.start(0.0)
    measured(p, [3.0, 6.0, 1.0])
    assert p.steps_for(0) == 2  # the fastest (worker 2) sets v_max
    assert p.on_event(WorkerLeft(now_s=2.0, worker=2)) == []
    assert p.steps_for(0) == 6 and p.steps_for(1) == 3  # worker 0 is now the fastest
    late = arrived(2, kind="delta")  # a delta it pushed before it left still counts...
    assert p.on_event(late) == [Apply(contributions=((late.push_id, 1 / 3),))]  # ...and nobody pulls for it


def test_a_worker_whose_loop_ends_pushes_its_unpushed_steps_and_gets_no_new_window():
    p = AsyncLocalSGD(ctx(2, lr=LR), H=5)
    p.start(0.0)
    measured(p, [1.0, 1.0])  # both did 1 step; their 2nd is under way (withdrawn when the loop ends)
    assert p.on_event(WorkerLeaving(now_s=2.0, worker=0)) == [Push(worker=0, kind="delta")]
    d = arrived(0, kind="delta", steps=1)
    assert p.on_event(d) == [Apply(contributions=((d.push_id, 0.5),))]
    # a worker whose last step already pushed has nothing left to push
    q = AsyncLocalSGD(ctx(2, lr=LR), H=1)
    q.start(0.0)
    assert q.on_event(stepped(1, 1.0)) == []
    assert q.on_event(WorkerLeaving(now_s=2.0, worker=1)) == []


# ------------------------------------------------------- config, state
@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ("async-local-sgd:H=0", "H"),
        ("async-local-sgd:H=2.5", "H"),
        ("async-local-sgd:dylu=maybe", "dylu"),
        ("async-local-sgd:outer_lr=0", "outer_lr"),
        ("async-local-sgd:outer_momentum=1", "outer_momentum"),
        ("async-local-sgd:momentum_period=-1", "momentum_period"),
        ("async-local-sgd:inner_wd=-0.1", "inner_wd"),
        ("async-local-sgd:inner_lr=fast", "inner_lr"),
        ("async-local-sgd:lr_scale=cubic", "lr_scale"),
    ],
)
def test_bad_params_name_the_parameter(spec, param):
    with pytest.raises(BadInput, match=f"'{param}'"):
        make_policy(spec, ctx(2))


def test_labels_and_inner_rate():
    assert make_policy("async-local-sgd", ctx(2)).label == "async-local-sgd(H=10)"
    label = make_policy("async-local-sgd:H=5:dylu=off:inner_lr=0.01", ctx(2)).label
    assert label == "async-local-sgd(H=5,dylu=off,inner_lr=0.01)"
    assert make_policy("async-local-sgd", ctx(2, lr=0.003)).start(0.0)[0].local_lr == 0.003
    assert make_policy("async-local-sgd:inner_lr=0.01", ctx(2, lr=0.5)).start(0.0)[0].local_lr == 0.01


def test_state_dict_round_trips_the_measured_speeds():
    p = AsyncLocalSGD(ctx(3, lr=LR), H=6)
    p.start(0.0)
    measured(p, [1.0, 2.0])
    assert p.on_event(stepped(2, 3.0)) == [local(2, push="delta")]  # ⌊6 · 1/3⌋ = 2 steps
    state = json.loads(json.dumps(p.state_dict()))
    q = AsyncLocalSGD(ctx(3, lr=LR), H=6)
    q.load_state_dict(state)
    assert q.step_s == p.step_s and [q.steps_for(w) for w in range(3)] == [6, 3, 2]
    # the resumed run's first windows are already sized by DyLU: the slowest pushes after 2 steps
    assert q.start(0.0) == [local(0), local(1), local(2)]
    assert q.on_event(stepped(2, 3.0)) == [local(2, push="delta")]
    with pytest.raises(ValueError, match="step_s"):
        AsyncLocalSGD(ctx(2, lr=LR)).load_state_dict(state)  # another worker count


# ----------------------------------------------------------- simulator
def test_in_the_simulator_windows_follow_speed_nobody_waits_and_every_delta_is_applied_alone(tmp_path):
    sc = make_scenario(workers=3, slowdown=[1.0, 2.0, 4.0], max_steps=60, policies=["async-local-sgd"])
    trace = tmp_path / "t.jsonl"
    s = Simulation(sc, "async-local-sgd:H=8", trace_path=trace, math=False).run().summary
    assert s["wait_share"] < 0.05  # no barrier: a worker only waits for its own push and pull
    assert s["steps"] == s["applied_steps"] + s["outstanding_steps"] and s["dropped_steps"] == 0
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    pushes = {r["id"]: r for r in records if r["ev"] == "push"}
    applies = [r for r in records if r["ev"] == "apply"]
    assert {r["kind"] for r in pushes.values()} == {"delta"}
    assert len(applies) == len(pushes) and all(len(r["ids"]) == 1 for r in applies)  # one delta per Apply
    assert all(r["weights"] == [pytest.approx(1 / 3)] for r in applies)
    assert max(st for r in applies for st in r["staleness"]) > 0  # others' deltas land between pull and push
    # after the first window (H each), DyLU sizes the windows ∝ speed: 8, 4 and 2 steps
    later = {w: [p["steps"] for p in pushes.values() if p["w"] == w][1:] for w in range(3)}
    assert set(later[0]) == {8} and set(later[1]) == {4} and set(later[2]) == {2}
    # so the three workers push about equally often (within one push)
    counts = [sum(p["w"] == w for p in pushes.values()) for w in range(3)]
    assert max(counts) - min(counts) <= 1


def test_in_the_simulator_with_the_math_it_learns_and_keeps_the_outer_momentum_on_the_server():
    sc = make_scenario(workers=3, slowdown=[1.0, 1.5, 3.0], max_steps=40, lr=0.01)
    sim = Simulation(sc, "async-local-sgd:H=4")
    s = sim.run().summary
    assert 0.0 <= s["final_accuracy"] <= 1.0 and s["final_accuracy"] > 0.3
    state = sim.ledger.outer.state_dict()["state"][0]
    assert state["step"] == s["updates"] and state["momentum_buffer"].abs().sum() > 0
