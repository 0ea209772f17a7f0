"""Peer-to-peer synchronization: the round machinery the three peer-to-peer
policies share (``p2p-allreduce``, ``p2p-random``, ``selmcast``), after
Luo et al., "SELMCAST", IEEE Trans. Services Computing (2024),
doi 10.1109/TSC.2024.3506480, and Epidemic Learning (de Vos et al., NeurIPS
2023) for the random baseline.

There is no server. Every worker takes an SGD step on its own model
(``Compute(local_lr=lr)``), then sends its model to a set of receivers
(``Multicast``); a receiver mixes what it received into its own model, with
push-sum weights (:mod:`hetsync.localmodel`), at the start of its next step. The subclasses differ only in
whom a sender sends to (:meth:`PeerPolicy.receivers`); the rounds are one of:

- ``sync=bsp``: a round is a step on every live worker, then one exchange
  planned for all senders at once; the next round starts when every model
  of the exchange has arrived. Planning the whole exchange at the barrier is
  what lets SELMCAST minimize the round's communication makespan.
- ``sync=ssp`` (bound ``s``): a worker's round is its step and then its own
  multicast, planned for it alone when its step ends (SELMCAST's
  ``window_s`` may hold it briefly to plan it with others); the round completes
  when its last copy has arrived. A worker may start round r only while
  r − (the fewest rounds any live worker has completed) ≤ s; otherwise it
  waits until the slowest catches up. A sender waits for its own multicast
  before its next step, so its uplink never queues rounds behind each other.
  Receivers never wait: they mix whatever has arrived when their next step
  starts.
- A worker that leaves is no longer waited for, and copies on their way to
  or from it are forgotten. A worker that joins (``WorkerJoined``, holding
  the live workers' average model) is a peer again: under ``bsp`` from the
  next round on (the round in flight neither waits for it nor sends to it),
  under ``ssp`` at once, at the slowest live worker's round count.

The coordinator's view of the links: the available uplink and downlink
bandwidth each worker reported with its last ``ComputeDone`` (as a resource
monitor would), and the backlog it has itself put on each link, estimated
from those bandwidths and cleared when the link's last planned copy arrives.

Learning rate: the local step uses the job's lr unscaled; averaging models
(not gradients) keeps the step size of one worker's SGD.

Optimizer state (hetsync.recipe): there is no server. Each worker's optimizer
(``optimizer``, or ``local_optimizer``) takes its local steps, and its state stays with the
worker when models are mixed or all-reduced: mixing averages parameters only,
as decentralized SGD with local momentum does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetsync.policies.base import (
    AllReduceDone,
    Command,
    Compute,
    ComputeDone,
    Event,
    ModelArrived,
    Multicast,
    Policy,
    PolicyConfig,
    PolicyContext,
    WorkerJoined,
    WorkerLeft,
    param,
)
from hetsync.policies.config import config_values


@dataclass(frozen=True, kw_only=True)
class PeerConfig(PolicyConfig):
    """The rounds every peer-to-peer policy runs."""

    sync: str = param("bsp", help="rounds: bsp (barrier) or ssp (bounded gap s)", choices=("bsp", "ssp"))
    s: int = param(3, help="ssp: largest round gap between workers", ge=0)


@dataclass(frozen=True, kw_only=True)
class MulticastConfig(PeerConfig):
    """Peer-to-peer rounds in which each sender multicasts to p receivers or more."""

    p: int = param(2, help="receivers per sender (at least)", ge=1, below_workers=True)


class PeerPolicy(Policy):
    """Base class; subclasses implement :meth:`receivers` (and may override
    :meth:`bsp_exchange`)."""

    topology = "p2p"
    takes_joins = True
    config_class = PeerConfig
    config: PeerConfig

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.sync = self.config.sync
        self.s = self.config.s if self.sync == "ssp" else 0
        self.alive = set(range(self.n))
        self.joining: set[int] = set()  # bsp: joined during the round in flight, live from the next
        self.rounds = [0] * self.n  # completed rounds per worker
        self.uplink_Bps = [math.inf] * self.n  # latest reports
        self.downlink_Bps = [math.inf] * self.n
        self.busy_up_until = [0.0] * self.n  # coordinator's backlog estimate, absolute seconds
        self.busy_down_until = [0.0] * self.n
        self.out: dict[int, set[int]] = {}  # sender -> receivers whose copy is still in flight
        self.into: dict[int, int] = {}  # receiver -> copies still in flight to it
        # bsp
        self.exchanging = False  # bsp: between the barrier and the next round
        self.stepped: set[int] = set()  # finished this round's step
        self.reducing: tuple[int, ...] | None = None  # an all-reduce in flight
        # ssp
        self.blocked: set[int] = set()

    @property
    def label(self) -> str:
        shown = [f"sync={self.sync}"]
        if self.sync == "ssp":
            shown.append(f"s={self.s}")
        shown += [f"{k}={v}" for k, v in config_values(self.config).items() if k not in ("sync", "s")]
        return f"{self.name}({','.join(shown)})"

    def step_gap_bound(self) -> int | None:
        return self.s

    # ------------------------------------------------------- to override
    def receivers(self, senders: list[int], now_s: float) -> dict[int, tuple[int, ...]]:
        """Each sender's receivers (live workers other than itself)."""
        raise NotImplementedError

    def bsp_exchange(self, senders: list[int], now_s: float) -> list[Command]:
        return self._multicast(senders, now_s)

    # --------------------------------------------------------- helpers
    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, local_lr=self.ctx.lr)

    def busy_s(self, now_s: float) -> tuple[list[float], list[float]]:
        """The backlog the coordinator estimates on each uplink and downlink."""
        up = [max(0.0, t - now_s) for t in self.busy_up_until]
        down = [max(0.0, t - now_s) for t in self.busy_down_until]
        return up, down

    def _multicast(self, senders: list[int], now_s: float) -> list[Command]:
        if len(self.alive) < 2:
            return []
        plan = self.receivers(senders, now_s)
        nbytes = self.ctx.model_bytes
        out: list[Command] = []
        for i in senders:
            rs = tuple(plan[i])
            if not rs:
                continue
            self.out[i] = set(rs)
            up = self.uplink_Bps[i]
            self.busy_up_until[i] = max(now_s, self.busy_up_until[i]) + (len(rs) * nbytes / up if up > 0 else math.inf)
            for j in rs:
                self.into[j] = self.into.get(j, 0) + 1
                down = self.downlink_Bps[j]
                self.busy_down_until[j] = max(now_s, self.busy_down_until[j]) + (
                    nbytes / down if down > 0 else math.inf
                )
            out.append(Multicast(worker=i, receivers=rs))
        return out

    def _landed(self, sender: int, receiver: int, now_s: float) -> bool:
        """Book one arrival; True when it was the sender's last copy."""
        pending = self.out.get(sender)
        if pending is None or receiver not in pending:
            return False
        pending.discard(receiver)
        left = self.into.get(receiver, 1) - 1
        if left <= 0:
            self.into.pop(receiver, None)
            self.busy_down_until[receiver] = min(self.busy_down_until[receiver], now_s)
        else:
            self.into[receiver] = left
        if pending:
            return False
        del self.out[sender]
        self.busy_up_until[sender] = min(self.busy_up_until[sender], now_s)
        return True

    # ------------------------------------------------------------ events
    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            w = event.worker
            self.uplink_Bps[w] = event.uplink_Bps
            self.downlink_Bps[w] = event.downlink_Bps
            if w not in self.alive:
                return []
            if self.sync == "bsp":
                self.stepped.add(w)
                return self._bsp_barrier(event.now_s)
            return self.ssp_step_done(w, event.now_s)
        if isinstance(event, ModelArrived):
            if not self._landed(event.sender, event.worker, event.now_s):
                return []
            if self.sync == "bsp":
                return self._bsp_next(event.now_s)
            return self._ssp_round_done(event.sender, event.now_s)
        if isinstance(event, AllReduceDone):
            if self.reducing != event.workers:
                return []
            self.reducing = None
            return self._bsp_next(event.now_s)
        if isinstance(event, WorkerLeft):
            return self._left(event.worker, event.now_s)
        if isinstance(event, WorkerJoined):
            return self._joined(event.worker)
        return []

    # --------------------------------------------------------------- bsp
    def _bsp_barrier(self, now_s: float) -> list[Command]:
        if not self.alive <= self.stepped:
            return []
        senders = sorted(self.alive)
        self.stepped.clear()
        self.exchanging = True
        cmds = self.bsp_exchange(senders, now_s)
        if not cmds:
            return self._bsp_next(now_s)
        return cmds

    def _bsp_next(self, now_s: float) -> list[Command]:
        if not self.exchanging or self.out or self.reducing is not None:
            return []
        self.exchanging = False
        for w in self.alive:
            self.rounds[w] += 1
        for w in self.joining:  # the workers that joined during the round: in the next one
            self.rounds[w] = max(self.rounds[u] for u in self.alive) if self.alive else self.rounds[w]
        self.alive |= self.joining
        self.joining.clear()
        return [self._step(w) for w in sorted(self.alive)]

    # --------------------------------------------------------------- ssp
    def ssp_step_done(self, w: int, now_s: float) -> list[Command]:
        """A live worker's step ended under ssp: its multicast, planned for it
        alone (a subclass may hold it back and plan several senders at once
        with :meth:`ssp_send`)."""
        return self.ssp_send([w], now_s)

    def ssp_send(self, senders: list[int], now_s: float) -> list[Command]:
        """One plan for ``senders`` (live, their steps ended); a sender with
        nobody to send to completes its round with the step alone."""
        cmds = self._multicast(senders, now_s)
        sent = {c.worker for c in cmds if isinstance(c, Multicast)}
        for w in senders:
            if w not in sent:
                cmds += self._ssp_round_done(w, now_s)
        return cmds

    def _ssp_round_done(self, w: int, now_s: float) -> list[Command]:
        if w not in self.alive:
            return []
        self.rounds[w] += 1
        self.blocked.add(w)
        return self._ssp_release()

    def _ssp_release(self) -> list[Command]:
        if not self.alive:
            return []
        slowest = min(self.rounds[w] for w in self.alive)
        ready = sorted(w for w in self.blocked if self.rounds[w] - slowest <= self.s)
        self.blocked.difference_update(ready)
        return [self._step(w) for w in ready]

    # ----------------------------------------------------- joining, leaving
    def _joined(self, w: int) -> list[Command]:
        """A worker is back with the live workers' average model. Under bsp it
        waits for the round in flight to end and takes part from the next one;
        under ssp it takes the slowest live worker's round count and steps at
        once. With no live worker it steps at once either way."""
        if w in self.alive:
            return []
        if self.sync == "bsp" and self.alive:
            self.joining.add(w)
            return []
        if self.alive:
            self.rounds[w] = min(self.rounds[u] for u in self.alive)
        self.alive.add(w)
        return [self._step(w)]

    def _left(self, w: int, now_s: float) -> list[Command]:
        self.joining.discard(w)
        self.alive.discard(w)
        self.blocked.discard(w)
        self.stepped.discard(w)
        cmds: list[Command] = []
        finished = []
        for sender in list(self.out):
            if sender == w:
                for j in self.out[sender]:
                    self.into[j] = self.into.get(j, 1) - 1
                del self.out[sender]
                continue
            if w in self.out[sender] and self._landed(sender, w, now_s):
                finished.append(sender)
        self.into.pop(w, None)
        if not self.alive:
            return []
        if self.sync == "bsp":
            if not self.exchanging:  # the leaver may have been the last step missing
                return self._bsp_barrier(now_s)
            if self.reducing is not None and w in self.reducing:
                self.reducing = None  # a collective with a dead member never completes
            return self._bsp_next(now_s)
        for sender in finished:
            cmds += self._ssp_round_done(sender, now_s)
        return cmds + self._ssp_release()
