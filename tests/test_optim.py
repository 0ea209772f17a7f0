"""Steppers: torch.optim over flat models, never modifying a model in place."""

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hetsync.errors import BadInput
from hetsync.optim import DelayedNesterov, Stepper, build_optimizer
from hetsync.recipe import parse_optimizer, parse_schedule


def _stepper(opt, schedule=None, clip=None):
    return Stepper(parse_optimizer("optimizer", opt), parse_schedule("schedule", schedule), clip)


def test_plain_is_exactly_sgd_and_takes_no_state():
    s = _stepper(None)
    assert s.plain
    m, g = torch.randn(50), torch.randn(50)
    assert torch.equal(s.descend(m, g, 0.3), torch.add(m, g, alpha=-0.3))
    assert s.state_dict() == {}


@pytest.mark.parametrize(
    "opt, clip",
    [
        ({"name": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}, None),
        ({"name": "adamw", "weight_decay": 0.1, "betas": [0.9, 0.95]}, None),
        ({"name": "adamw"}, 0.05),
    ],
)
def test_flat_steps_equal_torch_optim_on_the_module(opt, clip):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    ref = copy.deepcopy(module)
    ref_opt = build_optimizer(parse_optimizer("optimizer", opt), list(ref.parameters()))
    for group in ref_opt.param_groups:
        group["lr"] = 0.01
    stepper = _stepper(opt, clip=clip)
    flat = parameters_to_vector(module.parameters()).detach()
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    for _ in range(5):
        # the flat side: the gradient at the flat model
        vector_to_parameters(flat.clone(), module.parameters())
        module.zero_grad()
        nn.functional.cross_entropy(module(x), y).backward()
        grad = parameters_to_vector(p.grad for p in module.parameters()).detach()
        before = flat.clone()
        flat = stepper.descend(flat, grad, 0.01)
        assert not torch.equal(before, flat)
        # the reference: torch.optim on the module's own parameters
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        ref_opt.step()
    assert (flat - parameters_to_vector(ref.parameters()).detach()).abs().max() <= 1e-6


def test_descend_never_modifies_its_arguments():
    s = _stepper({"name": "sgd", "momentum": 0.5}, clip=0.1)
    m, g = torch.randn(20), torch.randn(20)
    m0, g0 = m.clone(), g.clone()
    out1 = s.descend(m, g, 0.1)
    out1_copy = out1.clone()
    s.descend(out1, g, 0.1)
    assert torch.equal(m, m0) and torch.equal(g, g0)
    assert torch.equal(out1, out1_copy)  # a model handed out earlier stays valid


def test_momentum_state_carries_between_steps_and_checkpoints():
    a = _stepper({"name": "sgd", "momentum": 0.9})
    m, g = torch.zeros(4), torch.ones(4)
    m1 = a.descend(m, g, 1.0)
    m2 = a.descend(m1, g, 1.0)
    assert torch.allclose(m2, torch.full((4,), -1.0 - 1.9))  # buffer 1, then 0.9 + 1
    b = _stepper({"name": "sgd", "momentum": 0.9})
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert torch.equal(b.descend(m2, g, 1.0), a.descend(m2, g, 1.0))


def test_schedule_scales_the_rate():
    s = _stepper(None, {"name": "step", "milestones": [10], "gamma": 0.5})
    assert s.lr_at(0.2, 9) == 0.2
    assert s.lr_at(0.2, 10) == pytest.approx(0.1)


def test_delayed_nesterov_with_period_one_is_torch_nesterov_sgd():
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(8))
    b = torch.nn.Parameter(a.detach().clone())
    dn = DelayedNesterov([a], lr=0.3, momentum=0.9, period=1, weight_decay=0.01)
    sgd = torch.optim.SGD([b], lr=0.3, momentum=0.9, nesterov=True, weight_decay=0.01)
    for _ in range(6):
        g = torch.randn(8)
        a.grad, b.grad = g.clone(), g.clone()
        dn.step()
        sgd.step()
        assert torch.allclose(a, b, atol=1e-6)


def test_delayed_nesterov_moves_every_step_and_adds_momentum_every_period():
    s = _stepper(None)  # (the plain path is untouched)
    assert s.plain
    cfg = parse_optimizer(
        "outer_optimizer", {"lr": 1.0, "momentum": 0.5, "nesterov": True, "momentum_period": 2}, outer=True
    )
    st = Stepper(cfg, parse_schedule("schedule", None), None)
    m = torch.zeros(2)
    m1 = st.descend(m, torch.tensor([1.0, 0.0]), 1.0)  # step 1: the gradient part only
    assert torch.equal(m1, torch.tensor([-1.0, 0.0]))
    m2 = st.descend(m1, torch.tensor([0.0, 2.0]), 1.0)  # step 2: −g, then momentum 0.5·(0 + [1, 2]) more
    assert torch.allclose(m2, torch.tensor([-1.0, -2.0]) - 0.5 * torch.tensor([1.0, 2.0]))
    state = copy.deepcopy(st.state_dict())
    assert state["state"][0]["step"] == 2
    restored = Stepper(cfg, parse_schedule("schedule", None), None)
    restored.load_state_dict(copy.deepcopy(state))
    a = b = m2
    for g in (torch.tensor([0.5, 0.5]), torch.tensor([-1.0, 0.25])):
        # the restored one keeps the schedule (step count: step 4 adds the momentum) and the buffers
        a, b = st.descend(a, g, 1.0), restored.descend(b, g, 1.0)
        assert torch.equal(a, b)


def test_a_delayed_momentum_needs_nesterov_sgd():
    for raw, key in [
        ({"name": "sgd", "momentum": 0.9, "momentum_period": 4}, "optimizer.momentum_period"),
        ({"name": "sgd", "momentum": 0.9, "nesterov": True, "momentum_period": 0}, "optimizer.momentum_period"),
        ({"name": "sgd", "momentum": 0.9, "nesterov": True, "momentum_period": 2.5}, "optimizer.momentum_period"),
        ({"name": "adamw", "momentum_period": 4}, "optimizer.momentum_period"),
    ]:
        with pytest.raises(BadInput, match=f"'{key}'"):
            parse_optimizer("optimizer", raw)
    cfg = parse_optimizer("optimizer", {"momentum": 0.9, "nesterov": True, "momentum_period": 3})
    assert cfg.momentum_period == 3 and not cfg.plain
    assert isinstance(build_optimizer(cfg, [torch.nn.Parameter(torch.zeros(2))]), DelayedNesterov)
    assert parse_optimizer("optimizer", {"momentum": 0.9}).momentum_period == 1  # torch's SGD as before
