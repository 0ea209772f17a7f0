"""WBSP — Worker-Busy Synchronous Parallel (Yang, Hu, Liu, Jin, Yeung, You,
"WBSP: Addressing stragglers in distributed machine learning with worker-busy
synchronous parallel", Parallel Computing 121 (2024) 103092; authors' code:
github.com/Dora233/WBSP).

Workers never wait for each other. After every local SGD step (taken at
``lr`` on the worker's own model) a worker pushes its model delta
Δ = local − model at its last push or pull, and carries on from its local
model. The server holds the pushed deltas of the open round. A round closes
when every live worker has pushed at least once in it; the push that closes
it comes from the round's slowest worker, found online (whoever completes
the set last; ``closers`` records who it was, round by round — no worker is
assumed slow). At the close the server applies the held deltas, each with
weight 1/N (N = live workers), as one update: version r → r+1. Every live
worker is then flagged. A worker learns of its flag in the reply to its next
push: instead of another step it pulls version r+1 and replaces its local
model, so every worker restarts from the same global model. The closing
worker is flagged at once and pulls straight away. Fast workers therefore
contribute several steps per round instead of idling at a barrier.

Choices where the paper leaves room (see also docs/results-wbsp.md):

- Late deltas. A delta that arrives after the close — in particular the
  push a flagged worker makes before it learns of the flag, computed on the
  pre-close model — belongs to the next round: it joins the next round's
  held deltas, counts as that worker's push in the next round, and is
  applied at the next close (staleness 1). Nothing is dropped, so plain WBSP
  loses no step. The authors' server adds every delta to the global model
  on arrival and only gates the pulls; holding the deltas until the close
  instead makes every pull of round r return exactly version r+1 (docs/architecture.md
  §4: "all workers hold the same model"). The two differ in when a late
  delta becomes visible, not in whether it counts.
- The slowest worker. The authors' code hard-codes which worker is slow (it
  watches one worker's step counter); here the round is closed by set
  membership, so the slowest can change from round to round.
- Learning-rate scaling. Local steps use ``lr``; deltas are weighted 1/N
  like the paper's server (``parameters += delta / worker_num``). With
  equal speeds one round is one step per worker and moves the model like
  one BSP step with batch N·b; a worker that took k steps in a round adds
  its k-step delta / N.
- A worker that leaves is no longer waited for; deltas it pushed in the
  open round stay in it. When the last one leaves, the open round closes
  on what it holds (weight 1/N, N = the workers that pushed in it), so a
  run whose workers all end their own loops keeps their last deltas.
- A worker that joins (``WorkerJoined``) waits for the open round to close
  (it is not waited for in it), then pulls that close's version and steps
  from it; it is live, waited for and weighted, from the next round on. With
  no live worker it starts at once.

Optimizer state (hetsync.recipe): each worker's optimizer (the scenario's
``optimizer``, or ``local_optimizer``) takes the local steps and keeps its
state across pulls — a pull replaces the parameters, not the momentum or Adam
moments, which describe the worker's own data stream and would restart from
zero if reset. The server steps on the averaged pseudo-gradient with
``outer_optimizer`` (default plain SGD at 1.0: plain averaging), whose state
lives on the server.

Staleness remedy (:mod:`hetsync.policies.staleness`), off by default:
``lr_scale=inverse|sqrt`` scales each delta's weight by 1/max(1, τ) or
1/√max(1, τ), τ its staleness when applied (Zhang, Gupta, Lian, Liu,
"Staleness-Aware Async-SGD for Distributed Deep Learning", IJCAI 2016). A
held delta is applied at the first close after it arrives and every
``Apply`` is a close, so τ is known on arrival. Plain WBSP's late deltas
have τ = 1, where both factors are 1: the option changes something only for
deltas two or more versions old (WBSP-overlap's pushes in flight across two
closes). Delay compensation and the momentum correction are for gradients
applied one at a time and are not offered here.
"""

from __future__ import annotations

from typing import Any

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
    PullDone,
    Push,
    PushArrived,
    WorkerJoined,
    WorkerLeft,
)
from hetsync.policies.staleness import LrScaleConfig


class WBSP(Policy):
    name = "wbsp"
    summary = "worker-busy sync: fast workers keep stepping; the slowest's push closes the round, all pull"
    config_class = LrScaleConfig
    config: LrScaleConfig
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.alive = set(range(self.n))
        self.joining: set[int] = set()  # joined during the open round: they pull its close's model
        self.held: list[int] = []  # push ids of the open round's deltas
        self.held_scale: list[float] = []  # and their staleness factors (lr_scale; 1.0 when off)
        self.pushed: set[int] = set()  # workers that pushed in the open round
        self.flagged: set[int] = set()  # workers that must pull at their next push reply
        self.version = 0  # rounds closed so far = global model version
        self.closers: list[int | None] = []  # per round: the worker whose push closed it

    # checkpoints: rounds closed and who closed them (the open round's deltas die with the workers)
    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "closers": list(self.closers)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = int(state["version"])
        self.closers = [None if c is None else int(c) for c in state["closers"]]

    def _compute(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.ctx.lr)

    def start(self, now_s: float) -> list[Command]:
        return [self._compute(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            return [Push(worker=event.worker, kind="delta")]
        if isinstance(event, PushArrived):
            w = event.worker
            commands = self._receive(event)
            if w in self.flagged:
                self.flagged.discard(w)
                return [*commands, Pull(worker=w)]
            return [*commands, self._compute(w)]
        if isinstance(event, PullDone):
            return [self._compute(event.worker)]
        if isinstance(event, WorkerLeft):
            return self._leave(event.worker)
        if isinstance(event, WorkerJoined):
            return self._join(event.worker)
        return []

    # ------------------------------------------------------------ joins
    def _join(self, w: int) -> list[Command]:
        """A worker is back: it waits for the open round to close (with no
        live worker, none is open: it starts at once)."""
        if w in self.alive:
            return []
        if self.alive:
            self.joining.add(w)
            return []
        self.alive.add(w)
        return [self._compute(w)]

    def _rejoin(self, w: int) -> list[Command]:
        """A joiner's first commands at the close it waited for: pull the new version (then step)."""
        return [Pull(worker=w)]

    # ------------------------------------------------------------ server
    def _receive(self, push: PushArrived) -> list[Command]:
        """Hold the delta in the open round; close the round if it completes it."""
        self.held.append(push.push_id)
        self.held_scale.append(staleness_lr_scale(self.config.lr_scale, push.staleness))
        self.pushed.add(push.worker)
        return self._maybe_close(push.worker)

    def _maybe_close(self, closer: int | None) -> list[Command]:
        if not self.held or not self.alive <= self.pushed:
            return []
        # the last worker has left: nobody to wait for, the round's deltas still count
        weight = 1.0 / len(self.alive or self.pushed)
        apply = Apply(contributions=tuple((i, weight * s) for i, s in zip(self.held, self.held_scale, strict=True)))
        self.held, self.held_scale, self.pushed = [], [], set()
        self.version += 1
        self.closers.append(closer)
        self.flagged = set(self.alive)
        joiners, self.joining = sorted(self.joining), set()
        self.alive.update(joiners)  # live from the next round on; they pull this close's version now
        return [apply, *(c for w in joiners for c in self._rejoin(w))]

    def _leave(self, w: int) -> list[Command]:
        self.alive.discard(w)
        self.joining.discard(w)
        self.flagged.discard(w)
        return self._maybe_close(None)
