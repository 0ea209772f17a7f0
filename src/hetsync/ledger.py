"""What both drivers keep on the server side: the global model, the pushes
it holds until the policy applies or drops them, and the run's accounting.

The simulator and the torch.distributed runtime differ in how bytes move and
how time passes, not in what an ``Apply`` or a ``Drop`` means; this module is
that shared meaning, so the two summaries are comparable field by field
(docs/formats.md).

Step accounting: every computed step ends up *applied* (its push was
applied), *dropped* (the policy dropped its push, a pull overwrote local work
that was never pushed, or a newer gradient replaced an unpushed one) or
*outstanding* (in flight when the run stopped).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from hetsync.errors import PolicyError
from hetsync.policies.base import Apply, Drop, Policy
from hetsync.trace import TraceWriter
from hetsync.workloads import Workload


@dataclass(slots=True)
class HeldPush:
    worker: int
    kind: str  # "grad" or "delta"
    payload: torch.Tensor | None
    base_version: int
    steps: int
    samples: int


class Ledger:
    """Global model + held pushes + counters. ``theta`` is never modified in
    place: an update makes a new tensor, so a pull in flight keeps the model
    it started with."""

    def __init__(
        self,
        policy: Policy,
        workload: Workload,
        theta: torch.Tensor | None,
        trace: TraceWriter,
        *,
        version: int = 0,
    ) -> None:
        self.policy = policy
        self.label = policy.label
        self.workload = workload
        self.theta = theta
        self.trace = trace
        self.version = version
        self.pushes: dict[int, HeldPush] = {}
        self.next_push_id = 0
        self.started_steps = 0
        self.steps = 0
        self.samples = 0
        self.applied_steps = 0
        self.dropped_steps = 0
        self.bytes_sent = 0
        self.staleness_sum = 0
        self.staleness_n = 0
        self.max_staleness = 0
        self.curve: list[list[float]] = []
        self.math_time_s = 0.0
        self.left: list[dict[str, Any]] = []  # workers that left: {"worker", "t", "reason"}

    # ------------------------------------------------------------ pushes
    def hold(self, push: HeldPush) -> int:
        push_id = self.next_push_id
        self.next_push_id += 1
        self.pushes[push_id] = push
        return push_id

    def apply(self, cmd: Apply, now_s: float) -> None:
        t0 = time.perf_counter()
        new: torch.Tensor | None = None  # a fresh tensor: the old model stays valid for pulls
        staleness = []
        for push_id, weight in cmd.contributions:
            rec = self.pushes.pop(push_id, None)
            if rec is None:
                raise PolicyError(f"{self.label}: Apply names push {push_id}, which is unknown or already used")
            staleness.append(self.version - rec.base_version)
            self.applied_steps += rec.steps
            if rec.payload is not None:
                scale = weight if rec.kind == "delta" else -cmd.lr * weight
                if new is None:
                    new = torch.add(self.theta, rec.payload, alpha=scale)
                else:
                    new.add_(rec.payload, alpha=scale)
        if new is not None:
            self.theta = new
            self.math_time_s += time.perf_counter() - t0
        self.version += 1
        self.staleness_sum += sum(staleness)
        self.staleness_n += len(staleness)
        self.max_staleness = max(self.max_staleness, *staleness)
        self.trace.write(
            {
                "t": now_s,
                "ev": "apply",
                "version": self.version,
                "ids": [c[0] for c in cmd.contributions],
                "weights": [c[1] for c in cmd.contributions],
                "staleness": staleness,
            }
        )

    def drop(self, cmd: Drop, now_s: float) -> None:
        steps = 0
        for push_id in cmd.push_ids:
            rec = self.pushes.pop(push_id, None)
            if rec is None:
                raise PolicyError(f"{self.label}: Drop names push {push_id}, which is unknown or already used")
            steps += rec.steps
        self.dropped_steps += steps
        self.trace.write({"t": now_s, "ev": "drop", "ids": list(cmd.push_ids), "steps": steps, "reason": cmd.reason})

    def overwritten(self, worker: int, steps: int, now_s: float) -> None:
        """Local steps a pull replaced before they were pushed."""
        self.dropped_steps += steps
        self.trace.write({"t": now_s, "ev": "drop", "ids": [], "steps": steps, "reason": "overwritten", "w": worker})

    # -------------------------------------------------------- evaluation
    def evaluate(self, now_s: float) -> None:
        if self.theta is None or (self.curve and self.curve[-1][0] == now_s):
            return
        acc, loss = self.workload.evaluate(self.theta)
        self.curve.append([now_s, acc])
        self.trace.write({"t": now_s, "ev": "eval", "accuracy": acc, "loss": loss, "version": self.version})

    # ----------------------------------------------------------- summary
    def summary(
        self,
        *,
        scenario: Any,
        driver: str,
        wall_s: float,
        compute_s: list[float],
        comm_s: list[float],
        worker_steps: list[int],
        host_s: float,
        stop_reason: str,
        trace_name: str | None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        n = len(compute_s)
        denom = n * wall_s if wall_s > 0 else 1.0
        compute, comm = sum(compute_s), sum(comm_s)
        wait_s = [max(0.0, wall_s - c - m) for c, m in zip(compute_s, comm_s, strict=True)]
        reached = next((t for t, acc in self.curve if acc >= scenario.target_accuracy), None)
        accs = [acc for _, acc in self.curve]
        out = {
            "policy": self.policy.name,
            "label": self.label,
            "params": dict(self.policy.values),
            "scenario": scenario.name,
            "driver": driver,
            "seed": scenario.seed,
            "workers": n,
            "target_accuracy": scenario.target_accuracy,
            "time_to_target_s": reached,
            "final_accuracy": accs[-1] if accs else None,
            "best_accuracy": max(accs) if accs else None,
            "wall_time_s": wall_s,
            "compute_share": compute / denom,
            "comm_share": comm / denom,
            "wait_share": max(0.0, 1.0 - (compute + comm) / denom) if wall_s > 0 else 0.0,
            "samples_per_s": self.samples / wall_s if wall_s > 0 else 0.0,
            "steps": self.steps,
            "applied_steps": self.applied_steps,
            "dropped_steps": self.dropped_steps,
            "outstanding_steps": self.started_steps - self.applied_steps - self.dropped_steps,
            "updates": self.version,
            "bytes_sent": self.bytes_sent,
            "max_staleness": self.max_staleness,
            "mean_staleness": self.staleness_sum / self.staleness_n if self.staleness_n else 0.0,
            "accuracy_curve": self.curve,
            "per_worker": {"compute_s": compute_s, "comm_s": comm_s, "wait_s": wait_s, "steps": worker_steps},
            "workers_left": self.left,
            "host_time_s": host_s,
            "math_time_s": self.math_time_s,
            "stop_reason": stop_reason,
            "trace": trace_name,
        }
        out.update(extra or {})
        return out


@dataclass(slots=True)
class ExchangeStats:
    """Peer-to-peer bookkeeping, the same for the simulator and the runtime:
    what the summary reports about multicasts and all-reduces
    (docs/formats.md)."""

    multicasts: int = 0
    allreduces: int = 0
    receivers_sum: int = 0
    exchange_s_sum: float = 0.0
    exchanges_done: int = 0

    def multicast(self, receivers: int) -> None:
        self.multicasts += 1
        self.receivers_sum += receivers

    def allreduce(self, members: int) -> None:
        self.allreduces += 1
        self.multicasts += members  # each member's model reaches every other
        self.receivers_sum += members * (members - 1)

    def finished(self, duration_s: float) -> None:
        self.exchanges_done += 1
        self.exchange_s_sum += duration_s

    def summary(self, *, steps: int, workers: int, wall_s: float) -> dict[str, Any]:
        steps_per_worker = steps / workers
        return {
            "topology": "p2p",
            "multicasts": self.multicasts,
            "allreduces": self.allreduces,
            "mean_receivers": self.receivers_sum / self.multicasts if self.multicasts else 0.0,
            "mean_exchange_s": self.exchange_s_sum / self.exchanges_done if self.exchanges_done else None,
            "mean_round_s": wall_s / steps_per_worker if steps_per_worker else None,
        }
