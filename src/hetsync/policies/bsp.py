"""BSP — bulk synchronous parallel (Valiant 1990; the data-parallel default).

Every round, all live workers compute one gradient on the same global version
v and push it. The server waits until it holds a gradient from every live
worker, applies their batch-weighted mean (weights bᵢ / Σb, learning rate
``lr``: one round moves the model like one SGD step with batch Σb), and every
worker pulls version v+1. Fast workers wait at the barrier for the slowest;
that idle time is what every other policy in hetsync tries to win back.

A worker that leaves is no longer waited for; a round it had already
contributed to keeps its gradient.

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.
"""

from __future__ import annotations

from hetsync.policies.base import (
    Command,
    Compute,
    Event,
    Policy,
    PolicyContext,
    PushArrived,
    WorkerLeft,
    apply_and_pull,
    everyone_pushed,
)


class BSP(Policy):
    name = "bsp"
    collective = True  # rounds of a batch-weighted gradient mean (path=collective all-reduces them)
    summary = "bulk synchronous: wait for all N gradients, apply their mean, all pull"

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.alive = set(range(self.n))
        self.round: list[PushArrived] = []

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def step_gap_bound(self) -> int | None:
        return 0

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, PushArrived):
            self.round.append(event)
            return self._maybe_close()
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            return self._maybe_close()  # what it already pushed stays in the round
        return []

    def _maybe_close(self) -> list[Command]:
        if not everyone_pushed(self.round, self.alive):
            return []
        pushes, self.round = self.round, []
        return apply_and_pull(pushes, lr=self.ctx.lr, next_steps=[self._step(w) for w in sorted(self.alive)])
