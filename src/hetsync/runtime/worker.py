"""A real worker process: executes the server's commands on its shard.

The worker holds no policy logic: it receives a command, does it (pull the
model, compute a step with real data, push a gradient or delta), and reports
what happened with its own timestamps. Heterogeneity is applied for real: a
step sleeps for the extra share the scenario gives this worker (slowdown,
noise, stragglers, background load, injected delay) on top of its measured
compute time; with ``throttle`` its transfers last at least
``model bytes / bandwidth`` (the bandwidth divided by the scenario's
``link_load`` factor when the transfer starts).

Threads: a control thread reads the command stream; the main thread
executes steps (with the pull or push a command chains to them) in order.
A standalone push goes up the uplink lane and a standalone pull comes down
the downlink lane (:mod:`hetsync.runtime.lanes`), beside the steps, so a
policy that communicates while its workers compute (WBSP-overlap) overlaps
on real processes as in the simulator: a pull that lands during a step
replaces the live model, and the step finishes on it. The control thread
itself handles what must not wait for a step to end — the peer-to-peer
commands (:class:`~hetsync.runtime.p2p.PeerComm`) and the evaluation's
``FETCH``. Each report carries the transfer time no step overlapped
(``R_COMM_S``), booked as the simulator books it (:class:`BusyClock`).

In a peer-to-peer run (``RESET`` says so) a step first mixes the models
that have arrived (push-sum weighted average with its own), then takes the SGD
step locally and commits it: the step is the update.

Devices (``hetsync run --device cuda``): the worker's model, its optimizers'
state, the workload's template (buffers included) and its shard live on
``device``; a model that arrives from rank 0 is copied there once, and what
leaves for rank 0 is copied to the host in :meth:`WorkerProcess._send` (the
wire is gloo). On the collective path the round's buckets are on the device
too (NCCL): a step there copies nothing to the host.
"""

from __future__ import annotations

import contextlib
import copy
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hetsync.algos.quantize import decode, encode
from hetsync.driver import TimingModel, policy_context
from hetsync.ledger import fragment_stepper, outer_fragment_step
from hetsync.localmodel import LocalModel, PushPayload
from hetsync.optim import Stepper, gpu_devices, gradient_stepper, local_steppers, outer_stepper, wait_for
from hetsync.policies import make_policy
from hetsync.policies.base import Fragment, Policy
from hetsync.runtime import protocol as P
from hetsync.runtime import worker_state as ws
from hetsync.runtime.checkpoint_check import worker_state_path
from hetsync.runtime.collective import GroupBroken, RoundReducer, workers_group
from hetsync.runtime.lanes import BusyClock, Lane
from hetsync.runtime.p2p import PeerComm, link_Bps
from hetsync.runtime.session import Link, WorldLink
from hetsync.runtime.shards import PendingModel, shard_ranges, split_push, unfinished
from hetsync.runtime.worker_state import WorkerState
from hetsync.scenario import Scenario
from hetsync.workloads import Workload

SERVER_RANK = 0
OUTBOX_MAX = 64  # messages queued to the server before a continuous step waits


class WorkerProcess:
    background = True  # standalone pushes and pulls run on the link lanes, beside the steps

    def __init__(
        self,
        worker: int,
        scenario: Scenario,
        workload: Workload,
        *,
        throttle: bool = False,
        pace: bool = False,
        kill_at_s: float | None = None,
        specs: list[str] | None = None,
        checkpoint_dir: Path | None = None,
        checkpoint_every_s: float = 10.0,
        resume: bool = False,
        servers: int = 1,
        link: Link | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.w = worker
        self.device = torch.device(device)
        if self.device.type != "cpu":
            workload.to(self.device)  # (this process's own workload: its template computes there)
        # the GPU a step's kernels are queued on: it is timed once they are done
        self.step_devices = gpu_devices([torch.empty(0, device=self.device)])
        # to rank 0: the world group, or the pairwise session of a worker that came back (runtime.session)
        self.link: Link = link if link is not None else WorldLink(SERVER_RANK)
        # the optimizer state of local steps (DiLoCo's inner AdamW moments...): saved beside the
        # server's checkpoint every checkpoint_every_s and at the run's end; a resumed run loads it
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every_s = checkpoint_every_s
        self.resume = resume
        self._state_path: Path | None = None  # this run's (None: no local optimizer state to keep)
        self._state_saved_s = 0.0
        self.specs = specs or []  # the runs' policies, in order: RESET names the run
        self.sc = scenario
        self.workload = workload
        self.kill_at_s = kill_at_s
        self.throttle = throttle
        self.pace = pace  # steps last the scenario's modelled time (TimingModel.extra_sleep_s)
        self.nbytes = scenario.job.model_bytes if scenario.job.model_bytes is not None else workload.model_nbytes
        self.epoch = time.time()
        self.model = LocalModel(None)
        # fragments pulled and held until a step merges them (Streaming DiLoCo): (lo, hi, values, keep, version)
        self.held: list[tuple[int, int, torch.Tensor, float, int]] = []
        # ... and this worker's copy of each fragment's outer optimizer: a pull that brings the mean of the
        # fragment's deltas takes the server's outer step here (hetsync.ledger.outer_fragment_step)
        self.fragment_outer: dict[tuple[int, int], Stepper] = {}
        self.outer_for_fragments: Stepper | None = None
        self.steps = 0
        self.p2p = False
        # the collective path (RESET says so): this worker's side of the rounds' all-reduces, and its
        # copies of the server's optimizers, which take each round's step here (hetsync.runtime.collective):
        # for gradient rounds (BSP) the scenario's optimizer, for delta rounds (local SGD, DiLoCo) the outer one
        self.state = WorkerState()  # the protocol's side of it: what each command asks (collective: off)
        self.reducer: RoundReducer | None = None
        self.replica: Stepper | None = None
        self.outer_replica: Stepper | None = None
        self.round_kind = "grad"  # what the run's rounds reduce: "grad" or "delta" (Policy.collective_kind)
        self.global_model: torch.Tensor | None = None  # the model as of the last round (what FETCH gives)
        self.global_version = 0  # ... and its version
        self.fell_back = False  # this run left the collective path (its group broke): FETCH still gives that model
        self._round_applied = threading.Condition()  # (a SNAPSHOT waits for the round it names)
        # the state of the copies of the server's optimizers as of the last SNAPSHOT (saved with the local state)
        self._rounds_saved: dict[str, object] | None = None
        # sharded servers (hetsync.runtime.shards): rank 0's range travels with the messages to it and
        # from it, the others go to and come from servers 1 … S−1
        self.ranges = shard_ranges(workload.n_params, servers) if servers > 1 else None
        self.channel = P.Channel(self.ranges[0][1] if self.ranges else workload.n_params)
        self._shard_sends: list[tuple[object, torch.Tensor]] = []
        self.commands: queue.Queue[tuple[P.Command, torch.Tensor | PendingModel | None] | BaseException] = queue.Queue()
        self.model_lock = threading.Lock()  # the lanes and the steps change the model
        # collective path: set by the control thread when the server has left it (a member died), so that
        # a wait for a round that gloo does not fail here ends too (collective.wait_round)
        self.group_broken = threading.Event()
        self.busy = BusyClock()
        # every message to the server leaves from one thread, in order: a step
        # never waits for the server to take its report
        self.outbox = Lane("outbox", self.commands.put, self._now_s)
        self.uplink: Lane | None = None
        self.downlink: Lane | None = None
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

    def _send(self, msg: P.Command | P.Report, payload: torch.Tensor | None = None) -> None:
        """Queue a message to the server (sent in order by the outbox thread;
        the tensors are never changed in place, so they are not copied). With
        sharded servers a push's other ranges leave for their servers from
        the same thread, just before it: every server numbers a worker's
        pushes as rank 0 does."""
        if payload is not None and payload.device.type != "cpu":
            payload = payload.cpu()  # (the wire is gloo: host memory; a model or a push leaves the GPU here)
        if self.ranges is not None and payload is not None:
            self.outbox.submit(lambda: self._write_sharded(msg, payload))
            return
        tensors = self.channel.pack_message(msg, payload)
        self.outbox.submit(lambda: self._write(tensors))

    def _write_sharded(self, msg: P.Command | P.Report, payload: torch.Tensor) -> None:
        assert self.ranges is not None
        first, sends = split_push(payload, self.ranges, self.sc.cluster.workers)
        self._shard_sends = unfinished(self._shard_sends) + sends
        self._write(self.channel.pack_message(msg, first))

    def _write(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            self.link.send(t)

    def flush(self) -> None:
        """Wait until every queued message has left (before the process group closes)."""
        self.outbox.drain()

    def _send_report(self, done: Done, payload: torch.Tensor | None) -> None:
        """A command's report, with the transfer time no step overlapped since
        the previous one; a push ends when its payload has left."""
        comm_s = self.busy.take_comm_s(self._now_s())
        self._send(P.WorkDone(pulled=done.pulled, computed=done.computed, pushed=done.pushed, comm_s=comm_s), payload)
        if done.pushed is not None:
            self.outbox.submit(lambda: self.busy.transfer(False, self._now_s()))

    def _whole(self, model: torch.Tensor | PendingModel | None) -> torch.Tensor | None:
        """A pulled model, its ranges from the sharded servers assembled (they were on their way)."""
        return model.whole() if isinstance(model, PendingModel) else model

    # ------------------------------------------------------------- loop
    @property
    def collective(self) -> bool:
        """Whether this run's rounds are all-reduced among the workers (the collective path)."""
        return self.state.collective

    @collective.setter
    def collective(self, on: bool) -> None:
        self.state.collective = on

    def serve(self) -> None:
        if self.background:
            self.uplink = Lane("uplink", self.commands.put, self._now_s)
            self.downlink = Lane("downlink", self.commands.put, self._now_s)
        threading.Thread(target=self._read_commands, daemon=True, name="control").start()
        while (step := self.until_step()) is not None:
            self._compute(*step)
            self._save_local_state()
        self.flush()

    def until_step(self) -> tuple[P.StepOrder, Done, torch.Tensor | None] | None:
        """Do what the server's commands ask (:class:`~hetsync.runtime.worker_state.WorkerState`)
        until one orders a step: returns it, with what its transfers did and
        their payload (reported with the step); None once ``EXIT`` has come.
        A continuous step goes on at once when no command is waiting."""
        while True:
            self.free_since_s = self._now_s()  # a command sent earlier waited for this moment
            again = self.state.again()
            if again is not None and self.commands.empty():
                # backpressure: a step nonstop waits while its reports queue up
                # (the server reads at most REPORTS_QUEUED_MAX ahead of its loop)
                self.outbox.wait_below(OUTBOX_MAX)
                self._maybe_die()
                return again, Done(), None
            cmd, payload = self._next()
            match self.state.receive(cmd):
                case ws.Exit():
                    return None
                case ws.Reset(cmd=reset):
                    assert payload is not None
                    self._reset(reset, payload)
                case ws.Bye():
                    self._bye()
                case ws.Snapshot(cmd=snapshot):
                    self._snapshot(snapshot)
                case ws.ZeroRound():
                    self._zero_round()
                case ws.Transfers(cmd=work):
                    self._maybe_die()
                    self._send_report(*self._transfers(work, payload, free_since_s=self.free_since_s))
                case ws.Step(cmd=work, step=step):
                    self._maybe_die()
                    done, out = self._transfers(work, payload, free_since_s=self.free_since_s)
                    return step, done, out

    def _next(self) -> tuple[P.Command, torch.Tensor | PendingModel | None]:
        """The next command for the main thread, in order (the control thread reads them)."""
        item = self.commands.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def _bye(self) -> None:
        """The run is over (``STOP``): nothing of it reports after this ``BYE``."""
        if self.reducer is not None and self.reducer.active:
            with self._group_may_break():
                self.reducer.mean()  # (the last round: every member finishes it, so the group stays in step)
        self._save_local_state(every=False)
        for lane in (self.uplink, self.downlink):
            if lane is not None:
                lane.drain()  # transfers in flight report first
        self.comm.quiesce()
        self._send(P.Bye())

    def _read_commands(self) -> None:
        """The control thread: peer-to-peer commands and FETCH at once,
        standalone pushes and pulls to their lanes, the rest to the main
        thread in order."""
        try:
            while True:
                cmd, first = self.channel.recv_command(self.link)
                # sharded servers: the model's other ranges, received as this command is read (in order)
                payload = (
                    PendingModel(first, self.ranges, self.sc.cluster.workers)
                    if self.ranges and first is not None
                    else first
                )
                if isinstance(cmd, P.MulticastCmd | P.ExpectCmd | P.AllReduceCmd):
                    self._maybe_die()  # a death in the middle of an exchange
                if self.collective and _brings_model(cmd, first):
                    self.group_broken.set()  # the server has fallen back to path ps
                match cmd:
                    case P.MulticastCmd(exchange=e, receivers=receivers):
                        self.comm.multicast(e, receivers)
                    case P.ExpectCmd(exchange=e, sender=sender):
                        self.comm.expect(e, sender)
                    case P.AllReduceCmd(exchange=e, ring=ring):
                        self.comm.allreduce(e, ring)
                    case P.AbortCmd(exchange=e):
                        self.comm.abort(e)
                    case P.LeaveGroupCmd():
                        self.group_broken.set()  # a round still waited for ends with GroupBroken
                    case P.FetchCmd():
                        model, weight = self._fetch()
                        self._send(P.Fetched(weight=weight), model)  # as it is: a step in progress is not in it
                    case P.WorkCmd(push=push, pull=None, step=None) if push and self.uplink is not None:
                        # a fragment's delta is taken as the command is read: the worker is between two
                        # steps (the policy answered one and has not ordered the next), as in the simulator
                        taken = self._take_fragment(f) if (f := cmd.push_fragment) is not None else None
                        self.uplink.submit(lambda c=cmd, t=taken: self._background(c, None, self.uplink, t))
                    case P.WorkCmd(push=None, pull=pull, step=None) if pull and self.downlink is not None:
                        self.downlink.submit(lambda c=cmd, m=payload: self._background(c, m, self.downlink))
                    case _:
                        self.commands.put((cmd, payload))
                        if isinstance(cmd, P.ExitCmd):
                            return
        except Exception as e:  # the server is gone
            self.commands.put(e)

    def _fetch(self) -> tuple[torch.Tensor | None, float]:
        """The model as it is now, and its push-sum weight (``FETCH``); on the
        collective path the model of the last round (the global model: local
        steps since then are not in it, as they are not in the server's)."""
        if (self.collective or self.fell_back) and self.global_model is not None:
            return self.global_model, 1.0  # (after the group broke: what the server's fall-back asks for)
        return self.comm.fetch()

    def _reset(self, cmd: P.ResetCmd, pulled: torch.Tensor | PendingModel) -> None:
        model = self._on_device(self._whole(pulled))
        assert model is not None
        self.collective = cmd.collective
        self.fell_back = False
        if self.collective:
            self._start_rounds(cmd.run)
        self.global_model, self.global_version = model, cmd.version
        self._rounds_saved = None
        self.epoch = cmd.epoch_s
        self.model = LocalModel(
            model, cmd.version, stepper=self._stepper(cmd.run), push_sum=self.sc.job.p2p_mixing == "push-sum"
        )
        self.held = []  # (fragments the last run pulled and never merged are its, not this one's)
        self.fragment_outer = {}
        policy = self._policy(cmd.run)
        self.outer_for_fragments = outer_stepper(self.sc, policy) if policy is not None and policy.fragmented else None
        self._state_saved_s = 0.0
        if self.resume and cmd.first_step > 0:  # a resumed run
            self._load_local_state()
        self.timing = TimingModel(self.sc)  # fresh streams: every run sees the same noise
        self.busy = BusyClock(self._now_s())
        for lane in (self.uplink, self.downlink):
            if lane is not None:
                lane.free_since_s = self._now_s()  # (the run's clock starts now)
        self.steps = cmd.first_step  # 0, or where a resumed run's checkpoint left this worker
        self.model.local_clock = self.steps
        self._reset_data(cmd.drawn)
        self.p2p = cmd.p2p
        self.comm.reset()
        self._send(P.ResetDone())

    def _start_rounds(self, run: int) -> None:
        """A collective run starts: the reducer (built once) and fresh copies of the server's optimizers."""
        if self.reducer is None:
            self.reducer = RoundReducer(
                [self.workload.n_params], group=workers_group(), broken=self.group_broken, device=self.device
            )
        policy, self.reducer.expected = self._round_kind(run)
        self.replica = gradient_stepper(self.sc)
        self.outer_replica = outer_stepper(self.sc, policy) if policy is not None else None

    def _round_kind(self, run: int) -> tuple[Policy | None, float]:
        """What run ``run``'s rounds reduce (sets :attr:`round_kind`: its
        policy's ``collective_kind``), and a full round's Σ weights (see
        RoundReducer): each gradient weighs its batch, each delta 1."""
        policy = self._policy(run)
        self.round_kind = policy.collective_kind if policy is not None else "grad"
        per_worker = self.sc.job.batch_size if self.round_kind == "grad" else 1
        return policy, float(self.sc.cluster.workers * per_worker)

    def _contribute(self, update: torch.Tensor | None, weight: int) -> None:
        """This step's gradient (weighted by its samples) or the round's delta
        (weight 1) goes into the round's all-reduce."""
        assert self.reducer is not None
        with self._group_may_break():
            self.reducer.begin(weight)
            self.reducer.add_flat(update)

    @contextlib.contextmanager
    def _group_may_break(self) -> Iterator[None]:
        """A collective that fails (a member of the workers' group died) ends
        this worker's collective path: the round is lost, the model stays as
        it was, and the server, which has seen the death, goes on through
        rank 0 (its next pull brings the model)."""
        try:
            yield
        except RuntimeError as e:
            if self.reducer is None or not _group_failure(e):
                raise
            print(
                f"worker {self.w}: the workers' group broke ({str(e).splitlines()[0][:120]}); on to path ps",
                file=sys.stderr,
                flush=True,
            )
            self._leave_collective()

    def _apply_round(self, lr: float, version: int) -> int:
        """The round this worker contributed to is reduced: take its step on
        the local model, now at ``version`` — the server's optimizer's at
        ``lr`` on the mean gradient, or (delta rounds) the outer optimizer's
        on the mean delta from the model of the last round, as the server
        would (:meth:`hetsync.ledger.Ledger.apply`)."""
        assert self.reducer is not None and self.replica is not None
        if not self.reducer.active:
            raise RuntimeError(f"worker {self.w}: told to apply a round it has no part in")
        with self._group_may_break():
            mean = self.reducer.mean()
            if self.round_kind == "delta":
                new = self._outer_step(mean)
            else:
                new = self.replica.descend(self.model.local, mean, lr)  # type: ignore[arg-type]
            with self._round_applied:
                self.global_model, self.global_version = new, version
                self._round_applied.notify_all()
            return self.model.load(new, version)
        return 0  # (the round is lost: the server's next pull brings the model)

    def _snapshot(self, cmd: P.SnapshotCmd) -> None:
        """A checkpoint on the collective path: once this worker's model is at
        ``cmd.version`` (the round's pull may still be on its lane), its copies
        of the server's optimizers are saved beside the checkpoint (a resumed
        run loads them) and, if asked, the model goes to the server. A worker
        that does not reach the version within its timeout leaves it: the
        server keeps its last checkpoint."""
        with self._round_applied:
            reached = self._round_applied.wait_for(lambda: self.global_version >= cmd.version, timeout=60.0)
            model, version = self.global_model, self.global_version
        if not reached or version != cmd.version or not self.collective:
            return
        assert self.replica is not None
        self._rounds_saved = {
            "version": version,
            "replica": copy.deepcopy(self.replica.state_dict()),
            "outer_replica": copy.deepcopy(self.outer_replica.state_dict()) if self.outer_replica is not None else {},
        }
        self._save_local_state(every=False)
        if cmd.send_model:
            self._send(P.Snapshot(version=version), model)

    def _outer_step(self, mean_delta: torch.Tensor) -> torch.Tensor:
        """The last round's model moved by the round's mean delta: plain
        averaging, or the outer optimizer's step on the pseudo-gradient −Δ̄."""
        outer, base = self.outer_replica, self.global_model
        assert outer is not None and base is not None
        if outer.plain:
            return torch.add(base, mean_delta)
        return outer.descend(base, mean_delta.neg_(), outer.cfg.lr, clip=False)

    def _leave_collective(self) -> None:
        assert self.reducer is not None
        self.reducer.abandon()
        self.fell_back = True  # (first: the control thread's FETCH may look between the two)
        self.collective = False

    def _zero_round(self) -> None:
        """Join a round with zero weight (this worker computes nothing in it)."""
        assert self.reducer is not None
        with self._group_may_break():
            if not self.reducer.active:
                self.reducer.begin(0)
            self.reducer.weight = 0.0
            self.reducer.mean()

    def _reset_data(self, drawn: int) -> None:
        """This worker's shard of the workload's data, positioned after the
        ``drawn`` samples a resumed run had already used."""
        self.shard = self.workload.make_shards(self.sc.cluster.workers, self.sc.job.seed, self.sc.job.label_skew)[
            self.w
        ].to(self.device)
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

    def _policy(self, run: int) -> Policy | None:
        """The run's policy, built here only to ask it (None: no spec for that run)."""
        if not 0 <= run < len(self.specs):
            return None
        return make_policy(self.specs[run], policy_context(self.sc))

    def _stepper(self, run: int) -> Stepper | None:
        """A fresh optimizer for this run's local steps (the policy's recipe or
        the scenario's)."""
        self._state_path = None
        policy = self._policy(run)
        if policy is None:
            return None
        stepper = local_steppers(self.sc, policy)[0]
        if self.checkpoint_dir is not None and (not stepper.plain or self.collective):
            self._state_path = worker_state_path(self.checkpoint_dir, policy.label, self.w)
        return stepper

    def _save_local_state(self, *, every: bool = True) -> None:
        """Write the local optimizer's state (atomically; ``every``: only if
        ``checkpoint_every_s`` has passed since the last time)."""
        path, stepper = self._state_path, self.model.stepper
        if path is None or (every and self._now_s() - self._state_saved_s < self.checkpoint_every_s):
            return
        if stepper is None and self._rounds_saved is None:
            return
        self._state_saved_s = self._now_s()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        state = {"worker": self.w, "steps": self.steps, "stepper": stepper.state_dict() if stepper is not None else {}}
        torch.save(state | {"rounds": self._rounds_saved}, tmp)
        os.replace(tmp, path)

    def _load_local_state(self) -> None:
        """A resumed run: the local optimizer's state as this worker last
        saved it (none saved: it starts afresh, as the summary says)."""
        path, stepper = self._state_path, self.model.stepper
        if path is None or not path.exists():
            return
        try:
            saved = torch.load(path, weights_only=True)
            if stepper is not None:
                stepper.load_state_dict(saved["stepper"])
            rounds = saved.get("rounds")
            if self.collective and rounds is not None and rounds["version"] == self.global_version:
                self._load_rounds(rounds)
                self._rounds_saved = rounds
        except Exception as e:  # damaged, or another model's: start afresh rather than fail the run
            print(f"worker {self.w}: {path} not loaded ({str(e).splitlines()[0][:120]}); its optimizer starts afresh")

    def _load_rounds(self, rounds: dict[str, Any]) -> None:
        """The collective path: the copies of the server's optimizers, as of the checkpoint (:meth:`_snapshot`)."""
        assert self.replica is not None
        self.replica.load_state_dict(rounds["replica"])
        if self.outer_replica is not None:
            self.outer_replica.load_state_dict(rounds["outer_replica"])

    def _maybe_die(self) -> None:
        """Fault injection for tests and demos: an abrupt death, like kill -9,
        at the first command after ``kill_at_s`` (a step, or in peer-to-peer
        runs also a copy to send or receive, or an all-reduce)."""
        if self.kill_at_s is not None and self._now_s() >= self.kill_at_s:
            os.kill(os.getpid(), signal.SIGKILL)

    def _background(
        self,
        cmd: P.WorkCmd,
        model: torch.Tensor | PendingModel | None,
        lane: Lane | None,
        taken: tuple[float, PushPayload] | None = None,
    ) -> None:
        """A standalone push or pull, on its lane while the main thread computes
        (``taken``: a fragment's delta, taken already)."""
        assert lane is not None
        self._maybe_die()
        done, payload = self._transfers(cmd, model, free_since_s=lane.free_since_s, taken=taken)
        self._send_report(done, payload)

    def _compute(self, step: P.StepOrder, done: Done, payload: torch.Tensor | None) -> None:
        """The step, on this worker's shard; reported with the transfers before it (``done``, ``payload``)."""
        start, base = self._begin_step(step)
        x, y = self.shard.next_batch(step.batch_size)
        t0 = time.perf_counter()
        grad, _ = self.workload.gradient_on_device(self.model.local, x, y)  # (the loss is not read back)
        wait_for(self.step_devices)
        measured = time.perf_counter() - t0
        after = self._end_step(step, done, grad, start, base, measured)
        self._send_report(done, after if after is not None else payload)

    def _transfers(
        self,
        cmd: P.WorkCmd,
        pulled: torch.Tensor | PendingModel | None,
        *,
        free_since_s: float,
        taken: tuple[float, PushPayload] | None = None,
    ) -> tuple[Done, torch.Tensor | None]:
        """A command's standalone push and its pull (both before its step, if
        it has one); returns what they did and the push's payload. A pull
        starts when it was sent or when whoever carries it
        (``free_since_s``) became free."""
        done, payload = Done(), None
        if cmd.push_fragment is not None:
            payload = self._push_fragment(done, cmd.push_fragment, taken or self._take_fragment(cmd.push_fragment))
        elif cmd.push is not None:
            payload = self._push(done, cmd.push)
        if (pull := cmd.pull) is not None and pull.span is not None:
            self._pull_fragment(done, pull, pulled, free_since_s)
        elif pull is not None:
            started = max(pull.sent_s, free_since_s)
            self.busy.transfer(True, started)
            model = self._on_device(self._whole(pulled))
            self._throttle(started)
            with self.model_lock:  # a step in progress finishes on the loaded model
                if pull.apply_lr is not None:  # collective: the round's step, taken here
                    overwritten = self._apply_round(pull.apply_lr, pull.version)
                else:
                    if self.collective:  # a model came: the server has left the collective path (a member died)
                        self._leave_collective()
                    overwritten = self.model.load(model, pull.version)
            end = self._now_s()
            self.busy.transfer(False, end)
            done.pulled = P.Pulled(version=pull.version, start_s=started, end_s=end, overwritten=overwritten)
        return done, payload

    def _on_device(self, model: torch.Tensor | None) -> torch.Tensor | None:
        """A model that came over the wire (host memory), copied to this worker's device."""
        return model if model is None else model.to(self.device)

    def _throttle(self, started_s: float, nbytes: int | None = None) -> None:
        """Throttled: hold the transfer of ``nbytes`` (the model's) for the link's time."""
        Bps = link_Bps(self.sc, self.w, started_s, self.throttle)
        if Bps == float("inf"):
            return
        left = (self.nbytes if nbytes is None else nbytes) / Bps - (self._now_s() - started_s)
        if left > 0:
            time.sleep(left)

    def _begin_step(self, step: P.StepOrder) -> tuple[float, int]:
        """A step starts: in a peer-to-peer run the models that arrived are
        mixed in first, and where the command says so the fragments pulled.
        Returns its start time and the version it computes on."""
        if self.p2p:
            self.comm.mix_arrived()  # push-sum weights (hetsync.localmodel)
        if step.merge:
            self._merge_held()
        start = self._now_s()
        self.busy.compute(True, start)
        return start, self.model.base_version

    def _end_step(
        self,
        step: P.StepOrder,
        done: Done,
        grad: torch.Tensor | None,
        start: float,
        base: int,
        measured_s: float,
    ) -> torch.Tensor | None:
        """A step's computation is done (``measured_s`` of it): sleep the
        scenario's extra share, book it (a local step, or a gradient to
        push), fill ``done``, and push right after if the command says so;
        returns that push's payload."""
        extra = self.timing.extra_sleep_s(self.w, measured_s, start, paced_batch=step.batch_size if self.pace else None)
        if extra > 0:
            time.sleep(extra)
        committed = 0
        with self.model_lock:
            replaced = self.model.finish_step(grad, step.batch_size, base, step.local_lr, step.clock)
            if self.p2p:
                committed = self.model.commit_local()
        end = self._now_s()
        self.busy.compute(False, end)
        Bps = link_Bps(self.sc, self.w, end, self.throttle)
        done.computed = P.Computed(
            step=self.steps,
            batch_size=step.batch_size,
            base_version=base,
            start_s=start,
            end_s=end,
            replaced=bool(replaced),
            committed=committed,
            load=self.timing.load_factor(self.w, start),
            uplink_Bps=Bps,
            downlink_Bps=Bps,
        )
        self.steps += 1
        return self._push(done, step.push_after) if step.push_after is not None else None

    def _hyper(self) -> tuple[float, ...] | None:
        """The optimizer settings a gradient push carries (:class:`~hetsync.runtime.protocol.Pushed`):
        a training loop's own (:mod:`hetsync.loop`); None here, where the scenario's recipe is the server's."""
        return None

    def _push(self, done: Done, kind: str) -> torch.Tensor | None:
        """Take what the push carries and hold it for the link's time; the
        transfer ends when its report has been sent (:meth:`_send_report`)."""
        start = self._now_s()
        self.busy.transfer(True, start)
        with self.model_lock:
            push = self.model.take_push(kind)
        carried = self.collective
        if carried:  # into the round's all-reduce (it goes on while the report travels)
            self._contribute(push.payload, push.samples if push.kind == "grad" else 1)
        self._throttle(start)
        done.pushed = P.Pushed(
            kind=push.kind,  # type: ignore[arg-type]
            steps=push.steps,
            samples=push.samples,
            base_version=push.base_version,
            start_s=start,
            hyper=self._hyper() if push.kind == "grad" and not carried else None,
            carried=carried,
        )
        if carried:
            return None
        assert push.payload is not None
        return push.payload

    # ------------------------------------------------ fragments (Streaming DiLoCo)
    def _take_fragment(self, fragment: Fragment) -> tuple[float, PushPayload]:
        """The delta of ``fragment``'s range since the worker last merged it, and when it was taken."""
        with self.model_lock:
            return self._now_s(), self.model.take_fragment(fragment.lo, fragment.hi)

    def _push_fragment(self, done: Done, fragment: Fragment, taken: tuple[float, PushPayload]) -> torch.Tensor:
        """A fragment's push: its delta encoded at the fragment's width (the
        bytes that travel: :func:`hetsync.algos.quantize.encode`)."""
        start, push = taken
        self.busy.transfer(True, start)
        delta = push.payload if push.payload is not None else torch.zeros(fragment.size)
        message = torch.from_numpy(encode(delta.detach().cpu().numpy(), fragment.bits))
        self._throttle(start, message.numel())
        done.pushed = P.Pushed(
            kind="delta",
            steps=push.steps,
            samples=push.samples,
            base_version=push.base_version,
            start_s=start,
            fragment=fragment,
            nbytes=message.numel(),
        )
        return message

    def _pull_fragment(
        self, done: Done, pull: P.PullOrder, payload: torch.Tensor | PendingModel | None, free_since_s: float
    ) -> None:
        """A fragment's pull, held until a step merges it: its global values
        (float32), or the mean of its deltas as it travelled, through this
        worker's copy of the fragment's outer optimizer from the global values
        it last merged there (the server's step, taken here)."""
        assert pull.span is not None and isinstance(payload, torch.Tensor)
        lo, hi = pull.span
        started = max(pull.sent_s, free_since_s)
        self.busy.transfer(True, started)
        self._throttle(started, payload.nbytes)
        with self.model_lock:
            values = payload
            if pull.mean_bits:
                values = self._outer_step_of(lo, hi, torch.from_numpy(decode(payload.numpy(), hi - lo, pull.mean_bits)))
            self.held.append((lo, hi, values, pull.keep, pull.version))  # (merge_fragment copies it to the device)
        end = self._now_s()
        self.busy.transfer(False, end)
        done.pulled = P.Pulled(version=pull.version, start_s=started, end_s=end, span=(lo, hi), bits=pull.mean_bits)

    def _outer_step_of(self, lo: int, hi: int, mean: torch.Tensor) -> torch.Tensor:
        """The fragment's new global values: the ones this worker last merged
        there moved by ``mean`` through its copy of the fragment's outer optimizer."""
        if self.outer_for_fragments is None or self.model.ref is None:
            raise RuntimeError(f"worker {self.w}: a fragment's mean came, and this run moves no fragments")
        stepper = self.fragment_outer.get((lo, hi))
        if stepper is None:
            stepper = self.fragment_outer[(lo, hi)] = fragment_stepper(self.outer_for_fragments)
        base = self.model.ref[lo:hi].detach().cpu()  # (the server's values before the step)
        return outer_fragment_step(stepper, base, mean)

    def _merge_held(self) -> None:
        """The step merges the fragments pulled so far (``StepOrder.merge``)."""
        with self.model_lock:
            if not self.held:
                raise RuntimeError(f"worker {self.w}: told to merge, and no fragment pull has arrived")
            device = self.model.local.device if self.model.local is not None else None
            for lo, hi, values, keep, version in self.held:
                self.model.merge_fragment(lo, hi, values.to(device), keep, version)
            self.held.clear()


@dataclass(slots=True)
class Done:
    """What a command did so far: the parts of its :class:`~hetsync.runtime.protocol.WorkDone`."""

    pulled: P.Pulled | None = None
    computed: P.Computed | None = None
    pushed: P.Pushed | None = None


def _brings_model(cmd: P.Command, payload: torch.Tensor | None) -> bool:
    """Whether ``cmd`` is a pull that carries the model (on the collective path
    only the server's fall-back to path ps sends one)."""
    return isinstance(cmd, P.WorkCmd) and cmd.pull is not None and cmd.pull.apply_lr is None and payload is not None


def _group_failure(e: BaseException) -> bool:
    """Whether ``e`` is gloo's word that a peer of a collective is gone, or
    the server's (:class:`~hetsync.runtime.collective.GroupBroken`)."""
    if isinstance(e, GroupBroken):
        return True
    text = str(e).lower()
    return "gloo" in text or "connection" in text or "pair" in text
