"""DiLoCo — Distributed Low-Communication training (A. Douillard et al.,
"DiLoCo: Distributed Low-Communication Training of Language Models",
arXiv:2311.08455, 2023), the recipe behind torchft's and prime's
low-communication modes.

Structurally it is local SGD with different optimizers. Each worker takes H
inner steps on its own model with AdamW; the H-th step pushes the worker's
model delta Δᵢ since its last pull. When the delta of every live worker has
arrived, the server applies them in one ``Apply`` with weights 1/k (k deltas
in the round), so Σ wᵢΔᵢ is the average delta, and the server's optimizer
treats the pseudo-gradient −Σ wᵢΔᵢ as the gradient of one outer step:
SGD with Nesterov momentum, outer lr 0.7 and momentum 0.9 by default (the
paper's values). Every live worker then pulls the new global model and starts
its next round. The outer momentum is what sets DiLoCo apart from plain model
averaging (outer SGD at lr 1 without momentum is exactly local SGD). A worker
that leaves is not waited for; a delta it pushed before leaving stays in the
round, and one whose own training loop ends mid-round pushes the inner steps
it took in it first (as local SGD does).

Where the optimizer state lives: the inner AdamW moments live on each worker
and are kept across outer steps, as in the paper, where every replica keeps
its own inner optimizer; the outer momentum buffer lives on the server. A
pull replaces the worker's model parameters only, never its AdamW state.
The policy names both optimizers through ``local_optimizer()`` and
``outer_optimizer()``; the drivers use them in place of the scenario's
``local_optimizer``/``optimizer`` and ``outer_optimizer``.

Learning rate: ``inner_lr`` is the inner AdamW rate of every local step
(times the scenario's schedule, on the worker's own step count); 0, the
default, takes the scenario's ``lr``, which suits scenarios tuned for Adam.
Next to SGD-tuned policies (the demo's SGD rate 0.5 diverges under AdamW) set
it explicitly, e.g. ``diloco:inner_lr=0.01`` (the paper uses 4e-4 on its
language models). The outer step size is ``outer_lr``.

Default H: the paper syncs every 500 inner steps over runs of tens of
thousands of steps, on the order of a hundred outer steps. hetsync's runs are
short (under local SGD each worker of the demo takes about 175 steps in its
30 s), and Nesterov momentum 0.9 needs on the order of ten outer steps to
build up, so the default is H = 10: about 18 outer steps in the demo, still
10× fewer synchronizations than BSP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsync.policies.base import PolicyContext, param
from hetsync.policies.config import config_params, config_values
from hetsync.policies.local_sgd import LocalSGD, LocalSGDConfig


@dataclass(frozen=True, kw_only=True)
class DiLoCoConfig(LocalSGDConfig):
    H: int = param(10, help="inner (local) steps between outer steps", ge=1)
    outer_lr: float = param(0.7, help="outer Nesterov SGD learning rate", gt=0.0)
    outer_momentum: float = param(0.9, help="outer Nesterov momentum (0: plain outer SGD)", ge=0.0, lt=1.0)
    inner_wd: float = param(0.1, help="inner AdamW weight decay", ge=0.0)
    inner_lr: float = param(0.0, help="inner AdamW learning rate (0: the scenario's lr)", ge=0.0)


class DiLoCo(LocalSGD):
    """Local SGD's rounds (H inner steps, push the delta, average, pull) with
    DiLoCo's optimizers and parameters."""

    name = "diloco"
    summary = "H inner AdamW steps per worker, averaged delta through outer Nesterov SGD"
    config_class = DiLoCoConfig
    config: DiLoCoConfig

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.local_lr = self.config.inner_lr or ctx.lr

    @property
    def label(self) -> str:
        """H always, the other parameters only where they differ from the paper's defaults."""
        values = config_values(self.config)
        changed = [p.name for p in config_params(type(self.config)) if p.name != "H" and values[p.name] != p.default]
        shown = [f"H={self.h}"] + [f"{name}={values[name]}" for name in changed]
        return f"{self.name}({','.join(shown)})"

    def outer_optimizer(self) -> dict[str, Any] | None:
        momentum = self.config.outer_momentum
        # Nesterov needs momentum; outer_momentum=0 is plain outer SGD
        # (and at outer_lr=1, plain model averaging: local SGD)
        return {"name": "sgd", "lr": self.config.outer_lr, "momentum": momentum, "nesterov": momentum > 0}

    def local_optimizer(self) -> dict[str, Any] | None:
        return {"name": "adamw", "weight_decay": self.config.inner_wd}
