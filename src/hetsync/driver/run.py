"""One run of one policy, wired once for both drivers.

A driver is a data plane and a clock. Everything else about a run — the
policy, the ledger that holds the global model with the server's optimizer
(its steppers from the scenario's recipe), the driver core that checks
every command and turns facts into events, and the dispatch of each command
to the data plane — is the same in the simulator and on real processes, and
is wired here once. A driver builds a :class:`Run`, hands it itself as the
:class:`DataPlane`, and implements only how each command moves bytes and
spends time: the simulator on its virtual network (:mod:`hetsync.sim.engine`),
the runtime over gloo to real workers (:mod:`hetsync.runtime.server`),
sharded servers and the collective path among them. This is the split
SimPy makes between its kernel and its real-time environment, which
overrides only how time passes.

A policy's commands reach the data plane in the order it gave them, each
checked first (:meth:`DriverCore.check`: one set of refusals for both
drivers). On the collective path an ``Apply`` must be what the round's
all-reduce computes (:func:`~hetsync.driver.paths.check_round`): checked here
before the data plane sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from hetsync.driver.core import DriverCore
from hetsync.driver.paths import check_round, uses_collective
from hetsync.ledger import Ledger
from hetsync.optim import Stepper, gradient_stepper, outer_stepper
from hetsync.policies.base import (
    AllReduce,
    Apply,
    Command,
    Compute,
    Drop,
    Forecast,
    Multicast,
    Note,
    Policy,
    Pull,
    Push,
    SetTimer,
)
from hetsync.scenario import Scenario
from hetsync.trace import TraceWriter


class DataPlane(Protocol):
    """What a driver implements: each command's bytes and time. The run has
    checked the command; the driver books its facts through ``run.core``."""

    def compute(self, cmd: Compute) -> None: ...  # a step starts (if ``run.core.start_step`` allows it)
    def push(self, cmd: Push) -> None: ...  # a standalone push
    def pull(self, cmd: Pull) -> None: ...  # the global model to a worker (then, maybe, a step)
    def apply(self, cmd: Apply) -> None: ...  # ``run.ledger.apply`` at the driver's time, and what it moves
    def drop(self, cmd: Drop) -> None: ...  # ``run.ledger.drop``, and what it frees
    def set_timer(self, cmd: SetTimer) -> None: ...  # a TimerFired for the policy at ``cmd.at_s``
    def multicast(self, cmd: Multicast) -> None: ...  # peer-to-peer: a model copy to receivers
    def allreduce(self, cmd: AllReduce) -> None: ...  # peer-to-peer: an all-reduce among workers
    def forecast(self, cmd: Forecast) -> None: ...  # a ForecastDone for the policy (scores None: not here)


class Run:
    """One policy on one scenario: the ledger (built here from the scenario's
    recipe, unless the driver brings the server's stepper — a training loop's
    optimizer), the driver core, and the dispatch onto ``plane``.

    ``theta``: the global model the ledger starts from (None: no math);
    ``version``: its version (a resumed run's); ``path``: the data path
    (``ps`` or ``collective``; :func:`~hetsync.driver.paths.uses_collective`
    says whether this policy's rounds take the collective one)."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        workload: Any,
        theta: torch.Tensor | None,
        trace: TraceWriter,
        *,
        plane: DataPlane,
        path: str = "ps",
        version: int = 0,
        stepper: Stepper | None = None,
    ) -> None:
        self.policy = policy
        self.label = policy.label
        self.collective = uses_collective(path, policy)
        self.ledger = Ledger(
            policy,
            workload,
            theta,
            trace,
            version=version,
            stepper=stepper if stepper is not None else gradient_stepper(scenario),
            outer=outer_stepper(scenario, policy),
            global_batch=scenario.cluster.workers * scenario.job.batch_size,
        )
        self.core = DriverCore(policy, self.ledger, scenario)
        self.plane = plane
        # each command type's handler (a subclass of one goes the isinstance way: _handler)
        self._handlers: dict[type, Callable[[Any], None]] = {
            Compute: plane.compute,
            Push: plane.push,
            Pull: plane.pull,
            Apply: self._apply,
            Drop: plane.drop,
            SetTimer: plane.set_timer,
            Multicast: plane.multicast,
            AllReduce: plane.allreduce,
            Forecast: plane.forecast,
            Note: self.core.note,  # (the record's: no data plane moves anything)
        }

    def execute(self, commands: list[Command]) -> None:
        """The policy's commands, in order: each checked, then dispatched."""
        for cmd in commands:
            self.core.check(cmd)
            self._handler(cmd)(cmd)

    def _handler(self, cmd: Command) -> Callable[[Any], None]:
        handler = self._handlers.get(type(cmd))
        if handler is not None:
            return handler
        # a subclass of one of the command types (DriverCore.check refused any other)
        return next(h for kind, h in self._handlers.items() if isinstance(cmd, kind))

    def _apply(self, cmd: Apply) -> None:
        if self.collective:  # the round its workers all-reduce: the mean their reduce computes
            check_round(self.label, cmd.contributions, self.ledger.pushes)
        self.plane.apply(cmd)
