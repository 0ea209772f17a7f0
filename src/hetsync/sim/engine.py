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

Accounting that the contract test relies on: every computed step ends up
applied (its push was applied), dropped (the policy dropped its push, or a
pull overwrote local work that was never pushed, or a newer gradient
replaced an unpushed one), or outstanding (still in flight at the stop).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetsync.errors import DeadlockError, PolicyError
from hetsync.policies import PolicyContext, make_policy
from hetsync.policies.base import (
    Apply,
    Command,
    Compute,
    ComputeDone,
    Drop,
    Event,
    Policy,
    Pull,
    PullDone,
    Push,
    PushArrived,
    SetTimer,
    TimerFired,
)
from hetsync.scenario import Scenario
from hetsync.sim.network import Network
from hetsync.sim.timing import TimingModel
from hetsync.trace import TraceWriter
from hetsync.workloads import Workload, make_workload

SERVER = 0  # network node of the server; worker w is node w + 1
EVALS_PER_RUN = 40  # default evaluation count when eval_every_s is not set

# heap priorities at equal times: deliveries first, then step ends, timers,
# and evaluation last so it sees every update of that instant
_NET, _COMPUTE, _TIMER, _EVAL = 0, 1, 2, 3


@dataclass(slots=True)
class _Worker:
    local: torch.Tensor | None  # local model (None when math is off)
    ref: torch.Tensor | None  # model at the last push/pull: deltas are local − ref
    base_version: int = 0
    computing: bool = False
    comm: int = 0  # transfers in flight that involve this worker
    since_s: float = 0.0  # when the current compute/comm/wait state began
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    steps: int = 0
    # a computed gradient not yet pushed (gradient-pushing policies)
    has_grad: bool = False
    grad: torch.Tensor | None = None
    grad_samples: int = 0
    grad_base: int = 0
    # local SGD steps taken since the last push or pull (delta-pushing policies)
    local_steps: int = 0
    local_samples: int = 0
    inflight_grad: torch.Tensor | None = None
    inflight: tuple[float, int, int, float | None, int] | None = None  # start, step, batch, local_lr, base


@dataclass(slots=True)
class _Push:
    worker: int
    kind: str
    payload: torch.Tensor | None
    base_version: int
    steps: int
    samples: int


@dataclass(slots=True)
class _Transfer:
    kind: str  # "push" or "pull"
    worker: int
    start_s: float
    nbytes: int
    push_id: int = -1
    snapshot: torch.Tensor | None = None
    version: int = 0


@dataclass
class RunResult:
    summary: dict[str, Any]
    params: torch.Tensor | None = field(repr=False, default=None)


class Simulation:
    """One policy on one scenario. ``run()`` returns the summary record.

    ``math=False`` skips the gradient math (the timing and the protocol
    still run) — for measuring the event loop alone.
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: str,
        *,
        trace_path: Path | None = None,
        math: bool = True,
        progress: Callable[[float], None] | None = None,
        workload: Workload | None = None,
    ) -> None:
        self.sc = scenario
        n = scenario.workers
        self.n = n
        self.math = math
        self.progress = progress
        self.workload = workload or make_workload(scenario.workload, **scenario.workload_args)
        self.policy: Policy = make_policy(
            policy,
            PolicyContext(
                workers=n,
                batch_size=scenario.batch_size,
                lr=scenario.lr,
                rng=np.random.default_rng([scenario.seed, 0x9017]),
            ),
        )
        self.label = self.policy.label
        self.timing = TimingModel(scenario)
        bw = scenario.bandwidth_Bps
        self.net = Network(
            uplink_Bps=(scenario.server_Bps, *bw),
            downlink_Bps=(scenario.server_Bps, *bw),
            latency_s=scenario.latency_s,
        )
        self.nbytes = scenario.model_bytes if scenario.model_bytes is not None else self.workload.model_nbytes
        self.trace = TraceWriter(trace_path)
        self.trace_path = trace_path

        self.theta: torch.Tensor | None = None
        if math:
            torch.manual_seed(scenario.seed)
            self.theta = self.workload.init_params(scenario.seed)
            self.shards = self.workload.make_shards(n, scenario.seed, scenario.label_skew)
        self.workers = [_Worker(local=self.theta, ref=self.theta) for _ in range(n)]
        self.version = 0
        self.pushes: dict[int, _Push] = {}
        self.next_push_id = 0

        self.now = 0.0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._net_epoch = 0
        self._live = 0  # heap entries other than evaluations

        self.budget = scenario.max_steps * n if scenario.max_steps is not None else None
        self.started_steps = 0
        self.samples = 0
        self.applied_steps = 0
        self.dropped_steps = 0
        self.bytes_sent = 0
        self.staleness_sum = 0
        self.staleness_n = 0
        self.max_staleness = 0
        self.curve: list[list[float]] = []
        self.math_time_s = 0.0
        self.stop_reason = "drained"
        self.events = 0

    # ------------------------------------------------------------ heap
    def _schedule(self, at_s: float, prio: int, payload: Any) -> None:
        self._seq += 1
        if prio != _EVAL:
            self._live += 1
        heapq.heappush(self._heap, (at_s, prio, self._seq, payload))

    def _schedule_net(self) -> None:
        self._net_epoch += 1
        at = self.net.next_event_s()
        if at < math.inf:
            self._schedule(at, _NET, self._net_epoch)

    # ----------------------------------------------------- worker states
    def _settle(self, w: _Worker) -> None:
        """Book the time since the worker's last state change."""
        dt = self.now - w.since_s
        if w.computing:
            w.compute_s += dt
        elif w.comm:
            w.comm_s += dt
        else:
            w.wait_s += dt
        w.since_s = self.now

    # ---------------------------------------------------------- commands
    def _execute(self, commands: list[Command]) -> None:
        for cmd in commands:
            if isinstance(cmd, Compute):
                self._compute(cmd)
            elif isinstance(cmd, Push):
                self._push(cmd)
            elif isinstance(cmd, Pull):
                self._pull(cmd)
            elif isinstance(cmd, Apply):
                self._apply(cmd)
            elif isinstance(cmd, Drop):
                self._drop(cmd)
            elif isinstance(cmd, SetTimer):
                self._schedule(max(cmd.at_s, self.now), _TIMER, cmd.tag)
            else:
                raise PolicyError(f"{self.label}: unknown command {cmd!r}")

    def _worker(self, cmd: Command, index: int) -> _Worker:
        if not 0 <= index < self.n:
            raise PolicyError(f"{self.label}: {type(cmd).__name__} names worker {index}, not in 0..{self.n - 1}")
        return self.workers[index]

    def _compute(self, cmd: Compute) -> None:
        w = self._worker(cmd, cmd.worker)
        if w.computing:
            raise PolicyError(f"{self.label}: worker {cmd.worker} is already computing")
        if self.budget is not None and self.started_steps >= self.budget:
            return  # step budget spent: the worker stays idle and the run drains
        self.started_steps += 1
        self._settle(w)
        w.computing = True
        b = cmd.batch_size
        duration = self.timing.step_duration_s(cmd.worker, b, self.now)
        if self.math:
            t0 = time.perf_counter()
            x, y = self.shards[cmd.worker].next_batch(b)
            w.inflight_grad, _ = self.workload.gradient(w.local, x, y)
            self.math_time_s += time.perf_counter() - t0
        w.inflight = (self.now, w.steps, b, cmd.local_lr, w.base_version)
        self._schedule(self.now + duration, _COMPUTE, cmd.worker)

    def _compute_done(self, index: int) -> None:
        w = self.workers[index]
        assert w.inflight is not None
        start_s, step, b, local_lr, base = w.inflight
        self._settle(w)
        w.computing = False
        w.inflight = None
        w.steps += 1
        self.samples += b
        grad, w.inflight_grad = w.inflight_grad, None
        if local_lr is not None:
            if self.math:
                t0 = time.perf_counter()
                w.local = torch.add(w.local, grad, alpha=-local_lr)
                self.math_time_s += time.perf_counter() - t0
            w.local_steps += 1
            w.local_samples += b
        else:
            if w.has_grad:
                self.dropped_steps += 1  # an unpushed gradient replaced by a newer one
            w.has_grad = True
            w.grad, w.grad_samples, w.grad_base = grad, b, base
        self.trace.write(
            {"t": start_s, "ev": "compute", "w": index, "end": self.now, "step": step, "batch": b, "base": base}
        )
        self._deliver(
            ComputeDone(
                now_s=self.now,
                worker=index,
                step=step,
                batch_size=b,
                base_version=base,
                duration_s=self.now - start_s,
            )
        )

    def _push(self, cmd: Push) -> None:
        w = self._worker(cmd, cmd.worker)
        payload = None
        if cmd.kind == "grad":
            if not w.has_grad:
                raise PolicyError(f"{self.label}: worker {cmd.worker} pushes a gradient it has not computed")
            rec = _Push(cmd.worker, "grad", w.grad, w.grad_base, 1, w.grad_samples)
            w.has_grad, w.grad = False, None
        elif cmd.kind == "delta":
            if self.math:
                t0 = time.perf_counter()
                payload = w.local - w.ref
                self.math_time_s += time.perf_counter() - t0
            rec = _Push(cmd.worker, "delta", payload, w.base_version, w.local_steps, w.local_samples)
            w.ref = w.local
            w.local_steps = w.local_samples = 0
        else:
            raise PolicyError(f"{self.label}: unknown push kind {cmd.kind!r}")
        push_id = self.next_push_id
        self.next_push_id += 1
        self.pushes[push_id] = rec
        self._transfer(_Transfer(kind="push", worker=cmd.worker, start_s=self.now, nbytes=self.nbytes, push_id=push_id))

    def _pull(self, cmd: Pull) -> None:
        self._worker(cmd, cmd.worker)
        self._transfer(
            _Transfer(
                kind="pull",
                worker=cmd.worker,
                start_s=self.now,
                nbytes=self.nbytes,
                snapshot=self.theta,
                version=self.version,
            )
        )

    def _transfer(self, tr: _Transfer) -> None:
        w = self.workers[tr.worker]
        self._settle(w)
        w.comm += 1
        node = tr.worker + 1
        src, dst = (node, SERVER) if tr.kind == "push" else (SERVER, node)
        self.net.start_flow(self.now, src, dst, tr.nbytes, tr)
        self._schedule_net()

    def _transfer_done(self, tr: _Transfer) -> None:
        w = self.workers[tr.worker]
        self._settle(w)
        w.comm -= 1
        self.bytes_sent += tr.nbytes
        if tr.kind == "push":
            rec = self.pushes[tr.push_id]
            self.trace.write(
                {
                    "t": tr.start_s,
                    "ev": "push",
                    "w": tr.worker,
                    "end": self.now,
                    "id": tr.push_id,
                    "kind": rec.kind,
                    "nbytes": tr.nbytes,
                    "steps": rec.steps,
                }
            )
            self._deliver(
                PushArrived(
                    now_s=self.now,
                    worker=tr.worker,
                    push_id=tr.push_id,
                    kind=rec.kind,  # type: ignore[arg-type]
                    base_version=rec.base_version,
                    steps=rec.steps,
                    samples=rec.samples,
                )
            )
        else:
            if w.local_steps:
                # local steps that were never pushed are overwritten by the pull
                self.dropped_steps += w.local_steps
                self.trace.write(
                    {"t": self.now, "ev": "drop", "ids": [], "steps": w.local_steps, "reason": "overwritten"}
                )
                w.local_steps = w.local_samples = 0
            w.local = w.ref = tr.snapshot
            w.base_version = tr.version
            self.trace.write(
                {
                    "t": tr.start_s,
                    "ev": "pull",
                    "w": tr.worker,
                    "end": self.now,
                    "version": tr.version,
                    "nbytes": tr.nbytes,
                }
            )
            self._deliver(PullDone(now_s=self.now, worker=tr.worker, version=tr.version))

    def _apply(self, cmd: Apply) -> None:
        t0 = time.perf_counter()
        new: torch.Tensor | None = None  # a fresh tensor: the old global model stays valid for pulls
        staleness = []
        for push_id, weight in cmd.contributions:
            rec = self.pushes.pop(push_id, None)
            if rec is None:
                raise PolicyError(f"{self.label}: Apply names push {push_id}, which is unknown or already used")
            staleness.append(self.version - rec.base_version)
            self.applied_steps += rec.steps
            if self.math:
                scale = weight if rec.kind == "delta" else -cmd.lr * weight
                if new is None:
                    new = torch.add(self.theta, rec.payload, alpha=scale)
                else:
                    new.add_(rec.payload, alpha=scale)
        if self.math:
            self.theta = new
            self.math_time_s += time.perf_counter() - t0
        self.version += 1
        self.staleness_sum += sum(staleness)
        self.staleness_n += len(staleness)
        self.max_staleness = max(self.max_staleness, *staleness)
        self.trace.write(
            {
                "t": self.now,
                "ev": "apply",
                "version": self.version,
                "ids": [c[0] for c in cmd.contributions],
                "weights": [c[1] for c in cmd.contributions],
                "staleness": staleness,
            }
        )

    def _drop(self, cmd: Drop) -> None:
        steps = 0
        for push_id in cmd.push_ids:
            rec = self.pushes.pop(push_id, None)
            if rec is None:
                raise PolicyError(f"{self.label}: Drop names push {push_id}, which is unknown or already used")
            steps += rec.steps
        self.dropped_steps += steps
        self.trace.write({"t": self.now, "ev": "drop", "ids": list(cmd.push_ids), "steps": steps, "reason": cmd.reason})

    def _deliver(self, event: Event) -> None:
        self._execute(self.policy.on_event(event))

    # -------------------------------------------------------- evaluation
    def _evaluate(self) -> None:
        if not self.math:
            return
        if self.curve and self.curve[-1][0] == self.now:
            return
        acc, loss = self.workload.evaluate(self.theta)
        self.curve.append([self.now, acc])
        self.trace.write({"t": self.now, "ev": "eval", "accuracy": acc, "loss": loss, "version": self.version})

    def eval_interval_s(self) -> float:
        sc = self.sc
        if sc.eval_every_s is not None:
            return sc.eval_every_s
        if sc.max_time_s is not None:
            return sc.max_time_s / EVALS_PER_RUN
        assert sc.max_steps is not None
        slowest = max(sc.nominal_step_s(w, sc.batch_size) for w in range(self.n))
        return max(sc.max_steps * slowest / EVALS_PER_RUN, 1e-9)

    # --------------------------------------------------------------- run
    def run(self) -> RunResult:
        host_t0 = time.perf_counter()
        sc = self.sc
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny models: threads only add overhead and nondeterminism
        try:
            self.trace.write(
                {
                    "t": 0.0,
                    "ev": "start",
                    "workers": self.n,
                    "policy": self.label,
                    "scenario": sc.name,
                    "seed": sc.seed,
                    "model_nbytes": self.nbytes,
                }
            )
            self._evaluate()
            every = self.eval_interval_s()
            self._schedule(every, _EVAL, None)
            self._execute(self.policy.start(0.0))
            self._loop(every)
            for w in self.workers:
                self._settle(w)
            self._evaluate()
            self.trace.write({"t": self.now, "ev": "end", "wall_time_s": self.now, "reason": self.stop_reason})
        finally:
            self.trace.close()
            torch.set_num_threads(torch_threads)
        host_s = time.perf_counter() - host_t0
        return RunResult(summary=self._summary(host_s), params=self.theta)

    def _loop(self, eval_every_s: float) -> None:
        heap = self._heap
        limit = self.sc.max_time_s if self.sc.max_time_s is not None else math.inf
        report_every = 2000
        countdown = report_every
        while self._live:  # evaluations alone do not keep a run going
            at, prio, _, payload = heap[0]
            if at > limit:
                self.now = limit
                self.stop_reason = "max_time"
                return
            heapq.heappop(heap)
            self.now = at
            self.events += 1
            if prio == _EVAL:
                self._evaluate()
                if self._live:
                    self._schedule(at + eval_every_s, _EVAL, None)
                continue
            self._live -= 1
            if prio == _NET:
                if payload == self._net_epoch:
                    for tr in self.net.advance(at):
                        self._transfer_done(tr)
                    self._schedule_net()
            elif prio == _COMPUTE:
                self._compute_done(payload)
            else:
                self._deliver(TimerFired(now_s=at, tag=payload))
            countdown -= 1
            if countdown == 0 and self.progress is not None:
                countdown = report_every
                self.progress(self._fraction())
        if self.budget is not None and self.started_steps >= self.budget:
            self.stop_reason = "max_steps"
            return
        busy = [i for i, w in enumerate(self.workers) if w.computing or w.comm]
        raise DeadlockError(
            f"{self.label} stalled at t={self.now:.6g}s: no event pending, "
            f"{self.started_steps} steps started, workers busy: {busy or 'none'}"
        )

    def _fraction(self) -> float:
        parts = []
        if self.sc.max_time_s is not None:
            parts.append(self.now / self.sc.max_time_s)
        if self.budget is not None:
            parts.append(self.started_steps / self.budget)
        return min(1.0, max(parts))

    # ----------------------------------------------------------- summary
    def _summary(self, host_s: float) -> dict[str, Any]:
        sc = self.sc
        wall = self.now
        denom = self.n * wall if wall > 0 else 1.0
        compute = sum(w.compute_s for w in self.workers)
        comm = sum(w.comm_s for w in self.workers)
        steps = sum(w.steps for w in self.workers)
        reached = next((t for t, acc in self.curve if acc >= sc.target_accuracy), None)
        accs = [acc for _, acc in self.curve]
        return {
            "policy": self.policy.name,
            "label": self.label,
            "params": dict(self.policy.values),
            "scenario": sc.name,
            "driver": "sim",
            "seed": sc.seed,
            "workers": self.n,
            "target_accuracy": sc.target_accuracy,
            "time_to_target_s": reached,
            "final_accuracy": accs[-1] if accs else None,
            "best_accuracy": max(accs) if accs else None,
            "wall_time_s": wall,
            "compute_share": compute / denom,
            "comm_share": comm / denom,
            "wait_share": max(0.0, 1.0 - (compute + comm) / denom) if wall > 0 else 0.0,
            "samples_per_s": self.samples / wall if wall > 0 else 0.0,
            "steps": steps,
            "applied_steps": self.applied_steps,
            "dropped_steps": self.dropped_steps,
            "outstanding_steps": self.started_steps - self.applied_steps - self.dropped_steps,
            "updates": self.version,
            "bytes_sent": self.bytes_sent,
            "max_staleness": self.max_staleness,
            "mean_staleness": self.staleness_sum / self.staleness_n if self.staleness_n else 0.0,
            "accuracy_curve": self.curve,
            "per_worker": {
                "compute_s": [w.compute_s for w in self.workers],
                "comm_s": [w.comm_s for w in self.workers],
                "wait_s": [w.wait_s for w in self.workers],
                "steps": [w.steps for w in self.workers],
            },
            "host_time_s": host_s,
            "math_time_s": self.math_time_s,
            "stop_reason": self.stop_reason,
            "events": self.events,
            "trace": self.trace_path.name if self.trace_path is not None else None,
        }


def simulate(scenario: Scenario, policy: str, **kwargs: Any) -> RunResult:
    return Simulation(scenario, policy, **kwargs).run()
