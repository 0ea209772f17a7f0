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
        theta_next = stepper.descend(theta, grad, lr=0.1 * 0.5)  # a policy at half the scenario's rate
        assert torch.equal(theta, before)  # never modified in place: a pull in flight may hold it
        ModuleModel(reference, None, {}).set_grad(grad)
        for group in ref_opt.param_groups:
            group["lr"] = 0.01 * 0.5
        ref_opt.step()
        assert torch.allclose(theta_next, ModuleModel(reference, None, {}).flat(), atol=1e-7)
        theta = theta_next
    assert stepper.state_dict()["state"]  # Adam's moments, for a checkpoint


def _two_groups(model: nn.Module, lrs: tuple[float, float]) -> list[dict]:
    trainable = [p for p in model.parameters() if p.requires_grad]
    return [{"params": trainable[:2], "lr": lrs[0]}, {"params": trainable[2:], "lr": lrs[1]}]


S = torch.optim.lr_scheduler
SCHEDULED = {  # family: (optimizer over a model, scheduler over an optimizer)
    "onecycle-sgd-nesterov": (
        lambda m: torch.optim.SGD(_two_groups(m, (0.05, 0.02)), lr=0.05, momentum=0.9, nesterov=True),
        lambda o: S.OneCycleLR(o, max_lr=[0.2, 0.1], total_steps=12, base_momentum=0.8),
    ),
    "onecycle-adamw": (
        lambda m: torch.optim.AdamW(_two_groups(m, (0.01, 0.01)), lr=0.01),
        lambda o: S.OneCycleLR(o, max_lr=0.02, total_steps=12),  # cycles beta1
    ),
    "cyclic-adamw": (
        lambda m: torch.optim.AdamW(_two_groups(m, (0.01, 0.005)), lr=0.01),
        lambda o: S.CyclicLR(o, base_lr=[1e-3, 5e-4], max_lr=[2e-2, 1e-2], step_size_up=3, base_momentum=0.8),
    ),
    "lambda-per-group": (
        lambda m: torch.optim.AdamW(_two_groups(m, (0.01, 0.02)), lr=0.01),
        lambda o: S.LambdaLR(o, [lambda s: min(1.0, (s + 1) / 6), lambda s: 0.8**s]),
    ),
    "step": (
        lambda m: torch.optim.SGD(_two_groups(m, (0.05, 0.02)), lr=0.05, momentum=0.9),
        lambda o: S.StepLR(o, step_size=3, gamma=0.5),
    ),
    "cosine-eta-min": (
        lambda m: torch.optim.SGD(_two_groups(m, (0.05, 0.02)), lr=0.05, momentum=0.9),
        lambda o: S.CosineAnnealingLR(o, T_max=12, eta_min=0.01),
    ),
    "sequential": (
        lambda m: torch.optim.AdamW(_two_groups(m, (0.01, 0.02)), lr=0.01),
        lambda o: S.SequentialLR(
            o, [S.LinearLR(o, start_factor=0.1, total_iters=4), S.ExponentialLR(o, gamma=0.9)], milestones=[4]
        ),
    ),
    "chained": (
        lambda m: torch.optim.SGD(_two_groups(m, (0.05, 0.02)), lr=0.05, momentum=0.9),
        lambda o: S.ChainedScheduler([S.ConstantLR(o, factor=0.5, total_iters=3), S.ExponentialLR(o, gamma=0.9)]),
    ),
}


@pytest.mark.parametrize("rank0_built_it", [True, False], ids=["rank0-built-it-too", "built-after-sync-optimizer"])
@pytest.mark.parametrize("family", list(SCHEDULED))
def test_the_servers_copy_steps_at_the_settings_the_workers_scheduler_set(family, rank0_built_it):
    """BSP's server step, as the runtime takes it: rank 0's copy of the
    optimizer follows what the workers' scheduler set (lr, momentum, betas;
    per group) and so steps as the worker's own optimizer would — whether
    rank 0 built the scheduler too (before ``sync.optimizer``: its
    construction changed rank 0's copy) or never saw it (after)."""
    from hetsync.optim import hyperparameters

    make_opt, make_sched = SCHEDULED[family]
    worker, server = net(), net()  # (equal: the same seed)
    worker_opt, server_opt = make_opt(worker), make_opt(server)
    sched = make_sched(worker_opt)
    if rank0_built_it:
        make_sched(server_opt)  # (never stepped: rank 0 does not return from sync.optimizer)
    flat = ModuleModel(server, None, {})
    stepper = ModuleStepper(flat.params, server_opt, base_lr=0.05)
    theta = flat.flat().clone()
    for i in range(12):
        grad = torch.randn(flat.n_params, generator=torch.Generator().manual_seed(i))
        stepper.follow(hyperparameters(worker_opt))  # what the worker's push carries
        theta = stepper.descend(theta, grad, lr=0.05)  # the policy's rate: the scenario's
        ModuleModel(worker, None, {}).set_grad(grad)
        worker_opt.step()
        sched.step()
    assert torch.equal(theta, ModuleModel(worker, None, {}).flat()), family


def test_the_settings_travel_per_group_and_a_different_optimizer_is_refused():
    from hetsync.optim import hyperparameters, set_hyperparameters

    sgd = torch.optim.SGD(_two_groups(net(), (0.1, 0.2)), lr=0.1, momentum=0.9, weight_decay=1e-4)
    assert hyperparameters(sgd) == (0.1, 0.9, 1e-4, 0.2, 0.9, 1e-4)  # lr, momentum, weight_decay per group
    adam = torch.optim.AdamW(net().parameters(), lr=0.01, betas=(0.8, 0.95))
    assert hyperparameters(adam) == (0.01, 0.8, 0.95, 0.01)  # lr, betas, weight_decay
    set_hyperparameters(adam, (0.02, 0.85, 0.99, 0.0))
    assert adam.param_groups[0]["betas"] == (0.85, 0.99) and adam.param_groups[0]["weight_decay"] == 0.0
    with pytest.raises(BadInput, match="has 6 scheduled settings .* rank 0's copy has 4: build the same optimizer"):
        set_hyperparameters(adam, hyperparameters(sgd))


def test_a_setting_rank_0_does_not_follow_is_named_when_the_loop_changes_it():
    from hetsync.optim import changed_setting, fixed_settings

    opt = torch.optim.AdamW(_two_groups(net(), (0.01, 0.02)), lr=0.01)
    before = fixed_settings(opt)
    S.OneCycleLR(opt, max_lr=0.1, total_steps=10)  # lr, betas and its own bookkeeping: all fine
    opt.param_groups[1]["weight_decay"] = 0.0
    assert changed_setting(before, opt) is None
    opt.param_groups[1]["eps"] = 1e-6
    assert changed_setting(before, opt) == "param_groups[1]['eps'] 1e-08 -> 1e-06"
    opt.param_groups[1]["eps"] = 1e-8
    opt.add_param_group({"params": [nn.Parameter(torch.zeros(1))]})
    assert changed_setting(before, opt) == "param_groups: 2 groups -> 3"


def test_a_worker_sends_its_settings_when_they_change_and_refuses_a_change_rank_0_would_miss():
    from hetsync.loop import _LoopWorker
    from hetsync.optim import fixed_settings

    opt = torch.optim.SGD(_two_groups(net(), (0.1, 0.1)), lr=0.1, momentum=0.9)
    worker = object.__new__(_LoopWorker)  # (its settings alone: no process group)
    worker.w, worker.opt, worker._settings, worker._hyper_sent = 1, opt, fixed_settings(opt), None
    worker._take_settings()
    assert worker._hyper() == (0.1, 0.9, 0.0, 0.1, 0.9, 0.0)  # lr, momentum, weight_decay of 2 groups
    worker._take_settings()
    assert worker._hyper() is None  # unchanged: the server keeps the last ones
    opt.param_groups[1]["lr"] = 0.05
    worker._take_settings()
    assert worker._hyper() == (0.1, 0.9, 0.0, 0.05, 0.9, 0.0)
    opt.param_groups[0]["nesterov"] = True
    with pytest.raises(
        BadInput, match=r"worker 1: your loop changed .* \(param_groups\[0\]\['nesterov'\] False -> True\)"
    ):
        worker._take_settings()


def test_one_update_of_several_workers_gradients_steps_at_their_settings():
    """The ledger hands the server's copy the contributions' settings: as
    they are when the workers agree (BSP: the same step of the same
    schedule), else their mean, weighted as the gradients are."""
    from hetsync.driver.core import policy_context
    from hetsync.ledger import HeldPush, Ledger
    from hetsync.policies import make_policy
    from hetsync.policies.base import Apply
    from hetsync.scenario import scenario_from_dict
    from hetsync.trace import TraceWriter

    sc = scenario_from_dict({"name": "s", "workers": 2, "max_steps": 4, "lr": 0.05})

    class Recorder:
        plain = False
        followed: list[tuple[float, ...]] = []

        def lr_at(self, lr: float, clock: float) -> float:
            return lr

        def follow(self, hyper: tuple[float, ...]) -> None:
            self.followed.append(hyper)

        def descend(self, model: torch.Tensor, grad: torch.Tensor, lr: float, **_: object) -> torch.Tensor:
            return model - lr * grad

    stepper = Recorder()
    led = Ledger(make_policy("bsp", policy_context(sc)), None, torch.zeros(3), TraceWriter(None), stepper=stepper)  # type: ignore[arg-type]
    g = torch.ones(3)
    a = led.hold(HeldPush(0, "grad", g, 0, 1, 8, (0.1 / 3, 0.9)))
    b = led.hold(HeldPush(1, "grad", g, 0, 1, 8, (0.1 / 3, 0.9)))
    led.apply(Apply(contributions=((a, 0.5), (b, 0.5)), lr=0.05), 1.0)
    a = led.hold(HeldPush(0, "grad", g, 1, 1, 8, (0.1, 0.9)))
    b = led.hold(HeldPush(1, "grad", g, 1, 1, 24, (0.2, 0.8)))
    led.apply(Apply(contributions=((a, 0.25), (b, 0.75)), lr=0.05), 2.0)
    assert stepper.followed[0] == (0.1 / 3, 0.9)  # bit for bit
    assert stepper.followed[1] == pytest.approx((0.175, 0.825))
    c = led.hold(HeldPush(0, "grad", g, 2, 1, 8))  # not from a loop: the server's own settings stay
    led.apply(Apply(contributions=((c, 1.0),), lr=0.05), 3.0)
    assert len(stepper.followed) == 2
    d = led.hold(HeldPush(0, "delta", g, 3, 1, 8, (0.5, 0.5)))  # (the server never sends a delta any)
    led.apply(Apply(contributions=((d, 1.0),), lr=0.05), 3.5)
    assert len(stepper.followed) == 2  # a delta goes to the outer optimizer, which no worker schedules
    a = led.hold(HeldPush(0, "grad", g, 3, 1, 8, (0.1, 0.9)))
    b = led.hold(HeldPush(1, "grad", g, 3, 1, 8, (0.1,)))
    with pytest.raises(BadInput, match="different parameter groups or kinds"):
        led.apply(Apply(contributions=((a, 0.5), (b, 0.5)), lr=0.05), 4.0)


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


def test_an_evaluate_without_the_targets_metric_is_told_how_to_give_its_target(tmp_path):
    """Your evaluate reports mse, you gave no target: rank 0 says so and how
    to give one, in one line, before the run starts (not the scenario's
    words: you set no scenario key)."""
    from types import SimpleNamespace

    from hetsync.loop import Sync, _scenario

    sc = _scenario(None, 2, {})
    sync = Sync(0, sc, "bsp", SimpleNamespace(out=tmp_path), None, {})
    model = net()
    flat = ModuleModel(model, lambda m: {"mse": 0.3}, {"mse": "min"})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(BadInput, match=r"^your evaluate reports mse, and the run's target is accuracy ≥ 0.9") as e:
        sync._serve(flat, opt)
    assert "target={'metric': 'mse', 'value': V}) for time to mse ≤ V" in str(e.value)
    # a target of the user's own that the evaluate lacks: said as given, not as hetsync's default
    mine = Sync(0, _scenario(None, 2, {"target": {"metric": "loss", "value": 0.2}}), "bsp", sync.opts, None, {})
    with pytest.raises(BadInput, match=r"the run's target is loss ≤ 0.2: give yours"):
        mine._serve(flat, opt)


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


def test_the_evaluator_beside_the_loop_sees_a_copy_with_the_global_model_and_the_workers_statistics():
    """Evaluations leave the server's loop: they run on a copy of the module
    (the server's optimizer steps the module itself meanwhile), loaded with the
    model and the workers' mean BatchNorm statistics of the moment asked."""
    seen = []

    def evaluate(m: nn.Module) -> dict[str, float]:
        seen.append((m, m.training, torch.is_grad_enabled(), m[1].running_mean.clone()))
        return {"loss": float(m[0].bias.sum())}

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    flat = ModuleModel(model, evaluate, {})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flat.take_buffers(0, torch.cat([torch.full((8,), 1.0), torch.full((8,), 4.0), torch.tensor([5.0])]))
    flat.take_buffers(1, torch.cat([torch.full((8,), 3.0), torch.full((8,), 2.0), torch.tensor([7.0])]))
    ev = flat.evaluator()
    assert ev is not None
    ev.submit(1.0, torch.ones(flat.n_params), version=4)
    flat.take_buffers(0, torch.full((17,), 100.0))  # (statistics that came after the copy are not in it)
    assert ev.drain() == [(1.0, {"loss": 8.0}, 4)]
    ev.close()
    copy_, training, grad, running_mean = seen[-1]
    assert copy_ is not model and not training and not grad
    assert torch.equal(running_mean, torch.full((8,), 2.0))  # the mean of the two workers'
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # yours untouched


def test_a_module_that_cannot_be_copied_is_evaluated_on_the_loop_and_says_so(capsys):
    import threading

    model = net()
    model.lock = threading.Lock()  # (deepcopy cannot copy a lock)
    flat = ModuleModel(model, lambda m: {"loss": 1.0}, {})
    assert flat.evaluator() is None  # the server evaluates on its loop then (summary: eval_beside false)
    assert "cannot be copied" in capsys.readouterr().err


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


def test_drop_last_leaves_out_a_short_last_batch_as_a_dataloader_does():
    batches = PolicyBatches(_Sizes([4]), _Sampler(10), drop_last=True)  # type: ignore[arg-type]
    assert [b for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(batches) == 2
    assert len(PolicyBatches(_Sizes([4]), _Sampler(10))) == 3  # type: ignore[arg-type]


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
    assert plain.cluster.workers == 3 and plain.stop.max_time_s == DEFAULT_MAX_TIME_S and plain.stop.eval_every_s == 2.0
    longer = _scenario("hetero-4", 2, {"max_time_s": 600})  # not every 15 s (max_time_s / 40)
    assert (
        longer.cluster.workers == 2 and longer.stop.eval_every_s == 2.0 and longer.cluster.delay_s == (0.01, 0.04)
    )  # linspace re-resolved for 2
    assert _scenario("hetero-4", 4, {"max_time_s": 20}).stop.eval_every_s == 0.5  # a 20 s run: 40 evaluations
    with pytest.raises(BadInput, match="max_time_s"):
        _scenario(None, 2, {"max_time_s": -1})


def test_a_scenario_gives_your_loop_its_cluster_and_not_its_job_unless_you_pass_it():
    """Issue 26: hetero-4's max_time_s: 20 and 0.93 accuracy target applied to
    the user's job without notice. A scenario now gives the cluster (speeds,
    delays, noise, links); the job (stop, target, evaluation interval, batch)
    is the loop's own, as without a scenario, and one note says which of the
    scenario's job settings would have changed it and how to keep them."""
    from hetsync.loop import _scenario

    own, emulated = _scenario(None, 2, {}), _scenario("hetero-4", 2, {})
    job = ("max_time_s", "max_steps", "eval_every_s", "batch_size", "target", "model_bytes")
    assert [emulated.setting(k) for k in job] == [own.setting(k) for k in job]
    assert (
        emulated.cluster.delay_s == (0.01, 0.04)
        and emulated.timing.jitter == 0.1
        and emulated.cluster.latency_s == 0.0005
    )
    (note,) = [n for n in emulated.notes if "not its job" in n]
    assert "max_time_s=20" in note and "target_accuracy=0.93" in note and "hetsync.init(..., " in note
    assert "batch_size" not in note  # (hetero-4's 32 is the loop's default: nothing changed)
    kept = _scenario("hetero-4", 2, {"max_time_s": 20, "target_accuracy": 0.93})
    assert kept.stop.max_time_s == 20 and kept.stop.target.value == 0.93 and kept.stop.eval_every_s == 0.5
    assert not [n for n in kept.notes if "not its job" in n]
    other = _scenario("hetero-4", 2, {"target": {"metric": "loss", "value": 0.2}})  # (either target key keeps it)
    assert other.stop.target.metric == "loss" and "target_accuracy" not in " ".join(other.notes)
    lm = _scenario("lm-8", 2, {"max_steps": 50})
    assert (
        lm.stop.max_time_s is None
        and lm.stop.max_steps == 50
        and lm.job.model_bytes is None
        and lm.job.clip_norm is None
    )
    assert "model_bytes=4000000" in lm.notes[0] and "max_time_s=60" in lm.notes[0]  # (your stop is max_steps)
    assert "clip_norm" not in lm.notes[0]  # your loop clips (and schedules, and optimizes) itself: nothing to say
