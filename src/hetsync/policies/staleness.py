"""Remedies for stale gradients, as options of the policies that apply
contributions computed on an older model (not a policy of its own).

ASP, SSP, DSSP and ElasticBSP apply every gradient push on arrival, so a
slow worker's gradient lands several versions after the model it was
computed on; WBSP applies a round's deltas together, and a delta pushed
before its worker learnt of the round's close lands one round (WBSP-overlap:
up to two) late. On recipes with momentum or Adam that staleness costs
accuracy (docs/results-real.md). The options (maths and papers in
:mod:`hetsync.algos.staleness`):

- ``lr_scale=inverse`` (or ``sqrt``): each contribution of staleness τ is
  applied at the policy's learning rate × 1/max(1, τ) (or 1/√max(1, τ)) —
  Zhang, Gupta, Lian, Liu, "Staleness-Aware Async-SGD for Distributed Deep
  Learning", IJCAI 2016. The factor multiplies what the policy already
  gives a push (ASP: weight 1/N at ``lr``), so an ASP push of staleness τ
  moves the model lr/(N·max(1, τ)). (The paper's per-gradient rule is
  α₀/τ with α₀ the synchronous rate, which in hetsync's convention would
  *replace* the 1/N weight — 1/N is its average-staleness form α₀/⟨τ⟩ for
  ⟨τ⟩ ≈ N; the factor here damps stale pushes more than the paper does.)
  ``lr_scale=zhang`` (gradient pushes only) is the paper's rule as written:
  the push moves the model at lr/max(1, τ), replacing the policy's 1/N
  share — at τ ≈ N plain ASP's step, larger for fresher pushes, smaller
  for staler ones.
  Gradient pushes scale the ``Apply``'s ``lr``, so it works under AdamW too
  (a scale on the gradient would cancel in Adam); deltas (WBSP) scale their
  weight.
- ``compensate=λ`` (gradient pushes only): DC-ASGD, Zheng et al., ICML
  2017 — the server replaces each gradient g computed on θ_then by
  g + λ·g⊙g⊙(θ_now − θ_then) before stepping. It needs θ_then: the policy
  says so (``needs_base_models``) and the server keeps, while any worker can
  still push a gradient computed on it, each model it handed out — the one
  each worker holds and one on its way: at most 2N models besides the
  global one (N + 1 in steady state; in the simulator the workers hold the
  same tensors, so nothing extra; on real processes N to 2N copies on the
  server, ``max_kept_models`` in the summary).
- ``momentum=corrected`` (gradient pushes only): Mitliagkas, Zhang, Hadjis,
  Ré, "Asynchrony begets Momentum", Allerton 2016 — N asynchronous workers
  act like an implicit momentum 1 − 1/N, so the server's SGD momentum μ
  (the scenario's ``optimizer.momentum``) is lowered to max(0, μ − (1 −
  1/N)), N the live workers. Needs an SGD server optimizer (an AdamW run
  refuses it).

The policy only decides and annotates (the ``Apply``'s ``lr``, weights,
``compensate`` and ``implicit_momentum``); the server-side stepping code both
drivers share (:class:`hetsync.ledger.Ledger`) applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsync.algos.staleness import GRADIENT_LR_SCALES, LR_SCALES, implicit_momentum, staleness_lr_scale
from hetsync.policies.base import Apply, Policy, PolicyConfig, PushArrived, param

_LR_SCALE_HELP = (
    "scale each contribution by its staleness tau: inverse 1/max(1,tau) (Zhang et al. IJCAI 2016), "
    "sqrt 1/sqrt(max(1,tau))"
)


@dataclass(frozen=True, kw_only=True)
class LrScaleConfig(PolicyConfig):
    """The staleness-dependent rate alone (policies that apply model deltas)."""

    lr_scale: str = param("none", help=_LR_SCALE_HELP, choices=LR_SCALES, quiet=True)


@dataclass(frozen=True, kw_only=True)
class StalenessConfig(LrScaleConfig):
    """Every remedy (policies that apply gradient pushes on arrival)."""

    lr_scale: str = param(
        "none",
        help=_LR_SCALE_HELP + ", zhang lr/max(1,tau) in place of the 1/N share",
        choices=GRADIENT_LR_SCALES,
        quiet=True,
    )

    compensate: float = param(
        0.0,
        help="delay compensation lambda: g + lambda*g*g*(w_now - w_then) (DC-ASGD, Zheng et al. ICML 2017); 0: off",
        ge=0.0,
        quiet=True,
    )
    momentum: str = param(
        "scenario",
        help="server momentum: the scenario's, or lowered by the implicit 1-1/N of N asynchronous workers "
        "(Mitliagkas et al. 2016)",
        choices=("scenario", "corrected"),
        quiet=True,
    )


class StalePushes(Policy):
    """Base of the policies that apply each gradient push on arrival (ASP,
    SSP, DSSP, ElasticBSP): :meth:`apply_push` builds their ``Apply`` with
    the remedies their spec asks for."""

    config_class = StalenessConfig
    config: StalenessConfig

    def needs_base_models(self) -> bool:
        return self.config.compensate > 0

    def apply_push(self, push: PushArrived, weight: float, workers: int) -> Apply:
        """Apply ``push`` alone, at once, with ``weight`` at the policy's rate;
        ``workers``: how many push asynchronously (the implicit momentum's M)."""
        cfg = self.config
        lr = self.ctx.lr * staleness_lr_scale(cfg.lr_scale, push.staleness, share=weight)
        implicit = implicit_momentum(max(1, workers)) if cfg.momentum == "corrected" else 0.0
        return Apply(
            contributions=((push.push_id, weight),), lr=lr, compensate=cfg.compensate, implicit_momentum=implicit
        )
