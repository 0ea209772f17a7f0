"""hetsync.loop's pieces that need no processes: the module as a flat model,
the server's step with the user's optimizer, the policy-sized batches.
(The wrapper under real processes: tests/runtime/test_loop.py.)"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from hetsync.errors import BadInput
from hetsync.loop import ModuleModel, ModuleStepper, PolicyBatches


def net() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Linear(8, 2))
    model[2].requires_grad_(False)
    return model


def test_the_flat_model_is_the_trainable_parameters_in_order():
    model = net()
    flat = ModuleModel(model, None, {})
    assert flat.n_params == (4 * 8 + 8) + (8 * 2 + 2) and flat.model_nbytes == 4 * flat.n_params
    theta = torch.arange(flat.n_params, dtype=torch.float32)
    frozen = model[2].weight.detach().clone()
    flat.load(theta)
    assert torch.equal(flat.flat(), theta)
    assert torch.equal(model[0].bias, theta[32:40])
    assert torch.equal(model[2].weight, frozen)
    theta.zero_()  # the module holds a copy, not a view
    assert flat.flat().abs().sum() > 0


def test_the_servers_step_is_the_users_optimizer_on_a_fresh_model():
    model = net()
    flat = ModuleModel(model, None, {})
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01)
    ref_opt = torch.optim.AdamW([p for p in reference.parameters() if p.requires_grad], lr=0.01)
    stepper = ModuleStepper(flat.params, opt, base_lr=0.1)
    theta = flat.flat().clone()
    for i in range(3):
        grad = torch.randn(flat.n_params, generator=torch.Generator().manual_seed(i))
        before = theta.clone()
        theta_next = stepper.descend(theta, grad, lr=0.1 * 0.5)  # the policy's lr x a schedule factor of 0.5
        assert torch.equal(theta, before)  # never modified in place: a pull in flight may hold it
        ModuleModel(reference, None, {}).set_grad(grad)
        for group in ref_opt.param_groups:
            group["lr"] = 0.01 * 0.5
        ref_opt.step()
        assert torch.allclose(theta_next, ModuleModel(reference, None, {}).flat(), atol=1e-7)
        theta = theta_next
    assert stepper.state_dict()["state"]  # Adam's moments, for a checkpoint


def test_metrics_need_a_direction_and_numbers():
    model = net()
    assert ModuleModel(model, lambda m: {"accuracy": 0.5, "loss": 1.0}, {}).metrics == {
        "accuracy": "max",
        "loss": "min",
    }
    assert ModuleModel(model, lambda m: {"bleu": 3}, {"bleu": "max"}).metrics == {"bleu": "max"}
    with pytest.raises(BadInput, match="no known direction"):
        ModuleModel(model, lambda m: {"bleu": 3}, {})
    with pytest.raises(BadInput, match="not a number"):
        ModuleModel(model, lambda m: {"accuracy": "high"}, {})
    with pytest.raises(BadInput, match="non-empty mapping"):
        ModuleModel(model, lambda m: 0.5, {})


def test_evaluation_sees_the_global_model_in_eval_mode_without_grad():
    seen = {}

    def evaluate(m: nn.Module) -> dict[str, float]:
        seen["training"], seen["grad"] = m.training, torch.is_grad_enabled()
        return {"loss": float(m[0].bias.sum())}

    model = net()
    flat = ModuleModel(model, evaluate, {})
    theta = torch.ones(flat.n_params)
    assert flat.evaluate_metrics(theta) == {"loss": 8.0}
    assert seen == {"training": False, "grad": False} and model.training


def test_a_model_without_trainable_parameters_is_refused():
    model = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(BadInput, match="no trainable parameters"):
        ModuleModel(model, None, {})


class _Sizes:
    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    @property
    def batch_size(self) -> int:
        return self.sizes[0] if len(self.sizes) == 1 else self.sizes.pop(0)

    drawn_before = 0


class _Sampler:
    def __init__(self, n: int) -> None:
        self.n, self.epochs = n, []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def test_batches_follow_the_size_the_policy_asks_for_each_step():
    sampler = _Sampler(10)
    batches = PolicyBatches(_Sizes([2, 5, 1, 4]), sampler)  # type: ignore[arg-type]
    assert [b for b in batches] == [[0, 1], [2, 3, 4, 5, 6], [7], [8, 9]]  # (no len(): it reads a size too)
    assert [b for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert sampler.epochs == [0, 1]  # a new shuffle each pass


def test_a_resumed_loops_batches_go_on_after_the_samples_drawn_before():
    sizes = _Sizes([4])
    sizes.drawn_before = 23  # two epochs of 10, then 3 samples into the third
    sampler = _Sampler(10)
    batches = PolicyBatches(sizes, sampler)  # type: ignore[arg-type]
    assert [b for b in batches] == [[3, 4, 5, 6], [7, 8, 9]]
    assert [b for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert sampler.epochs == [2, 3]


def test_the_scenario_of_a_loop_gets_the_world_size_and_a_useful_evaluation_interval():
    from hetsync.loop import DEFAULT_MAX_TIME_S, _scenario

    plain = _scenario(None, 3, {})
    assert plain.workers == 3 and plain.max_time_s == DEFAULT_MAX_TIME_S and plain.eval_every_s == 2.0
    longer = _scenario("hetero-4", 2, {"max_time_s": 600})  # not every 15 s (max_time_s / 40)
    assert (
        longer.workers == 2 and longer.eval_every_s == 2.0 and longer.delay_s == (0.01, 0.04)
    )  # linspace re-resolved for 2
    assert _scenario("hetero-4", 4, {}).eval_every_s == 0.5  # the runtime's own default for a 20 s run
    with pytest.raises(BadInput, match="max_time_s"):
        _scenario(None, 2, {"max_time_s": -1})
