"""The server process (rank 0): runs the policy against real workers.

It holds the global model and the policy, turns the policy's commands into
messages (``protocol``), and turns the workers' reports back into events.
For a peer-to-peer policy it is only the coordinator: it holds no model
during the run and no model data passes through it (see
:mod:`hetsync.runtime.p2p`, which also says how evaluation works there).
One receiver thread per worker posts a blocking receive from that worker
and queues what arrives; the main thread waits on the queue with a timeout,
so timers, evaluations and checkpoints happen on time.

Why a receive per worker and not one receive-from-any-source: measured on
gloo, a receive from a named peer fails within milliseconds when that peer's
process dies (its connection resets), while a receive-from-any keeps waiting
until the group's timeout. A worker that stays alive but silent longer than
``worker_timeout_s`` while it owes a report is declared gone as well.

Either way the policy gets ``WorkerLeft`` and the run goes on with the rest;
the summary's ``workers_left`` says who and when.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hetsync.errors import BadInput, DeadlockError, PolicyError
from hetsync.ledger import ExchangeStats, HeldPush, Ledger
from hetsync.optim import Stepper, gradient_stepper, local_steppers, outer_stepper
from hetsync.policies import make_policy
from hetsync.policies.base import (
    AllReduce,
    Apply,
    Command,
    Compute,
    ComputeDone,
    Drop,
    Event,
    Multicast,
    Pull,
    PullDone,
    Push,
    PushArrived,
    SetTimer,
    TimerFired,
    WorkerLeft,
)
from hetsync.runtime import checkpoint_check
from hetsync.runtime import protocol as P
from hetsync.runtime.p2p import Coordinator
from hetsync.scenario import Scenario
from hetsync.sim.engine import policy_context
from hetsync.trace import TraceWriter
from hetsync.workloads import Workload

DEFAULT_EVAL_EVERY_S = 0.5  # for step-limited runs without eval_every_s
PROGRESS_LINE_S = 5.0  # how often a progress line is printed, when it is
CHECKPOINT_FORMAT = 2  # 2: with the accounting, the workers' books and the trace length


@dataclass
class RuntimeOptions:
    out_dir: Path
    worker_timeout_s: float = 60.0
    checkpoint_dir: Path | None = None
    checkpoint_every_s: float = 10.0
    resume: bool = False
    progress_lines: bool = False  # print a progress line every PROGRESS_LINE_S (under plain torchrun)


@dataclass
class _Peer:
    """What the server knows about one worker during a run."""

    outstanding: int = 0  # commands sent, not yet reported
    owed_since_s: float = 0.0  # when the oldest unreported command was sent
    compute_s: float = 0.0
    comm_s: float = 0.0
    steps: int = 0
    samples: int = 0  # drawn by the worker's sampler in the steps it reported

    CHECKPOINTED = ("compute_s", "comm_s", "steps", "samples")


class ServerProcess:
    def __init__(
        self, scenario: Scenario, workload: Workload, opts: RuntimeOptions, *, gradient_stepper: Stepper | None = None
    ) -> None:
        if workload.metrics:  # (a training loop without an evaluation reports none)
            scenario.target_direction_for(workload.name, workload.metrics)  # BadInput: a metric it lacks
        # the optimizer for gradient pushes: the scenario's, or (hetsync.loop) the user's own
        self.gradient_stepper = gradient_stepper
        self.sc = scenario
        self.n = scenario.workers
        self.workload = workload
        self.opts = opts
        self.nbytes = scenario.model_bytes if scenario.model_bytes is not None else workload.model_nbytes
        self.alive = set(range(self.n))
        self.inbox: queue.Queue[tuple[int, torch.Tensor | None, torch.Tensor | None, str | None]] = queue.Queue()
        self._sends: list[tuple[Any, tuple[torch.Tensor, ...]]] = []
        self.channel = P.Channel(workload.n_params, P.report_has_payload)
        self._commands = P.Channel(workload.n_params, P.command_has_payload)
        self._exchanges = 0  # p2p exchange ids, unique over the server's life (they make the tags)
        for w in range(self.n):
            threading.Thread(target=self._receive, args=(w,), daemon=True, name=f"rx-{w}").start()

    # ------------------------------------------------------------ wire
    def _receive(self, w: int) -> None:
        rank = w + 1
        while True:
            try:
                hdr, payload = self.channel.recv(rank)
            except Exception as e:  # the peer is gone: its connection reset
                self.inbox.put((w, None, None, f"connection lost: {str(e).splitlines()[0][:160]}"))
                return
            self.inbox.put((w, hdr, payload, None))

    def new_exchange(self) -> int:
        self._exchanges += 1
        return self._exchanges

    def _send(
        self, w: int, hdr: torch.Tensor, payload: torch.Tensor | None = None, peers: tuple[int, ...] | None = None
    ) -> bool:
        tensors = tuple(self._commands.pack(hdr, payload))
        if peers is not None:  # MULTICAST / ALLREDUCE: the worker list follows
            tensors += (torch.tensor(peers, dtype=torch.int64),)
        try:
            for t in tensors:
                self._sends.append((dist.isend(t, dst=w + 1), tensors))
        except Exception as e:
            self.inbox.put((w, None, None, f"send failed: {str(e).splitlines()[0][:160]}"))
            return False
        return True

    def _reap_sends(self, wait: bool = False) -> None:
        keep = []
        for work, tensors in self._sends:
            if wait:
                try:
                    work.wait()
                except Exception:  # the receiver died; its receiver thread reports it
                    continue
            elif not work.is_completed():
                keep.append((work, tensors))
        self._sends = keep

    def shutdown(self) -> None:
        for w in sorted(self.alive):
            hdr = P.header()
            hdr[P.H_TYPE] = P.C_EXIT
            self._send(w, hdr)
        self._reap_sends(wait=True)

    # ------------------------------------------------------------- run
    def run(self, spec: str, trace_path: Path | None, run_index: int = 0) -> dict[str, Any]:
        run = _Run(self, spec, trace_path, run_index)
        summary = run.execute()
        self.last_model = run.ledger.theta
        return summary


class _Run:
    """One policy's run on the live workers."""

    def __init__(self, server: ServerProcess, spec: str, trace_path: Path | None, run_index: int) -> None:
        self.srv = server
        self.sc = server.sc
        self.policy = make_policy(spec, policy_context(server.sc, server.nbytes))
        self.label = self.policy.label
        self.p2p = Coordinator(self) if self.policy.topology == "p2p" else None
        self.computing: set[int] = set()  # workers with a step in progress
        self.local_steps = False  # the policy had workers take steps locally (with their own optimizer)
        self.stopping = False  # the run is over: commands the policy still gives are not sent
        self.trace_path = trace_path
        self.run_index = run_index
        self.peers = [_Peer() for _ in range(server.n)]
        self._p2p_comm_before = [0.0] * server.n  # a resumed p2p run: comm time booked before its checkpoint
        self.timers: list[tuple[float, int, str]] = []
        self._timer_seq = 0
        sc = self.sc
        self.budget = sc.max_steps * server.n if sc.max_steps is not None else None
        self.eval_every_s = sc.eval_every_s or (sc.max_time_s / 40 if sc.max_time_s else DEFAULT_EVAL_EVERY_S)
        self.resumed: dict[str, Any] | None = None
        theta = server.workload.init_params(sc.seed)
        version, self.offset_s = 0, 0.0
        ckpt = self._checkpoint_path()
        self._restore: dict[str, Any] | None = None  # the checkpoint a resumed run continues
        trace_at: int | None = None
        if server.opts.resume and ckpt is not None and ckpt.exists():
            state = self._load_checkpoint(ckpt, theta)
            theta, version, self.offset_s = state["theta"], int(state["version"]), float(state["elapsed_s"])
            self.policy.load_state_dict(state["policy_state"])
            trace_at, trace_note = self._trace_resume_point(int(state["trace_bytes"]))
            self._restore = state
            self.resumed = {
                "version": version,
                "elapsed_s": self.offset_s,
                "steps": int(state["steps"]),
                "trace": trace_note,
            }
        self.trace = TraceWriter(trace_path, resume_at=trace_at)
        self.ledger = Ledger(
            self.policy,
            server.workload,
            theta,
            self.trace,
            version=version,
            stepper=server.gradient_stepper if server.gradient_stepper is not None else gradient_stepper(sc),
            outer=outer_stepper(sc, self.policy),
            global_batch=server.n * sc.batch_size,
        )
        if self._restore is not None:
            # the server's optimizer state (momentum, Adam moments) goes on; its
            # schedule clock and the rest of the accounting with the ledger (execute)
            self.ledger.stepper.load_state_dict(self._restore.get("optimizer_state", {}))
            self.ledger.outer.load_state_dict(self._restore.get("outer_optimizer_state", {}))
        self.stop_reason = "drained"
        self._last_line_s = 0.0  # the last progress line printed

    # ----------------------------------------------------------- clock
    def now(self) -> float:
        return time.time() - self.epoch

    # ------------------------------------------------------- lifecycle
    def execute(self) -> dict[str, Any]:
        host_t0 = time.perf_counter()
        srv, sc = self.srv, self.sc
        self.epoch = time.time() - self.offset_s  # a resumed run's clock goes on from its checkpoint
        if self.resumed is None or self.resumed["trace"] != "continued":
            self.trace.write(
                {
                    "t": self.offset_s,
                    "ev": "start",
                    "workers": srv.n,
                    "policy": self.label,
                    "scenario": sc.name,
                    "seed": sc.seed,
                    "model_nbytes": srv.nbytes,
                    "driver": "dist",
                }
            )
        if self._restore is not None:
            self._resume(self._restore)
        try:
            self._reset_workers()
            start = self.now()
            for w in sorted(set(range(srv.n)) - srv.alive):
                self._left(w, "left before the run")
            self.ledger.evaluate(start)
            self.trace.flush()  # and at every evaluation: a server that dies leaves a readable trace
            self.next_eval = start + self.eval_every_s
            self.next_ckpt = start + srv.opts.checkpoint_every_s
            self._execute(self.policy.start(start))
            self._loop()
            wall = self.now()
            self._stop_workers()
            if self.p2p is not None:
                self.p2p.final_evaluation(wall)
            else:
                self.ledger.evaluate(wall)
            self._save_checkpoint(wall)
            self.trace.write({"t": wall, "ev": "end", "wall_time_s": wall, "reason": self.stop_reason})
        finally:
            self.trace.close(sync=True)
        peers = self.peers
        if self.resumed is not None:
            self.resumed["fresh"] = self._fresh_on_resume()
        extra: dict[str, Any] = {"resumed_from": self.resumed}
        comm_s = [p.comm_s for p in peers]
        if self.p2p is not None:
            since = self.p2p.comm_s(self.offset_s, wall)
            comm_s = [before + now for before, now in zip(self._p2p_comm_before, since, strict=True)]
            extra.update(self.p2p.summary(wall))
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
        for w in sorted(srv.alive):
            hdr = P.header()
            hdr[P.H_TYPE] = P.C_RESET
            hdr[P.H_EPOCH_US] = P.to_us(self.epoch)
            hdr[P.H_VERSION] = self.ledger.version
            hdr[P.H_RUN] = self.run_index
            hdr[P.H_P2P] = int(self.p2p is not None)
            # a resumed run: the worker's step numbers, data order and timing noise go on from there
            hdr[P.H_FIRST_STEP] = self.peers[w].steps
            hdr[P.H_DRAWN] = self.peers[w].samples
            srv._send(w, hdr, self.ledger.theta)
        self._await_all(P.R_RESET)

    def _stop_workers(self) -> None:
        srv = self.srv
        self.stopping = True
        for w in sorted(srv.alive):
            hdr = P.header()
            hdr[P.H_TYPE] = P.C_STOP
            srv._send(w, hdr)
        self._await_all(P.R_BYE)
        srv._reap_sends(wait=True)

    def _await_all(self, kind: int) -> None:
        """Wait for a ``kind`` reply from every live worker; other reports
        (work that was in flight) are discarded, deaths recorded."""
        waiting = set(self.srv.alive)
        deadline = time.time() + self.srv.opts.worker_timeout_s
        while waiting:
            try:
                w, hdr, _, error = self.srv.inbox.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                for w in sorted(waiting):
                    self._left(w, f"no reply within worker_timeout_s={self.srv.opts.worker_timeout_s}")
                return
            if error is not None:
                self._left(w, error)
                waiting.discard(w)
            elif hdr is not None and int(hdr[P.R_TYPE]) & kind:
                waiting.discard(w)

    # ------------------------------------------------------------ loop
    def _loop(self) -> None:
        srv, sc = self.srv, self.sc
        limit = sc.max_time_s if sc.max_time_s is not None else float("inf")
        last_progress = 0.0
        while True:
            now = self.now()
            if now >= limit:
                self.stop_reason = "max_time"
                return
            busy = any(self.peers[w].outstanding for w in srv.alive)
            spent = self.budget is not None and self.ledger.started_steps >= self.budget
            if not busy and (spent or not srv.alive):
                self.stop_reason = "max_steps" if spent else "no workers left"
                return
            if not busy and not self.timers:
                raise DeadlockError(
                    f"{self.label} stalled at t={now:.3f}s: no worker has work and no timer is set "
                    f"({self.ledger.started_steps} steps started, workers alive: {sorted(srv.alive)})"
                )
            wake = min(limit, self.next_eval, self.timers[0][0] if self.timers else limit)
            try:
                item = srv.inbox.get(timeout=min(1.0, max(0.0, wake - now)))
            except queue.Empty:
                item = None
            now = self.now()
            if item is not None:
                w, hdr, payload, error = item
                if error is not None:
                    self._left(w, error)
                elif w in srv.alive and hdr is not None:
                    self._report(w, hdr, payload, now)
            while self.timers and self.timers[0][0] <= now:
                at, _, tag = heapq.heappop(self.timers)
                self._deliver(TimerFired(now_s=now, tag=tag))
            self._watchdog(now)
            if now >= self.next_eval:
                if self.p2p is not None:
                    self.p2p.evaluate(now)
                else:
                    self.ledger.evaluate(now)
                self.next_eval = now + self.eval_every_s
                self.trace.flush()
            if self.srv.opts.checkpoint_dir is not None and now >= self.next_ckpt:
                self._save_checkpoint(now)
                self.next_ckpt = now + self.srv.opts.checkpoint_every_s
            if now - last_progress >= 0.5:
                last_progress = now
                self._progress(now)
                srv._reap_sends()

    def _watchdog(self, now: float) -> None:
        timeout = self.srv.opts.worker_timeout_s
        for w in sorted(self.srv.alive):
            p = self.peers[w]
            if p.outstanding and now - p.owed_since_s > timeout:
                self._left(w, f"no reply within worker_timeout_s={timeout}")

    def _progress(self, now: float) -> None:
        parts = []
        if self.sc.max_time_s is not None:
            parts.append(now / self.sc.max_time_s)
        if self.budget is not None:
            parts.append(self.ledger.started_steps / self.budget)
        fraction = min(1.0, max(parts)) if parts else 0.0
        path = self.srv.opts.out_dir / "progress.json"
        tmp = path.with_name(".progress.tmp")
        tmp.write_text(json.dumps({"label": self.label, "run": self.run_index, "fraction": fraction}))
        os.replace(tmp, path)
        if self.srv.opts.progress_lines and now - self._last_line_s >= PROGRESS_LINE_S:
            self._last_line_s = now
            print(self._progress_line(now), flush=True)

    def _progress_line(self, now: float) -> str:
        """``hetsync: bsp  12.0 s · 340 steps · 4 workers · accuracy 0.912`` (the last evaluation)."""
        led = self.ledger
        parts = [f"{now:.1f} s", f"{led.steps} steps", f"{len(self.srv.alive)} workers"]
        names = list(self.srv.workload.metrics)
        if led.curve and names:
            metric = self.sc.target_metric if self.sc.target_metric in names else names[0]
            value = led.curve[-1][1 + names.index(metric)]
            parts.append(f"{metric} {value:.4g}" if value is not None else f"{metric} diverged")
        return f"hetsync: {self.label}  " + " · ".join(parts)

    # --------------------------------------------------------- reports
    def _report(self, w: int, hdr: torch.Tensor, payload: torch.Tensor | None, now: float) -> None:
        kind = int(hdr[P.R_TYPE])
        if kind & (P.R_ARRIVED | P.R_REDUCED | P.R_FETCHED | P.R_LOST):
            if self.p2p is not None:
                self.p2p.report(w, hdr, payload, now)
            return
        if kind & P.R_LEAVING:  # its own training loop ended (hetsync.loop)
            if self.p2p is not None and payload is not None:
                self.p2p.finished[w] = payload  # its model stays in the final average
            self._left(w, "its training loop ended")
            bye = P.header()
            bye[P.H_TYPE] = P.C_EXIT
            self.srv._send(w, bye)
            return
        p = self.peers[w]
        self._paid(w, now)
        led = self.ledger
        if kind & P.R_PULLED:
            sent = P.from_us(int(hdr[P.R_PULL_START_US]))  # sent, and the worker free to take it
            end = P.from_us(int(hdr[P.R_PULL_END_US]))
            version = int(hdr[P.R_VERSION])
            p.comm_s += max(0.0, end - sent)
            led.bytes_sent += self.srv.nbytes
            if int(hdr[P.R_OVERWRITTEN]):
                led.overwritten(w, int(hdr[P.R_OVERWRITTEN]), now)
            self.trace.write(
                {"t": sent, "ev": "pull", "w": w, "end": end, "version": version, "nbytes": self.srv.nbytes}
            )
            self._deliver(PullDone(now_s=now, worker=w, version=version))
        if kind & P.R_COMPUTED:
            start, end = P.from_us(int(hdr[P.R_C_START_US])), P.from_us(int(hdr[P.R_C_END_US]))
            batch, base, step = int(hdr[P.R_BATCH]), int(hdr[P.R_BASE]), int(hdr[P.R_STEP])
            p.compute_s += end - start
            p.steps += 1
            p.samples += batch
            led.steps += 1
            led.samples += batch
            led.applied_steps += int(hdr[P.R_COMMITTED])  # p2p: the step is the update
            self.computing.discard(w)
            if self.p2p is not None:
                self.p2p.computed(w, start, end)
            if int(hdr[P.R_REPLACED]):
                led.overwritten(w, 1, now)
            self.trace.write(
                {"t": start, "ev": "compute", "w": w, "end": end, "step": step, "batch": batch, "base": base}
            )
            self._deliver(
                ComputeDone(
                    now_s=now,
                    worker=w,
                    step=step,
                    batch_size=batch,
                    base_version=base,
                    duration_s=end - start,
                    load=P.get_float(hdr, P.R_LOAD),
                    uplink_Bps=P.get_float(hdr, P.R_UP_BPS),
                    downlink_Bps=P.get_float(hdr, P.R_DOWN_BPS),
                )
            )
        if kind & P.R_PUSHED:
            start = P.from_us(int(hdr[P.R_P_START_US]))
            push_kind = P.KIND_NAMES[int(hdr[P.R_P_KIND])]
            steps, samples, base = int(hdr[P.R_P_STEPS]), int(hdr[P.R_P_SAMPLES]), int(hdr[P.R_P_BASE])
            lr_scale = P.get_float(hdr, P.R_LR_SCALE) if int(hdr[P.R_LR_SCALE]) else 1.0
            push_id = led.hold(HeldPush(w, push_kind, payload, base, steps, samples, lr_scale))
            p.comm_s += max(0.0, now - start)
            led.bytes_sent += self.srv.nbytes
            self.trace.write(
                {
                    "t": start,
                    "ev": "push",
                    "w": w,
                    "end": now,
                    "id": push_id,
                    "kind": push_kind,
                    "nbytes": self.srv.nbytes,
                    "steps": steps,
                }
            )
            self._deliver(
                PushArrived(
                    now_s=now,
                    worker=w,
                    push_id=push_id,
                    kind=push_kind,  # type: ignore[arg-type]
                    base_version=base,
                    steps=steps,
                    samples=samples,
                )
            )

    def _left(self, w: int, reason: str) -> None:
        srv = self.srv
        if w not in srv.alive and any(x["worker"] == w for x in self.ledger.left):
            return
        srv.alive.discard(w)
        now = self.now()
        self.peers[w].outstanding = 0
        self.computing.discard(w)
        self.ledger.left.append({"worker": w, "t": now, "reason": reason})
        self.trace.write({"t": now, "ev": "left", "w": w, "reason": reason})
        if self.p2p is not None:
            self.p2p.left(w, now)
        self._deliver(WorkerLeft(now_s=now, worker=w))

    # -------------------------------------------------------- commands
    def _deliver(self, event: Event) -> None:
        self._execute(self.policy.on_event(event))

    def _execute(self, commands: list[Command]) -> None:
        if self.stopping:
            return
        for cmd in commands:
            if isinstance(cmd, (Compute, Pull, Push)):
                if self.p2p is not None and not isinstance(cmd, Compute):
                    raise PolicyError(f"{self.label}: {type(cmd).__name__} in a peer-to-peer run (there is no server)")
                self._command(cmd)
            elif isinstance(cmd, (Multicast, AllReduce)):
                if self.p2p is None:
                    raise PolicyError(
                        f"{self.label}: {type(cmd).__name__} is a peer-to-peer command; set topology = 'p2p'"
                    )
                if isinstance(cmd, Multicast):
                    self.p2p.multicast(cmd, self.now())
                else:
                    self.p2p.allreduce(cmd, self.now())
            elif isinstance(cmd, Apply):
                self.ledger.apply(cmd, self.now())
            elif isinstance(cmd, Drop):
                self.ledger.drop(cmd, self.now())
            elif isinstance(cmd, SetTimer):
                self._timer_seq += 1
                heapq.heappush(self.timers, (cmd.at_s, self._timer_seq, cmd.tag))
            else:
                raise PolicyError(f"{self.label}: unknown command {cmd!r}")

    def _budget_allows(self) -> bool:
        led = self.ledger
        if self.budget is not None and led.started_steps >= self.budget:
            return False
        led.started_steps += 1
        return True

    def _command(self, cmd: Compute | Pull | Push) -> None:
        w = cmd.worker
        if not 0 <= w < self.srv.n:
            raise PolicyError(f"{self.label}: {type(cmd).__name__} names worker {w}, not in 0..{self.srv.n - 1}")
        if w not in self.srv.alive:
            return
        hdr = P.header()
        payload = None
        now = self.now()
        step = cmd if isinstance(cmd, Compute) else cmd.then if isinstance(cmd, Pull) else None
        if isinstance(cmd, Push):
            hdr[P.H_TYPE] = P.C_PUSH
            hdr[P.H_PUSH_KIND] = P.KINDS[cmd.kind]
        if isinstance(cmd, Pull):
            hdr[P.H_TYPE] |= P.C_PULL
            hdr[P.H_VERSION] = self.ledger.version
            hdr[P.H_SENT_US] = P.to_us(now)
            payload = self.ledger.theta
        if step is not None and self.p2p is not None and step.local_lr is None:
            raise PolicyError(f"{self.label}: peer-to-peer steps must set Compute.local_lr (there is no server)")
        if step is not None and self._budget_allows():
            hdr[P.H_TYPE] |= P.C_COMPUTE
            hdr[P.H_BATCH] = step.batch_size
            if step.local_lr is not None:
                self.local_steps = True
                hdr[P.H_HAS_LR] = 1
                P.put_float(hdr, P.H_LR, step.local_lr)
            hdr[P.H_PUSH_AFTER] = P.KINDS[step.push] if step.push is not None else 0
        if int(hdr[P.H_TYPE]) == 0:
            return  # a step the budget no longer allows
        if self._post(w, hdr, payload) and int(hdr[P.H_TYPE]) & P.C_COMPUTE:
            self.computing.add(w)

    def _post(
        self,
        w: int,
        hdr: torch.Tensor,
        payload: torch.Tensor | None = None,
        *,
        peers: tuple[int, ...] | None = None,
        owes: bool = True,
    ) -> bool:
        """Send a command; ``owes``: the worker owes one report for it."""
        now = self.now()
        if not self.srv._send(w, hdr, payload, peers):
            return False
        if owes:
            p = self.peers[w]
            if p.outstanding == 0:
                p.owed_since_s = now
            p.outstanding += 1
        return True

    def _paid(self, w: int, now: float) -> None:
        """A report owed by ``w`` came in (or is forgiven)."""
        p = self.peers[w]
        p.outstanding = max(0, p.outstanding - 1)
        p.owed_since_s = now

    # ------------------------------------------------------ checkpoints
    def _checkpoint_path(self) -> Path | None:
        from hetsync.report import safe_name

        d = self.srv.opts.checkpoint_dir
        return None if d is None else d / f"ckpt-{safe_name(self.label)}.pt"

    def _identity(self) -> dict[str, Any]:
        """What a checkpoint must share with the run that resumes it."""
        return checkpoint_check.identity(self.sc, self.srv.workload, self.label, self.srv.n)

    def _save_checkpoint(self, now: float) -> None:
        """Everything a resumed run needs to go on as if it had not stopped:
        the model, the optimizers, the policy's learned state, the ledger's
        accounting, each worker's books (compute and comm time, steps, samples
        drawn: its data position) and how long the trace was at ``now``
        (written out first, so the file holds at least that much)."""
        path = self._checkpoint_path()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        led = self.ledger
        trace_bytes = self.trace.flush()
        p2p: dict[str, Any] = {}
        if self.p2p is not None:
            since = self.p2p.comm_s(self.offset_s, now)
            p2p = {
                "comm_s": [before + x for before, x in zip(self._p2p_comm_before, since, strict=True)],
                "stats": dataclasses.asdict(self.p2p.stats),
            }
        state = {
            "format": CHECKPOINT_FORMAT,
            "identity": self._identity(),
            "theta": led.theta,
            "version": led.version,
            "elapsed_s": now,
            "steps": led.applied_steps,
            "curve": led.curve,
            "policy": self.label,
            "scenario": self.sc.name,
            "policy_state": self.policy.state_dict(),
            "optimizer_state": led.stepper.state_dict(),
            "outer_optimizer_state": led.outer.state_dict(),
            "applied_samples": led.applied_samples,
            "ledger": led.state_dict(),
            "peers": [{key: getattr(p, key) for key in _Peer.CHECKPOINTED} for p in self.peers],
            "p2p": p2p,
            "trace_bytes": trace_bytes,
        }
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    def _load_checkpoint(self, path: Path, theta: torch.Tensor | None) -> dict[str, Any]:
        """The checkpoint at ``path``, refused (BadInput) unless this format,
        sane, and saved by a run of this scenario, workload, worker count,
        seed and policy (the CLI checks the same before launching)."""
        state = checkpoint_check.read_checkpoint(path)
        checkpoint_check.check_format(path, state)
        checkpoint_check.check_identity(path, state, self._identity())
        checkpoint_check.check_state(path, state, theta)
        books = (state.get("ledger"), state.get("peers"), state.get("p2p"), state.get("trace_bytes"))
        ledger, peers, p2p, trace_bytes = books
        if not (
            isinstance(ledger, dict)
            and isinstance(peers, list)
            and len(peers) == self.srv.n
            and isinstance(p2p, dict)
            and isinstance(trace_bytes, int)
            and trace_bytes >= 0
        ):
            raise BadInput(f"checkpoint {str(path)!r} lacks the run's accounting: it is damaged")
        return state

    def _trace_resume_point(self, nbytes: int) -> tuple[int | None, str]:
        """Where the resumed run continues the trace: at ``nbytes`` (what the
        trace held at the checkpoint; later records are cut), or nowhere — a
        new trace — when the one in the output folder is not that run's."""
        path = self.trace_path
        if path is None:
            return None, "none"
        kept = path.with_name(path.name + ".partial")  # an interrupted run's trace, set aside
        if not path.exists() and kept.exists():
            os.replace(kept, path)
        try:
            with path.open("rb") as fh:
                first = json.loads(fh.readline() or b"{}")
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, nbytes - 1))
                last = fh.read(1)
        except (OSError, ValueError):
            return None, f"new: no readable trace at {path.name} to continue"
        if first.get("ev") != "start" or first.get("policy") != self.label:
            return None, f"new: {path.name} is not this run's trace"
        if size < nbytes or last != b"\n":
            return None, f"new: {path.name} is shorter than at the checkpoint ({size} < {nbytes} bytes)"
        return nbytes, "continued"

    def _fresh_on_resume(self) -> list[str]:
        """What a resumed run cannot restore (summary ``resumed_from.fresh``)."""
        fresh = []
        if self.resumed and self.resumed.get("lost_steps"):
            fresh.append("work in progress at the checkpoint (done again; its steps are dropped, reason restart)")
        if self.local_steps and not local_steppers(self.sc, self.policy)[0].plain:
            fresh.append("the workers' optimizer state for local steps (momentum, Adam moments)")
        return fresh

    def _resume(self, state: dict[str, Any]) -> None:
        """Go on with the checkpoint's books: a ``resume`` record, then the
        ledger's accounting and every worker's."""
        t = self.offset_s
        self.trace.write({"t": t, "ev": "resume", "version": int(state["version"]), "steps": int(state["steps"])})
        assert self.resumed is not None
        sc, started = self.sc, int(state["ledger"]["started_steps"])
        goes_on = (sc.max_time_s is None or t < sc.max_time_s) and (self.budget is None or started < self.budget)
        self.resumed["lost_steps"] = self.ledger.load_state_dict(state["ledger"], t, goes_on=goes_on)
        for p, saved in zip(self.peers, state["peers"], strict=True):
            for key in _Peer.CHECKPOINTED:
                setattr(p, key, type(getattr(p, key))(saved[key]))
        if self.p2p is not None and state["p2p"]:
            self._p2p_comm_before = [float(x) for x in state["p2p"]["comm_s"]]
            self.p2p.stats = ExchangeStats(**state["p2p"]["stats"])
