"""BSP in the simulator equals single-process training with batch N·b, with
plain SGD and with the server's optimizer (torch.optim on the real module)."""

import copy

import pytest
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hetsync.optim import build_optimizer
from hetsync.recipe import parse_optimizer, parse_schedule
from hetsync.sim.engine import Simulation
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario


def _global_batches(wl, n, b, seed):
    shards = wl.make_shards(n, seed, 0.0)
    while True:
        batches = [s.next_batch(b) for s in shards]
        yield torch.cat([xb for xb, _ in batches]), torch.cat([yb for _, yb in batches])


def test_bsp_equals_single_process_large_batch_sgd():
    n, b, lr, steps, seed = 4, 16, 0.2, 50, 3
    sc = make_scenario(workers=n, workload="digits-mlp", batch_size=b, lr=lr, max_steps=steps, seed=seed)
    result = Simulation(sc, "bsp").run()
    assert result.summary["updates"] == steps

    wl = make_workload("digits-mlp")
    theta = wl.init_params(seed)
    batches = _global_batches(wl, n, b, seed)
    for _ in range(steps):
        grad, _ = wl.gradient(theta, *next(batches))
        theta = theta - lr * grad
    diff = (result.params - theta).abs().max().item()
    assert diff <= 1e-5, diff
    # and the model really moved: the comparison is not vacuous
    assert (theta - wl.init_params(seed)).abs().max().item() > 1e-2


RECIPES = {
    "sgd-momentum": ({"name": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}, None, None, 0.05),
    "adamw": ({"name": "adamw", "weight_decay": 0.01}, None, None, 3e-3),
    "adamw-cosine-clip": (
        {"name": "adamw", "betas": [0.9, 0.95]},
        {"name": "cosine", "warmup_steps": 5, "total_steps": 40, "min_factor": 0.1},
        0.5,
        3e-3,
    ),
    "sgd-step-decay": ({"name": "sgd", "momentum": 0.9}, {"name": "step", "milestones": [20, 35]}, None, 0.05),
}


@pytest.mark.parametrize("recipe", RECIPES)
def test_bsp_with_a_server_optimizer_equals_single_process_training(recipe):
    opt, schedule, clip, lr = RECIPES[recipe]
    n, b, steps, seed = 4, 16, 50, 3
    extra = {"optimizer": opt, "schedule": schedule, "clip_norm": clip}
    sc = make_scenario(workers=n, workload="digits-mlp", batch_size=b, lr=lr, max_steps=steps, seed=seed, **extra)
    result = Simulation(sc, "bsp").run()
    assert result.summary["updates"] == steps

    # the reference: one process, the module's own parameters, torch.optim and
    # its own clock (the step count, which is the global version under BSP)
    wl = make_workload("digits-mlp")
    theta0 = wl.init_params(seed)
    module = copy.deepcopy(wl.model)
    for p in module.parameters():
        p.data = p.data.clone()
        p.grad = None
    vector_to_parameters(theta0.clone(), module.parameters())  # it aliases the vector
    optimizer = build_optimizer(parse_optimizer("optimizer", opt), list(module.parameters()))
    sched = parse_schedule("schedule", schedule)
    batches = _global_batches(wl, n, b, seed)
    for step in range(steps):
        x, y = next(batches)
        optimizer.zero_grad()
        wl.loss_fn(module(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        for group in optimizer.param_groups:
            group["lr"] = lr * sched.factor(step)
        optimizer.step()
    theta = parameters_to_vector(module.parameters()).detach()
    diff = (result.params - theta).abs().max().item()
    assert diff <= 1e-5, diff
    assert (theta - theta0).abs().max().item() > 1e-2


def test_diloco_first_outer_step_equals_the_hand_computation():
    """2 workers, H=1: one inner AdamW step each, then one outer Nesterov step."""
    n, b, lr, seed, wd = 2, 16, 0.01, 5, 0.1
    outer_lr, mu = 0.7, 0.9
    sc = make_scenario(workers=n, workload="digits-mlp", batch_size=b, lr=lr, max_steps=1, seed=seed)
    result = Simulation(sc, f"diloco:H=1:outer_lr={outer_lr}:outer_momentum={mu}:inner_wd={wd}").run()
    assert result.summary["updates"] == 1

    wl = make_workload("digits-mlp")
    theta0 = wl.init_params(seed)
    shards = wl.make_shards(n, seed, 0.0)
    deltas = []
    for shard in shards:
        g, _ = wl.gradient(theta0, *shard.next_batch(b))
        # AdamW's first step: bias-corrected moments are g and g², so the step
        # is lr·g/(|g|+eps), after the decoupled weight decay θ·(1 − lr·wd)
        local = theta0 * (1 - lr * wd) - lr * g / (g.abs() + 1e-8)
        deltas.append(local - theta0)
    pseudo_grad = -(deltas[0] + deltas[1]) / 2
    # Nesterov SGD's first step: buffer = g, direction = g + μ·buffer
    theta1 = theta0 - outer_lr * (1 + mu) * pseudo_grad
    diff = (result.params - theta1).abs().max().item()
    assert diff <= 1e-6, diff
    assert (theta1 - theta0).abs().max().item() > 1e-3
