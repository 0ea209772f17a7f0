"""The training recipe of a scenario: optimizers, learning-rate schedule,
gradient clipping — as validated configs, without torch.

A policy decides *what* is combined and *when*; the recipe decides *how* an
update moves a model (docs/architecture.md §7). One recipe serves every policy of a
comparison, so they train alike wherever they take the same kind of step:

- ``optimizer`` steps on **gradients**, wherever a policy takes such a step:
  on the server for gradient pushes (BSP, ASP, SSP, backup workers, DSSP,
  ElasticBSP, LB-BSP) — one step per ``Apply``, on the weighted gradient
  ``Σ wᵢ gᵢ`` at the ``Apply``'s learning rate (the scenario's ``lr`` as the
  policy scales it) times the schedule — and on every worker for the local
  steps of local SGD, WBSP, WBSP-overlap, DiLoCo and the peer-to-peer
  policies (``Compute(local_lr=...)``, at ``local_lr`` times the schedule).
- ``local_optimizer`` (optional) replaces it for the workers' local steps.
- ``outer_optimizer`` steps on the **pseudo-gradient** ``−Σ wᵢ Δᵢ`` of delta
  pushes on the server (local SGD, WBSP, DiLoCo), at its own ``lr``, not
  scheduled or clipped. The default, plain SGD at lr 1.0, is plain model
  averaging; DiLoCo's outer Nesterov momentum is one, and asynchronous local
  SGD's *delayed* Nesterov momentum (``momentum_period``: the momentum
  term taken once every k steps, :class:`hetsync.optim.DelayedNesterov`)
  another.

Clocks of the schedule (documented in docs/scenarios.md):

- server: the *global step*, samples applied to the global model divided by
  the global batch (``workers × batch_size``) — the version under BSP, and a
  fair clock for every other policy (ASP's version runs N times faster);
- workers: the worker's own local steps since the run began.

``clip_norm`` clips every gradient an optimizer steps on (a worker's local
gradient; the server's aggregated gradient) to that L2 norm; pseudo-gradients
of deltas are not clipped.

The default recipe — plain SGD, no momentum, no weight decay, constant rate,
no clipping — is stateless and computes exactly what hetsync computed before
optimizers existed (bit for bit), so it is taken on a fast path.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass, fields
from typing import Any

from hetsync.errors import BadInput

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("constant", "step", "cosine")


def _number(key: str, value: Any, *, minimum: float | None = None, below: float | None = None) -> float:
    if isinstance(value, str):  # PyYAML reads 1e-8 as a string
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise BadInput(f"scenario key {key!r} must be a finite number, got {value!r}")
    value = float(value)
    if minimum is not None and value < minimum:
        raise BadInput(f"scenario key {key!r} must be >= {minimum}, got {value!r}")
    if below is not None and value >= below:
        raise BadInput(f"scenario key {key!r} must be < {below}, got {value!r}")
    return value


def _integer(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"scenario key {key!r} must be an integer, got {value!r}")
    if value < minimum:
        raise BadInput(f"scenario key {key!r} must be >= {minimum}, got {value!r}")
    return value


def _mapping(key: str, raw: Any, cls: type) -> dict[str, Any]:
    """``raw`` as a mapping of ``cls``'s fields; a bare string is ``{name: raw}``."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        raise BadInput(f"scenario key {key!r} must be a mapping (or a name), got {raw!r}")
    known = [f.name for f in fields(cls)]
    for k in raw:
        if k not in known:
            raise BadInput(f"scenario key '{key}.{k}' is unknown (known: {', '.join(known)})")
    return raw


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerConfig:
    """One optimizer, as a scenario names it (built on ``torch.optim``).

    ``sgd``: ``torch.optim.SGD`` (momentum, nesterov, weight_decay);
    ``adamw``: ``torch.optim.AdamW`` (betas, eps, weight_decay). ``lr`` is
    the outer optimizer's own step size (the others take the scenario's
    ``lr``); 1.0 with plain SGD is plain model averaging.
    ``momentum_period`` k > 1 (Nesterov SGD only) delays the momentum: every
    step moves the model by −lr·g, and every k-th step the momentum takes the
    sum of the last k gradients and adds its own term
    (:class:`hetsync.optim.DelayedNesterov`); 1 is ordinary Nesterov SGD.
    """

    name: str = "sgd"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    lr: float = 1.0
    momentum_period: int = 1

    @property
    def plain(self) -> bool:
        """Stateless plain SGD: the bit-exact fast path."""
        return self.name == "sgd" and self.momentum == 0 and self.weight_decay == 0 and self.lr == 1.0


def parse_optimizer(key: str, raw: Any, *, outer: bool = False) -> OptimizerConfig:
    """Validate a scenario's ``optimizer`` / ``local_optimizer`` /
    ``outer_optimizer`` value (or a policy's override); errors name
    ``key.field``. Only an outer optimizer has an ``lr`` of its own."""
    if raw is None:
        return OptimizerConfig()
    if isinstance(raw, OptimizerConfig):
        return raw
    raw = _mapping(key, raw, OptimizerConfig)
    name = raw.get("name", "sgd")
    if name not in OPTIMIZERS:
        raise BadInput(f"scenario key '{key}.name' must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    out: dict[str, Any] = {"name": name}
    if "momentum" in raw:
        out["momentum"] = _number(f"{key}.momentum", raw["momentum"], minimum=0.0, below=1.0)
    if "nesterov" in raw:
        if not isinstance(raw["nesterov"], bool):
            raise BadInput(f"scenario key '{key}.nesterov' must be true or false, got {raw['nesterov']!r}")
        out["nesterov"] = raw["nesterov"]
    if "weight_decay" in raw:
        out["weight_decay"] = _number(f"{key}.weight_decay", raw["weight_decay"], minimum=0.0)
    if "eps" in raw:
        out["eps"] = _number(f"{key}.eps", raw["eps"], minimum=0.0)
        if out["eps"] == 0:
            raise BadInput(f"scenario key '{key}.eps' must be > 0, got {raw['eps']!r}")
    if "betas" in raw:
        betas = raw["betas"]
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise BadInput(f"scenario key '{key}.betas' must be a pair [beta1, beta2], got {betas!r}")
        out["betas"] = tuple(_number(f"{key}.betas[{i}]", b, minimum=0.0, below=1.0) for i, b in enumerate(betas))
    if "momentum_period" in raw:
        out["momentum_period"] = _integer(f"{key}.momentum_period", raw["momentum_period"], 1)
    if "lr" in raw:
        if not outer:
            raise BadInput(f"scenario key '{key}.lr' is not a setting: gradient steps take the scenario's lr")
        out["lr"] = _number(f"{key}.lr", raw["lr"], minimum=0.0)
        if out["lr"] == 0:
            raise BadInput(f"scenario key '{key}.lr' must be > 0, got {raw['lr']!r}")
    cfg = OptimizerConfig(**out)
    if name == "sgd":
        for k in ("betas", "eps"):
            if k in raw:
                raise BadInput(
                    f"scenario key '{key}.{k}' is an adamw setting; sgd has momentum, nesterov, weight_decay"
                )
        if cfg.nesterov and cfg.momentum == 0:
            raise BadInput(f"scenario key '{key}.nesterov' needs {key}.momentum > 0")
        if cfg.momentum_period > 1 and not cfg.nesterov:
            raise BadInput(
                f"scenario key '{key}.momentum_period' delays Nesterov momentum: it needs {key}.nesterov: true "
                f"(and {key}.momentum > 0)"
            )
    elif "momentum" in raw or "nesterov" in raw or "momentum_period" in raw:
        what = next(k for k in ("momentum", "nesterov", "momentum_period") if k in raw)
        raise BadInput(f"scenario key '{key}.{what}' is an sgd setting; adamw has betas, eps, weight_decay")
    return cfg


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleConfig:
    """A learning-rate schedule: a factor on the learning rate at a clock value.

    - ``constant``: 1;
    - ``step``: ``gamma ** k`` where k is the number of ``milestones`` reached
      (the WBSP paper's 0.1 → 0.01 → 0.001 is ``gamma: 0.1`` and two milestones);
    - ``cosine``: linear warm-up over ``warmup_steps`` (factor (s+1)/warmup),
      then a half cosine from 1 down to ``min_factor`` at ``total_steps``, and
      ``min_factor`` after it.
    """

    name: str = "constant"
    milestones: tuple[float, ...] = ()
    gamma: float = 0.1
    warmup_steps: float = 0
    total_steps: float = 0
    min_factor: float = 0.0

    @property
    def constant(self) -> bool:
        return self.name == "constant"

    def factor(self, step: float) -> float:
        """The factor on the learning rate at clock value ``step`` (>= 0)."""
        if self.name == "step":
            reached = sum(1 for m in self.milestones if step >= m)
            return self.gamma**reached
        if self.name == "cosine":
            if step < self.warmup_steps:
                return (step + 1) / self.warmup_steps
            span = self.total_steps - self.warmup_steps
            progress = min(1.0, (step - self.warmup_steps) / span) if span > 0 else 1.0
            return self.min_factor + (1 - self.min_factor) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0


def parse_schedule(key: str, raw: Any) -> ScheduleConfig:
    """Validate a scenario's ``schedule`` value; errors name ``key.field``."""
    if raw is None:
        return ScheduleConfig()
    if isinstance(raw, ScheduleConfig):
        return raw
    raw = _mapping(key, raw, ScheduleConfig)
    name = raw.get("name", "constant")
    if name not in SCHEDULES:
        raise BadInput(f"scenario key '{key}.name' must be one of {', '.join(SCHEDULES)}, got {name!r}")
    allowed = {
        "constant": set(),
        "step": {"milestones", "gamma"},
        "cosine": {"warmup_steps", "total_steps", "min_factor"},
    }
    for k in raw:
        if k != "name" and k not in allowed[name]:
            raise BadInput(f"scenario key '{key}.{k}' does not apply to the {name!r} schedule")
    out: dict[str, Any] = {"name": name}
    if name == "step":
        ms = raw.get("milestones")
        if not isinstance(ms, (list, tuple)) or not ms:
            raise BadInput(f"scenario key '{key}.milestones' must be a non-empty list of steps, got {ms!r}")
        values = tuple(_number(f"{key}.milestones[{i}]", m, minimum=0.0) for i, m in enumerate(ms))
        for i in range(1, len(values)):
            if values[i] <= values[i - 1]:
                raise BadInput(f"scenario key '{key}.milestones' must be increasing, got {list(ms)!r}")
        out["milestones"] = values
        if "gamma" in raw:
            out["gamma"] = _number(f"{key}.gamma", raw["gamma"], minimum=0.0)
            if not 0 < out["gamma"] <= 1:
                raise BadInput(f"scenario key '{key}.gamma' must be in (0, 1], got {raw['gamma']!r}")
    elif name == "cosine":
        if "total_steps" not in raw:
            raise BadInput(f"scenario key '{key}.total_steps' is required for the cosine schedule")
        out["warmup_steps"] = _integer(f"{key}.warmup_steps", raw.get("warmup_steps", 0), 0)
        out["total_steps"] = _integer(f"{key}.total_steps", raw["total_steps"], 1)
        if out["total_steps"] < out["warmup_steps"]:
            raise BadInput(f"scenario key '{key}.total_steps' must be >= warmup_steps ({out['warmup_steps']})")
        if "min_factor" in raw:
            out["min_factor"] = _number(f"{key}.min_factor", raw["min_factor"], minimum=0.0)
            if out["min_factor"] > 1:
                raise BadInput(f"scenario key '{key}.min_factor' must be in [0, 1], got {raw['min_factor']!r}")
    return ScheduleConfig(**out)


def parse_clip_norm(raw: Any) -> float | None:
    if raw is None:
        return None
    value = _number("clip_norm", raw, minimum=0.0)
    if value == 0:
        raise BadInput(f"scenario key 'clip_norm' must be > 0 (or null for no clipping), got {raw!r}")
    return value
