"""Local SGD(H) — periodic model averaging (Zinkevich et al. 2010; Stich,
"Local SGD Converges Fast and Communicates Little", ICLR 2019).

Each worker takes H SGD steps on its own model (learning rate ``lr``), then
pushes its model delta since the last average. When every live worker's delta
has arrived the server adds their mean (weights 1/N) to the global model —
the same as averaging the N local models — and everyone pulls it. It
communicates H times less than BSP, and still waits for the slowest worker
once per round.

Optimizer state (hetsync.recipe): each worker's optimizer (the scenario's
``optimizer``, or ``local_optimizer``) takes the local steps and keeps its
state across pulls — a pull replaces the parameters, not the momentum or Adam
moments, which describe the worker's own data stream and would restart from
zero if reset. The server steps on the averaged pseudo-gradient with
``outer_optimizer`` (default plain SGD at 1.0: plain averaging), whose state
lives on the server.
"""

from __future__ import annotations

from hetsync.policies.base import (
    Apply,
    Command,
    Compute,
    ComputeDone,
    Event,
    Param,
    Policy,
    Pull,
    PushArrived,
    WorkerLeft,
)


class LocalSGD(Policy):
    name = "local-sgd"
    summary = "H local steps per worker, then average the models (one barrier per H steps)"
    params = (Param(name="H", type=int, default=4, help="local steps between averages", minimum=1),)

    def __init__(self, ctx, **params) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx, **params)
        self.h: int = self.values["H"]
        self.local_lr: float = ctx.lr  # subclasses (DiLoCo) may take another
        self.local_steps = [0] * self.n
        self.alive = set(range(self.n))
        self.round: list[PushArrived] = []

    def step_gap_bound(self) -> int | None:
        return self.h - 1

    def _compute(self, w: int) -> Compute:
        """The worker's next local step; the H-th of a round pushes the delta."""
        self.local_steps[w] += 1
        last = self.local_steps[w] == self.h
        if last:
            self.local_steps[w] = 0
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.local_lr, push="delta" if last else None)

    def start(self, now_s: float) -> list[Command]:
        return [self._compute(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            # steps 1..H-1 of a round go straight on; the H-th pushed itself
            return [self._compute(event.worker)] if self.local_steps[event.worker] else []
        if isinstance(event, PushArrived):
            self.round.append(event)
            return self._maybe_close()
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            return self._maybe_close()  # what it already pushed stays in the round
        return []

    def _maybe_close(self) -> list[Command]:
        if not self.round or not self.alive <= {p.worker for p in self.round}:
            return []
        weight = 1.0 / len(self.round)
        contributions = tuple((p.push_id, weight) for p in self.round)
        self.round = []
        return [Apply(contributions=contributions)] + [
            Pull(worker=w, then=self._compute(w)) for w in sorted(self.alive)
        ]
