"""Peer-to-peer runs on the runtime: the workers' data plane. Rank 0's side
(the coordinator's messages and books, evaluation) is
:mod:`hetsync.runtime.coordinator`.

In a peer-to-peer run (a policy with ``topology = "p2p"``) rank 0 is only the
*coordinator*: it runs the policy, sends commands and receives small reports.
No model data passes through it during training: copies and all-reduce chunks
go worker to worker with ``dist.isend``/``dist.irecv`` (explicit peer ranks on
the one gloo group, one tag per exchange, :func:`~hetsync.runtime.protocol.exchange_tag`).
Two things do pass through rank 0, neither of them training traffic: the
``RESET`` that starts every run gives every worker the same initial model (as
in parameter-server runs), and evaluation fetches the workers' models (below).

Messages (:mod:`hetsync.runtime.protocol`), for a ``Multicast(i, R)``: the
coordinator sends ``EXPECT(e, sender=i)`` to every receiver and
``MULTICAST(e)`` + the receiver list (a small int64 tensor) to ``i``. The
sender posts one ``isend`` per receiver of a snapshot of its model as it is
then, each behind a small copy header that also carries the copy's push-sum
weight (:mod:`hetsync.localmodel`: the sender splits its weight among the
copies and itself when the multicast starts); every receiver has posted an
``irecv`` from ``i`` as soon as its EXPECT arrived, and a waiter thread
reports ``ARRIVED(e, i)`` when the copy is in (``ModelArrived`` on the
coordinator). An ``AllReduce(W)`` sends ``ALLREDUCE(e)`` + the ring to every
member; each runs the ring in a thread and reports ``REDUCED(e)``; the
coordinator delivers ``AllReduceDone`` when all members have. The ring
reduces w·x and w (one more float32 element), so every member ends with the
weighted average Σw·x/Σw and the mean weight Σw/k (exactly x̄ and 1 while
every weight is 1). A step mixes the copies that arrived with push-sum
weights (:meth:`PeerComm.mix_arrived`); a copy that is lost (its sender or
receiver died) loses its weight with it.

Threads on a worker (:class:`PeerComm`): the main thread executes steps one
after another, as in parameter-server runs; a control thread reads the
command stream and handles ``MULTICAST``/``EXPECT``/``ALLREDUCE``/``ABORT``
/``FETCH`` at once, even while a step runs (so a receiver busy computing
under SSP still takes its copies), by posting non-blocking ops; one waiter
thread per expected copy and one thread per all-reduce block in
``Work.wait()`` and report. The control thread never waits on a peer, and
every op is posted before anyone waits for it, so an exchange in which every
worker is both a sender and a receiver cannot deadlock. Reports to rank 0 from all
these threads go through one lock (a report with a payload is two sends for
large models). Measured on gloo: concurrent sends and receives from several
threads on one process group, to and from the same and different peers, are
safe (every message arrives intact), messages with the same peers and tag
match in the order they were posted, and an op with a peer whose process
dies fails within a second (the connection resets). ``Work.wait(timeout)``
is *not* usable: a timeout closes the connection for good. So a receive from
a live peer that will never send (the exchange was given up) cannot be
cancelled: its thread stays blocked and is abandoned; the exchange's unique
tag makes sure it never matches a later message, and ``ABORT`` and the run
generation make sure it never touches the model or reports.

Throttling (``--throttle``): every worker's uplink and downlink run at
``bandwidth_Bps[w] / link_load.factor_at(w, t)``. The bytes themselves move
as fast as the network lets them (on loopback, at once); a multicast is
shaped on the timestamps, and whatever depends on them waits for it. A multicast's copies leave the sender's uplink
one after another (copy k of a multicast that starts at t0 occupies it for
``[t0 + k·T, t0 + (k+1)·T]``, ``T = bytes / uplink``; a multicast queues
behind the previous one's copies); the copy header carries those times. A
receiver's downlink takes one copy at a time, each for ``bytes / downlink``:
a copy gets the first free slot on it that starts no earlier than its start
on the uplink and ends no earlier than its end there (the copies already
booked on the downlink keep theirs: :func:`book_slot`). The copy counts as
arrived — is mixable and reported — at the end of that slot: the waiter
thread sleeps until then. All-reduce chunks are shaped by really waiting:
each phase's chunk is sent no earlier than ``chunk bytes / min(own uplink,
successor's downlink)`` after the phase began, so the ring moves at the pace
of its slowest link, phase by phase.

Control messages keep the runtime's one format: for models of up to
``FUSE_LIMIT_PARAMS`` parameters every message to or from rank 0 is one
model-sized buffer, header first (:class:`~hetsync.runtime.protocol.Channel`);
for ``EXPECT`` and the reports that is padding, not model data.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from hetsync.localmodel import LocalModel
from hetsync.runtime import protocol as P
from hetsync.scenario import Scenario

if TYPE_CHECKING:
    from collections.abc import Callable

_COPY_F32 = 2 * P.COPY_HDR_LEN  # a model copy is one float32 message: its header's bits, then the model


def link_Bps(sc: Scenario, worker: int, t: float, throttle: bool) -> float:
    """The worker's available link bandwidth at ``t`` (both directions):
    ``bandwidth_Bps / link_load factor``; inf without throttling."""
    if not throttle:
        return math.inf
    load = sc.cluster.link_load
    return sc.cluster.bandwidth_Bps[worker] / (load.factor_at(worker, t) if load is not None else 1.0)


def _seconds(nbytes: float, Bps: float) -> float:
    return nbytes / Bps if Bps < math.inf else 0.0


def book_slot(busy: list[tuple[float, float]], earliest: float, length: float) -> float:
    """Book the first free slot of ``length`` starting at or after
    ``earliest`` on a link whose booked slots are ``busy`` (sorted, disjoint;
    updated in place); returns the slot's start."""
    start = earliest
    at = 0
    for i, (a, b) in enumerate(busy):
        if b <= start:
            at = i + 1
            continue
        if a >= start + length:
            break
        start = b
        at = i + 1
    if length > 0:
        busy.insert(at, (start, start + length))
    return start


# ------------------------------------------------------------------ worker side
class PeerComm:
    """A worker's peer-to-peer data plane (see the module docstring).

    Called from the control thread (``multicast``, ``expect``, ``allreduce``,
    ``abort``, ``fetch``) and the main thread (``mix_arrived``, ``reset``, ``quiesce``);
    its own threads wait for ops. ``lock`` guards its state and is held
    while a report is sent, so that after ``quiesce`` or ``reset`` (which bump
    the generation under it) nothing from before is reported or applied.
    """

    def __init__(
        self,
        worker: int,
        scenario: Scenario,
        nbytes: int,
        n_params: int,
        *,
        throttle: bool,
        clock: Callable[[], float],
        report: Callable[[P.Report], None],  # sends a report to rank 0
        model: Callable[[], LocalModel],
    ) -> None:
        self.w = worker
        self.sc = scenario
        self.nbytes = nbytes
        self.n_params = n_params
        self.throttle = throttle
        self.clock = clock
        self.report = report
        self.model = model
        self.lock = threading.Lock()
        self.gen = 0
        self.aborted: set[int] = set()
        self.up_free_s = 0.0  # when the uplink has sent the copies queued on it
        self.down_busy: list[tuple[float, float]] = []  # the downlink's booked slots
        self.inbox: list[tuple[torch.Tensor, float]] = []  # (model, push-sum weight) copies not yet mixed
        self.sends: list[tuple[Any, torch.Tensor]] = []  # isends not known complete (with their buffers)

    # ----------------------------------------------------------- lifecycle
    def reset(self) -> None:
        """A new run: forget everything of the old one."""
        with self.lock:
            self.gen += 1
            self.aborted.clear()
            self.up_free_s = 0.0
            self.down_busy = []
            self.inbox = []
            self._reap()

    def quiesce(self) -> None:
        """End of a run (STOP): from now on nothing in flight reports or
        touches the model."""
        with self.lock:
            self.gen += 1

    def abort(self, exchange: int) -> None:
        with self.lock:
            self.aborted.add(exchange)

    def mix_arrived(self) -> None:
        """A step starts: push-sum mix the copies that have arrived into the
        model (under ``lock``, so a multicast's weight split never interleaves)."""
        with self.lock:
            arrived, self.inbox = self.inbox, []
            if arrived:
                self.model().mix(arrived)  # type: ignore[arg-type]

    def fetch(self) -> tuple[torch.Tensor | None, float]:
        """The model as it is and its push-sum weight (evaluation's ``FETCH``)."""
        with self.lock:
            m = self.model()
            return m.local, m.weight

    def _reap(self) -> None:
        self.sends = [(work, buf) for work, buf in self.sends if not work.is_completed()]

    def _rate(self, worker: int, t: float) -> float:
        return link_Bps(self.sc, worker, t, self.throttle)

    def _report_now(self, gen: int, rep: P.Arrived | P.Reduced | P.Lost) -> bool:
        """Report unless the run or the exchange is over; call with ``lock`` held."""
        if gen != self.gen or rep.exchange in self.aborted:
            return False
        self.report(rep)
        return True

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=target, args=args, daemon=True, name=f"p2p-{self.w}").start()

    # ----------------------------------------------------------- multicast
    def multicast(self, exchange: int, receivers: tuple[int, ...]) -> None:
        """Send a snapshot of the model as it is now to every receiver."""
        now = self.clock()
        with self.lock:
            model = self.model().local
            assert model is not None
            share = self.model().split_weight(len(receivers))  # push-sum: every copy and the sender keep w/(k+1)
            self._reap()
            t = max(now, self.up_free_s)
            plan = []
            for r in receivers:
                end = t + _seconds(self.nbytes, self._rate(self.w, t))
                plan.append((r, t, end))
                t = end
            self.up_free_s = t
        tag = P.exchange_tag(exchange)
        for r, start, end in plan:
            buf = torch.empty(_COPY_F32 + self.n_params, dtype=torch.float32)
            copy = P.CopyHeader(
                exchange=exchange, sender=self.w, start_s=now, copy_start_s=start, up_end_s=end, weight=share
            )
            buf[:_COPY_F32].view(torch.int64).copy_(copy.encode())
            buf[_COPY_F32:].copy_(model)
            try:
                work = dist.isend(buf, dst=r + 1, tag=tag)
            except Exception:  # the receiver is gone; the coordinator hears of it
                continue
            with self.lock:
                self.sends.append((work, buf))

    def expect(self, exchange: int, sender: int) -> None:
        """Post the receive of ``sender``'s copy; a waiter thread reports it."""
        gen = self.gen
        buf = torch.empty(_COPY_F32 + self.n_params, dtype=torch.float32)
        try:
            work = dist.irecv(buf, src=sender + 1, tag=P.exchange_tag(exchange))
        except Exception:
            self._lost(gen, exchange, sender)
            return
        self._spawn(self._await_copy, gen, exchange, sender, buf, work)

    def _lost(self, gen: int, exchange: int, sender: int | None) -> None:
        with self.lock:
            self._report_now(gen, P.Lost(exchange=exchange, sender=sender))

    def _await_copy(self, gen: int, exchange: int, sender: int, buf: torch.Tensor, work: Any) -> None:
        try:
            work.wait()
        except Exception:  # the sender died
            self._lost(gen, exchange, sender)
            return
        real = self.clock()
        copy = P.CopyHeader.decode(buf[:_COPY_F32].view(torch.int64))
        arrive = real
        if self.throttle:
            with self.lock:
                if gen != self.gen:
                    return
                length = _seconds(self.nbytes, self._rate(self.w, copy.copy_start_s))
                busy = self.down_busy
                while busy and busy[0][1] < real - 60.0:  # long past: nothing can be booked there any more
                    busy.pop(0)
                slot = book_slot(busy, max(copy.copy_start_s, copy.up_end_s - length), length)
                arrive = max(real, slot + length)
            wait = arrive - self.clock()
            if wait > 0:
                time.sleep(wait)
        end = max(arrive, self.clock())
        rep = P.Arrived(
            exchange=exchange, sender=sender, start_s=copy.start_s, copy_start_s=copy.copy_start_s, end_s=end
        )
        with self.lock:
            if gen == self.gen and exchange not in self.aborted:
                self.inbox.append((buf[_COPY_F32:], copy.weight))  # mixable from now on
                self._report_now(gen, rep)

    # ----------------------------------------------------------- all-reduce
    def allreduce(self, exchange: int, ring: tuple[int, ...]) -> None:
        self._spawn(self._ring, self.gen, exchange, ring, self.clock())

    def _ring(self, gen: int, exchange: int, ring: tuple[int, ...], start: float) -> None:
        try:
            mean, weight = self.ring_mean(exchange, ring)
        except Exception:  # a member died
            self._lost(gen, exchange, None)
            return
        with self.lock:
            if gen == self.gen and exchange not in self.aborted:
                self.model().replace(mean, weight)
                self._report_now(gen, P.Reduced(exchange=exchange, start_s=start, end_s=self.clock()))

    def ring_mean(self, exchange: int, ring: tuple[int, ...]) -> tuple[torch.Tensor, float]:
        """Ring all-reduce (Patarasuk & Yuan): 2(k−1) phases, each sending
        1/k of the model to the ring successor and receiving 1/k from the
        predecessor — k−1 of reduce-scatter, then k−1 of all-gather. Reduces
        w·x and w (push-sum weights; the weight in float32) and returns the
        weighted average Σw·x/Σw and the mean weight Σw/k. Works on a copy;
        the model is replaced only when all of it is done."""
        k = len(ring)
        j = ring.index(self.w)
        succ, pred = ring[(j + 1) % k] + 1, ring[(j - 1) % k] + 1
        with self.lock:
            model, own_w = self.model().local, self.model().weight
        assert model is not None
        n = model.numel()
        c = -(-(n + 1) // k)
        flat = torch.zeros(k * c, dtype=torch.float32)
        flat[:n].copy_(model)
        if own_w != 1.0:
            flat[:n].mul_(own_w)
        flat[n] = own_w
        chunks = flat.view(k, c)
        incoming = torch.empty(c, dtype=torch.float32)
        chunk_bytes = -(-self.nbytes // k)
        tag = P.exchange_tag(exchange)
        for phase in range(2 * (k - 1)):
            if phase < k - 1:  # reduce-scatter
                send_i, recv_i = (j - phase) % k, (j - phase - 1) % k
            else:  # all-gather
                s = phase - (k - 1)
                send_i, recv_i = (j + 1 - s) % k, (j - s) % k
            t0 = self.clock()
            rx = dist.irecv(incoming, src=pred, tag=tag)
            if self.throttle:
                Bps = min(self._rate(self.w, t0), self._rate(succ - 1, t0))
                wait = t0 + _seconds(chunk_bytes, Bps) - self.clock()
                if wait > 0:
                    time.sleep(wait)
            tx = dist.isend(chunks[send_i], dst=succ, tag=tag)
            rx.wait()
            tx.wait()
            if phase < k - 1:
                chunks[recv_i].add_(incoming)
            else:
                chunks[recv_i].copy_(incoming)
        total_w = float(flat[n])
        return flat[:n] / total_w, total_w / k
