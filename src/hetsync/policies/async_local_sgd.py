"""Asynchronous local SGD for unequal workers — Liu, Chhaparia, Douillard,
Kale, Rusu, Shen, Szlam, Ranzato, "Asynchronous Local-SGD Training for
Language Modeling" (arXiv:2401.09135, 2024): DiLoCo's optimizers without
DiLoCo's barrier, with their two remedies, Dynamic Local Updates (DyLU) and
the Delayed Nesterov momentum update (DN).

How it runs. Each worker takes H_w local steps on its own model with AdamW
(``Compute(local_lr=...)``, as DiLoCo's inner steps), and its last step
pushes the model delta Δ it accumulated since its last pull. The server
applies each delta **as it arrives** — nobody waits for anybody — through
the outer optimizer, the pusher pulls the new global model and starts its
next H_w steps. The staleness of each delta (versions the global model
moved since the pusher's pull) is recorded in the trace and the summary as
for every other asynchronous policy (the ledger's ``apply`` records).

DyLU (the paper's "Dynamic Local Updates"; :mod:`hetsync.algos.dylu`): the
fastest live worker runs H local steps per push and worker w runs
H_w = max(1, ⌊H · v_w / v_max⌋), v the speed (1 / step time), so every
worker needs about the same wall time per push and no update is much staler
than the others. The speeds are re-estimated as the run goes from the step
durations the driver measures (``ComputeDone.duration_s``: compute only;
the one push and pull per window cost every worker about the same). Each
worker's step time is an exponential moving average, weight 0.2 on the
newest step (:data:`SPEED_EMA`), not a recent mean: it needs one number per
worker, follows a worker whose load changes within about a window of H
steps, and one straggling step (k× slower) raises it by 0.2·(k − 1) of its
value, so a single hiccup does not halve a worker's window. H_w is decided step by step
with the latest estimates: after each step the policy asks whether the
worker has done its H_w (the next step then pushes, or it pushes at once if
H_w shrank below what it has done). Before anything is measured every
worker gets H; from its first measured step on, DyLU applies.
``dylu=off`` gives every worker H steps.

DN (the Delayed Nesterov momentum update the paper proposes, with DyLU, in
its section on proposed solutions; we could read the paper's abstract and
secondary descriptions here, not its full text, so we give no section or
algorithm number and implement the form those agree on; the authors' toy
notebook, github.com/google-deepmind/asyncdiloco, has only a simpler
"delayed" outer step that applies nothing until N pseudo-gradients are
buffered): plain Nesterov momentum on every arrival lets one stale
pseudo-gradient steer the momentum alone, which the paper identifies as the
key obstacle for asynchronous local SGD. DN instead, with N
(``momentum_period``; 0, the default, takes the number of workers, the
paper's default):

- at every arrival, the plain gradient part: θ ← θ − ε·g/N, g = −Δ the
  pseudo-gradient, and g/N joins a buffer;
- at every N-th arrival also the momentum part: m ← β·m + (buffer),
  θ ← θ − ε·β·m, and the buffer empties.

So N arrivals move the model as one synchronous DiLoCo outer step on their
mean does (ε·(ḡ + β·m)), but the model moves at every arrival. The 1/N is
this policy's weight on each push (``Apply`` weight 1/N); the rest is an
outer optimizer the server builds from the recipe this policy names
(``outer_optimizer``: Nesterov SGD with ``momentum_period`` N,
:class:`hetsync.optim.DelayedNesterov`). The buffers are tensors, so they
live with the server's outer optimizer (and its checkpoint), not in this
sans-IO policy, which only says what is applied when and with what weight.
``momentum_period=1`` is plain Nesterov at every arrival (the paper's
baseline that DN fixes) and ``outer_momentum=0`` plain outer SGD.

Simplifications, stated plainly: N and the 1/N weights are fixed at the
start from the worker count; a worker that leaves is no longer expected (it
is not waited for anyway: nothing here waits) but N is not lowered, so with
fewer workers the momentum part comes a little less often per unit of time.
The paper's other device — a short grace period in which arrivals are
averaged into one update — is not implemented (every arrival is its own
``Apply``). ``lr_scale`` (quiet, off by default) additionally scales each
delta's weight by its staleness, as for WBSP (:mod:`hetsync.policies.staleness`).

Optimizers and learning rates (as hetsync's DiLoCo: inner AdamW, outer
ε = 0.7, β = 0.9, the DiLoCo paper's values): ``inner_lr``
is the inner AdamW rate (0: the scenario's ``lr``, which suits scenarios
tuned for Adam; next to an SGD-tuned scenario set it, e.g.
``async-local-sgd:inner_lr=0.01``), ``inner_wd`` its weight decay; the
workers' AdamW state stays on each worker across pulls (a pull replaces
parameters only). The default H is DiLoCo's here (10), so the two compare at
the same communication per step of the fastest worker.

Results (docs/results-async-local-sgd.md, ``hetsync bench async-local-sgd``,
lm-8 and default, 3 seeds, settings declared before running): with DN and
DyLU as above it reached neither target and lost to BSP, local SGD and
DiLoCo; DN did beat Nesterov at every arrival, and the same policy without
outer momentum (``outer_momentum=0:outer_lr=1``: each delta added with
weight 1/N) was the fastest of all to the target on both. The page says why
we think the outer momentum fails here (staleness ≈ N − 1 arrivals, 10-step
windows).

Leaving: a worker whose own training loop ends (``WorkerLeaving``) first
pushes the local steps it took since its last push, if any, and gets no new
window; its delta is applied when it arrives. A worker that is gone
(``WorkerLeft``) no longer counts for v_max. A worker that joins
(``WorkerJoined``) holds the current global model and starts its next local
phase at once, H_w sized from its step time measured before it left (H if it
never ran); it counts for v_max again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsync.algos.dylu import dylu_steps, ema, fastest
from hetsync.algos.staleness import staleness_lr_scale
from hetsync.policies.base import (
    Apply,
    Command,
    Compute,
    ComputeDone,
    Event,
    Policy,
    PolicyContext,
    Pull,
    Push,
    PushArrived,
    WorkerJoined,
    WorkerLeaving,
    WorkerLeft,
    param,
    state_list,
)
from hetsync.policies.config import config_params, config_values
from hetsync.policies.staleness import LrScaleConfig

SPEED_EMA = 0.2
"""Weight of the newest step in each worker's step-time average (see the header)."""


@dataclass(frozen=True, kw_only=True)
class AsyncLocalSGDConfig(LrScaleConfig):
    H: int = param(10, help="local steps per push of the fastest worker (DyLU gives slower ones fewer)", ge=1)
    dylu: str = param(
        "on",
        help="Dynamic Local Updates: on (steps per push proportional to speed) or off (H each)",
        choices=("on", "off"),
    )
    outer_lr: float = param(0.7, help="outer learning rate epsilon", gt=0.0)
    outer_momentum: float = param(0.9, help="outer Nesterov momentum beta (0: plain outer SGD)", ge=0.0, lt=1.0)
    momentum_period: int = param(
        0, help="arrivals per delayed-Nesterov momentum step N (0: the workers; 1: Nesterov at every arrival)", ge=0
    )
    inner_wd: float = param(0.1, help="inner AdamW weight decay", ge=0.0)
    inner_lr: float = param(0.0, help="inner AdamW learning rate (0: the scenario's lr)", ge=0.0)


class AsyncLocalSGD(Policy):
    name = "async-local-sgd"
    summary = "async local SGD (Liu et al. 2024): deltas applied on arrival, DyLU steps, delayed Nesterov"
    config_class = AsyncLocalSGDConfig
    config: AsyncLocalSGDConfig
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.H = self.config.H
        self.period = self.config.momentum_period or self.n  # N: arrivals per momentum step
        self.local_lr = self.config.inner_lr or ctx.lr
        self.step_s: list[float | None] = [None] * self.n  # each worker's step-time average (DyLU)
        self.alive = set(range(self.n))
        self.leaving: set[int] = set()
        # the current window of each worker: steps given, steps done, whether its push is under way
        self.given = [0] * self.n
        self.done = [0] * self.n
        self.pushing = [False] * self.n  # its last given step pushes (or a Push was sent)

    @property
    def label(self) -> str:
        """H always, the other parameters only where they differ from their defaults."""
        values = config_values(self.config)
        changed = [p.name for p in config_params(type(self.config)) if p.name != "H" and values[p.name] != p.default]
        return f"{self.name}({','.join([f'H={self.H}'] + [f'{k}={values[k]}' for k in changed])})"

    # ----------------------------------------------------------- optimizers
    def outer_optimizer(self) -> dict[str, Any] | None:
        momentum = self.config.outer_momentum
        if momentum == 0:  # plain outer SGD: nothing to delay
            return {"name": "sgd", "lr": self.config.outer_lr, "momentum": 0.0, "nesterov": False}
        return {
            "name": "sgd",
            "lr": self.config.outer_lr,
            "momentum": momentum,
            "nesterov": True,
            "momentum_period": self.period,
        }

    def local_optimizer(self) -> dict[str, Any] | None:
        return {"name": "adamw", "weight_decay": self.config.inner_wd}

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The measured step times DyLU sizes the windows from (the momentum
        schedule lives with the server's outer optimizer and its state)."""
        return {"step_s": list(self.step_s)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_s = [None if s is None else float(s) for s in state_list(self.name, state, "step_s", self.n)]

    # ------------------------------------------------------------------ DyLU
    def steps_for(self, w: int) -> int:
        """H_w: worker w's local steps per push from the current estimates."""
        if self.config.dylu == "off":
            return self.H
        live = [self.step_s[u] for u in sorted(self.alive)]
        return dylu_steps(self.step_s[w], fastest(live), self.H)

    def _next_step(self, w: int) -> Compute:
        """Worker w's next local step; the one that completes its H_w pushes the delta."""
        self.given[w] += 1
        last = self.given[w] >= self.steps_for(w)
        self.pushing[w] = last
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.local_lr, push="delta" if last else None)

    def _new_window(self, w: int) -> Compute:
        self.given[w] = self.done[w] = 0
        self.pushing[w] = False
        return self._next_step(w)

    # ---------------------------------------------------------------- events
    def start(self, now_s: float) -> list[Command]:
        return [self._new_window(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            return self._on_step(event)
        if isinstance(event, PushArrived):
            return self._on_push(event)
        if isinstance(event, WorkerLeaving):
            return self._flush(event.worker)
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.leaving.discard(event.worker)
        if isinstance(event, WorkerJoined):
            w = event.worker
            if w in self.alive:
                return []
            self.alive.add(w)
            return [self._new_window(w)]
        return []

    def _on_step(self, event: ComputeDone) -> list[Command]:
        w = event.worker
        self.step_s[w] = ema(self.step_s[w], max(0.0, event.duration_s), SPEED_EMA)
        self.done[w] += 1
        if self.pushing[w] or w in self.leaving:
            return []  # the step pushed itself: the worker waits for its pull
        if self.done[w] >= self.steps_for(w):  # its H_w shrank below what it has done: push now
            self.pushing[w] = True
            return [Push(worker=w, kind="delta")]
        return [self._next_step(w)]

    def _on_push(self, push: PushArrived) -> list[Command]:
        """Apply the delta at once with weight 1/N (× the staleness rule, if
        any); the pusher pulls the new model and starts its next window."""
        w = push.worker
        weight = staleness_lr_scale(self.config.lr_scale, push.staleness) / self.n
        cmds: list[Command] = [Apply(contributions=((push.push_id, weight),))]
        if w in self.alive and w not in self.leaving:
            cmds.append(Pull(worker=w, then=self._new_window(w)))
        return cmds

    def _flush(self, w: int) -> list[Command]:
        """A worker whose own loop ended pushes the local steps it took since
        its last push (its step in progress is withdrawn), unless its last
        step already pushed them."""
        pushed = self.pushing[w] and self.done[w] >= self.given[w]
        unpushed = 0 if pushed else self.done[w]
        self.leaving.add(w)
        self.pushing[w] = True
        return [Push(worker=w, kind="delta")] if unpushed > 0 else []
