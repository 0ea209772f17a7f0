"""The worker's side of the protocol, once: what each command from the server asks of it.

A worker is driven two ways: :class:`~hetsync.runtime.worker.WorkerProcess`
computes every step itself (``hetsync run``), and a user's training loop
computes them in its own code, handing control back at ``opt.step()``
(:mod:`hetsync.loop`). Both read the same command stream and must do the
same thing with it; this state machine says what, sans IO (as h11 does for
HTTP): it is told each command as it is read (:meth:`WorkerState.receive`)
and answers with the action to take; it does no I/O and holds no tensors.
The worker (:meth:`~hetsync.runtime.worker.WorkerProcess.until_step`) does
the actions, and each driver computes the step it stops at.

The state is small: the continuous step (a policy that has a worker train
nonstop, :class:`~hetsync.runtime.protocol.StepOrder` ``continuous``) that
goes on while no command is waiting (:meth:`WorkerState.again`), until a
command that is not work (``HALT`` among them) or another step replaces it;
and whether the run's rounds are all-reduced among the workers (the
collective path), where a step of batch 0 is the order to join a round with
zero weight (the worker sets ``collective`` as ``RESET`` says, and clears it
when a model comes back from the server: a member died, the server has left
the collective path).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsync.runtime import protocol as P


@dataclass(frozen=True, slots=True)
class Exit:
    """``EXIT``: this worker's part of the job is over."""


@dataclass(frozen=True, slots=True)
class Reset:
    """``RESET``: a new run starts from the model that comes with it."""

    cmd: P.ResetCmd


@dataclass(frozen=True, slots=True)
class Bye:
    """``STOP``: the run is over; finish what is in flight and say ``BYE``."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """``SNAPSHOT``: a checkpoint on the collective path wants this worker's copies of the server's optimizers."""

    cmd: P.SnapshotCmd


@dataclass(frozen=True, slots=True)
class ZeroRound:
    """Join the round the others are reducing, with zero weight (a step of batch 0 on the collective path)."""


@dataclass(frozen=True, slots=True)
class Transfers:
    """A standalone push and/or pull: do them and report at once."""

    cmd: P.WorkCmd


@dataclass(frozen=True, slots=True)
class Step:
    """Transfers first (if any), then a step: the driver computes it; one report for both."""

    cmd: P.WorkCmd
    step: P.StepOrder


@dataclass(frozen=True, slots=True)
class Nothing:
    """A command with nothing to do on the main thread (``HALT``: it only ends a continuous step)."""


Action = Exit | Reset | Bye | Snapshot | ZeroRound | Transfers | Step | Nothing


class WorkerState:
    """What the next command means for this worker (see the module's header)."""

    def __init__(self, *, collective: bool = False) -> None:
        self.collective = collective
        self._repeat: P.StepOrder | None = None  # the continuous step in force

    def again(self) -> P.StepOrder | None:
        """The step to take again when no command is waiting (None: wait for one)."""
        return self._repeat

    def receive(self, cmd: P.Command) -> Action:
        """The action ``cmd`` asks for (peer-to-peer commands and ``FETCH`` are the control thread's, not here)."""
        if not isinstance(cmd, P.WorkCmd):
            self._repeat = None
        match cmd:
            case P.ExitCmd():
                return Exit()
            case P.ResetCmd():
                return Reset(cmd)
            case P.StopCmd():
                return Bye()
            case P.SnapshotCmd():
                return Snapshot(cmd)
            case P.WorkCmd(step=None):
                return Transfers(cmd)
            case P.WorkCmd(step=step) if step is not None:
                if self.collective and step.batch_size == 0:
                    return ZeroRound()
                self._repeat = step if step.continuous else None
                return Step(cmd, step)
        return Nothing()

    def zero_order(self, cmd: P.Command) -> bool:
        """Whether ``cmd`` is the order to join a round with zero weight (a leaving loop's worker sees these)."""
        return self.collective and isinstance(cmd, P.WorkCmd) and cmd.step is not None and cmd.step.batch_size == 0
