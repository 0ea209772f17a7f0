"""The server process (rank 0): runs the policy against real workers.

It holds the global model and the policy, turns the policy's commands into
messages (``protocol``), and turns the workers' reports back into events.
For a peer-to-peer policy it is only the coordinator: it holds no model
during the run and no model data passes through it (see
:mod:`hetsync.runtime.coordinator`, which also says how evaluation works
there). What a command means, and what a report becomes (trace record,
counters, the policy's event), is the driver core's
(:class:`~hetsync.driver.core.DriverCore`), the same as in the simulator.
One receiver thread per worker posts a blocking receive from that worker
and queues what arrives; the main thread waits on the queue with a timeout,
so timers, evaluations and checkpoints happen on time.

Why a receive per worker and not one receive-from-any-source: measured on
gloo, a receive from a named peer fails within milliseconds when that peer's
process dies (its connection resets), while a receive-from-any keeps waiting
until the group's timeout. A worker that stays alive but silent longer than
``worker_timeout_s`` while it owes a report is declared gone as well
(:mod:`hetsync.runtime.watchdog`).

A run (``_Run``) is the loop; its pieces are the checkpoint file
(:mod:`hetsync.runtime.checkpointer`), the watchdog and the progress file
(:mod:`hetsync.runtime.progress`).

Either way the policy gets ``WorkerLeft`` and the run goes on with the rest;
the summary's ``workers_left`` says who and when.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hetsync.algos.quantize import decode, fragment_nbytes
from hetsync.driver import eval_interval_s, policy_context
from hetsync.driver.policycall import describe
from hetsync.driver.run import Run
from hetsync.errors import DeadlockError
from hetsync.ledger import ExchangeStats, HeldPush
from hetsync.optim import Stepper, local_steppers
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
    Pull,
    Push,
    SetTimer,
    TimerFired,
    WorkerLeaving,
)
from hetsync.runtime import checkpoint_check
from hetsync.runtime import protocol as P
from hetsync.runtime.checkpoint_check import CHECKPOINT_FORMAT as CHECKPOINT_FORMAT  # (the server's format)
from hetsync.runtime.checkpointer import Checkpointer, trace_resume_point
from hetsync.runtime.config import OWN_STORE_ENV, ProcessOptions, leave_s_of
from hetsync.runtime.coordinator import Coordinator, Received
from hetsync.runtime.evaluator import BackgroundEvaluator, Spent
from hetsync.runtime.forecasts import ForecastJobs
from hetsync.runtime.progress import Progress
from hetsync.runtime.session import JoinWatcher, Link, Rejoined, SessionLink, WorldLink, absent_at_start, rejoins
from hetsync.runtime.shards import ShardClient, join_states, shard_ranges, slice_state, unfinished
from hetsync.runtime.watchdog import Watchdog
from hetsync.scenario import Scenario
from hetsync.trace import TraceWriter
from hetsync.workloads import Workload

# an evaluation takes real time from the run it measures: a step-limited run
# without eval_every_s evaluates 40 times (as in the simulator), at most this often
MIN_EVAL_EVERY_S = 0.5
REPORTS_QUEUED_MAX = 256  # per worker, read off the wire but not yet handled by the server loop
# the summary's eval_warning: evaluations on the loop that long a share of the run, or an
# evaluator beside it that busy on a machine whose CPUs the workers need
EVAL_SHARE_WARN = 0.1
EVAL_CPU_WARN = 0.5
FORECAST_POLL_S = 0.05  # how often the loop looks for a forecast process's answer while one runs


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeOptions(ProcessOptions):
    """The process's options (what every rank is given) and the server's own one."""

    progress_lines: bool = False  # print a progress line every few seconds (under plain torchrun)
    # evaluate copies of the global model on a thread beside the loop (runtime.evaluator), so the
    # server keeps serving the workers meanwhile (the own loop: on a copy of the user's module)
    background_eval: bool = False

    @property
    def out_dir(self) -> Path:
        return self.out


@dataclass
class _Peer:
    """A worker's books during a run (checkpointed: a resumed run goes on with them)."""

    compute_s: float = 0.0
    comm_s: float = 0.0
    steps: int = 0
    samples: int = 0  # drawn by the worker's sampler in the steps it reported
    # its training loop's optimizer settings as of its last gradient push (they travel when they
    # change: protocol.Pushed.hyper); a resumed worker sends them again with its first push
    hyper: tuple[float, ...] | None = None

    CHECKPOINTED = ("compute_s", "comm_s", "steps", "samples")


class ServerProcess:
    def __init__(
        self, scenario: Scenario, workload: Workload, opts: RuntimeOptions, *, gradient_stepper: Stepper | None = None
    ) -> None:
        if workload.metrics:  # (a training loop without an evaluation reports none)
            scenario.stop.target.direction_for(workload.name, workload.metrics)  # BadInput: a metric it lacks
        # the optimizer for gradient pushes: the scenario's, or (hetsync.loop) the user's own
        self.gradient_stepper = gradient_stepper
        self.sc = scenario
        self.n = scenario.cluster.workers
        self.workload = workload
        self.opts = opts
        self.nbytes = scenario.job.model_bytes if scenario.job.model_bytes is not None else workload.model_nbytes
        # workers that may join later (hetsync launch --nproc-max) have no rank in the world group:
        # absent at the start, booked so by each run (absent_at_start), they come in on sessions
        self.alive = set(range(self.n - opts.joinable))
        self.inbox: queue.Queue[Received] = queue.Queue()
        # backpressure: a worker's receiver stops reading while this many of its
        # reports wait for the server loop, so a worker stepping nonstop
        # (Compute.continuous) cannot run ahead of the server without bound
        self._queued = [0] * self.n
        self._queued_cv = threading.Condition()
        self._sends: list[tuple[Any, tuple[torch.Tensor, ...]]] = []
        # sharded servers (hetsync.runtime.shards): rank 0 holds the model's first range, servers
        # 1 … S−1 the others; every push that brings a payload gets its worker's next number
        self.ranges = shard_ranges(workload.n_params, opts.servers) if opts.servers > 1 else None
        self.shards = ShardClient(self.ranges, self.n) if self.ranges is not None else None
        self.push_seq = [0] * self.n
        self.last_seq = [-1] * self.n  # the number of each worker's last push taken from the inbox
        self.channel = P.Channel(self.ranges[0][1] if self.ranges is not None else workload.n_params)
        self._exchanges = 0  # p2p exchange ids, unique over the server's life (they make the tags)
        self.terminating = False  # SIGTERM came (the launcher stops the run: Ctrl-C)
        # each worker's link to rank 0: the world group, replaced by a pairwise session when a
        # restarted worker comes back (hetsync.runtime.session)
        self.links: list[Link] = [WorldLink(w + 1) for w in range(self.n)]
        for w in sorted(self.alive):
            self._start_receiver(w, self.links[w])
        # sessions of restarted workers, opened and waiting for the loop to take them in (_Run._admit)
        self.joins: queue.Queue[tuple[int, Rejoined]] = queue.Queue()
        self.watcher = (
            JoinWatcher(self.n, self._session_opened, timeout_s=opts.startup_timeout_s).start()
            if rejoins(scenario, opts) and os.environ.get(OWN_STORE_ENV)
            else None
        )

    # ------------------------------------------------------------ wire
    def _start_receiver(self, w: int, link: Link) -> None:
        threading.Thread(target=self._receive, args=(w, link), daemon=True, name=f"rx-{w}").start()

    def _receive(self, w: int, link: Link) -> None:
        """Worker ``w``'s reports on ``link``, queued; once the link has been
        replaced (the worker came back on a new session) nothing more of it is."""
        while True:
            try:
                report, payload = self.channel.recv_report(link)
            except Exception as e:  # the peer is gone (its connection reset), or out of step with the stream
                what = "bad report" if isinstance(e, ValueError) else "connection lost"
                if self.links[w] is link:
                    self.inbox.put((w, None, None, f"{what}: {str(e).splitlines()[0][:160]}"))
                return
            if self.links[w] is not link:
                return
            with self._queued_cv:
                while self._queued[w] >= REPORTS_QUEUED_MAX:
                    self._queued_cv.wait()
                self._queued[w] += 1
            self.inbox.put((w, report, payload, None))

    def _session_opened(self, w: int, link: SessionLink, came: float, setup_s: float) -> None:
        """(the join watcher's thread) Worker ``w`` came back on ``link``: the
        loop takes it in; a wake-up item in the inbox, which every reader ignores."""
        self.joins.put((w, Rejoined(link, came, setup_s)))
        self.inbox.put((w, None, None, None))

    def install(self, w: int, link: Link) -> None:
        """``w``'s messages go over ``link`` from now on (the old link's receiver falls silent)."""
        self.links[w] = link
        self._start_receiver(w, link)

    def take(self, timeout_s: float) -> Received:
        """The next report (or death) from the inbox; ``queue.Empty`` after ``timeout_s``."""
        item = self.inbox.get(timeout=timeout_s)
        if item[1] is not None:
            with self._queued_cv:
                self._queued[item[0]] -= 1
                self._queued_cv.notify_all()
        rep = item[1]
        if self.shards is not None and isinstance(rep, P.WorkDone) and rep.pushed and not rep.pushed.carried:
            w = item[0]  # (every report passes here once, in the order it came: the servers number them so)
            self.last_seq[w], self.push_seq[w] = self.push_seq[w], self.push_seq[w] + 1
        return item

    def new_exchange(self) -> int:
        self._exchanges += 1
        return self._exchanges

    def _send(self, w: int, cmd: P.Command, payload: torch.Tensor | None = None) -> bool:
        tensors = tuple(self.channel.pack_message(cmd, payload))
        try:
            for t in tensors:
                self._sends.append((self.links[w].isend(t), tensors))
        except Exception as e:
            self.inbox.put((w, None, None, f"send failed: {str(e).splitlines()[0][:160]}"))
            return False
        return True

    def _reap_sends(self, wait: bool = False) -> None:
        """Forget the sends that have left; ``wait``: wait for them first, as
        long as a worker may be silent (a receiver that died: its receiver
        thread says so; one that lives but never reads is not waited on for ever)."""
        self._sends = unfinished(self._sends, wait=wait, limit_s=self.opts.worker_timeout_s if wait else None)

    def shutdown(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        while not self.joins.empty():  # came back too late for any run: they leave too
            w, rj = self.joins.get()
            self.install(w, rj.link)
            self.alive.add(w)
        for w in sorted(self.alive):
            self._send(w, P.ExitCmd())
        self._reap_sends(wait=True)
        if self.shards is not None:
            self.shards.exit()

    # ------------------------------------------------------------- run
    def run(self, spec: str, trace_path: Path | None, run_index: int = 0) -> dict[str, Any]:
        run = _Run(self, spec, trace_path, run_index)
        previous = self._catch_sigterm()
        try:
            summary = run.execute()
        except _Terminated:  # checkpointed: now end as SIGTERM would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        self.last_model = run.whole_model()
        return summary

    def _catch_sigterm(self) -> Any:
        """SIGTERM (how the launcher stops a run on Ctrl-C) sets a flag the
        loop reads, so the run's state is checkpointed before the process
        ends: ``--resume`` goes on from the interrupt, not from the last
        periodic checkpoint. Returns the handler it replaced (None: not on
        the main thread, where no handler can be set)."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def flag(signum: int, frame: Any) -> None:
            self.terminating = True

        return signal.signal(signal.SIGTERM, flag)


def _all_ranks_here() -> bool:
    """Whether every rank runs on this machine (a loopback rendezvous, as
    ``hetsync run`` and ``hetsync launch`` use by default)."""
    return os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost", "::1")


class _Terminated(Exception):
    """The server got SIGTERM; its run is checkpointed (when it has a checkpoint folder)."""


class _Run:
    """One policy's run on the live workers."""

    def __init__(self, server: ServerProcess, spec: str, trace_path: Path | None, run_index: int) -> None:
        self.srv = server
        self.sc = server.sc
        sizes = getattr(server.workload, "param_sizes", ())  # (Streaming DiLoCo cuts its fragments on them)
        self.policy = make_policy(spec, policy_context(server.sc, server.nbytes, sizes))
        self.label = self.policy.label
        self.local_steps = False  # the policy had workers take steps locally (with their own optimizer)
        self.continuous: dict[int, Compute] = {}  # workers training nonstop (Compute.continuous)
        self.halted: set[int] = set()  # workers sent HaltCmd: a step already begun is not booked
        self.leaving: set[int] = set()  # own loops ended: finishing the transfers they owe (then EXIT)
        # workers that came back, sent RESET with the model: (when they came, the model's version, session set-up s)
        self.joining: dict[int, tuple[float, int, float]] = {}
        self.stopping = False  # the run is over: commands the policy still gives are not sent
        self.evaluator: BackgroundEvaluator | None = None  # set when the run starts
        self.eval_spent: list[Spent] = []  # evaluations on the loop (no evaluator)
        self.eval_before: dict[str, Any] = {"eval_time_s": 0.0, "evals_skipped": 0}  # a resumed run's first leg
        self.trace_path = trace_path
        self.run_index = run_index
        self.peers = [_Peer() for _ in range(server.n)]
        self.watchdog = Watchdog(server.n, server.opts.worker_timeout_s)
        self._p2p_comm_before = [0.0] * server.n  # a resumed p2p run: comm time booked before its checkpoint
        self.timers: list[tuple[float, int, str | ForecastDone]] = []  # (a tag: a TimerFired; else the event)
        self.forecasts = ForecastJobs()  # running in processes of their own (forecast)
        self._timer_seq = 0
        sc = self.sc
        self.eval_every_s = eval_interval_s(sc, floor_s=MIN_EVAL_EVERY_S)
        self.resumed: dict[str, Any] | None = None
        theta = server.workload.init_params(sc.job.seed)
        version, self.offset_s = 0, 0.0
        d = server.opts.checkpoint_dir
        self.checkpointer = Checkpointer(
            None if d is None else checkpoint_check.checkpoint_path(d, self.label),
            checkpoint_check.identity(sc, server.workload, self.label, server.n),
            server.n,
        )
        self._restore: dict[str, Any] | None = None  # the checkpoint a resumed run continues
        self._unsaved_local_state: list[int] = []  # a resumed run's workers with no local optimizer state saved
        trace_at: int | None = None
        if server.opts.resume and self.checkpointer.saved():
            state = self.checkpointer.load(theta)
            theta, version, self.offset_s = state["theta"], int(state["version"]), float(state["elapsed_s"])
            self.policy.load_state_dict(state["policy_state"])
            trace_at, trace_note = trace_resume_point(trace_path, self.label, int(state["trace_bytes"]))
            self._restore = state
            # each worker saves its local optimizer's state beside the checkpoint, on its own machine
            # (rank 0 sees those saved on its own): the ones not found start afresh
            assert d is not None  # (a checkpoint was saved)
            self._unsaved_local_state = [
                w for w in range(server.n) if not checkpoint_check.worker_state_path(d, self.label, w).exists()
            ]
            self.resumed = {
                "version": version,
                "elapsed_s": self.offset_s,
                "steps": int(state["steps"]),
                "trace": trace_note,
            }
        self.trace = TraceWriter(trace_path, resume_at=trace_at)
        self.start_model = theta  # (whole: sharded servers start from their ranges of it)
        self.push_keys: dict[int, tuple[int, int]] = {}  # sharded: held push -> (worker, its push number)
        if server.ranges is not None and theta is not None:
            lo, hi = server.ranges[0]
            theta = theta[lo:hi].clone()  # rank 0's range: the ledger's model
        self.wiring = Run(
            sc,
            self.policy,
            server.workload,
            theta,
            self.trace,
            plane=self,
            path=server.opts.path,
            version=version,
            stepper=server.gradient_stepper,
        )
        self.ledger, self.core = self.wiring.ledger, self.wiring.core
        if self._restore is not None:
            # the server's optimizer state (momentum, Adam moments) goes on (sharded: rank 0's range of
            # it; the servers get theirs as the run starts); its schedule clock and the rest of the
            # accounting with the ledger (execute)
            states = [self._restore.get(k, {}) for k in ("optimizer_state", "outer_optimizer_state")]
            if server.ranges is not None:
                n = server.ranges[-1][1]
                states = [slice_state(st, *server.ranges[0], n) for st in states]
            self.ledger.stepper.load_state_dict(states[0])
            self.ledger.outer.load_state_dict(states[1])
            self.ledger.load_fragment_states(self._restore.get("fragment_outer_states", []))
        self.p2p = Coordinator(self, server.nbytes) if self.core.p2p else None
        # the collective path (hetsync.runtime.collective): rounds reduced among the workers
        self.collective = self.wiring.collective
        self.snapshot: dict[str, Any] | None = None  # collective: a checkpoint waiting for its model
        self.apply_lr: float | None = None  # collective: the learning rate of the round last applied
        self.round_sent: set[int] = set()  # collective: the workers given a step of the round being dispatched
        # collective delta rounds (local SGD, DiLoCo): the members of the open round that are in it already
        # (given its push, or joined with zero weight); empty while no round is open
        self.round_in: set[int] = set()
        self.parked: set[int] = set()  # collective: loops ended, kept in the group (zero weight) until the end
        self.fetch_at: float | None = None  # collective: when the model being fetched was asked for
        self.held_pulls: list[Pull] | None = None  # fallen back to ps: pulls wait for a worker's model
        self.path = "collective" if self.collective else "ps"  # (as the run began: the summary's)
        self.fallback: dict[str, Any] | None = None  # collective: when and why the run fell back to ps
        self.stop_reason = "drained"
        self.progress = Progress(server.opts.out_dir, self.label, run_index, lines=server.opts.progress_lines)

    # ------------------------------------------- the coordinator's host
    def now(self) -> float:
        return time.time() - self.epoch

    @property
    def alive(self) -> set[int]:
        return self.srv.alive

    @property
    def worker_timeout_s(self) -> float:
        return self.srv.opts.worker_timeout_s

    def new_exchange(self) -> int:
        return self.srv.new_exchange()

    def next_report(self, timeout_s: float) -> Received | None:
        try:
            return self.srv.take(timeout_s)
        except queue.Empty:
            return None

    # ------------------------------------------------------- lifecycle
    def execute(self) -> dict[str, Any]:
        host_t0, cpu_t0 = time.perf_counter(), time.process_time()
        srv, sc = self.srv, self.sc
        self.epoch = time.time() - self.offset_s  # a resumed run's clock goes on from its checkpoint
        if self.resumed is None or self.resumed["trace"] != "continued":
            self.core.started(self.offset_s, model_nbytes=srv.nbytes, scenario=sc, driver="dist")
        if self._restore is not None:
            self._resume(self._restore)
        self.evaluator = self._evaluator()
        try:
            # (membership: their processes leave the group as it forms; --nproc-max: not there yet)
            for w in absent_at_start(sc, srv.opts.joinable):
                self.left(w, "absent at the start")
            self._reset_workers()
            start = self.now()
            for w in sorted(set(range(srv.n)) - srv.alive):
                self.left(w, "left before the run")
            self.evaluate_model(start)
            self.trace.flush()  # and at every evaluation: a server that dies leaves a readable trace
            self.next_eval = start + self.eval_every_s
            self.next_ckpt = start + srv.opts.checkpoint_every_s
            self._execute(self.core.start_policy(start))
            self._loop()
            wall = self.now()
            if self.collective:
                self._fetch_final()
            self._stop_workers()
            if self.p2p is not None:
                self.p2p.final_evaluation(wall)
                self._record_evaluations(wait=True)
            else:
                self._record_evaluations(wait=True)
                self.ledger.evaluate(wall, self.whole_model())  # (the workers have stopped: nobody waits for it)
            self._checkpoint(wall)
            self._release_parked()
            self.core.ended(wall, self.stop_reason)
        finally:
            self.forecasts.close()
            if self.parked:  # (a run that failed or was stopped: they must not wait for ever)
                self._release_parked()
            if self.evaluator is not None:
                self.evaluator.close()
            self.trace.close(sync=True)
        peers = self.peers
        if self.resumed is not None:
            self.resumed["fresh"] = self._fresh_on_resume()
        extra: dict[str, Any] = {"resumed_from": self.resumed, **self._eval_figures(wall)}
        # rank 0's CPU time over the run (every thread: the loop, receivers, evaluator): the server's load
        extra.update(path=self.path, path_fallback=self.fallback, server_cpu_s=time.process_time() - cpu_t0)
        extra["servers"] = self.srv.opts.servers
        extra["eval_warning"] = self._eval_warning(extra, wall)
        if extra["eval_warning"]:
            print(f"hetsync: {self.label}: {extra['eval_warning']}", file=sys.stderr, flush=True)
        comm_s = [p.comm_s for p in peers]
        if self.p2p is not None:
            since = self.p2p.comm_s(self.offset_s, wall)
            comm_s = [before + now for before, now in zip(self._p2p_comm_before, since, strict=True)]
            extra.update(self.core.p2p_summary(wall))
        return self.ledger.summary(
            scenario=sc,
            driver="dist",
            wall_s=wall,
            compute_s=[p.compute_s for p in peers],
            comm_s=comm_s,
            worker_steps=[p.steps for p in peers],
            host_s=time.perf_counter() - host_t0,
            stop_reason=self.stop_reason,
            trace_name=self.trace_path.name if self.trace_path is not None else None,
            extra=extra,
        )

    def _reset_workers(self) -> None:
        """Every live worker starts the run from the server's model."""
        srv = self.srv
        if srv.shards is not None:
            assert self.start_model is not None
            srv.shards.reset(self.run_index, self.ledger.version, self.start_model, srv.push_seq)
            if self._restore is not None:
                restore = self._restore
                srv.shards.load_states(restore.get("optimizer_state", {}), restore.get("outer_optimizer_state", {}))
        for w in sorted(srv.alive):
            reset = P.ResetCmd(
                epoch_s=self.epoch,
                version=self.ledger.version,
                run=self.run_index,
                p2p=self.p2p is not None,
                collective=self.collective,
                # a resumed run: the worker's step numbers, data order and timing noise go on from there
                first_step=self.peers[w].steps,
                drawn=self.peers[w].samples,
            )
            if srv._send(w, reset, self.ledger.theta) and srv.shards is not None:
                srv.shards.pull(w)
        self._await_all(P.ResetDone)

    def _stop_workers(self) -> None:
        srv = self.srv
        self.stopping = True
        if self.collective and self.round_in:  # a delta round is open: the rest join it, so it ends everywhere
            self._zero_fill((srv.alive | self.parked) - self.round_in)
        for w in sorted(srv.alive):
            srv._send(w, P.StopCmd())
        self._await_all(P.Bye)
        srv._reap_sends(wait=True)

    def _release_parked(self) -> None:
        """Collective: the workers whose loops ended long ago leave the group
        (``EXIT``), once the run's last checkpoint has their model."""
        for w in sorted(self.parked):
            self.srv._send(w, P.ExitCmd())
        self.parked.clear()
        self.srv._reap_sends(wait=True)

    def _await_all(self, kind: type[P.ResetDone | P.Bye]) -> None:
        """Wait for a ``kind`` reply from every live worker; other reports
        (work that was in flight) are discarded, deaths recorded."""
        waiting = set(self.srv.alive)
        deadline = time.time() + self.srv.opts.worker_timeout_s
        while waiting:
            try:
                w, report, _, error = self.srv.take(max(0.01, deadline - time.time()))
            except queue.Empty:
                for w in sorted(waiting):
                    self.left(w, f"no reply within worker_timeout_s={self.srv.opts.worker_timeout_s}")
                return
            if error is not None:
                self.left(w, error)
                waiting.discard(w)
            elif isinstance(report, kind):
                waiting.discard(w)

    # ------------------------------------------------------------ loop
    def _loop(self) -> None:
        srv, sc = self.srv, self.sc
        limit = sc.stop.max_time_s if sc.stop.max_time_s is not None else float("inf")
        last_progress = 0.0
        while True:
            now = self.now()
            if srv.terminating:
                self._checkpoint(now)
                raise _Terminated
            if now >= limit:
                self.stop_reason = "max_time"
                return
            busy = self.watchdog.busy(srv.alive)
            spent = self.core.spent()
            if not busy and (spent or not srv.alive):
                self.stop_reason = "max_steps" if spent else "no workers left"
                return
            if not busy and not self.timers and not self.forecasts:
                raise DeadlockError(
                    f"{self.label} stalled at t={now:.3f}s: no worker has work and no timer is set "
                    f"({self.ledger.started_steps} steps started, workers alive: {sorted(srv.alive)}); "
                    f"the policy's last event: {describe(self.core.heard, self.core.heard_s or 0.0)}"
                )
            wake = min(limit, self.next_eval, self.timers[0][0] if self.timers else limit)
            if self.forecasts:
                wake = min(wake, now + FORECAST_POLL_S)
            try:
                item = srv.take(min(1.0, max(0.0, wake - now)))
            except queue.Empty:
                item = None
            now = self.now()
            if srv.terminating:  # (what came meanwhile may be the launcher's stopping the workers)
                continue
            if item is not None:
                w, report, payload, error = item
                if error is not None:
                    self.left(w, error)
                elif w in srv.alive and report is not None:
                    self._report(w, report, payload, now)
            while not srv.joins.empty():
                self._admit(*srv.joins.get())
            for done in self.forecasts.answers(now):
                self.deliver(done)
            while self.timers and self.timers[0][0] <= now:
                at, _, tag = heapq.heappop(self.timers)
                self.deliver(
                    TimerFired(now_s=now, tag=tag) if isinstance(tag, str) else dataclasses.replace(tag, now_s=now)
                )
            for w in self.watchdog.overdue(srv.alive, now):
                self.left(w, f"no reply within worker_timeout_s={self.watchdog.timeout_s}")
            if now >= self.next_eval:
                if self.p2p is not None:
                    self.p2p.evaluate(now)
                elif self.collective:
                    if self.srv.workload.metrics:  # (nothing to evaluate: no model to fetch)
                        self._fetch(now)
                else:
                    self.evaluate_model(now)
                self.next_eval = now + self.eval_every_s
                self.trace.flush()
            self._record_evaluations()
            if self.srv.opts.checkpoint_dir is not None and now >= self.next_ckpt:
                self._checkpoint(now, periodic=True)
                self.next_ckpt = now + self.srv.opts.checkpoint_every_s
            if now - last_progress >= 0.5:
                last_progress = now
                self.progress.update(now, self.core.fraction(now), self._progress_status)
                srv._reap_sends()

    def _progress_status(self, now: float) -> str:
        """``12.0 s · 340 steps · 4 workers · accuracy 0.912`` (the last
        evaluation); after a policy's switch note, the policy in force before
        the metric: ``… · 4 workers · auto→lb-bsp · accuracy 0.912``."""
        led = self.ledger
        parts = [f"{now:.1f} s", f"{led.steps} steps", f"{len(self.srv.alive)} workers"]
        parts += [p for p in [self.core.policy_status()] if p]  # (auto→lb-bsp: the policy a switch put in force)
        names = list(self.srv.workload.metrics)
        if led.curve and names:
            metric = self.sc.stop.target.metric if self.sc.stop.target.metric in names else names[0]
            value = led.curve[-1][1 + names.index(metric)]
            parts.append(f"{metric} {value:.4g}" if value is not None else f"{metric} diverged")
        return " · ".join(parts)

    # --------------------------------------------------------- reports
    def _report(self, w: int, rep: P.Report, payload: torch.Tensor | None, now: float) -> None:
        if isinstance(rep, P.Snapshot):
            self._snapshotted(w, rep, payload)
            return
        if isinstance(rep, P.Fetched) and (self.collective or self.held_pulls is not None):
            self._fetched(w, payload)
            return
        if isinstance(rep, P.Arrived | P.Reduced | P.Fetched | P.Lost):
            if self.p2p is not None:
                self.p2p.report(w, rep, payload, now)
            return
        if isinstance(rep, P.Buffers):  # its module's running statistics (hetsync.loop's ModuleModel)
            assert payload is not None
            self.srv.workload.take_buffers(w, payload)  # type: ignore[attr-defined]
            return
        if isinstance(rep, P.Leaving):  # its own training loop ended (hetsync.loop)
            if self.p2p is not None and payload is not None:
                self.p2p.finished[w] = (payload, rep.weight)  # its model stays in the final average
            elif self.collective and payload is not None:  # (every worker holds the round's model)
                self.ledger.theta = payload.clone()
            self._leaving(w, now)
            return
        if isinstance(rep, P.WorkDone) and rep.pushed is not None and rep.pushed.hyper is not None:
            self.peers[w].hyper = rep.pushed.hyper  # (sent once per change: kept even if the report is not booked)
        if isinstance(rep, P.WorkDone) and rep.computed and w not in self.core.computing and w in self.halted:
            return  # a continuous step begun before the worker saw HaltCmd: not booked, owes nothing
        self.paid(w, now)
        if isinstance(rep, P.ResetDone) and w in self.joining:
            self._joined(w, now)
            return
        if not isinstance(rep, P.WorkDone):
            return  # a late ResetDone or Bye
        p, core, nbytes = self.peers[w], self.core, self.srv.nbytes
        p.comm_s += rep.comm_s  # transfer time no step overlapped (runtime.lanes.BusyClock)
        if (pulled := rep.pulled) is not None:  # (its start: sent, and the worker free to take it)
            moved = 0 if self.path == "collective" and self.fallback is None else nbytes  # (the ring's: at Apply)
            given = dataclasses.asdict(pulled)
            span = given.pop("span")
            bits = given.pop("bits") or 32  # (0: the float32 values)
            fragment = Fragment(lo=span[0], hi=span[1], bits=bits) if span is not None else None
            if fragment is not None:
                moved = fragment_nbytes(nbytes, self.srv.workload.n_params, fragment.lo, fragment.hi, bits)
            self.deliver(core.pulled(w, now_s=now, nbytes=moved, fragment=fragment, **given))
        if (c := rep.computed) is not None:
            p.compute_s += c.end_s - c.start_s
            p.steps += 1
            p.samples += c.batch_size
            if self.p2p is not None:
                self.p2p.computed(w, c.start_s, c.end_s)
            done = core.computed(w, now_s=now, **dataclasses.asdict(c))
            self._continue(w, now)
            self.deliver(done)
        if (s := rep.pushed) is not None:
            hyper = p.hyper if s.kind == "grad" else None  # its loop's optimizer settings for this gradient
            if self.collective and not s.carried:
                raise RuntimeError(f"worker {w}: a push outside a collective round")
            # (carried after a fall-back to ps: that round's all-reduce failed, its gradient is lost)
            moved = 0 if s.carried else nbytes  # (a carried push's bytes are the ring's, counted at Apply)
            if (frag := s.fragment) is not None:  # its delta, encoded at the fragment's width
                assert payload is not None
                payload = torch.from_numpy(decode(payload.numpy(), frag.size, frag.bits))
                moved = fragment_nbytes(nbytes, self.srv.workload.n_params, frag.lo, frag.hi, frag.bits)
            push_id = core.ledger.hold(
                HeldPush(w, s.kind, payload, s.base_version, s.steps, s.samples, hyper, fragment=s.fragment)
            )
            if self.srv.shards is not None and not s.carried:
                self.push_keys[push_id] = (w, self.srv.last_seq[w])
            self.deliver(core.push_arrived(push_id, start_s=s.start_s, now_s=now, nbytes=moved))
        if w in self.leaving:
            self._exit_when_square(w)

    def _leaving(self, w: int, now: float) -> None:
        """``w``'s own loop has ended. Its steps are all reported (the report
        channel keeps order), but the server may still have commanded
        transfers for them, e.g. WBSP-overlap's push of the steps finished
        since the last one: the worker does those (and no new step), and
        leaves once it owes nothing, so no finished step is lost. The step
        it was given and will not run is forgiven now. A peer-to-peer
        worker's model came with this report: it leaves at once."""
        self.leaving.add(w)
        self.continuous.pop(w, None)
        if w in self.core.computing:  # the step its loop will not run
            self.core.unstart_step(w)
            self.paid(w, now)
        if self.p2p is not None:
            self.watchdog.forgive(w)
        else:  # the policy may want its unpushed local steps (local SGD, DiLoCo)
            self.deliver(WorkerLeaving(now_s=now, worker=w))
        self._exit_when_square(w)

    def _exit_when_square(self, w: int) -> None:
        """A leaving worker that owes no report leaves the run (``EXIT``; on
        the collective path it stays in the workers' group, parked, until the
        run ends: the others' all-reduces need it)."""
        if self.watchdog.outstanding[w] == 0:
            if self.collective:
                self.leaving.discard(w)
                self.parked.add(w)
            self.left(w, "its training loop ended")

    def _continue(self, w: int, now: float) -> None:
        """A continuous step was reported: the worker has begun the next one
        already; book it, or stop the worker when the budget is spent. (Before
        the policy hears of the step, as in the simulator.)"""
        step = self.continuous.get(w)
        if step is None:
            return
        if self.core.start_step(step):
            self.watchdog.owe(w, now)
            return
        del self.continuous[w]
        self.halted.add(w)
        self.post(w, P.HaltCmd(), owes=False)

    def left(self, w: int, reason: str) -> None:
        """``w`` is gone: the coordinator forgives what was owed for it, then
        the policy hears of it (once)."""
        srv = self.srv
        reason = self._membership_reason(w, reason)
        if w not in srv.alive and any(x["worker"] == w for x in self.ledger.left):
            return
        if self.joining.pop(w, None) is not None:  # it came back and died again before it held the model
            srv.alive.discard(w)
            self.watchdog.forgive(w)
            self.ledger.forget_worker(w)
            print(f"hetsync: {self.label}: worker {w} was lost again while it joined: {reason}", file=sys.stderr)
            return
        srv.alive.discard(w)
        self.continuous.pop(w, None)
        now = self.now()
        self.watchdog.forgive(w)
        event = self.core.left(w, now, reason)
        if self.p2p is not None:
            self.p2p.left(w, now)
        if self.collective:
            self._fall_back(w)
        elif self.held_pulls is not None and self.fetch_at is not None:  # (it may have been the one asked)
            self.fetch_at = None
            self._fetch(now)
        if w in self.leaving:  # its loop has ended (even if it went silent meanwhile): it waits for EXIT
            self.leaving.discard(w)
            self.srv._send(w, P.ExitCmd())
        self.deliver(event)

    def _membership_reason(self, w: int, reason: str) -> str:
        """``membership`` (as the simulator books it) for a worker whose
        connection was lost after the scenario's ``leave_s`` for its current
        life (its process is killed there: :mod:`hetsync.runtime.process`);
        ``reason`` otherwise."""
        if not reason.startswith("connection lost") or not self.sc.cluster.membership:
            return reason
        life = sum(1 for x in self.ledger.joined if x["worker"] == w)  # (as the launcher counts its restarts)
        leave_s = leave_s_of(self.sc.cluster.membership, w, life)
        return "membership" if leave_s is not None and self.now() >= leave_s else reason

    # ------------------------------------------------- workers that come back
    def _admit(self, w: int, rj: Rejoined) -> None:
        """Worker ``w``'s process came back on a session of its own
        (:mod:`hetsync.runtime.session`): it is in the run again and gets
        RESET with the current global model (a pull) and its place in the
        run — its step count and the samples it had drawn, as the run booked
        them, so its data goes on where it was. The policy hears
        ``WorkerJoined`` once it holds the model (:meth:`_joined`)."""
        srv = self.srv
        if w in srv.alive:  # (its old process's death not seen yet: a restarted worker's old process is dead)
            self.left(w, "its process was restarted")
        srv.install(w, rj.link)
        srv.alive.add(w)
        came = rj.came - self.epoch
        model, version = self.ledger.send_model(w)
        reset = P.ResetCmd(
            epoch_s=self.epoch,
            version=version,
            run=self.run_index,
            p2p=False,
            collective=False,
            first_step=self.peers[w].steps,
            drawn=self.peers[w].samples,
        )
        self.joining[w] = (came, version, rj.setup_s)
        self.post(w, reset, model)

    def _joined(self, w: int, now: float) -> None:
        """A worker that came back holds the model: the policy hears ``WorkerJoined``."""
        came, version, setup_s = self.joining.pop(w)
        self.ledger.model_arrived(w, version)
        first = w in absent_at_start(self.sc, self.srv.opts.joinable) and self.peers[w].steps == 0  # (never in yet)
        print(
            f"hetsync: {self.label}: worker {w} {'joined' if first else 'came back'} at {came:.2f} s and held the model of version {version} "
            f"at {now:.2f} s (session {setup_s:.2f} s, then {now - came - setup_s:.2f} s to reset and download)",
            file=sys.stderr,
            flush=True,
        )
        self.deliver(self.core.joined(w, start_s=came, end_s=now, now_s=now, version=version, nbytes=self.srv.nbytes))

    # -------------------------------------------------------- commands
    def deliver(self, event: Event) -> None:
        self._execute(self.core.hear(event))

    def _execute(self, commands: list[Command]) -> None:
        if self.stopping:
            return
        self.wiring.execute(commands)
        if self.round_sent:  # (the policy's answer is all sent: the round's members are known)
            self._fill_round()

    # ------------------------------------------- the data plane (driver.run.DataPlane)
    def compute(self, cmd: Compute) -> None:
        self._command(cmd)

    def push(self, cmd: Push) -> None:
        self._command(cmd)

    def pull(self, cmd: Pull) -> None:
        self._command(cmd)

    def multicast(self, cmd: Multicast) -> None:
        assert self.p2p is not None  # (DriverCore.check: a peer-to-peer run)
        self.p2p.multicast(cmd, self.now())

    def allreduce(self, cmd: AllReduce) -> None:
        assert self.p2p is not None
        self.p2p.allreduce(cmd, self.now())

    def apply(self, cmd: Apply) -> None:
        if self.collective:  # (the run has checked it is the round's mean)
            # the round's ring all-reduce over the group: 2(k−1) phases, each member sending M/k
            k = len(self.srv.alive | self.parked)
            self.ledger.bytes_sent += 2 * (k - 1) * k * -(-self.srv.nbytes // k)
            self.round_in.clear()  # (a delta round closes)
        shard = self._shard_parts(cmd)
        self.ledger.apply(cmd, self.now())
        self.apply_lr = self.ledger.last_lr
        if shard is not None and self.srv.shards is not None:
            kind, parts = shard
            self.srv.shards.apply(kind, self.ledger.last_lr or 0.0, cmd.implicit_momentum, parts)

    def drop(self, cmd: Drop) -> None:
        self.ledger.drop(cmd, self.now())
        if self.srv.shards is not None:
            self.srv.shards.drop([self.push_keys.pop(pid) for pid in cmd.push_ids if pid in self.push_keys])

    def set_timer(self, cmd: SetTimer) -> None:
        self._timer_seq += 1
        heapq.heappush(self.timers, (cmd.at_s, self._timer_seq, cmd.tag))

    def forecast(self, cmd: Forecast) -> None:
        """Simulate the candidates from the global model in a process of its
        own (``python -m hetsync.sim.forecast_job``: the workers train on
        meanwhile; the loop delivers its answer when it is written). A
        training loop of one's own, whose model the simulator cannot run, and
        sharded servers are answered at once with no scores."""
        why = None
        if self.srv.gradient_stepper is not None:
            why = "your own model: the simulator cannot run it (ranked by measured throughput)"
        elif self.srv.ranges is not None:
            why = "sharded servers do not forecast yet"
        if why is not None:
            self._timer_seq += 1
            heapq.heappush(self.timers, (self.now(), self._timer_seq, ForecastDone(now_s=0.0, ask=cmd.ask, why=why)))
            return
        self.forecasts.start(self.sc, cmd, self.ledger.theta, self.now())

    def _command(self, cmd: Compute | Pull | Push) -> None:
        w = cmd.worker
        if w not in self.srv.alive:
            return
        if self.held_pulls is not None and isinstance(cmd, Pull):
            self.held_pulls.append(cmd)  # (sent with the model a worker brings: _fetched)
            return
        push = cmd.kind if isinstance(cmd, Push) else None
        if self.collective and isinstance(cmd, Pull):  # no model: the worker takes the round it reduced
            model, version = None, self.ledger.version
            pull = P.PullOrder(version=version, sent_s=self.now(), apply_lr=self.apply_lr)
        elif isinstance(cmd, Pull) and (frag := cmd.fragment) is not None:  # held by the worker until a merge
            model, version = self.ledger.send_model(w)
            span, mean = (frag.lo, frag.hi), self.ledger.fragment_means.get((frag.lo, frag.hi))
            if mean is not None and not self.resumed:  # the mean of its deltas: the worker takes the outer step
                model = torch.from_numpy(mean)
                pull = P.PullOrder(
                    version=version, sent_s=self.now(), span=span, keep=cmd.keep, mean_bits=frag.bits, nbytes=mean.size
                )
            else:  # (a resumed run: the workers' copies of the outer optimizer are gone) its values
                model = model[frag.lo : frag.hi] if model is not None else None
                pull = P.PullOrder(version=version, sent_s=self.now(), span=span, keep=cmd.keep)
        else:
            model, version = self.ledger.send_model(w) if isinstance(cmd, Pull) else (None, 0)
            pull = P.PullOrder(version=version, sent_s=self.now()) if isinstance(cmd, Pull) else None
        step = cmd if isinstance(cmd, Compute) else cmd.then if isinstance(cmd, Pull) else None
        if w in self.leaving:  # its loop has ended: transfers only
            step = None
        order = None
        if step is not None and self.core.start_step(step):
            order = P.StepOrder(
                batch_size=step.batch_size,
                local_lr=step.local_lr,
                push_after=step.push,
                continuous=step.continuous,
                merge=step.merge,
                clock=self.ledger.clock if step.sync_clock else None,
            )
            self.local_steps |= step.local_lr is not None
            self.halted.discard(w)
            if step.continuous:
                self.continuous[w] = step
        if push is None and pull is None and order is None:
            return  # a step the budget no longer allows
        if self.collective and order is not None and order.push_after == "grad":
            self.round_sent.add(w)
        elif self.collective and "delta" in (push, order.push_after if order is not None else None):
            self._join_delta_round(w)
        fragment = cmd.fragment if isinstance(cmd, Push) else None
        work = P.WorkCmd(push=push, push_fragment=fragment, pull=pull, step=order)
        if not self.post(w, work, model):
            if order is not None:
                self.core.computing.discard(w)  # not sent: the worker is gone (its receiver thread says so)
        elif pull is not None and model is not None and self.srv.shards is not None:
            self.srv.shards.pull(w)  # (the model's other ranges, from their servers)

    def _shard_parts(self, cmd: Apply) -> tuple[str, list[tuple[int, int, float]]] | None:
        """Sharded servers: what they apply of ``cmd`` (the pushes' kind and
        (worker, push number, weight) each), taken before the ledger uses them up."""
        if self.srv.shards is None or not cmd.contributions:
            return None
        first = self.ledger.pushes.get(cmd.contributions[0][0])
        if first is None:
            return None  # (an unknown push: the ledger names it)
        parts = [(*self.push_keys.pop(pid), weight) for pid, weight in cmd.contributions if pid in self.push_keys]
        return first.kind, parts

    def whole_model(self) -> torch.Tensor | None:
        """The global model (sharded: rank 0's range and the servers', as of the last command)."""
        theta = self.ledger.theta
        if self.srv.shards is None or theta is None:
            return theta
        return torch.cat([theta, *self.srv.shards.fetch()])

    # ------------------------------------------------------- collective
    def _fill_round(self) -> None:
        """A round's steps are sent: every other worker still in the group
        (one the policy gave no step, one whose loop has ended) joins its
        all-reduce with zero weight, so every member issues the same collectives."""
        given, self.round_sent = self.round_sent, set()
        self._zero_fill((self.srv.alive | self.parked) - given)
        self.round_in.clear()

    def _join_delta_round(self, w: int) -> None:
        """``w`` is given its push of a delta round (local SGD's, DiLoCo's):
        its members push at different times, so the round is open until the
        Apply; a member that will not push (its loop has ended) joins it with
        zero weight as it opens."""
        self.round_in.add(w)
        self._zero_fill(self.parked - self.round_in)

    def _zero_fill(self, workers: set[int]) -> None:
        """``workers`` join the open round with zero weight (they owe no report for it)."""
        for v in sorted(workers):
            self.srv._send(v, P.WorkCmd(step=P.StepOrder(batch_size=0, push_after="grad")))
            self.round_in.add(v)

    def _fetch(self, now: float) -> None:
        """Ask a worker for the model (the workers all hold it) to evaluate it as of ``now``."""
        if self.fetch_at is not None or not self.srv.alive:
            return  # (the last fetch has not come back yet)
        self.fetch_at = now
        self.post(min(self.srv.alive), P.FetchCmd())

    def _fall_back(self, gone: int) -> None:
        """Worker ``gone`` has left the workers' group for good (it died), so
        no all-reduce over it can end: the run goes on on the parameter-server
        path. The round in flight is lost (the workers' all-reduces fail
        within a second and they keep the model they had); the model the
        workers hold is fetched from one of them, and the pulls the policy
        gives meanwhile wait for it, then carry it. The workers' optimizer
        state stays with them; the server's starts afresh."""
        if gone in self.parked:
            return
        self.collective = False
        self.round_sent.clear()
        self.held_pulls = []
        self.fetch_at = None
        self.fallback = {"worker": gone, "t": self.now(), "version": self.ledger.version}
        print(
            f"hetsync: {self.label}: worker {gone} left the collective path's group at {self.fallback['t']:.1f} s: "
            "the run goes on through rank 0 (path ps); the round in flight is lost",
            file=sys.stderr,
            flush=True,
        )
        for w in sorted(self.srv.alive):  # (one whose ring no longer touches the dead may wait for a round)
            self.srv._send(w, P.LeaveGroupCmd())
        if self.srv.alive:
            self._fetch(self.now())

    def _fetched(self, w: int, payload: torch.Tensor | None) -> None:
        self.paid(w, self.now())
        if w in self.leaving:  # (its loop has ended: this may have been all it owed)
            self._exit_when_square(w)
        at, self.fetch_at = self.fetch_at, None
        if payload is None or at is None:
            return
        self.ledger.theta = payload.clone()
        if self.held_pulls is not None:  # the fall-back's model: the pulls that waited go now
            held, self.held_pulls = self.held_pulls, None
            self._execute(list(held))
            return
        self.evaluate_model(at)

    def _fetch_final(self) -> None:
        """The run's final model, from a worker, before they stop."""
        deadline = time.time() + self.srv.opts.worker_timeout_s
        while self.srv.alive and time.time() < deadline:
            if self.fetch_at is None:
                self._fetch(self.now())
            try:
                w, report, payload, error = self.srv.take(max(0.01, deadline - time.time()))
            except queue.Empty:
                return
            if error is not None:
                self.left(w, error)
                self.fetch_at = None
            elif isinstance(report, P.Fetched):
                self.paid(w, self.now())
                self.fetch_at = None
                if payload is not None:
                    self.ledger.theta = payload.clone()
                return

    def post(self, w: int, cmd: P.Command, payload: torch.Tensor | None = None, *, owes: bool = True) -> bool:
        """Send a command; ``owes``: the worker owes one report for it."""
        now = self.now()
        if not self.srv._send(w, cmd, payload):
            return False
        if owes:
            self.watchdog.owe(w, now)
        return True

    def paid(self, w: int, now: float) -> None:
        """A report owed by ``w`` came in (or is forgiven)."""
        self.watchdog.paid(w, now)

    # ------------------------------------------------------- evaluation
    def _evaluator(self) -> BackgroundEvaluator | None:
        """The thread that evaluates beside the loop (None: evaluations run on it)."""
        wl = self.srv.workload
        if not (self.srv.opts.background_eval and wl.metrics):
            return None
        own = getattr(wl, "evaluator", None)  # hetsync.loop's ModuleModel: on a copy of the user's module
        return own() if own is not None else BackgroundEvaluator(wl.evaluate_metrics)

    def evaluate_model(self, now: float) -> None:
        """Evaluate the global model as it is at ``now``: on the evaluator's
        thread (its result is booked when it comes back), or here."""
        led, ev = self.ledger, self.evaluator
        if ev is None:
            if led.wants_evaluation(now):
                began, cpu0 = time.time(), time.thread_time()
                led.evaluate(now, self.whole_model())
                self.eval_spent.append(Spent(began, time.time(), time.thread_time() - cpu0))
        elif led.wants_evaluation(now) and ev.last_s != now:
            model = self.whole_model()
            assert model is not None
            ev.submit(now, model, led.version)

    def _eval_figures(self, now: float) -> dict[str, Any]:
        """What evaluating cost the run up to ``now`` (summary: ``eval_time_s``,
        ``eval_share``, ``eval_beside``, ``evals_skipped``): the time an
        evaluation was running, beside the loop or on it; evaluations run one
        at a time, so the share is at most 1."""
        ev, end = self.evaluator, self.epoch + now
        spent = [*self.eval_spent, *(ev.spent if ev is not None else [])]
        this_leg = sum(max(0.0, min(s.ended, end) - s.began) for s in spent)
        eval_s = float(self.eval_before["eval_time_s"]) + this_leg
        return {
            "eval_time_s": eval_s,
            "eval_share": min(1.0, eval_s / now) if now > 0 else 0.0,
            "eval_beside": ev is not None if self.srv.workload.metrics else None,
            "evals_skipped": int(self.eval_before["evals_skipped"]) + (ev.skipped if ev is not None else 0),
        }

    def _eval_warning(self, figures: dict[str, Any], wall: float) -> str | None:
        """One line when evaluating still dominates the run: evaluations slower
        than the interval (results sparser than asked), ones that held up the
        loop, or an evaluator that competes with the workers for this machine's CPUs."""
        ev = self.evaluator
        spent = [*self.eval_spent, *(ev.spent if ev is not None else [])]
        if not spent or wall <= 0:
            return None
        mean_s = sum(s.ended - s.began for s in spent) / len(spent)
        said = []
        skipped = figures["evals_skipped"]
        if mean_s > self.eval_every_s:  # (a few skipped by one slow evaluation: evals_skipped says so)
            why = f": {skipped} were skipped (each evaluates the newest model when the previous one ends)"
            said.append(
                f"an evaluation took {mean_s:.3g} s on average, longer than eval_every_s={self.eval_every_s:g} s, "
                f"so the curve is sparser than asked{why if skipped else ''}"
            )
        if not figures["eval_beside"] and figures["eval_share"] >= EVAL_SHARE_WARN:
            said.append(
                f"evaluations ran on the server's loop {figures['eval_share']:.0%} of the run, "
                "and no worker was served meanwhile"
            )
        cpu_share = sum(s.cpu_s for s in spent if s.began < self.epoch + wall) / wall
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        processes = self.srv.n + 1
        if figures["eval_beside"] and cpu_share >= EVAL_CPU_WARN and _all_ranks_here() and processes >= cpus:
            said.append(
                f"the evaluator kept {cpu_share:.0%} of a CPU busy on this machine, whose {cpus} CPUs "
                f"run the server and {self.srv.n} workers: it competes with them"
            )
        if not said:
            return None
        return "evaluation: " + "; ".join(said) + "; raise eval_every_s or evaluate on less data"

    def _record_evaluations(self, *, wait: bool = False) -> None:
        """Book the evaluator's finished results (``wait``: all of those asked for)."""
        if self.evaluator is not None:
            for at_s, values, version in self.evaluator.drain() if wait else self.evaluator.ready():
                self.ledger.record_evaluation(at_s, values, version)

    # ------------------------------------------------------ checkpoints
    def _checkpoint(self, now: float, *, periodic: bool = False) -> None:
        if self.checkpointer.path is not None:
            # the last checkpoint's curve holds every evaluation asked for; a periodic one those that
            # came back (waiting for the evaluator would hold up the loop as long as it evaluates)
            self._record_evaluations(wait=not periodic)
            if self.collective:
                self._snapshot(now, wait=not periodic)
            else:
                self.checkpointer.save(self.checkpoint_state(now))

    def _snapshot(self, now: float, *, wait: bool) -> None:
        """A checkpoint on the collective path, where the model and the
        server's optimizer state live on the workers: every worker saves its
        copies of the optimizers once its model is at the ledger's version
        (beside the checkpoint, as local optimizer state is), and one sends
        that model, which completes the checkpoint (:meth:`_snapshotted`).
        ``wait``: until it has come (the run is ending), else it comes while
        the loop goes on (one at a time)."""
        alive = self.srv.alive
        members = alive | self.parked  # (a loop that ended holds the round's model too, until EXIT)
        if (self.snapshot is not None and not wait) or not members:
            return
        self.snapshot = self.checkpoint_state(now)
        sender = min(alive) if alive else min(members)
        for w in sorted(members):
            cmd = P.SnapshotCmd(version=self.ledger.version, send_model=w == sender)
            if w == sender and w in alive:
                self.post(w, cmd)
            else:
                self.srv._send(w, cmd)
        if not wait:
            return
        deadline = time.time() + self.srv.opts.worker_timeout_s
        while self.snapshot is not None and time.time() < deadline:
            try:
                w, report, payload, error = self.srv.take(max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if error is not None:
                self.left(w, error)
                if w == sender:
                    break
            elif isinstance(report, P.Snapshot):
                self._snapshotted(w, report, payload)
        self.snapshot = None  # (not come in time: the last checkpoint stays)

    def _snapshotted(self, w: int, rep: P.Snapshot, payload: torch.Tensor | None) -> None:
        self.paid(w, self.now())
        state, self.snapshot = self.snapshot, None
        if state is None or payload is None or rep.version != state["version"]:
            return
        state["theta"] = payload.clone()
        self.checkpointer.save(state)

    def checkpoint_state(self, now: float) -> dict[str, Any]:
        """Everything a resumed run needs to go on as if it had not stopped:
        the model, the optimizers, the policy's learned state, the ledger's
        accounting, each worker's books (compute and comm time, steps, samples
        drawn: its data position) and how long the trace was at ``now``
        (written out first, so the file holds at least that much)."""
        led = self.ledger
        trace_bytes = self.trace.flush()
        p2p: dict[str, Any] = {}
        if self.p2p is not None:
            since = self.p2p.comm_s(self.offset_s, now)
            p2p = {
                "comm_s": [before + x for before, x in zip(self._p2p_comm_before, since, strict=True)],
                "stats": dataclasses.asdict(self.core.stats),
            }
        optimizer_state, outer_state = led.stepper.state_dict(), led.outer.state_dict()
        if self.srv.shards is not None:  # the whole model's, as an unsharded run's checkpoint holds
            sizes = [hi - lo for lo, hi in self.srv.ranges or []]
            theirs = self.srv.shards.states()
            optimizer_state = join_states([optimizer_state, *(st for st, _ in theirs)], sizes)
            outer_state = join_states([outer_state, *(st for _, st in theirs)], sizes)
        return {
            "theta": self.whole_model(),
            "version": led.version,
            "elapsed_s": now,
            "steps": led.applied_steps,
            "curve": led.curve,
            "policy": self.label,
            "scenario": self.sc.name,
            "policy_state": self.policy.state_dict(),
            "optimizer_state": optimizer_state,
            "outer_optimizer_state": outer_state,
            "fragment_outer_states": led.fragment_states(),  # (Streaming DiLoCo's, one per fragment)
            "applied_samples": led.applied_samples,
            "ledger": led.state_dict(),
            "peers": [{key: getattr(p, key) for key in _Peer.CHECKPOINTED} for p in self.peers],
            "p2p": p2p,
            "trace_bytes": trace_bytes,
            "eval": {key: value for key, value in self._eval_figures(now).items() if key in self.eval_before},
        }

    def _fresh_on_resume(self) -> list[str]:
        """What a resumed run cannot restore (summary ``resumed_from.fresh``)."""
        fresh = []
        if self.resumed and self.resumed.get("lost_steps"):
            fresh.append("work in progress at the checkpoint (done again; its steps are dropped, reason restart)")
        missing = self._unsaved_local_state
        if self.local_steps and not local_steppers(self.sc, self.policy)[0].plain and missing:
            fresh.append(f"the optimizer state for local steps (momentum, Adam moments) of workers {missing}")
        if self.collective and missing and not self._round_steppers_plain():
            fresh.append(
                f"the server's optimizer state (on the collective path each worker's copy) of workers {missing}"
            )
        return fresh

    def _round_steppers_plain(self) -> bool:
        """Whether the optimizers a collective run's workers copy hold no state (plain SGD)."""
        kind = self.policy.collective_kind
        return (self.ledger.outer if kind == "delta" else self.ledger.stepper).plain

    def _resume(self, state: dict[str, Any]) -> None:
        """Go on with the checkpoint's books: a ``resume`` record, then the
        ledger's accounting and every worker's."""
        t = self.offset_s
        self.trace.write({"t": t, "ev": "resume", "version": int(state["version"]), "steps": int(state["steps"])})
        self.eval_before.update(state.get("eval", {}))  # (checkpoints from before it have none)
        assert self.resumed is not None
        sc, started = self.sc, int(state["ledger"]["started_steps"])
        budget = self.core.budget
        goes_on = (sc.stop.max_time_s is None or t < sc.stop.max_time_s) and (budget is None or started < budget)
        self.resumed["lost_steps"] = self.ledger.load_state_dict(state["ledger"], t, goes_on=goes_on)
        for p, saved in zip(self.peers, state["peers"], strict=True):
            for key in _Peer.CHECKPOINTED:
                setattr(p, key, type(getattr(p, key))(saved[key]))
        if self.p2p is not None and state["p2p"]:
            self._p2p_comm_before = [float(x) for x in state["p2p"]["comm_s"]]
            self.core.stats = ExchangeStats(**state["p2p"]["stats"])
