"""Half-sync: a user's own policy, outside hetsync (tests/test_user_policy.py).

A round closes as soon as ceil(quorum · N) gradients have arrived (half the
workers by default): they are averaged and applied, and the workers that
pushed them pull the new model and go on. A gradient that arrives later
counts toward the next round, stale. It shows what a
policy of your own needs: a ``Policy`` subclass with a ``name``, ``start``
and ``on_event``, parameters as ``Param``, and nothing but stdlib and numpy.
"""

from __future__ import annotations

import math

from hetsync.policies.base import Apply, Command, Compute, Event, Param, Policy, Pull, PushArrived


class HalfSync(Policy):
    name = "halfsync"
    summary = "apply the average of the first ceil(N/2) gradients of each round; the rest as they come"
    params = (
        Param(
            name="quorum",
            type=float,
            default=0.5,
            help="fraction of workers closing a round",
            minimum=0.01,
            maximum=1.0,
        ),
    )

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        self.waiting: list[tuple[int, int]] = []  # (worker, push id) of the open round
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if not isinstance(event, PushArrived):
            return []
        self.waiting.append((event.worker, event.push_id))
        need = max(1, math.ceil(self.values["quorum"] * self.n))
        if len(self.waiting) < need:
            return []
        pushed, self.waiting = self.waiting, []
        weight = 1.0 / len(pushed)
        apply = Apply(contributions=tuple((pid, weight) for _, pid in pushed), lr=self.ctx.lr)
        return [apply, *(Pull(worker=w, then=self._step(w)) for w, _ in pushed)]


class OneRound(HalfSync):
    """A broken policy for the contract test: after the first round nobody is told to go on."""

    name = "one-round"

    def on_event(self, event: Event) -> list[Command]:
        commands = super().on_event(event)
        return [c for c in commands if not isinstance(c, Pull)]
