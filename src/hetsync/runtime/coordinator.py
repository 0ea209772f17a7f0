"""Rank 0's side of a peer-to-peer run: the coordinator.

In a peer-to-peer run (a policy with ``topology = "p2p"``) rank 0 runs the
policy, sends commands and receives small reports; the model data moves
worker to worker (:mod:`hetsync.runtime.p2p`, which also gives the
messages). The coordinator turns ``Multicast``/``AllReduce`` into those
messages and the workers' reports into facts for the driver core
(:class:`~hetsync.driver.core.DriverCore`: trace records, counters, the
``ModelArrived``/``AllReduceDone`` events). It talks to the process that
hosts it — the runtime server's run — only through :class:`CoordinatorHost`.

Timing: as the simulator books it, a worker is communicating while a copy it
sends or receives is in flight (from the copy's start on the uplink to its
arrival) or while it takes part in an all-reduce, and not computing. The
coordinator collects those intervals from the reports and the compute
intervals from the step reports, and books ``|comm ∖ compute|``.

Evaluation: the accuracy of a peer-to-peer run is that of the push-sum
average Σw·x/Σw of the workers' models (:mod:`hetsync.localmodel`; each
``FETCHED`` report carries its model's weight). Every ``eval_every_s`` the coordinator sends ``FETCH`` to
every live worker; the control thread answers at once with the model as it
is (a step in progress is not in it yet, as in the simulator) and the
coordinator has the average evaluated at the time it asked (beside its loop,
as the server's model is: :mod:`hetsync.runtime.evaluator`). The fetched bytes are
not counted as traffic and the workers' time to send them (microseconds,
concurrent with their steps) is not booked. At the end of a run, after
``STOP``, the models are fetched once more; their average is the run's final
model (``model-<label>.pt``). Checkpoints (``--checkpoint-dir``) hold the
average as last evaluated; a resumed run starts every worker from it.

Outstanding reports (the host's watchdog): each ``EXPECT``, ``ALLREDUCE``
and ``FETCH`` owes one report; ``MULTICAST`` owes none (its receivers
report). When a worker dies, what others owed for exchanges with it is
forgiven and their late reports are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from hetsync.driver import DriverCore
from hetsync.localmodel import weighted_average
from hetsync.policies.base import AllReduce, Event, Multicast
from hetsync.runtime import protocol as P

# what a worker's receiver thread queues: (worker, report, payload, error)
Received = tuple[int, P.Report | None, torch.Tensor | None, str | None]


class CoordinatorHost(Protocol):
    """What the coordinator needs from the process that hosts it."""

    core: DriverCore

    @property
    def alive(self) -> set[int]: ...  # the workers still in the run

    @property
    def worker_timeout_s(self) -> float: ...

    def now(self) -> float: ...

    def new_exchange(self) -> int: ...  # a fresh exchange id (it makes the messages' tag)

    def post(self, worker: int, cmd: P.Command, *, owes: bool = True) -> bool: ...  # ``owes``: one report for it

    def paid(self, worker: int, now_s: float) -> None: ...  # a report owed by ``worker`` came in or is forgiven

    def deliver(self, event: Event) -> None: ...  # hand an event to the policy

    def left(self, worker: int, reason: str) -> None: ...  # ``worker`` is gone

    def evaluate_model(self, now_s: float) -> None: ...  # the ledger's model (beside the loop, when it can)

    def next_report(self, timeout_s: float) -> Received | None: ...  # None: none within ``timeout_s``


@dataclass(slots=True)
class _Exchange:
    kind: str  # "multicast" or "allreduce"
    start_s: float
    workers: tuple[int, ...]  # the sender, then the receivers; or the ring
    pending: set[int]  # workers whose report is still owed
    arrived: int = 0  # multicast: copies that arrived


@dataclass(slots=True)
class _Fetch:
    at_s: float
    waiting: set[int]
    models: list[torch.Tensor] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)  # push-sum weights, one per model


def measure(intervals: list[tuple[float, float]], minus: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of (∪ intervals) ∖ (∪ minus), within [lo, hi]."""

    def merged(ivs: list[tuple[float, float]]) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for a, b in sorted((max(a, lo), min(b, hi)) for a, b in ivs):
            if b <= a:
                continue
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    total = 0.0
    cut = merged(minus)
    k = 0
    for a, b in merged(intervals):
        total += b - a
        while k < len(cut) and cut[k][1] <= a:
            k += 1
        m = k
        while m < len(cut) and cut[m][0] < b:
            total -= min(b, cut[m][1]) - max(a, cut[m][0])
            m += 1
    return total


class Coordinator:
    """Rank 0's side of a peer-to-peer run (see the module docstring)."""

    def __init__(self, host: CoordinatorHost, nbytes: int) -> None:
        self.host = host
        self.core = host.core
        self.nbytes = nbytes
        n = self.core.n
        self.exchanges: dict[int, _Exchange] = {}
        self.compute_iv: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        self.comm_iv: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        self.fetch: _Fetch | None = None
        # (model, push-sum weight) of workers whose own training loop ended (hetsync.loop): part of the final average
        self.finished: dict[int, tuple[torch.Tensor, float]] = {}

    # ------------------------------------------------------------ commands
    def multicast(self, cmd: Multicast, now: float) -> None:
        host, alive = self.host, self.host.alive
        self.core.stats.multicast(len(cmd.receivers))
        receivers = tuple(r for r in cmd.receivers if r in alive)
        if cmd.worker not in alive or not receivers:
            return
        e = host.new_exchange()
        self.exchanges[e] = _Exchange("multicast", now, (cmd.worker, *receivers), set(receivers))
        for r in receivers:
            host.post(r, P.ExpectCmd(exchange=e, sender=cmd.worker), owes=True)
        host.post(cmd.worker, P.MulticastCmd(exchange=e, receivers=receivers), owes=False)

    def allreduce(self, cmd: AllReduce, now: float) -> None:
        host = self.host
        k = len(cmd.workers)
        self.core.stats.allreduce(k)
        e = host.new_exchange()
        self.exchanges[e] = _Exchange("allreduce", now, cmd.workers, set(cmd.workers) & host.alive)
        for w in cmd.workers:
            if w in host.alive:
                host.post(w, P.AllReduceCmd(exchange=e, ring=cmd.workers), owes=True)
        if len(self.exchanges[e].pending) < k:  # a member already gone: it cannot complete
            self._abort(e, now)

    # ------------------------------------------------------------- reports
    def report(
        self, w: int, rep: P.Arrived | P.Reduced | P.Fetched | P.Lost, payload: torch.Tensor | None, now: float
    ) -> None:
        if isinstance(rep, P.Fetched):
            self._fetched(w, rep, payload, now)
            return
        e = rep.exchange
        ex = self.exchanges.get(e)
        if ex is None or w not in ex.pending:
            return  # forgiven: a peer of that exchange died
        ex.pending.discard(w)
        host, core, nbytes = self.host, self.core, self.nbytes
        host.paid(w, now)
        if ex.kind == "multicast":
            sender = ex.workers[0]
            arrived = None
            if isinstance(rep, P.Arrived):
                self.comm_iv[sender].append((rep.copy_start_s, rep.end_s))
                self.comm_iv[w].append((rep.copy_start_s, rep.end_s))
                ex.arrived += 1
                arrived = core.copy_arrived(sender, w, start_s=rep.start_s, end_s=rep.end_s, now_s=now, nbytes=nbytes)
            if not ex.pending:
                self._finish(e, ex, now)
            if arrived is not None:
                host.deliver(arrived)
            return
        if not isinstance(rep, P.Reduced):
            return  # a ring op failed: a member died, and its WorkerLeft ends the exchange
        k = len(ex.workers)
        self.comm_iv[w].append((rep.start_s, rep.end_s))
        core.reduced(w, start_s=ex.start_s, end_s=rep.end_s, nbytes=nbytes, members=k)
        if ex.pending:
            return
        core.ledger.bytes_sent += 2 * (k - 1) * k * -(-nbytes // k)  # 2(k−1) phases of k chunks
        del self.exchanges[e]
        host.deliver(core.allreduce_done(ex.workers, start_s=ex.start_s, now_s=now))

    def _finish(self, e: int, ex: _Exchange, now: float) -> None:
        del self.exchanges[e]
        if ex.kind == "multicast" and not ex.arrived:
            return
        self.core.exchange_done(ex.start_s, now)

    def computed(self, w: int, start: float, end: float) -> None:
        self.compute_iv[w].append((start, end))

    # ------------------------------------------------------------- deaths
    def left(self, w: int, now: float) -> None:
        """Before the policy hears of it: forgive what others owed for
        exchanges with ``w`` and stop rings it was in."""
        host = self.host
        for e, ex in list(self.exchanges.items()):
            if w not in ex.workers:
                continue
            if ex.kind == "allreduce":
                self._abort(e, now)
            elif ex.workers[0] == w:  # the sender: its copies never come
                for r in ex.pending:
                    host.paid(r, now)
                del self.exchanges[e]
            elif w in ex.pending:
                ex.pending.discard(w)
                if not ex.pending:
                    self._finish(e, ex, now)
        if self.fetch is not None and w in self.fetch.waiting:
            self.fetch.waiting.discard(w)
            if not self.fetch.waiting:
                self._evaluate_fetched()

    def _abort(self, e: int, now: float) -> None:
        ex = self.exchanges.pop(e)
        host = self.host
        for p in ex.pending:
            host.paid(p, now)
        for p in ex.workers:
            if p in host.alive:
                host.post(p, P.AbortCmd(exchange=e), owes=False)

    # ---------------------------------------------------------- evaluation
    def evaluate(self, now: float) -> None:
        """Ask every live worker for its model; evaluate their average when
        all have answered (skipped while the previous request is open)."""
        if self.fetch is not None:
            return
        live = sorted(self.host.alive)
        if not live:
            return
        self.fetch = _Fetch(at_s=now, waiting=set(live))
        for w in live:
            self.host.post(w, P.FetchCmd(), owes=True)

    def _fetched(self, w: int, rep: P.Fetched, payload: torch.Tensor | None, now: float) -> None:
        f = self.fetch
        if f is None or w not in f.waiting:
            return
        f.waiting.discard(w)
        self.host.paid(w, now)
        if payload is not None:
            f.models.append(payload)
            f.weights.append(rep.weight)
        if not f.waiting:
            self._evaluate_fetched()

    def _evaluate_fetched(self) -> None:
        f, self.fetch = self.fetch, None
        assert f is not None
        if f.models:
            self.core.ledger.theta = weighted_average(f.models, f.weights)
            self.host.evaluate_model(f.at_s)

    def _add_finished(self, f: _Fetch) -> None:
        for model, weight in self.finished.values():
            f.models.append(model)
            f.weights.append(weight)

    def final_evaluation(self, wall: float) -> None:
        """After STOP: fetch every live worker's model (nothing else is in
        flight any more) and evaluate their average at ``wall``, with the
        final models of workers whose own loop ended before."""
        host = self.host
        self.fetch = None
        self.evaluate(wall)
        if self.fetch is None and self.finished:  # nobody left to ask
            self.fetch = _Fetch(at_s=wall, waiting=set())
            self._add_finished(self.fetch)
            self._evaluate_fetched()
            return
        if self.fetch is not None:
            self._add_finished(self.fetch)
        f = self.fetch
        deadline = host.now() + host.worker_timeout_s
        while self.fetch is f and f is not None:
            item = host.next_report(max(0.01, deadline - host.now()))
            if item is None:  # the silent ones are gone
                for w in sorted(f.waiting):
                    host.left(w, f"no reply within worker_timeout_s={host.worker_timeout_s}")
                break
            w, rep, payload, error = item
            if error is not None:
                host.left(w, error)
            elif isinstance(rep, P.Fetched):
                self._fetched(w, rep, payload, host.now())
        if self.fetch is f:
            self.fetch = None

    # ------------------------------------------------------------- summary
    def comm_s(self, lo: float, hi: float) -> list[float]:
        """Per worker: time in flight (sending, receiving, all-reducing)
        while not computing, within [lo, hi]."""
        return [measure(c, m, lo, hi) for c, m in zip(self.comm_iv, self.compute_iv, strict=True)]
