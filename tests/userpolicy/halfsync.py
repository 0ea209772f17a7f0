"""Half-sync: a user's own policy, outside hetsync (tests/test_user_policy.py).

A round closes as soon as ceil(quorum · N) gradients have arrived (half the
workers by default): they are averaged and applied, and the workers that
pushed them pull the new model and go on. A gradient that arrives later
counts toward the next round, stale. It shows what a
policy of your own needs: a ``Policy`` subclass with a ``name``, ``start``
and ``on_event``, its parameters as a config dataclass, and nothing but
stdlib and numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetsync.policies.base import Apply, Command, Compute, Event, Policy, PolicyConfig, Pull, PushArrived, param


@dataclass(frozen=True, kw_only=True)
class HalfSyncConfig(PolicyConfig):
    quorum: float = param(0.5, help="fraction of workers closing a round", ge=0.01, le=1.0)


class HalfSync(Policy):
    name = "halfsync"
    summary = "apply the average of the first ceil(N/2) gradients of each round; the rest as they come"
    config_class = HalfSyncConfig
    config: HalfSyncConfig

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        self.waiting: list[tuple[int, int]] = []  # (worker, push id) of the open round
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if not isinstance(event, PushArrived):
            return []
        self.waiting.append((event.worker, event.push_id))
        need = max(1, math.ceil(self.config.quorum * self.n))
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


class EveryPush(Policy):
    """A policy with no parameters declares no config: apply each gradient as it arrives."""

    name = "everypush"
    summary = "apply every gradient on arrival with weight 1/N"

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if not isinstance(event, PushArrived):
            return []
        apply = Apply(contributions=((event.push_id, 1.0 / self.n),), lr=self.ctx.lr)
        return [apply, Pull(worker=event.worker, then=self._step(event.worker))]


class SimulatorOnly(HalfSync):
    """The same policy, marked as one the runtime does not run
    (``Policy.simulator_only``): real processes refuse it before they start."""

    name = "halfsync-sim"
    simulator_only = True
