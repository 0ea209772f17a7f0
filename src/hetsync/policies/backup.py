"""Backup workers(b) — synchronous SGD that ignores the b slowest (Chen,
Pan, Monga, Bengio, Jozefowicz, "Revisiting Distributed Synchronous SGD",
arXiv 1604.00981, 2016).

Each round every worker computes a gradient on the current global version v.
The server applies the batch-weighted mean of the first N − b gradients
computed on v to arrive (learning rate ``lr``) and bumps the version; the
contributors pull v+1 at once. Gradients that arrive later, computed on an
older version, are dropped (and counted); their senders then pull the newest
model and join the current round. Straggling b workers no longer hold the
round, at the price of b wasted gradients per round.

A worker that leaves is no longer counted (the round needs N − b of the live
ones). A worker that joins (``WorkerJoined``) waits for the round in flight
to close, then pulls the new version with its contributors and counts in N
from that round on (with no live worker, it starts at once).

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsync.errors import BadInput
from hetsync.policies.base import (
    Command,
    Compute,
    Drop,
    Event,
    Policy,
    PolicyConfig,
    PolicyContext,
    Pull,
    PushArrived,
    WorkerJoined,
    WorkerLeft,
    admit,
    apply_and_pull,
    param,
)


@dataclass(frozen=True, kw_only=True)
class BackupConfig(PolicyConfig):
    b: int = param(1, help="backup workers: gradients ignored per round", ge=0, below_workers=True)


class BackupWorkers(Policy):
    name = "backup"
    summary = "synchronous rounds closed by the first N-b gradients; late ones are dropped"
    config_class = BackupConfig
    config: BackupConfig
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.b = self.config.b
        if self.b >= self.n:
            raise BadInput(f"policy 'backup' parameter 'b' must be < workers ({self.n}), got {self.b}")
        self.alive = set(range(self.n))
        self.joining: set[int] = set()  # joined during the round in flight: live from the next one
        self.version = 0
        self.round: list[PushArrived] = []

    # checkpoints: the version decides which gradients are late (the open round dies with the workers)
    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = int(state["version"])

    def _needed(self) -> int:
        return max(1, len(self.alive) - self.b)

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, PushArrived):
            if event.base_version < self.version:
                return [
                    Drop(push_ids=(event.push_id,), reason="late"),
                    Pull(worker=event.worker, then=self._step(event.worker)),
                ]
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
        if not self.round or len(self.round) < self._needed():
            return []
        pushes, self.round = self.round, []
        self.version += 1
        # the contributors go on at once (the late ones pull when their push is dropped); so do
        # the workers that joined during the round (live from now on, counted in N − b)
        contributors = sorted({p.worker for p in pushes if p.worker in self.alive} | self.joining)
        self.alive |= self.joining
        self.joining.clear()
        return apply_and_pull(pushes, lr=self.ctx.lr, next_steps=[self._step(w) for w in contributors])
