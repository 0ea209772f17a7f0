"""Optimizers over flat models, the same in both drivers: ``torch.optim`` does
the math, :mod:`hetsync.recipe` says which optimizer, schedule and clipping.

Drivers hold a model as one flat float32 vector that is never modified in
place (a pull in flight or a multicast copy may share it). A
:class:`Stepper` therefore keeps one ``torch.nn.Parameter`` whose storage it
points at a fresh copy of the model before each step; the optimizer's state
(momentum, Adam moments) lives beside it, keyed on that parameter, and
survives from step to step. The plain recipe (stateless SGD, no clipping)
skips torch.optim and computes ``model − lr·g`` exactly as hetsync always has.

Who owns a stepper: the server's :class:`~hetsync.ledger.Ledger` owns two for
the global model (gradient pushes, delta pushes); each worker's :class:`~hetsync.localmodel.LocalModel` owns
one for its local steps. What happens to a worker's optimizer state when a
pull replaces its model is each policy's choice, stated in its header; the
drivers keep it (a pull replaces parameters, not optimizer state), which is
what local SGD, WBSP and DiLoCo implementations do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from hetsync.algos.staleness import corrected_momentum
from hetsync.errors import BadInput
from hetsync.recipe import OptimizerConfig, ScheduleConfig, parse_optimizer


class Stepper:
    """One optimizer, its schedule and its clipping, over a flat model."""

    def __init__(self, cfg: OptimizerConfig, schedule: ScheduleConfig, clip_norm: float | None) -> None:
        self.cfg = cfg
        self.schedule = schedule
        self.clip_norm = clip_norm
        self.plain = cfg.plain and clip_norm is None
        self._param: torch.nn.Parameter | None = None
        self._opt: torch.optim.Optimizer | None = None
        self._pending_state: dict[str, Any] | None = None

    def lr_at(self, lr: float, clock: float) -> float:
        """``lr`` scaled by the schedule at ``clock`` (exactly ``lr`` when constant)."""
        return lr if self.schedule.constant else lr * self.schedule.factor(clock)

    def descend(
        self, model: torch.Tensor, grad: torch.Tensor, lr: float, *, clip: bool = True, implicit_momentum: float = 0.0
    ) -> torch.Tensor:
        """A new model: one optimizer step from ``model`` along gradient ``grad``
        at learning rate ``lr``. Neither argument is modified. With
        ``implicit_momentum`` m (the momentum asynchrony already implies:
        ``momentum=corrected``) an SGD step uses momentum max(0, μ − m)
        instead of its μ; BadInput for another optimizer."""
        if implicit_momentum and self.cfg.name != "sgd":
            raise BadInput(
                f"momentum=corrected lowers an SGD server's momentum; this run's optimizer is {self.cfg.name}"
            )
        if self.plain:
            return torch.add(model, grad, alpha=-lr)  # (no momentum to lower)
        param, opt = self._optimizer(model)
        with torch.no_grad():
            param.data = model.clone()
        param.grad = grad.clone() if clip and self.clip_norm is not None else grad
        if clip and self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_([param], self.clip_norm)
        for group in opt.param_groups:
            group["lr"] = lr
            if self.cfg.name == "sgd":
                group["momentum"] = corrected_momentum(self.cfg.momentum, implicit_momentum)
        opt.step()
        param.grad = None
        return param.data

    def _optimizer(self, model: torch.Tensor) -> tuple[torch.nn.Parameter, torch.optim.Optimizer]:
        if self._param is None or self._opt is None:
            self._param = torch.nn.Parameter(model.clone())
            self._opt = build_optimizer(self.cfg, [self._param])
            if self._pending_state is not None:
                self._opt.load_state_dict(self._pending_state)
                self._pending_state = None
        return self._param, self._opt

    # checkpoints: the optimizer's state (tensors and numbers; loads with weights_only=True)
    def state_dict(self) -> dict[str, Any]:
        if self._opt is None:
            return self._pending_state or {}
        return self._opt.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        if self._opt is None:
            self._pending_state = state
        else:
            self._opt.load_state_dict(state)


def warm_up() -> None:
    """Build one throwaway ``torch.optim`` optimizer: the first one a process
    builds imports ``torch._dynamo`` (1 s here, 6.5 s on a loaded machine),
    which must not land inside the first run's clock on real processes."""
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def build_optimizer(cfg: OptimizerConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer ``cfg`` names (learning rate set per step)."""
    if cfg.name == "adamw":
        return torch.optim.AdamW(params, lr=1.0, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    if cfg.momentum_period > 1:
        return DelayedNesterov(
            params, lr=1.0, momentum=cfg.momentum, period=cfg.momentum_period, weight_decay=cfg.weight_decay
        )
    return torch.optim.SGD(params, lr=1.0, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay)


class DelayedNesterov(torch.optim.Optimizer):
    """Nesterov SGD whose momentum is updated and applied once every
    ``period`` steps: the delayed Nesterov update (DN) of Liu et al.,
    "Asynchronous Local-SGD Training for Language Modeling" (2024), for an
    outer optimizer that receives one worker's pseudo-gradient at a time.

    Each step, with g the gradient (plus ``weight_decay``·θ):

    - θ ← θ − lr·g, and g is added to a buffer Σ;
    - every ``period``-th step also m ← β·m + Σ, θ ← θ − lr·β·m, Σ ← 0.

    With ``period`` 1 this is ``torch.optim.SGD(nesterov=True)`` (dampening
    0) step for step. With ``period`` N and each of N workers' pseudo-gradients
    given weight 1/N (asynchronous local SGD's ``Apply``), N arrivals move
    the model exactly as one synchronous Nesterov step on their mean does
    (DiLoCo's outer step), but the model moves at every arrival, and one
    stale pseudo-gradient never enters the momentum alone. The state (per
    parameter: ``momentum_buffer``, ``pending`` = Σ and ``step``) is saved
    and loaded with the optimizer's ``state_dict``, as torch.optim's is.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        *,
        lr: float = 1.0,
        momentum: float = 0.9,
        period: int = 1,
        weight_decay: float = 0.0,
    ) -> None:
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"DelayedNesterov momentum must be in [0, 1), got {momentum!r}")
        if period < 1:
            raise ValueError(f"DelayedNesterov period must be >= 1, got {period!r}")
        super().__init__(params, {"lr": lr, "momentum": momentum, "period": period, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            lr, beta, period, decay = group["lr"], group["momentum"], group["period"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad if not decay else p.grad.add(p, alpha=decay)
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["momentum_buffer"] = torch.zeros_like(p)
                    state["pending"] = torch.zeros_like(p)
                state["step"] += 1
                pending = state["pending"]
                pending.add_(g)
                p.add_(g, alpha=-lr)
                if state["step"] % period == 0:
                    m = state["momentum_buffer"]
                    m.mul_(beta).add_(pending)
                    p.add_(m, alpha=-lr * beta)
                    pending.zero_()


def _policy_choice(policy: Any, hook: str, default: OptimizerConfig, outer: bool) -> OptimizerConfig:
    override = getattr(policy, hook)()
    if override is None:
        return default
    return parse_optimizer(f"policy {policy.name} {hook}", override, outer=outer)


def gradient_stepper(scenario: Any) -> Stepper:
    """The server's optimizer for gradient pushes: the scenario's ``optimizer``."""
    return Stepper(scenario.job.optimizer, scenario.job.schedule, scenario.job.clip_norm)


def outer_stepper(scenario: Any, policy: Any) -> Stepper:
    """The server's optimizer for delta pushes: the policy's own
    (``Policy.outer_optimizer``, DiLoCo's) or the scenario's ``outer_optimizer``."""
    cfg = _policy_choice(policy, "outer_optimizer", scenario.job.outer_optimizer, outer=True)
    return Stepper(cfg, ScheduleConfig(), None)


def local_steppers(scenario: Any, policy: Any, count: int = 1) -> list[Stepper]:
    """``count`` workers' optimizers for local steps — the policy's own
    (``Policy.local_optimizer``), else the scenario's ``local_optimizer``, else
    its ``optimizer`` — with the schedule and clipping; one per worker, never
    shared, the choice made once."""
    default = scenario.job.local_optimizer if scenario.job.local_optimizer is not None else scenario.job.optimizer
    cfg = _policy_choice(policy, "local_optimizer", default, outer=False)
    return [Stepper(cfg, scenario.job.schedule, scenario.job.clip_norm) for _ in range(count)]


def gpu_devices(params: Iterable[torch.Tensor]) -> list[torch.device]:
    """The CUDA devices ``params`` live on (none for a CPU model), in a fixed order."""
    return sorted({p.device for p in params if p.device.type == "cuda"}, key=str)


def wait_for(devices: Iterable[torch.device]) -> None:
    """Wait until the kernels queued on ``devices`` are done: a GPU step's
    Python returns before its work does, so a step is timed after this."""
    for device in devices:
        torch.cuda.synchronize(device)


# What a step of a user's optimizer reads that a training loop moves: every LR scheduler sets
# ``lr``; OneCycleLR and CyclicLR cycle ``momentum`` (SGD, RMSprop) or Adam's beta1 (``betas``);
# a loop may schedule ``weight_decay``. Rank 0's copy of the optimizer takes the workers' values
# with each gradient (hetsync.loop); the group's other settings must not change in the loop.
FOLLOWED = ("lr", "momentum", "betas", "weight_decay")


def hyperparameters(optimizer: torch.optim.Optimizer) -> tuple[float, ...]:
    """The :data:`FOLLOWED` settings of every parameter group, flat, in group
    order (``betas`` as two values): what a gradient push from a training
    loop carries (:class:`hetsync.runtime.protocol.Pushed`). Two copies of
    one optimizer (the same class and parameter groups) lay them out alike."""
    values: list[float] = []
    for group in optimizer.param_groups:
        for key in FOLLOWED:
            if key not in group:
                continue
            if key == "betas":
                values.extend(float(beta) for beta in group[key])
            else:
                values.append(float(group[key]))
    return tuple(values)


def set_hyperparameters(optimizer: torch.optim.Optimizer, values: tuple[float, ...]) -> None:
    """Set ``values`` — :func:`hyperparameters` of another copy of the same
    optimizer — on ``optimizer``'s parameter groups; BadInput when the two
    copies' parameter groups differ."""
    expected = len(hyperparameters(optimizer))
    if len(values) != expected:
        raise BadInput(
            f"a worker's {type(optimizer).__name__} has {len(values)} scheduled settings ({', '.join(FOLLOWED)} "
            f"over its parameter groups) and rank 0's copy has {expected}: build the same optimizer, with the "
            "same parameter groups, on every rank before sync.optimizer"
        )
    it = iter(values)
    for group in optimizer.param_groups:
        for key in FOLLOWED:
            if key == "betas" and key in group:
                group[key] = tuple(_assign(old, next(it)) for old in group[key])
            elif key in group:
                group[key] = _assign(group[key], next(it))


def _assign(old: Any, new: float) -> Any:
    """``new`` in the form of ``old``: a tensor setting (capturable or fused optimizers) is filled in place."""
    if isinstance(old, torch.Tensor):
        return old.fill_(new)
    return new


def fixed_settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Per parameter group, the optimizer's settings other than the
    :data:`FOLLOWED` ones (its ``defaults``' keys: eps, nesterov, dampening,
    maximize, ...). Rank 0's copy keeps its own, so a training loop must not
    change them after ``sync.optimizer`` (:mod:`hetsync.loop` checks).
    Scheduler bookkeeping (``initial_lr``, ``max_lr``...) is not among them:
    no step reads it."""
    return [
        {key: _plain(group[key]) for key in optimizer.defaults if key not in FOLLOWED and key in group}
        for group in optimizer.param_groups
    ]


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, torch.Tensor) else value


def changed_setting(before: list[dict[str, Any]], optimizer: torch.optim.Optimizer) -> str | None:
    """What changed in ``optimizer``'s :func:`fixed_settings` since ``before``
    (``"param_groups[0]['eps'] 1e-08 -> 1e-06"``); None: nothing."""
    now = fixed_settings(optimizer)
    if len(now) != len(before):
        return f"param_groups: {len(before)} groups -> {len(now)}"
    for i, (was, is_) in enumerate(zip(before, now, strict=True)):
        for key, value in was.items():
            if is_.get(key) != value:
                return f"param_groups[{i}][{key!r}] {value!r} -> {is_.get(key)!r}"
    return None


class OptimizerView(torch.optim.Optimizer):
    """A user's optimizer seen through a wrapper whose ``step()`` does more
    (:class:`hetsync.loop.SyncOptimizer`,
    :class:`hetsync.advise.loop_profile.ProfilingOptimizer`). Everything else —
    ``param_groups``, ``state``, ``defaults``, ``zero_grad``, ``state_dict`` —
    *is* the wrapped optimizer's, not a copy, so ``torch.optim.lr_scheduler``
    works on either object. Subclasses define ``step``."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        # not Optimizer.__init__: this object shares the wrapped one's state
        self.optimizer = optimizer
        self.defaults = optimizer.defaults
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # type: ignore[override]
        self.optimizer.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        optimizer = self.__dict__.get("optimizer")
        if optimizer is None:
            raise AttributeError(name)
        return getattr(optimizer, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.optimizer!r})"
