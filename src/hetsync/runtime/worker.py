"""A real worker process: executes the server's commands on its shard.

The worker holds no policy logic: it receives a command, does it (pull the
model, compute a step with real data, push a gradient or delta), and reports
what happened with its own timestamps. Heterogeneity is applied for real: a
step sleeps for the extra share the scenario gives this worker (slowdown,
noise, stragglers, background load, injected delay) on top of its measured
compute time; with ``throttle`` its transfers last at least
``model bytes / bandwidth`` (the bandwidth divided by the scenario's
``link_load`` factor when the transfer starts).

Two threads: a control thread reads the command stream; the main thread
executes steps, pulls and pushes one after another, in order. The control
thread itself handles what must not wait for a step to end — the
peer-to-peer commands (:class:`~hetsync.runtime.p2p.PeerComm`) and the
evaluation's ``FETCH`` — and hands everything else to the main thread.

In a peer-to-peer run (``RESET`` says so) a step first mixes the models
that have arrived (push-sum weighted average with its own), then takes the SGD
step locally and commits it: the step is the update.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

import torch
import torch.distributed as dist

from hetsync.driver import TimingModel, policy_context
from hetsync.localmodel import LocalModel
from hetsync.optim import Stepper, local_steppers
from hetsync.policies import make_policy
from hetsync.runtime import protocol as P
from hetsync.runtime.p2p import PeerComm, link_Bps
from hetsync.scenario import Scenario
from hetsync.workloads import Workload

SERVER_RANK = 0


class WorkerProcess:
    def __init__(
        self,
        worker: int,
        scenario: Scenario,
        workload: Workload,
        *,
        throttle: bool = False,
        kill_at_s: float | None = None,
        specs: list[str] | None = None,
    ) -> None:
        self.w = worker
        self.specs = specs or []  # the runs' policies, in order: RESET names the run
        self.sc = scenario
        self.workload = workload
        self.kill_at_s = kill_at_s
        self.throttle = throttle
        self.nbytes = scenario.model_bytes if scenario.model_bytes is not None else workload.model_nbytes
        self.epoch = time.time()
        self.model = LocalModel(None)
        self.steps = 0
        self.p2p = False
        self.channel = P.Channel(workload.n_params, P.command_has_payload)
        self.commands: queue.Queue[tuple[torch.Tensor, torch.Tensor | None] | BaseException] = queue.Queue()
        self._send_lock = threading.Lock()  # reports come from several threads
        self.comm = PeerComm(
            worker,
            scenario,
            self.nbytes,
            workload.n_params,
            throttle=throttle,
            clock=self._now_s,
            report=self._send,
            model=lambda: self.model,
        )

    # --------------------------------------------------------------- io
    def _now_s(self) -> float:
        return time.time() - self.epoch

    def _send(self, rep: torch.Tensor, payload: torch.Tensor | None = None) -> None:
        tensors = self.channel.pack(rep, payload)
        with self._send_lock:
            for t in tensors:
                dist.send(t, dst=SERVER_RANK)

    # ------------------------------------------------------------- loop
    def serve(self) -> None:
        threading.Thread(target=self._read_commands, daemon=True, name="control").start()
        while True:
            self.free_since_s = self._now_s()  # a command sent earlier waited for this moment
            item = self.commands.get()
            if isinstance(item, BaseException):
                raise item
            hdr, payload = item
            kind = int(hdr[P.H_TYPE])
            if kind & P.C_EXIT:
                return
            if kind & P.C_RESET:
                assert payload is not None
                self._reset(hdr, payload)
                continue
            if kind & P.C_STOP:
                self._bye()
                continue
            self._maybe_die()
            self._command(hdr, kind, payload)

    def _bye(self) -> None:
        """The run is over (``STOP``): nothing of it reports after this ``BYE``."""
        self.comm.quiesce()
        rep = P.header()
        rep[P.R_TYPE] = P.R_BYE
        self._send(rep)

    def _read_commands(self) -> None:
        """The control thread: peer-to-peer commands and FETCH at once, the
        rest to the main thread in order."""
        try:
            while True:
                hdr, payload = self.channel.recv(SERVER_RANK)
                kind = int(hdr[P.H_TYPE])
                peers: tuple[int, ...] = ()
                if P.command_has_peers(hdr):
                    listed = torch.empty(int(hdr[P.H_NPEERS]), dtype=torch.int64)
                    dist.recv(listed, src=SERVER_RANK)
                    peers = tuple(int(x) for x in listed.tolist())
                exchange = int(hdr[P.H_EXCH])
                if kind & (P.C_MULTICAST | P.C_EXPECT | P.C_ALLREDUCE):
                    self._maybe_die()  # a death in the middle of an exchange
                if kind & P.C_MULTICAST:
                    self.comm.multicast(exchange, peers)
                elif kind & P.C_EXPECT:
                    self.comm.expect(exchange, int(hdr[P.H_PEER]))
                elif kind & P.C_ALLREDUCE:
                    self.comm.allreduce(exchange, peers)
                elif kind & P.C_ABORT:
                    self.comm.abort(exchange)
                elif kind & P.C_FETCH:
                    rep = P.header()
                    rep[P.R_TYPE] = P.R_FETCHED
                    model, weight = self.comm.fetch()
                    P.put_float(rep, P.R_WEIGHT, weight)
                    self._send(rep, model)  # the model as it is: a step in progress is not in it
                else:
                    self.commands.put((hdr, payload))
                    if kind & P.C_EXIT:
                        return
        except Exception as e:  # the server is gone
            self.commands.put(e)

    def _reset(self, hdr: torch.Tensor, model: torch.Tensor) -> None:
        self.epoch = P.from_us(int(hdr[P.H_EPOCH_US]))
        self.model = LocalModel(
            model,
            int(hdr[P.H_VERSION]),
            stepper=self._stepper(int(hdr[P.H_RUN])),
            push_sum=self.sc.p2p_mixing == "push-sum",
        )
        self.timing = TimingModel(self.sc)  # fresh streams: every run sees the same noise
        self.steps = int(hdr[P.H_FIRST_STEP])  # 0, or where a resumed run's checkpoint left this worker
        self.model.local_clock = self.steps
        self._reset_data(int(hdr[P.H_DRAWN]))
        self.p2p = bool(int(hdr[P.H_P2P]))
        self.comm.reset()
        rep = P.header()
        rep[P.R_TYPE] = P.R_RESET
        self._send(rep)

    def _reset_data(self, drawn: int) -> None:
        """This worker's shard of the workload's data, positioned after the
        ``drawn`` samples a resumed run had already used."""
        self.shard = self.workload.make_shards(self.sc.workers, self.sc.seed, self.sc.label_skew)[self.w]
        self._skip(drawn)

    def _skip(self, samples: int) -> None:
        """A resumed run: draw (and discard) the batches and the step noise the
        worker had drawn by the checkpoint, so its data order and timing go on
        where they were (a batch drawn in pieces is the same samples)."""
        for _ in range(self.steps):
            self.timing.random_factor(self.w, 0.0)
        chunk = max(1, len(self.shard))
        while samples > 0:
            self.shard.next_batch(min(samples, chunk))
            samples -= chunk

    def _stepper(self, run: int) -> Stepper | None:
        """A fresh optimizer for this run's local steps (the policy's recipe or
        the scenario's); the run's policy is built here only to ask it."""
        if not 0 <= run < len(self.specs):
            return None
        policy = make_policy(self.specs[run], policy_context(self.sc))
        return local_steppers(self.sc, policy)[0]

    def _maybe_die(self) -> None:
        """Fault injection for tests and demos: an abrupt death, like kill -9,
        at the first command after ``kill_at_s`` (a step, or in peer-to-peer
        runs also a copy to send or receive, or an all-reduce)."""
        if self.kill_at_s is not None and self._now_s() >= self.kill_at_s:
            os.kill(os.getpid(), signal.SIGKILL)

    def _command(self, hdr: torch.Tensor, kind: int, model: torch.Tensor | None) -> None:
        rep = P.header()
        payload = self._transfers(hdr, kind, model, rep)
        if kind & P.C_COMPUTE:
            start, base = self._begin_step()
            batch = int(hdr[P.H_BATCH])
            x, y = self.shard.next_batch(batch)
            t0 = time.perf_counter()
            grad, _ = self.workload.gradient(self.model.local, x, y)
            measured = time.perf_counter() - t0
            after = self._end_step(hdr, rep, grad, start, base, measured)
            payload = after if after is not None else payload
        self._send(rep, payload)

    def _transfers(
        self, hdr: torch.Tensor, kind: int, model: torch.Tensor | None, rep: torch.Tensor
    ) -> torch.Tensor | None:
        """A command's standalone push and its pull (both before its step, if
        it has one); returns the push's payload."""
        payload = None
        if kind & P.C_PUSH:
            payload = self._push(rep, P.KIND_NAMES[int(hdr[P.H_PUSH_KIND])])
        if kind & P.C_PULL:
            started = max(P.from_us(int(hdr[P.H_SENT_US])), self.free_since_s)
            rep[P.R_PULL_START_US] = P.to_us(started)
            self._throttle(started)
            rep[P.R_OVERWRITTEN] = self.model.load(model, int(hdr[P.H_VERSION]))
            rep[P.R_TYPE] |= P.R_PULLED
            rep[P.R_VERSION] = int(hdr[P.H_VERSION])
            rep[P.R_PULL_END_US] = P.to_us(self._now_s())
        return payload

    def _throttle(self, started_s: float) -> None:
        Bps = link_Bps(self.sc, self.w, started_s, self.throttle)
        if Bps == float("inf"):
            return
        left = self.nbytes / Bps - (self._now_s() - started_s)
        if left > 0:
            time.sleep(left)

    def _begin_step(self) -> tuple[float, int]:
        """A step starts: in a peer-to-peer run the models that arrived are
        mixed in first. Returns its start time and the version it computes on."""
        if self.p2p:
            self.comm.mix_arrived()  # push-sum weights (hetsync.localmodel)
        return self._now_s(), self.model.base_version

    def _end_step(
        self,
        hdr: torch.Tensor,
        rep: torch.Tensor,
        grad: torch.Tensor | None,
        start: float,
        base: int,
        measured_s: float,
    ) -> torch.Tensor | None:
        """A step's computation is done (``measured_s`` of it): sleep the
        scenario's extra share, book it (a local step, or a gradient to
        push), fill the report, and push right after if the command says so;
        returns that push's payload."""
        local_lr = P.get_float(hdr, P.H_LR) if int(hdr[P.H_HAS_LR]) else None
        batch = int(hdr[P.H_BATCH])
        extra = self.timing.extra_sleep_s(self.w, measured_s, start)
        if extra > 0:
            time.sleep(extra)
        rep[P.R_REPLACED] = self.model.finish_step(grad, batch, base, local_lr)
        if self.p2p:
            rep[P.R_COMMITTED] = self.model.commit_local()
        end = self._now_s()
        rep[P.R_TYPE] |= P.R_COMPUTED
        rep[P.R_C_START_US] = P.to_us(start)
        rep[P.R_C_END_US] = P.to_us(end)
        P.put_float(rep, P.R_UP_BPS, link_Bps(self.sc, self.w, end, self.throttle))
        P.put_float(rep, P.R_DOWN_BPS, link_Bps(self.sc, self.w, end, self.throttle))
        rep[P.R_STEP] = self.steps
        rep[P.R_BATCH] = batch
        rep[P.R_BASE] = base
        P.put_float(rep, P.R_LOAD, self.timing.load_factor(self.w, start))
        self.steps += 1
        after = int(hdr[P.H_PUSH_AFTER])
        return self._push(rep, P.KIND_NAMES[after]) if after else None

    def _push(self, rep: torch.Tensor, kind: str) -> torch.Tensor:
        start = self._now_s()
        push = self.model.take_push(kind)
        self._throttle(start)
        rep[P.R_TYPE] |= P.R_PUSHED
        rep[P.R_P_KIND] = P.KINDS[push.kind]
        rep[P.R_P_STEPS] = push.steps
        rep[P.R_P_SAMPLES] = push.samples
        rep[P.R_P_BASE] = push.base_version
        rep[P.R_P_START_US] = P.to_us(start)
        assert push.payload is not None
        return push.payload
