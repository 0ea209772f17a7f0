"""Local SGD(H) — periodic model averaging (Zinkevich et al. 2010; Stich,
"Local SGD Converges Fast and Communicates Little", ICLR 2019).

Each worker takes H SGD steps on its own model (learning rate ``lr``), then
pushes its model delta since the last average. When every live worker's delta
has arrived the server adds their mean (weights 1/N) to the global model —
the same as averaging the N local models — and everyone pulls it. It
communicates H times less than BSP, and still waits for the slowest worker
once per round.

A worker that leaves is no longer waited for (a delta it already pushed
stays in the round). A worker that joins (``WorkerJoined``) waits for the
round in flight to close, then pulls the new average with the others and
starts its H local steps from it (DiLoCo: its next inner phase); with no live
worker it starts at once.

Optimizer state (hetsync.recipe): each worker's optimizer (the scenario's
``optimizer``, or ``local_optimizer``) takes the local steps and keeps its
state across pulls — a pull replaces the parameters, not the momentum or Adam
moments, which describe the worker's own data stream and would restart from
zero if reset. The server steps on the averaged pseudo-gradient with
``outer_optimizer`` (default plain SGD at 1.0: plain averaging), whose state
lives on the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsync.policies.base import (
    Command,
    Compute,
    ComputeDone,
    Event,
    Policy,
    PolicyConfig,
    PolicyContext,
    Push,
    PushArrived,
    WorkerJoined,
    WorkerLeaving,
    WorkerLeft,
    admit,
    apply_and_pull,
    everyone_pushed,
    param,
)


@dataclass(frozen=True, kw_only=True)
class LocalSGDConfig(PolicyConfig):
    H: int = param(4, help="local steps between averages", ge=1)


class LocalSGD(Policy):
    name = "local-sgd"
    summary = "H local steps per worker, then average the models (one barrier per H steps)"
    config_class = LocalSGDConfig
    config: LocalSGDConfig
    # a round: every live worker's delta, averaged with equal weights (path=collective all-reduces them)
    collective = True
    collective_kind = "delta"
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.h = self.config.H
        self.local_lr: float = ctx.lr  # subclasses (DiLoCo) may take another
        self.local_steps = [0] * self.n
        # the H-th step of the round given (its counter is back at 0) and not yet done: a loop that ends
        # now has H − 1 steps to push (_flush)
        self.last_given = [False] * self.n
        self.alive = set(range(self.n))
        self.leaving: set[int] = set()  # own loops ended: no more steps (WorkerLeft follows)
        self.joining: set[int] = set()  # joined during the round in flight: live from the next one
        self.round: list[PushArrived] = []

    def step_gap_bound(self) -> int | None:
        return self.h - 1

    def _compute(self, w: int) -> Compute:
        """The worker's next local step; the H-th of a round pushes the delta."""
        self.local_steps[w] += 1
        last = self.local_steps[w] == self.h
        if last:
            self.local_steps[w] = 0
        self.last_given[w] = last
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.local_lr, push="delta" if last else None)

    def start(self, now_s: float) -> list[Command]:
        return [self._compute(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            # steps 1..H-1 of a round go straight on; the H-th pushed itself
            if self.local_steps[event.worker]:
                return [self._compute(event.worker)]
            self.last_given[event.worker] = False
            return []
        if isinstance(event, PushArrived):
            self.round.append(event)
            return self._maybe_close()
        if isinstance(event, WorkerLeaving):
            return self._flush(event.worker)
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.joining.discard(event.worker)
            self.leaving.discard(event.worker)
            self.local_steps[event.worker] = 0  # (its round's steps went with it)
            return self._maybe_close()  # what it already pushed stays in the round
        if isinstance(event, WorkerJoined):
            w = event.worker
            self.local_steps[w] = 0
            return [self._compute(w)] if admit(self.alive, self.joining, w) else []
        return []

    def _flush(self, w: int) -> list[Command]:
        """A worker whose own loop ended mid-round pushes the local steps it
        took in it, so they count: its round closes as if H had been reached
        (its delta then carries fewer steps, averaged like the others)."""
        if self.last_given[w]:  # the round's H-th step was given and is withdrawn: the H − 1 before it
            done = self.h - 1
        else:
            in_flight = self.local_steps[w] > 0  # (the step given after the last one done: withdrawn)
            done = self.local_steps[w] - 1 if in_flight else 0
        self.local_steps[w] = 0
        self.last_given[w] = False
        self.leaving.add(w)
        return [Push(worker=w, kind="delta")] if done > 0 else []

    def _maybe_close(self) -> list[Command]:
        if not everyone_pushed(self.round, self.alive):
            return []
        pushes, self.round = self.round, []
        self.alive |= self.joining  # the workers that joined during the round: live from the next
        self.joining.clear()
        going_on = sorted(self.alive - self.leaving)
        return apply_and_pull(pushes, equal_weights=True, next_steps=[self._compute(w) for w in going_on])
