"""BSP — bulk synchronous parallel (Valiant 1990; the data-parallel default).

Every round, all live workers compute one gradient on the same global version
v and push it. The server waits until it holds a gradient from every live
worker, applies their batch-weighted mean (weights bᵢ / Σb, learning rate
``lr``: one round moves the model like one SGD step with batch Σb), and every
worker pulls version v+1. Fast workers wait at the barrier for the slowest;
that idle time is what every other policy in hetsync tries to win back.

A worker that leaves is no longer waited for; a round it had already
contributed to keeps its gradient. A worker that joins (``WorkerJoined``)
takes part from the next round on: the round in flight neither waits for it
nor includes it, and it pulls the new model with the others when that round
closes (with no live worker, it starts a round of its own at once).

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
    WorkerJoined,
    WorkerLeft,
    admit,
    apply_and_pull,
    everyone_pushed,
    take_joiners,
)


class BSP(Policy):
    name = "bsp"
    collective = True  # rounds of a batch-weighted gradient mean (path=collective all-reduces them)
    summary = "bulk synchronous: wait for all N gradients, apply their mean, all pull"
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.alive = set(range(self.n))
        self.joining: set[int] = set()  # joined during the round in flight: live from the next one
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
            self.joining.discard(event.worker)
            return self._maybe_close()  # what it already pushed stays in the round
        if isinstance(event, WorkerJoined):
            return [self._step(event.worker)] if admit(self.alive, self.joining, event.worker) else []
        return []

    def _maybe_close(self) -> list[Command]:
        if not everyone_pushed(self.round, self.alive):
            return []
        pushes, self.round = self.round, []
        take_joiners(self.alive, self.joining)
        return apply_and_pull(pushes, lr=self.ctx.lr, next_steps=[self._step(w) for w in sorted(self.alive)])
