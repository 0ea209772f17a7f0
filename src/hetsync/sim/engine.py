"""The virtual-time simulator: a deterministic discrete-event loop that runs
a policy against a timing model and a fluid network, with real SGD math.

Only the clock is virtual. Every ``Compute`` runs a real forward/backward
pass on the worker's real local model and mini-batch; every ``Apply`` really
updates the global model; pulls really hand out the model as it was when
the pull started. The event heap is keyed on ``(time, priority, sequence)``
(as in SimPy), so equal-time events resolve in a fixed order and the same
scenario and seed give a byte-identical trace.

Tensors are never modified in place: an update makes a new global tensor,
so a pull can hand out a reference instead of a copy, and a worker's local
model stays valid however the server moves on.

What is not about the clock or the network — checking the policy's
commands, the step budget, trace records, counters and the events the facts
become — is the driver core (:mod:`hetsync.driver.core`), shared with the
torch.distributed runtime; this module dispatches commands onto the virtual
data plane and reports what happens there as facts.

Peer-to-peer policies (``topology = "p2p"``) run on the same loop: a
``Multicast`` is one flow per receiver from the sender's node, an
``AllReduce`` is a ring of 2(k−1) phases of k flows of 1/k of the model each,
and a step is applied to the worker's own model as it ends. The accuracy is
that of the push-sum average of the workers' models (hetsync.localmodel). ``link_load`` in the scenario
changes the workers' link capacities over time, for both topologies.

Data paths (``path``, :mod:`hetsync.driver.paths`). On ``ps`` (the default)
a parameter-server policy's push is a flow from the worker's node into the
server's and a pull one out of it, so a round's pushes are an incast on the
server's downlink. On ``collective`` (policies with ``Policy.collective``:
BSP, LB-BSP) a round's bulk bytes never reach the server, as on the
runtime's collective path: a step's push is held at once and the policy hears
``PushArrived`` when the step's small report reaches the server (at once, or
``latency_s`` later with ``control_latency``); the ``Apply`` of a round starts
a ring all-reduce of the model among the workers whose pushes it applies (the
machinery of p2p's ``AllReduce``: 2(k−1) phases of k flows of 1/k of the
model), and a pull carries no model but completes when that ring has ended
(and its small command has arrived). The ledger's math is the same on both
paths — every worker ends a round holding the model after the ``Apply`` — so
only the timing and the bytes differ.

Sharded servers (``servers`` S > 1, :mod:`hetsync.driver.shards`, as
``hetsync run --servers S`` runs them): the model is cut into S contiguous
ranges held by S server nodes — server 0 is node 0 (``SERVER``), server k ≥ 1
node N + k after the N workers (the runtime's rank), each with the scenario's
server link. A push is S flows, range k (its share of the model's bytes)
from the worker's node into server k's, and has arrived when all S have; a
pull is S flows out of the servers, done when all S are. The bytes counted
are the model's, as with one server, and the math is the ledger's on the
whole model (the S servers' S optimizers over S ranges take the step one
takes over the whole). The server's messages (``server_s_per_message``)
stay one queue, rank 0's: it still hears every report and sends every
command, and each other server handles its range of a push or a pull in
parallel with rank 0, so a message costs one service time, not S. What
shards cannot carry is refused as the runtime refuses it (collective path,
clip_norm, p2p, delay compensation).

Batched math (the default): a step's gradient depends only on the worker's
model when the step starts and on its batch, so the step is only registered
with a :class:`~hetsync.sim.batch.GradientBatcher` when it starts, and the
first step to end evaluates every step then in flight in one vmapped call.
``batch_math=False`` computes each gradient as its step starts, one call per
step; models ``vmap`` cannot run or cannot speed up (``Workload.batch_blocker``:
BatchNorm with running statistics, dropout, ops without a batching rule such
as CPU flash attention) get one call per step automatically. Both give the
same trace and the same parameters up to float rounding.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hetsync.algos.quantize import fragment_nbytes
from hetsync.driver import TimingModel, eval_interval_s, policy_context
from hetsync.driver.core import check_membership
from hetsync.driver.paths import check_path, uses_collective
from hetsync.driver.policycall import describe
from hetsync.driver.run import Run
from hetsync.driver.shards import check_servers, server_rank, shard_ranges
from hetsync.errors import BadInput, DeadlockError, PolicyError
from hetsync.ledger import HeldPush, wire
from hetsync.localmodel import LocalModel, weighted_average
from hetsync.optim import local_steppers
from hetsync.policies import make_policy
from hetsync.policies.base import (
    AllReduce,
    Apply,
    Command,
    Compute,
    Drop,
    Event,
    Forecast,
    ForecastDone,
    Fragment,
    Multicast,
    Policy,
    Pull,
    Push,
    SetTimer,
    TimerFired,
)
from hetsync.scenario import Scenario
from hetsync.sim.batch import GradientBatcher
from hetsync.sim.network import Network
from hetsync.trace import TraceWriter
from hetsync.workloads import Workload, make_workload

SERVER = 0  # network node of the server; worker w is node w + 1; sharded server k >= 1 node N + k

# heap priorities at equal times: link capacity changes, deliveries, step
# ends, leaves and joins, timers, and evaluation last so it sees every update
# of that instant. Capacity changes and evaluations alone do not keep a run
# going; leaves and joins do while steps are left to take.
_LINK, _NET, _COMPUTE, _TIMER, _EVAL = -1, 0, 1, 2, 3
_SERVE = 2.5  # the server's messages (server_s_per_message, control_latency): after timers, before evaluation
_MEMBER = 1.5  # a worker leaves or joins (membership): after the steps that end at that instant


@dataclass(slots=True)
class _Worker:
    index: int
    model: LocalModel
    comm: int = 0  # transfers in flight that involve this worker
    since_s: float = 0.0  # when the current compute/comm/wait state began
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    steps: int = 0
    # the step in progress
    inflight: Compute | None = None
    inflight_grad: torch.Tensor | None = None
    inflight_start_s: float = 0.0
    inflight_base: int = 0
    # p2p: (model, push-sum weight) copies received, not yet mixed
    inbox: list[tuple[torch.Tensor | None, float]] = field(default_factory=list)
    # fragment pulls that have arrived, not yet merged: (fragment, its global values, keep, version)
    held: list[tuple[Fragment, torch.Tensor | None, float, int]] = field(default_factory=list)
    # membership: goes up each time the worker leaves; what was under way before (a step, a
    # transfer) carries the old value and is void when it ends
    epoch: int = 0


@dataclass(slots=True)
class _Exchange:
    """A multicast or an all-reduce in flight (p2p), or a round's ring (path collective)."""

    start_s: float
    workers: tuple[int, ...]  # sender first for a multicast; the ring for an all-reduce
    left: int  # flows of the multicast, or of the ring's current phase, not delivered
    phase: int = 0  # ring phase
    # a ring's end, when it is not p2p's averaging (path collective: the round's pulls complete)
    done: Callable[[_Exchange], None] | None = None
    ended: bool = False
    waiting: list[_Transfer] = field(default_factory=list)  # path collective: pulls waiting for the ring
    void: bool = False  # a member left while it ran (membership): it never completes


@dataclass(slots=True)
class _Transfer:
    kind: str  # "push", "pull", "send" (p2p model copy) or "ring" (all-reduce chunk)
    worker: int
    start_s: float
    nbytes: int
    push_id: int = -1
    snapshot: torch.Tensor | None = None
    weight: float = 1.0  # send: the push-sum weight the copy carries
    version: int = 0
    then: Compute | None = None
    peer: int = -1  # send / ring: the receiving worker
    exchange: _Exchange | None = None
    fragment: Fragment | None = None  # push / pull of one range of the model (Streaming DiLoCo)
    keep: float = 0.0  # a fragment pull: the share of the worker's own values its merge keeps
    parts: int = 0  # sharded servers: the transfer's flows not yet delivered (0: one flow)
    # membership: the worker's (and a send's receiver's) epoch when the transfer started (-1: not yet)
    epoch: int = -1
    peer_epoch: int = -1


@dataclass
class RunResult:
    summary: dict[str, Any]
    params: torch.Tensor | None = field(repr=False, default=None)


class Simulation:
    """One policy on one scenario. ``run()`` returns the summary record.

    ``progress`` is called now and then with the fraction done (0..1) and
    the policy in force when a switch note named it (``auto→lb-bsp``), else
    ``""`` (:meth:`~hetsync.driver.core.DriverCore.policy_status`).
    ``math=False`` skips the gradient math (the timing and the protocol
    still run) — for measuring the event loop alone. ``batch_math=False``
    computes one gradient per call as each step starts instead of batching
    the steps in flight (see the module docstring). ``path``: the data path
    modelled, ``ps`` or ``collective`` (BadInput for a policy that cannot use
    it; see the module docstring). ``servers``: the sharded servers holding
    the model's ranges (1: the server alone; BadInput for what they cannot
    carry; see the module docstring).
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: str,
        *,
        trace_path: Path | None = None,
        math: bool = True,
        progress: Callable[[float, str], None] | None = None,
        workload: Workload | None = None,
        batch_math: bool = True,
        path: str = "ps",
        servers: int = 1,
        initial_model: torch.Tensor | None = None,
    ) -> None:
        if not scenario.timing.resolved:
            raise BadInput(
                f"scenario {scenario.name!r}: its step cost is 'measured' and not timed yet; the simulator times "
                "nothing: resolve it where you load the scenario, with hetsync.steptime.resolve_measured(scenario) "
                "(hetsync.runner.compare and hetsync.sim.engine.simulate do)"
            )
        n = scenario.cluster.workers
        self.path = check_path(path)
        self.n = n
        self.math = math
        self.progress = progress
        self.workload = workload or make_workload(scenario.job.workload, **scenario.job.workload_args)
        scenario.stop.target.direction_for(self.workload.name, self.workload.metrics)  # BadInput: a metric it lacks
        self.sc = scenario
        self.nbytes = scenario.job.model_bytes if scenario.job.model_bytes is not None else self.workload.model_nbytes
        self.policy: Policy = make_policy(
            policy, policy_context(scenario, self.nbytes, getattr(self.workload, "param_sizes", ()))
        )
        self.label = self.policy.label
        self.p2p = self.policy.topology == "p2p"
        self.collective = uses_collective(self.path, self.policy)  # rounds all-reduced among the workers
        check_servers(servers, scenario, [self.policy], path=self.path, driver="sim")
        check_membership(scenario, self.policy, driver="sim")
        if scenario.cluster.membership and self.collective:
            raise BadInput(
                f"{self.label}: the scenario's membership (workers that leave and join) is not modelled on "
                "path=collective yet; run it on path=ps"
            )
        self.servers = servers
        # sharded servers: each server's node and range of the model ([] : the server alone)
        self._server_ranges = (
            [(server_rank(k, n), r) for k, r in enumerate(shard_ranges(self.workload.n_params, servers))]
            if servers > 1
            else []
        )
        self._round: _Exchange | None = None  # path collective: the last round's ring (ended or not)
        self.timing = TimingModel(scenario)
        bw = [b / self._link_factor(w, 0.0) for w, b in enumerate(scenario.cluster.bandwidth_Bps)]
        more = (scenario.cluster.server_Bps,) * (servers - 1)  # sharded servers 1 … S−1: nodes N+1 … N+S−1
        self.net = Network(
            uplink_Bps=(scenario.cluster.server_Bps, *bw, *more),
            downlink_Bps=(scenario.cluster.server_Bps, *bw, *more),
            latency_s=scenario.cluster.latency_s,
        )
        self.trace = TraceWriter(trace_path)
        self.trace_path = trace_path

        theta = None
        if math:
            # (a forecast starts from the model of the run that asked: hetsync.sim.forecast)
            theta = initial_model.clone() if initial_model is not None else self.workload.init_params(scenario.job.seed)
            self.shards = self.workload.make_shards(n, scenario.job.seed, scenario.job.label_skew)
        # None: one gradient call per step, as it starts
        self.batcher = (
            GradientBatcher(self.workload) if math and batch_math and self.workload.batch_blocker is None else None
        )
        self.wiring = Run(scenario, self.policy, self.workload, theta, self.trace, plane=self, path=self.path)
        self.ledger, self.core = self.wiring.ledger, self.wiring.core
        self.workers = [
            _Worker(index=i, model=LocalModel(theta, stepper=stepper, push_sum=scenario.job.p2p_mixing == "push-sum"))
            for i, stepper in enumerate(local_steppers(scenario, self.policy, n))
        ]
        self.computing = self.core.computing  # workers with a step in progress
        # the server's messages (a parameter server only): its time per message, served in order,
        # and whether commands and reports travel latency_s; both off = today's free control plane
        self._messages = not self.p2p and (
            scenario.cluster.server_s_per_message > 0 or scenario.cluster.control_latency
        )
        self._server_free_s = 0.0  # when the server has handled every message booked so far

        self.now = 0.0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._live = 0  # heap entries other than evaluations and capacity changes
        # The network's next wake-up, kept out of the heap (one is pending at a time); inf: none.
        self._net_at = float("inf")  # (math is the argument here)
        self._net_dirty = False  # flows started since the network was last read
        # membership (scenario key): who is in the run now, and what the leavers took with them
        self.present = [True] * n
        self._members = bool(scenario.cluster.membership)  # (else none of this is kept)
        self.lost_steps = 0  # computed steps a leaver took with it (unpushed, or pushes on their way)
        self._pushing: dict[int, set[int]] = {}  # worker -> its pushes on their way to the server
        self._rings: list[_Exchange] = []  # the p2p all-reduces in flight
        self._members_pending = 0  # leaves and joins not yet played
        self.stop_reason = "drained"
        self.events = 0
        self.eval_time_s = 0.0  # host time spent evaluating (part of the bookkeeping, not of the math)

    def _link_factor(self, worker: int, now_s: float) -> float:
        load = self.sc.cluster.link_load
        return load.factor_at(worker, now_s) if load is not None else 1.0

    # ------------------------------------------------------------ heap
    def _schedule(self, at_s: float, prio: int, payload: Any) -> None:
        self._seq += 1
        if prio != _EVAL and prio != _LINK and prio != _MEMBER:  # (_MEMBER: see _loop)
            self._live += 1
        heapq.heappush(self._heap, (at_s, prio, self._seq, payload))

    def _schedule_net(self) -> None:
        """Re-read the network's next delivery, once per handled event: flows
        started at one instant (a broadcast) cost one re-share, not one each.
        The wake-up it replaces is dropped (the loop once kept superseded
        wake-ups in its heap, and a run that drained went on, evaluating,
        until the last of them)."""
        self._net_dirty = False
        self._net_at = self.net.next_event_s()

    # ----------------------------------------------------- worker states
    def _settle(self, w: _Worker, *, computing: bool | None = None) -> None:
        """Book the time since the worker's last state change (``computing``:
        what it was doing, when the core has already moved on)."""
        dt = self.now - w.since_s
        if w.index in self.computing if computing is None else computing:
            w.compute_s += dt
        elif w.comm:
            w.comm_s += dt
        else:
            w.wait_s += dt
        w.since_s = self.now

    # ---------------------------------------------------------- commands
    # ------------------------------------------- the data plane (driver.run.DataPlane)
    def apply(self, cmd: Apply) -> None:
        members = None
        if self.collective:  # the round its workers all-reduce (the run has checked it is the round's mean)
            pushes = self.ledger.pushes
            members = tuple(sorted({pushes[pid].worker for pid, _ in cmd.contributions if pid in pushes}))
        t0 = time.perf_counter()
        self.ledger.apply(cmd, self.now)
        if not self.math:
            self.ledger.math_time_s -= time.perf_counter() - t0
        if members is not None:
            self._start_round(members)

    def drop(self, cmd: Drop) -> None:
        self.ledger.drop(cmd, self.now)

    def set_timer(self, cmd: SetTimer) -> None:
        self._schedule(max(cmd.at_s, self.now), _TIMER, cmd.tag)

    def forecast(self, cmd: Forecast) -> None:
        """Simulated at once, in no simulated time (a background process as
        fast as one can wish: hetsync.sim.forecast), answered as the next event."""
        from hetsync.sim import forecast

        answer = forecast.forecast(self.sc, self.workload, self.ledger.theta, cmd, self.now, simulation=Simulation)
        self._schedule(self.now, _TIMER, answer)

    def compute(self, cmd: Compute) -> None:
        w = self.workers[cmd.worker]
        led = self.ledger
        if not self.present[cmd.worker]:
            return  # a step for a worker that is not in the run: lost, as a command to a dead process
        if not self.core.start_step(cmd):
            return  # step budget spent: the worker stays idle and the run drains
        self._settle(w, computing=False)  # until now it was not computing
        duration = self.timing.step_duration_s(cmd.worker, cmd.batch_size, self.now)
        if w.inbox:
            t0 = time.perf_counter()
            w.model.mix(w.inbox)
            w.inbox = []
            led.math_time_s += time.perf_counter() - t0
        if cmd.merge:
            self._merge(w)
        if self.math:
            t0 = time.perf_counter()
            shard = self.shards[cmd.worker]
            if self.batcher is not None and shard.indices is not None:
                # the batch as rows of the training split: gathered with its group's, in one go
                rows = shard.indices[shard.next_index(cmd.batch_size)]
                self.batcher.submit_rows(cmd.worker, w.model.local, rows)  # type: ignore[arg-type]
            else:
                x, y = shard.next_batch(cmd.batch_size)
                if self.batcher is not None:
                    self.batcher.submit(cmd.worker, w.model.local, x, y)  # type: ignore[arg-type]
                else:
                    w.inflight_grad, _ = self.workload.gradient(w.model.local, x, y)
            led.math_time_s += time.perf_counter() - t0
        w.inflight, w.inflight_start_s, w.inflight_base = cmd, self.now, w.model.base_version
        self._schedule(self.now + duration, _COMPUTE, (cmd.worker, w.epoch))

    def _merge(self, w: _Worker) -> None:
        """A step that merges: the fragment pulls that have arrived go into the worker's model."""
        if not w.held:
            raise PolicyError(f"{self.label}: worker {w.index} is told to merge, and no fragment pull has arrived")
        t0 = time.perf_counter()
        for fragment, values, keep, version in w.held:
            w.model.merge_fragment(fragment.lo, fragment.hi, values, keep, version)
        w.held = []
        self.ledger.math_time_s += time.perf_counter() - t0

    def _fragment_nbytes(self, fragment: Fragment) -> int:
        """Bytes of ``fragment``'s transfer: its share of the model's, at its width."""
        n = self.workload.n_params
        if fragment.hi > n:
            raise PolicyError(f"{self.label}: fragment [{fragment.lo}, {fragment.hi}) is beyond the model's {n} values")
        return fragment_nbytes(self.nbytes, n, fragment.lo, fragment.hi, fragment.bits)

    def _compute_done(self, payload: tuple[int, int]) -> None:
        index, epoch = payload
        w = self.workers[index]
        if epoch != w.epoch:
            return  # its worker left while it computed: the step never ends
        cmd, start_s, base = w.inflight, w.inflight_start_s, w.inflight_base
        assert cmd is not None
        step, b = w.steps, cmd.batch_size
        self._settle(w)
        w.inflight = None
        w.steps += 1
        t0 = time.perf_counter()
        if self.batcher is not None:
            grad = self.batcher.take(index)
        else:
            grad, w.inflight_grad = w.inflight_grad, None
        replaced = bool(
            # (the server's clock: no Apply can come between this step's start and end, its round waits for it)
            w.model.finish_step(grad, b, base, cmd.local_lr, self.ledger.clock if cmd.sync_clock else None)
        )  # an unpushed gradient replaced by a newer one
        committed = w.model.commit_local() if self.p2p else 0  # p2p: the step is the update
        if self.math:
            self.ledger.math_time_s += time.perf_counter() - t0
        bandwidth_Bps = self.sc.cluster.bandwidth_Bps[index] / self._link_factor(index, self.now)
        done = self.core.computed(
            index,
            start_s=start_s,
            end_s=self.now,
            now_s=self.now,
            step=step,
            batch_size=b,
            base_version=base,
            replaced=replaced,
            committed=committed,
            load=self.timing.load_factor(index, start_s),
            uplink_Bps=bandwidth_Bps,
            downlink_Bps=bandwidth_Bps,
        )
        carried = None
        if cmd.push is not None:  # pushed as the step ends, before the policy hears of it
            if self.collective:  # into the round's all-reduce: the policy hears of it with the step's report
                carried = self._hold_push(Push(worker=index, kind=cmd.push))
            else:
                self.push(Push(worker=index, kind=cmd.push))
        if cmd.continuous:  # the next step starts at once, before the policy hears of this one
            self.wiring.execute([cmd])
        self._report(done, served=cmd.push is None)
        if carried is not None:
            self._carried(carried)

    def push(self, cmd: Push) -> None:
        if not self.present[cmd.worker]:
            return  # (a command to a worker that is not in the run)
        tr = self._hold_push(cmd)
        if self.collective:
            self._carried(tr)
        else:
            self._transfer(tr)

    def _hold_push(self, cmd: Push) -> _Transfer:
        """The worker's push taken from its model and held by the ledger; the
        transfer that carries it to the server (path collective: none — its
        bytes go into the round's ring, and only the report travels)."""
        w = self.workers[cmd.worker]
        fragment = cmd.fragment
        if fragment is not None:  # one range of the delta, quantized as it travels
            nbytes = self._fragment_nbytes(fragment)
            t0 = time.perf_counter()
            p = w.model.take_fragment(fragment.lo, fragment.hi)
            p.payload = wire(p.payload, fragment.bits)
            if self.math:
                self.ledger.math_time_s += time.perf_counter() - t0
            rec = HeldPush(cmd.worker, p.kind, p.payload, p.base_version, p.steps, p.samples, fragment=fragment)
            push_id = self.ledger.hold(rec)
            if self._members:
                self._pushing.setdefault(cmd.worker, set()).add(push_id)
            return _Transfer(
                kind="push", worker=cmd.worker, start_s=self.now, nbytes=nbytes, push_id=push_id, fragment=fragment
            )
        t0 = time.perf_counter()
        try:
            p = w.model.take_push(cmd.kind)
        except ValueError as e:
            raise PolicyError(f"{self.label}: worker {cmd.worker} {e}") from None
        if self.math:
            self.ledger.math_time_s += time.perf_counter() - t0
        rec = HeldPush(cmd.worker, p.kind, p.payload, p.base_version, p.steps, p.samples)
        push_id = self.ledger.hold(rec)
        if self._members:
            self._pushing.setdefault(cmd.worker, set()).add(push_id)
        nbytes = 0 if self.collective else self.nbytes
        return _Transfer(kind="push", worker=cmd.worker, start_s=self.now, nbytes=nbytes, push_id=push_id)

    def pull(self, cmd: Pull) -> None:
        if not self.present[cmd.worker]:
            return  # (a command to a worker that is not in the run)
        tr = self._pull_transfer(cmd, self.now)
        if self.collective:
            self._await_round(tr)
        else:
            self._transfer(tr)

    def _pull_transfer(self, cmd: Pull, start_s: float) -> _Transfer:
        """The model as it is now, on its way to ``cmd.worker`` from ``start_s``
        (path collective: no bytes — the worker reduces the round itself — and
        the round's ring it waits for)."""
        if cmd.fragment is not None:  # one range of the global model, held by the worker until a step merges it
            fragment = cmd.fragment
            nbytes = self._fragment_nbytes(fragment)
            theta, version = self.ledger.theta, self.ledger.version
            return _Transfer(
                kind="pull",
                worker=cmd.worker,
                start_s=start_s,
                nbytes=nbytes,
                snapshot=theta[fragment.lo : fragment.hi] if theta is not None else None,
                version=version,
                then=cmd.then,
                fragment=fragment,
                keep=cmd.keep,
                epoch=self.workers[cmd.worker].epoch,
            )
        snapshot, version = self.ledger.send_model(cmd.worker)
        return _Transfer(
            kind="pull",
            worker=cmd.worker,
            start_s=start_s,
            nbytes=0 if self.collective else self.nbytes,
            snapshot=snapshot,
            version=version,
            then=cmd.then,
            exchange=self._round if self.collective else None,
            epoch=self.workers[cmd.worker].epoch,
        )

    def _transfer(self, tr: _Transfer) -> None:
        node = tr.worker + 1
        if tr.kind == "ring":  # the all-reduce books its members' time as a whole
            src, dst = node, tr.peer + 1
        else:
            if tr.epoch < 0:
                tr.epoch = self.workers[tr.worker].epoch
            busy = [tr.worker, tr.peer] if tr.kind == "send" else [tr.worker]  # a receiver is busy too
            if tr.kind == "send":
                tr.peer_epoch = self.workers[tr.peer].epoch
            for i in busy:
                w = self.workers[i]
                self._settle(w)
                w.comm += 1
            if tr.kind == "send":
                src, dst = node, tr.peer + 1
            elif tr.kind == "join" and self.p2p:  # the live workers' average, from one of them
                src, dst = tr.peer + 1, node
            else:
                if self._server_ranges:
                    self._shard_flows(tr)
                    return
                src, dst = (node, SERVER) if tr.kind == "push" else (SERVER, node)
        self.net.start_flow(self.now, src, dst, tr.nbytes, tr)
        self._net_dirty = True

    def _shard_flows(self, tr: _Transfer) -> None:
        """Sharded servers: push or pull ``tr`` as one flow per server whose
        range it covers, each of that range's share of its bytes; done when
        every one is delivered (``tr.parts`` counts them down)."""
        node, n = tr.worker + 1, self.workload.n_params
        fragment = tr.fragment
        flows = []
        for server, (lo, hi) in self._server_ranges:
            if fragment is None:  # the range's share of the model's bytes (they add up to them)
                nbytes = self.nbytes * hi // n - self.nbytes * lo // n
            elif max(lo, fragment.lo) < min(hi, fragment.hi):
                nbytes = fragment_nbytes(self.nbytes, n, max(lo, fragment.lo), min(hi, fragment.hi), fragment.bits)
            else:
                continue  # a fragment this server holds none of
            flows.append((node, server, nbytes) if tr.kind == "push" else (server, node, nbytes))
        tr.parts = len(flows)
        for src, dst, nbytes in flows:
            self.net.start_flow(self.now, src, dst, nbytes, tr)
        self._net_dirty = True

    def _transfer_done(self, tr: _Transfer) -> None:
        if tr.parts:  # sharded servers: one of its flows; done with the last
            tr.parts -= 1
            if tr.parts:
                return
        w = self.workers[tr.worker]
        if tr.kind == "ring":
            self.ledger.bytes_sent += tr.nbytes  # (the runtime counts a ring's bytes when it ends)
            self._ring_chunk_done(tr)
            return
        if tr.kind == "push" and self._members:
            self._pushing.get(tr.worker, set()).discard(tr.push_id)  # (none: it left, the push is void)
        if tr.epoch != w.epoch or (tr.kind == "send" and tr.peer_epoch != self.workers[tr.peer].epoch):
            self._void_done(tr)
            return
        self._settle(w)
        w.comm -= 1
        if tr.kind == "send":
            self._copy_done(tr)
            return
        if tr.kind == "join":
            self._joined(tr)
            return
        now = self.now
        if tr.kind == "push":
            if self._messages:  # it waits its turn at the server
                self._schedule(now, _SERVE, ("arrived", tr))
                return
            self._deliver(self.core.push_arrived(tr.push_id, start_s=tr.start_s, now_s=now, nbytes=tr.nbytes))
            return
        self._pulled(tr)

    def _pulled(self, tr: _Transfer) -> None:
        """``tr``'s pull is done: the worker holds the model it carried."""
        w = self.workers[tr.worker]
        now = self.now
        if tr.fragment is not None:  # held, not loaded: a step merges it (Compute.merge)
            w.held.append((tr.fragment, tr.snapshot, tr.keep, tr.version))
            overwritten = 0
        else:
            overwritten = w.model.load(tr.snapshot, tr.version)
        done = self.core.pulled(
            tr.worker,
            start_s=tr.start_s,
            end_s=now,
            now_s=now,
            version=tr.version,
            nbytes=tr.nbytes,
            overwritten=overwritten,
            fragment=tr.fragment,
        )
        self._report(done, served=tr.then is None)  # a pull with a step reports with the step (one message)
        if tr.then is not None:
            self.compute(tr.then)

    def _deliver(self, event: Event) -> None:
        commands = self.core.hear(event)
        if self._messages:
            self._send(commands)
        else:
            self.wiring.execute(commands)

    # ------------------------------------------------ the server's messages
    def _report(self, event: Event, *, served: bool = True) -> None:
        """A worker's report (a step done, a pull done) for the policy: at
        once, or with the server's messages modelled, after it has travelled
        (``control_latency``) and waited its turn at the server. A step that
        pushes reports with its push, and a pull followed by a step with the
        step (one message each, as the runtime's workers report): ``served``
        False."""
        if not self._messages:
            self._deliver(event)
            return
        travel_s = self.sc.cluster.latency_s if self.sc.cluster.control_latency else 0.0
        self._schedule(self.now + travel_s, _SERVE, ("arrived" if served else "heard", event))

    def _book_server(self) -> float:
        """The server takes one more message now or when it is free: when it is done with it."""
        self._server_free_s = max(self.now, self._server_free_s) + self.sc.cluster.server_s_per_message
        return self._server_free_s

    def _send(self, commands: list[Command]) -> None:
        """The policy's commands, the server's messages modelled: a step or a
        push command and a model (pull) leave one at a time as the server
        sends them; a command travels ``latency_s`` (``control_latency``), a
        model its transfer. Applying, dropping and timers are the server's
        own and take effect at once."""
        travel_s = self.sc.cluster.latency_s if self.sc.cluster.control_latency else 0.0
        for cmd in commands:
            if isinstance(cmd, Pull):
                self.core.check(cmd)
                if not self.present[cmd.worker]:
                    continue  # (a command to a worker that is not in the run)
                tr = self._pull_transfer(cmd, self._book_server())  # the model as the server takes the command
                # path collective: a command (no model) that reaches the worker after its travel
                self._schedule(tr.start_s + (travel_s if self.collective else 0.0), _SERVE, ("pull", tr))
            elif isinstance(cmd, (Compute, Push)):
                self.core.check(cmd)
                self._schedule(self._book_server() + travel_s, _SERVE, ("command", cmd))
            else:
                self.wiring.execute([cmd])

    def _serve(self, what: str, item: Any) -> None:
        """A server message's next stage (a ``_SERVE`` heap entry)."""
        if what == "arrived":  # at the server: it waits its turn, then the policy hears of it
            self._schedule(self._book_server(), _SERVE, ("heard", item))
        elif what == "heard":
            if isinstance(item, _Transfer):
                now = self.now
                item = self.core.push_arrived(item.push_id, start_s=item.start_s, now_s=now, nbytes=item.nbytes)
            self._deliver(item)
        elif what == "pull":
            if item.epoch != self.workers[item.worker].epoch or not self.present[item.worker]:
                return  # its worker left before the model went out
            if self.collective:
                self._await_round(item)
            else:
                self._transfer(item)
        elif isinstance(item, Compute):
            self.compute(item)
        else:
            self.push(item)

    # ----------------------------------------------------- peer to peer
    def multicast(self, cmd: Multicast) -> None:
        w = self.workers[cmd.worker]
        receivers = tuple(r for r in cmd.receivers if self.present[r])  # (copies to the absent are lost)
        if not self.present[cmd.worker] or not receivers:
            return
        ex = _Exchange(start_s=self.now, workers=(cmd.worker, *receivers), left=len(receivers))
        self.core.stats.multicast(len(receivers))
        share = w.model.split_weight(len(receivers))  # push-sum: every copy and the sender keep w/(k+1)
        for r in receivers:
            self._transfer(
                _Transfer(
                    kind="send",
                    worker=cmd.worker,
                    start_s=self.now,
                    nbytes=self.nbytes,
                    snapshot=w.model.local,
                    weight=share,
                    peer=r,
                    exchange=ex,
                )
            )

    def _copy_done(self, tr: _Transfer) -> None:
        peer = self.workers[tr.peer]
        self._settle(peer)
        peer.comm -= 1
        peer.inbox.append((tr.snapshot, tr.weight))
        ex = tr.exchange
        assert ex is not None
        now = self.now
        arrived = self.core.copy_arrived(tr.worker, tr.peer, start_s=tr.start_s, end_s=now, now_s=now, nbytes=tr.nbytes)
        ex.left -= 1
        if ex.left == 0:
            self.core.exchange_done(ex.start_s, now)
        self._deliver(arrived)

    def allreduce(self, cmd: AllReduce) -> None:
        if not all(self.present[i] for i in cmd.workers):
            return  # a member is not in the run: the all-reduce never completes (the policy knows it left)
        self.core.stats.allreduce(len(cmd.workers))
        ex = _Exchange(start_s=self.now, workers=cmd.workers, left=0)
        self._rings.append(ex)
        self._start_ring(ex)

    def _start_ring(self, ex: _Exchange) -> None:
        """The ring all-reduce ``ex`` starts now: its members are busy communicating until it ends."""
        for i in ex.workers:
            w = self.workers[i]
            self._settle(w)
            w.comm += 1
        self._ring_phase(ex)

    def _ring_phase(self, ex: _Exchange) -> None:
        ring = ex.workers
        k = len(ring)
        chunk = -(-self.nbytes // k)  # the model in k chunks, the last one padded
        ex.left = k
        for j in range(k):
            succ = ring[(j + 1) % k]
            self._transfer(
                _Transfer(kind="ring", worker=ring[j], start_s=self.now, nbytes=chunk, peer=succ, exchange=ex)
            )

    def _ring_chunk_done(self, tr: _Transfer) -> None:
        ex = tr.exchange
        assert ex is not None
        if ex.void:
            return  # a member left: the ring stops (its chunks in flight still cross the links)
        ex.left -= 1
        if ex.left:
            return
        ex.phase += 1
        k = len(ex.workers)
        if ex.phase < 2 * (k - 1):
            self._ring_phase(ex)
            return
        if ex.done is not None:
            ex.done(ex)
            return
        self._rings.remove(ex)
        t0 = time.perf_counter()
        models = [self.workers[i].model for i in ex.workers]
        weights = [m.weight for m in models]
        # push-sum: the weighted average, and the mean weight (both sums kept); equal weights stay as they are
        weight = None if all(x == weights[0] for x in weights) else math.fsum(weights) / len(weights)
        if models[0].local is not None:
            mean = weighted_average([m.local for m in models], weights)  # type: ignore[misc]
            for m in models:
                m.replace(mean, weight)
        elif weight is not None:
            for m in models:
                m.weight = weight
        self.ledger.math_time_s += time.perf_counter() - t0
        for i in ex.workers:
            w = self.workers[i]
            self._settle(w)
            w.comm -= 1
            self.core.reduced(i, start_s=ex.start_s, end_s=self.now, nbytes=self.nbytes, members=k)
        self._deliver(self.core.allreduce_done(ex.workers, start_s=ex.start_s, now_s=self.now))

    # -------------------------------------------------- path collective
    def _carried(self, tr: _Transfer) -> None:
        """A push that went into the round's all-reduce: the server hears of
        it with the step's report (at once, or after the report's travel and
        its turn at the server), and no bytes reach it."""
        if self._messages:
            travel_s = self.sc.cluster.latency_s if self.sc.cluster.control_latency else 0.0
            self._schedule(self.now + travel_s, _SERVE, ("arrived", tr))
            return
        self._deliver(self.core.push_arrived(tr.push_id, start_s=tr.start_s, now_s=self.now, nbytes=0))

    def _start_round(self, members: tuple[int, ...]) -> None:
        """An Apply closed a round: its members all-reduce the model in a ring
        (the runtime reduces their gradients: the same bytes). The pulls the
        policy gives from now on wait for it. One member, or none, has no one
        to reduce with: its round ends at once."""
        ex = _Exchange(start_s=self.now, workers=members, left=0, done=self._round_reduced)
        self._round = ex
        if len(members) < 2:
            ex.ended = True
            return
        self._start_ring(ex)

    def _round_reduced(self, ex: _Exchange) -> None:
        ex.ended = True
        k = len(ex.workers)
        for i in ex.workers:
            w = self.workers[i]
            self._settle(w)
            w.comm -= 1
            self.core.reduced(i, start_s=ex.start_s, end_s=self.now, nbytes=self.nbytes, members=k)
        waiting, ex.waiting = ex.waiting, []
        for tr in waiting:
            self._pulled(tr)

    def _await_round(self, tr: _Transfer) -> None:
        """A collective pull has reached its worker: done when its round's ring is."""
        ex = tr.exchange
        if ex is None or ex.ended:
            self._pulled(tr)
        else:
            ex.waiting.append(tr)

    def _average_model(self) -> None:
        """p2p: what is evaluated is the push-sum average of the workers'
        models, Σ w·x / Σ w (hetsync.localmodel)."""
        if self.p2p and self.math:
            members = [w for w in self.workers if self.present[w.index]] or self.workers  # (nobody: all)
            self.ledger.theta = weighted_average(
                [w.model.local for w in members],  # type: ignore[misc]
                [w.model.weight for w in members],
            )

    def _evaluate(self, at_s: float) -> None:
        t0 = time.perf_counter()
        self._average_model()
        self.ledger.evaluate(at_s)
        self.eval_time_s += time.perf_counter() - t0

    # ------------------------------------------------------- link load
    def _schedule_link_switches(self) -> None:
        load = self.sc.cluster.link_load
        if load is None:
            return
        for w in load.workers:
            at, factor = load.next_switch(w, 0.0)
            if at < math.inf:
                self._schedule(at, _LINK, (w, factor))

    def _link_switch(self, worker: int, factor: float) -> None:
        bw = self.sc.cluster.bandwidth_Bps[worker] / factor
        self.net.set_capacity(self.now, worker + 1, uplink_Bps=bw, downlink_Bps=bw)
        self._net_dirty = True
        load = self.sc.cluster.link_load
        assert load is not None
        at, nxt = load.next_switch(worker, self.now)
        if at < math.inf:
            self._schedule(at, _LINK, (worker, nxt))

    # -------------------------------------------------------- membership
    def _schedule_membership(self) -> None:
        """The scenario's leaves and joins, on the clock; the workers absent at
        the start are out of the run before its first command (their steps are
        never started) and the policy hears ``WorkerLeft`` for them at 0."""
        for a in self.sc.cluster.membership:
            if a.leave_s is not None:
                self._members_pending += 1
                self._schedule(a.leave_s, _MEMBER, ("leave", a.worker))
            if a.join_s is not None:
                self._members_pending += 1
                self._schedule(a.join_s, _MEMBER, ("join", a.worker))

    def _absent_at_start(self) -> list[int]:
        return sorted({a.worker for a in self.sc.cluster.membership if a.leave_s is None})

    def _member(self, what: str, index: int) -> None:
        self._members_pending -= 1
        if what == "leave":
            self._leave(index, "membership")
        else:
            self._join(index)

    def _leave(self, index: int, reason: str) -> None:
        """Worker ``index`` leaves now, as a process that dies: the step it is
        computing never ends (it was never computed: not counted, as a step a
        worker's own loop withdraws), its unpushed steps and its pushes still
        on their way are lost (computed, neither applied nor dropped: they
        stay outstanding, as on real processes, ``outstanding_detail.lost``),
        its transfers in flight and any all-reduce it is in never complete.
        Its place in the data stays where it is. The policy hears ``WorkerLeft``."""
        w = self.workers[index]
        self._settle(w)
        self.present[index] = False
        w.epoch += 1
        if index in self.computing:
            self.core.unstart_step(index)
            if self.batcher is not None:
                self.batcher.discard(index)
            w.inflight, w.inflight_grad = None, None
        lost = w.model.drop_local()
        for push_id in sorted(self._pushing.pop(index, set())):
            lost += self.ledger.lose(push_id)
        self.lost_steps += lost
        w.comm = 0
        w.inbox, w.held = [], []
        for ex in [ex for ex in self._rings if index in ex.workers]:
            self._void_ring(ex)
        self._deliver(self.core.left(index, self.now, reason))

    def _void_ring(self, ex: _Exchange) -> None:
        """An all-reduce one of whose members left: it never completes; the others stop waiting for it."""
        ex.void = True
        self._rings.remove(ex)
        for i in ex.workers:
            w = self.workers[i]
            if self.present[i]:
                self._settle(w)
                w.comm -= 1

    def _void_done(self, tr: _Transfer) -> None:
        """A transfer whose worker (or receiver) left while it ran has ended:
        nothing arrives; whoever is still there stops waiting for it."""
        ends = [(tr.worker, tr.epoch)] + ([(tr.peer, tr.peer_epoch)] if tr.kind == "send" else [])
        for i, epoch in ends:
            w = self.workers[i]
            if w.epoch == epoch:
                self._settle(w)
                w.comm -= 1
        ex = tr.exchange
        if tr.kind == "send" and ex is not None:
            ex.left -= 1
            if ex.left == 0:
                self.core.exchange_done(ex.start_s, self.now)

    def _join(self, index: int) -> None:
        """Worker ``index`` is back: it downloads the current global model on
        its link, as a pull (peer to peer: the live workers' push-sum average,
        from the first of them), then the policy hears ``WorkerJoined``. Its
        place in the data goes on where it was."""
        w = self.workers[index]
        self.present[index] = True
        w.since_s = self.now  # (its time away is neither work nor waiting)
        if not self.p2p:
            snapshot, version = self.ledger.send_model(index)
            tr = _Transfer(
                kind="join", worker=index, start_s=self.now, nbytes=self.nbytes, snapshot=snapshot, version=version
            )
            self._transfer(tr)
            return
        peers = [u for u in self.workers if self.present[u.index] and u.index != index]
        if not peers:  # nobody to take a model from: it goes on with its own
            tr = _Transfer(
                kind="join",
                worker=index,
                start_s=self.now,
                nbytes=0,
                snapshot=w.model.local,
                weight=w.model.weight,
                version=self.ledger.version,
            )
            tr.epoch = w.epoch
            self._joined(tr)
            return
        weights = [u.model.weight for u in peers]
        snapshot = weighted_average([u.model.local for u in peers], weights) if self.math else None  # type: ignore[misc]
        tr = _Transfer(
            kind="join",
            worker=index,
            start_s=self.now,
            nbytes=self.nbytes,
            snapshot=snapshot,
            weight=math.fsum(weights) / len(weights),
            version=self.ledger.version,
            peer=peers[0].index,
        )
        self._transfer(tr)

    def _joined(self, tr: _Transfer) -> None:
        """A joining worker holds the model it downloaded: it is in the run again."""
        w = self.workers[tr.worker]
        if self.p2p:
            w.model.replace(tr.snapshot, tr.weight)
        else:
            w.model.load(tr.snapshot, tr.version)
            self.ledger.model_arrived(tr.worker, tr.version)
        now = self.now
        event = self.core.joined(
            tr.worker, start_s=tr.start_s, end_s=now, now_s=now, version=tr.version, nbytes=tr.nbytes
        )
        self._report(event)

    # --------------------------------------------------------------- run
    def run(self) -> RunResult:
        host_t0 = time.perf_counter()
        sc = self.sc
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny models: threads only add overhead and nondeterminism
        try:
            # (the path is named when it is not ps: a ps trace is byte-identical to those before paths)
            named = {"path": self.path} if self.collective else {}
            self.core.started(0.0, model_nbytes=self.nbytes, scenario=sc, **named)
            self._evaluate(0.0)
            every = eval_interval_s(sc)
            self._schedule(every, _EVAL, None)
            self._schedule_link_switches()
            self._schedule_membership()
            absent = self._absent_at_start()
            for i in absent:
                self.present[i] = False
                self.workers[i].epoch += 1
            (self._send if self._messages else self.wiring.execute)(self.core.start_policy(0.0))
            for i in absent:  # (their steps were never started)
                self._deliver(self.core.left(i, 0.0, "absent at the start"))
            if self._net_dirty:
                self._schedule_net()
            self._loop(every)
            for w in self.workers:
                self._settle(w)
            self._evaluate(self.now)
            self.core.ended(self.now, self.stop_reason)
        finally:
            self.trace.close()
            torch.set_num_threads(torch_threads)
        summary = self.ledger.summary(
            scenario=sc,
            driver="sim",
            wall_s=self.now,
            compute_s=[w.compute_s for w in self.workers],
            comm_s=[w.comm_s for w in self.workers],
            worker_steps=[w.steps for w in self.workers],
            host_s=time.perf_counter() - host_t0,
            stop_reason=self.stop_reason,
            trace_name=self.trace_path.name if self.trace_path is not None else None,
            extra={
                "events": self.events,
                "eval_time_s": self.eval_time_s,
                "batched_calls": self.batcher.calls if self.batcher is not None else 0,
                "outstanding_detail": self._outstanding_detail(),
                "measured_step": self.sc.step_cost.to_dict() if self.sc.step_cost.measured else None,
                "path": self.path if not self.p2p else None,
                **({"servers": self.servers} if self.servers > 1 else {}),  # (one server: as before)
                **self.core.p2p_summary(self.now),
            },
        )
        return RunResult(summary=summary, params=self.ledger.theta)

    def _loop(self, eval_every_s: float) -> None:
        heap = self._heap
        limit = self.sc.stop.max_time_s if self.sc.stop.max_time_s is not None else math.inf
        inf = math.inf
        report_every = 2000
        countdown = report_every
        # evaluations and capacity changes alone do not keep a run going
        # (evaluations and capacity changes alone do not keep a run going; leaves and joins do
        # while steps are left to take: a join may bring a worker to a run that has none)
        while self._live or self._net_at < inf or (self._members_pending and not self.core.spent()):
            # the next entry: the heap's first or the network's wake-up, whichever
            # comes first in (time, priority) order (_NET: after _LINK, before the rest)
            net_at = self._net_at
            if heap:
                at, prio, _, payload = heap[0]
                if net_at < at or (net_at == at and prio > _NET):
                    at, prio = net_at, _NET
            else:
                at, prio = net_at, _NET
            if at > limit:
                self.now = limit
                self.stop_reason = "max_time"
                return
            self.now = at
            self.events += 1
            if prio == _NET:
                self._net_at = inf
                for tr in self.net.advance(at):
                    self._transfer_done(tr)
                self._net_dirty = True
                self._schedule_net()
                countdown -= 1
                if countdown == 0 and self.progress is not None:
                    countdown = report_every
                    self.progress(self.core.fraction(self.now), self.core.policy_status())
                continue
            heapq.heappop(heap)
            if prio == _EVAL:
                self._evaluate(at)
                self._schedule(at + eval_every_s, _EVAL, None)
                continue
            if prio == _LINK:
                self._link_switch(*payload)
                if self._net_dirty:
                    self._schedule_net()
                continue
            if prio == _MEMBER:
                self._member(*payload)
                if not self._members_pending and not any(self.present):
                    self.stop_reason = "no workers left"  # (what they left on the links never arrives)
                    return
                if self._net_dirty:
                    self._schedule_net()
                continue
            self._live -= 1
            if prio == _COMPUTE:
                self._compute_done(payload)
            elif prio == _SERVE:
                self._serve(*payload)
            elif isinstance(payload, ForecastDone):
                self._deliver(payload)
            else:
                self._deliver(TimerFired(now_s=at, tag=payload))
            if self._net_dirty:
                self._schedule_net()
            countdown -= 1
            if countdown == 0 and self.progress is not None:
                countdown = report_every
                self.progress(self.core.fraction(self.now), self.core.policy_status())
        if self.core.spent() or self.core.refused:
            self.stop_reason = "max_steps"
            return
        if not any(self.present):
            self.stop_reason = "no workers left"
            return
        busy = [w.index for w in self.workers if w.index in self.computing or w.comm]
        raise DeadlockError(
            f"{self.label} stalled at t={self.now:.6g}s: no event pending, "
            f"{self.ledger.started_steps} steps started, workers busy: {busy or 'none'}; "
            f"the policy's last event: {describe(self.core.heard, 0.0)}"
        )

    def _outstanding_detail(self) -> dict[str, int]:
        """Where the steps in flight at the stop are: every one is somewhere."""
        return {
            # pushed (in transfer or arrived), neither applied nor dropped yet
            "held": sum(p.steps for p in self.ledger.pushes.values()),
            "unpushed": sum(w.model.local_steps + w.model.has_grad for w in self.workers),
            "computing": len(self.computing),
            **({"lost": self.lost_steps} if self.sc.cluster.membership else {}),
        }


def simulate(scenario: Scenario, policy: str, **kwargs: Any) -> RunResult:
    """One run of ``policy`` on ``scenario``, its ``measured`` step cost timed first (hetsync.steptime)."""
    from hetsync.steptime import resolve_measured

    return Simulation(resolve_measured(scenario, kwargs.get("workload")), policy, **kwargs).run()
