"""SSP(s) — stale synchronous parallel (Ho et al., "More Effective
Distributed ML via a Stale Synchronous Parallel Parameter Server", NIPS 2013).

ASP with a bounded clock gap. Every worker counts the steps the server has
applied from it (its clock). A worker may start its step c only when every
live worker's clock is at least c − s; otherwise it blocks until the slowest
catches up. Gradients are applied on arrival with weight 1/N (as ASP); a
worker pulls the newest model just before each step it is allowed to take,
so a step blocked at the bound starts from the freshest model. s = 0 gives
BSP-like lockstep, s = ∞ is ASP.

A worker that leaves is no longer waited for. A worker that joins
(``WorkerJoined``) takes the slowest live worker's clock (its own, from before
it left, would be below everyone's and block them all until it caught up; a
clock of 0 for a worker that starts late, the same) and starts a step at
once on the model it holds, the current one; from then on the bound counts
it like the others.

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.

Staleness remedies (:mod:`hetsync.policies.staleness`), all off by default,
as for ASP: ``lr_scale=inverse|sqrt|zhang`` (Zhang, Gupta, Lian, Liu,
"Staleness-Aware Async-SGD for Distributed Deep Learning", IJCAI 2016),
``compensate=λ`` (DC-ASGD: Zheng et al., "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017) and ``momentum=corrected``
(Mitliagkas, Zhang, Hadjis, Ré, "Asynchrony begets Momentum, with an
Application to Deep Learning", Allerton 2016; N = the live workers).
E.g. ``ssp:s=3:momentum=corrected``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsync.policies.base import (
    Command,
    Compute,
    Event,
    PolicyContext,
    Pull,
    PushArrived,
    WorkerJoined,
    WorkerLeft,
    param,
    slowest_clock,
)
from hetsync.policies.staleness import StalenessConfig, StalePushes


@dataclass(frozen=True, kw_only=True)
class SSPConfig(StalenessConfig):
    s: int = param(3, help="staleness bound in steps", ge=0)


class SSP(StalePushes):
    name = "ssp"
    summary = "stale synchronous: asynchronous, but no worker more than s steps ahead"
    config_class = SSPConfig
    config: SSPConfig
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.s = self.config.s
        self.clock = [0] * self.n
        self.alive = set(range(self.n))
        self.blocked: set[int] = set()

    def step_gap_bound(self) -> int | None:
        return self.s

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def _slowest(self) -> int:
        return min(self.clock[w] for w in self.alive)

    def _release(self) -> list[Command]:
        slowest = self._slowest()
        ready = sorted(w for w in self.blocked if self.clock[w] - slowest <= self.s)
        self.blocked.difference_update(ready)
        return [Pull(worker=w, then=self._step(w)) for w in ready]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, PushArrived):
            w = event.worker
            self.clock[w] += 1
            self.blocked.add(w)
            apply = self.apply_push(event, 1.0 / self.n, len(self.alive))
            return [apply, *self._release()]
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.blocked.discard(event.worker)
            return self._release() if self.alive else []
        if isinstance(event, WorkerJoined):
            w = event.worker
            if w in self.alive:
                return []
            self.clock[w] = slowest_clock(self.clock, self.alive, w)
            self.alive.add(w)
            return [self._step(w)]
        return []
