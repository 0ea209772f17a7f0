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

Stale gradients (:mod:`hetsync.policies.staleness`): an ``Apply`` may ask
for delay compensation (``compensate``, DC-ASGD), which needs the model each
gradient was computed on. When the policy says so
(``Policy.needs_base_models``), the ledger keeps every model it hands out
(:meth:`Ledger.send_model`) while a worker may still compute on it: the one
each worker holds until its next pull lands (:meth:`Ledger.model_arrived`),
the one on its way, and the base of each gradient push held. Models are
never modified in place, so keeping one is keeping a reference: at most 2N
besides the global model, N + 1 in steady state (the summary's
``max_kept_models``). An ``Apply``'s ``implicit_momentum`` goes to the
server's optimizer, which lowers its momentum by it.

Fragments (Streaming DiLoCo, :mod:`hetsync.policies.streaming_diloco`): a
push may carry the delta of one range of the flat vector
(``HeldPush.fragment``). An ``Apply`` of such pushes — all of one fragment —
changes that range only: the weighted sum of their (already dequantized)
deltas is quantized to the fragment's width and read back (the averaged
outer gradient on its way back to the workers, :func:`wire`), then the outer
optimizer takes one step on the range with the state it keeps for that
fragment (one :class:`~hetsync.optim.Stepper` per fragment, built from the
policy's outer optimizer; plain outer SGD adds the sum).

Bytes per worker: :meth:`Ledger.count_bytes` books each transfer's bytes to
the workers whose links it crossed (the summary's ``per_worker.bytes``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hetsync.algos.quantize import decode, encode, roundtrip
from hetsync.algos.staleness import delay_compensated
from hetsync.errors import BadInput, PolicyError
from hetsync.optim import Stepper
from hetsync.policies.base import Apply, Drop, Fragment, Policy
from hetsync.policies.config import config_values
from hetsync.recipe import OptimizerConfig, ScheduleConfig
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
    # a gradient's optimizer settings in the pushing worker's own training loop (hetsync.loop:
    # hetsync.optim.hyperparameters of the user's optimizer when it computed it); None otherwise
    hyper: tuple[float, ...] | None = None
    fragment: Fragment | None = None  # a fragment push: the delta of that range only


def wire(values: torch.Tensor | None, bits: int) -> torch.Tensor | None:
    """``values`` as they arrive after travelling at ``bits`` (32: as they
    are; 8 or 4: a real quantize / dequantize round trip, one scale:
    :func:`hetsync.algos.quantize.roundtrip`)."""
    if values is None or bits == 32:
        return values
    return torch.from_numpy(roundtrip(values.detach().cpu().numpy(), bits)).to(values.device)


def outer_fragment_step(stepper: Stepper, part: torch.Tensor, mean_delta: torch.Tensor) -> torch.Tensor:
    """A fragment's values moved by the mean of its deltas through the
    fragment's outer optimizer (plain: added). The server's step, and the
    one a worker takes itself from the mean it pulls (hetsync.runtime.worker)."""
    if stepper.plain:
        return part + mean_delta
    return stepper.descend(part, mean_delta.neg(), stepper.cfg.lr, clip=False)


def fragment_stepper(outer: Stepper) -> Stepper:
    """A fresh copy of the outer optimizer for one fragment (its own state)."""
    return Stepper(outer.cfg, outer.schedule, None)


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
        stepper: Stepper | None = None,
        outer: Stepper | None = None,
        global_batch: int = 1,
    ) -> None:
        self.policy = policy
        # the server's optimizers (hetsync.optim) for gradient and for delta pushes; None: plain SGD
        self.stepper = stepper if stepper is not None else Stepper(OptimizerConfig(), ScheduleConfig(), None)
        self.outer = outer if outer is not None else Stepper(OptimizerConfig(), ScheduleConfig(), None)
        self.global_batch = global_batch  # samples of one BSP round: the schedule's clock unit
        self.applied_samples = 0
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
        self.worker_bytes: list[int] = []  # per worker: bytes through its link, up and down (count_bytes)
        self._fragment_outer: dict[tuple[int, int], Stepper] = {}  # the outer optimizer's state per fragment
        # each fragment's last mean delta as it travelled (hetsync.algos.quantize.encode): what a worker
        # that keeps a copy of the fragment's outer optimizer needs to take the step itself
        self.fragment_means: dict[tuple[int, int], np.ndarray] = {}
        self.staleness_sum = 0
        self.staleness_n = 0
        self.max_staleness = 0
        self.curve: list[list[float]] = []
        self.math_time_s = 0.0
        self.last_lr: float | None = None  # the learning rate of the last gradient Apply
        self.left: list[dict[str, Any]] = []  # workers that left: {"worker", "t", "reason"}
        # workers that joined (the simulator's membership): {"worker", "t" it came, "ready_s" it held the model}
        self.joined: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []  # the policy's Note commands ({t, what, detail}): policy_notes
        self.resumed_at_s: float | None = None  # a resumed run: when it went on from its checkpoint
        # delay compensation: the models workers compute on, kept while referenced (module docstring)
        needs = getattr(policy, "needs_base_models", None)  # (a stand-in for a policy may lack it)
        self.keeps_bases = theta is not None and needs is not None and bool(needs())
        self._bases: dict[int, torch.Tensor] = {}  # version -> model
        self._base_refs: dict[int, int] = {}  # version -> workers holding it, pulls bringing it, pushes on it
        self._holding: dict[int, int] = {}  # worker -> version of the model it computes on
        self._incoming: dict[int, list[int]] = {}  # worker -> versions of its pulls in flight
        self._push_base: dict[int, int] = {}  # held gradient push -> the version it references
        self.max_kept_models = 0
        self.uncompensated = 0  # stale gradients whose base model was not kept (not compensated)
        if self.keeps_bases:
            for w in range(policy.ctx.workers):  # every worker starts from the model the run starts with
                self._ref(version, theta)
                self._holding[w] = version

    # ------------------------------------------------- models handed out
    def send_model(self, worker: int) -> tuple[torch.Tensor | None, int]:
        """The global model and its version, as a pull to ``worker`` takes it now."""
        if self.keeps_bases:
            self._ref(self.version, self.theta)
            self._incoming.setdefault(worker, []).append(self.version)
        return self.theta, self.version

    def model_arrived(self, worker: int, version: int) -> None:
        """``worker``'s pull of ``version`` has landed: the model it held before is no longer its base."""
        if not self.keeps_bases:
            return
        incoming = self._incoming.get(worker, [])
        if version in incoming:
            incoming.remove(version)
            self._swap_holding(worker, version)
        else:  # not handed out through send_model: nothing kept for it
            self._swap_holding(worker, None)

    @property
    def kept_versions(self) -> list[int]:
        """The versions whose models are kept for delay compensation now."""
        return sorted(self._bases)

    def forget_worker(self, worker: int) -> None:
        """``worker`` has left: nothing it holds or has on its way needs keeping."""
        if not self.keeps_bases:
            return
        for version in self._incoming.pop(worker, []):
            self._unref(version)
        self._swap_holding(worker, None)

    def _swap_holding(self, worker: int, version: int | None) -> None:
        old = self._holding.pop(worker, None)
        if version is not None:
            self._holding[worker] = version
        if old is not None:
            self._unref(old)

    def _ref(self, version: int, model: torch.Tensor | None) -> None:
        if model is None:
            return
        self._bases.setdefault(version, model)
        self._base_refs[version] = self._base_refs.get(version, 0) + 1
        self.max_kept_models = max(self.max_kept_models, len(self._bases))

    def _unref(self, version: int) -> None:
        left = self._base_refs.get(version, 0) - 1
        if left > 0:
            self._base_refs[version] = left
        else:
            self._base_refs.pop(version, None)
            self._bases.pop(version, None)

    def count_bytes(self, worker: int, nbytes: int) -> None:
        """Book ``nbytes`` that crossed ``worker``'s link (sent or received)."""
        if worker >= len(self.worker_bytes):
            self.worker_bytes.extend([0] * (worker + 1 - len(self.worker_bytes)))
        self.worker_bytes[worker] += nbytes

    # ------------------------------------------------------------ pushes
    def hold(self, push: HeldPush) -> int:
        push_id = self.next_push_id
        self.next_push_id += 1
        self.pushes[push_id] = push
        if self.keeps_bases and push.kind == "grad" and push.base_version in self._bases:
            self._ref(push.base_version, self._bases[push.base_version])
            self._push_base[push_id] = push.base_version
        return push_id

    def _release(self, push_id: int) -> None:
        version = self._push_base.pop(push_id, None)
        if version is not None:
            self._unref(version)

    def _compensated(self, rec: HeldPush, lam: float) -> HeldPush:
        """``rec`` with its gradient delay-compensated (DC-ASGD) against the
        model it was computed on; as it is when fresh or not a gradient."""
        if rec.kind != "grad" or rec.payload is None or rec.base_version == self.version or self.theta is None:
            return rec
        then = self._bases.get(rec.base_version)
        if then is None:  # the policy did not ask for the models to be kept (or the base predates a resume)
            self.uncompensated += 1
            return rec
        return dataclasses.replace(rec, payload=delay_compensated(rec.payload, self.theta, then, lam))

    @property
    def clock(self) -> float:
        """The schedule's clock: the samples applied so far, in global batches
        (the server's optimizer steps at it; Compute.sync_clock hands it to a
        worker's local steps)."""
        return self.applied_samples / self.global_batch

    def apply(self, cmd: Apply, now_s: float) -> None:
        t0 = time.perf_counter()
        pushes, version = self.pushes, self.version
        recs = []
        staleness = []
        ids = []
        weights = []
        for push_id, weight in cmd.contributions:
            rec = pushes.pop(push_id, None)
            if rec is None:
                raise PolicyError(f"{self.label}: Apply names push {push_id}, which is unknown or already used")
            recs.append((rec, weight))
            staleness.append(version - rec.base_version)
            ids.append(push_id)
            weights.append(weight)
        lr = self.stepper.lr_at(cmd.lr, self.clock)  # (the clock before this update)
        self.last_lr = lr  # (the collective path hands it to the workers, who take the step)
        if cmd.compensate > 0:
            recs = [(self._compensated(rec, cmd.compensate), weight) for rec, weight in recs]
        kind = recs[0][0].kind
        hyper = self._settings(recs)
        if hyper is not None and kind == "grad":  # the workers' loops schedule their optimizer: the server's follows
            self.stepper.follow(hyper)  # type: ignore[attr-defined]  # hetsync.loop.ModuleStepper
        if any(rec.fragment is not None for rec, _ in recs):
            new = self._fragment_step(recs)
        else:
            if len({rec.kind for rec, _ in recs}) > 1 and not (self.outer if kind == "delta" else self.stepper).plain:
                raise PolicyError(
                    f"{self.label}: one Apply mixes gradient and delta pushes; an optimizer step takes one kind"
                )
            parts = [(rec.payload, rec.kind, weight) for rec, weight in recs]
            new = update_model(self.theta, parts, lr, self.stepper, self.outer, cmd.implicit_momentum)
        for push_id in ids:  # (after the step: compensation read their base models)
            self._release(push_id)
        for rec, _ in recs:
            self.applied_steps += rec.steps
            self.applied_samples += rec.samples
        if new is not None:
            self.theta = new
            self.math_time_s += time.perf_counter() - t0
        self.version = version = version + 1
        self.staleness_sum += sum(staleness)
        self.staleness_n += len(staleness)
        self.max_staleness = max(self.max_staleness, *staleness)
        record = {"t": now_s, "ev": "apply", "version": version, "ids": ids, "weights": weights, "staleness": staleness}
        if cmd.compensate or cmd.implicit_momentum:  # (a remedy: recorded only then, older traces stay as they were)
            record.update(lr=lr, compensate=cmd.compensate, implicit_momentum=cmd.implicit_momentum)
        self.trace.write(record)

    def _settings(self, recs: list[tuple[HeldPush, float]]) -> tuple[float, ...] | None:
        """The optimizer settings of an update from several workers' loops:
        theirs when they agree (BSP's workers step their schedules in
        lockstep, so the step is DDP's bit for bit), else their mean weighted
        as the gradients are; None when no push carries any."""
        given = [(rec.hyper, weight) for rec, weight in recs if rec.hyper is not None]
        if not given:
            return None
        first = given[0][0]
        if all(hyper == first for hyper, _ in given):
            return first
        if len({len(hyper) for hyper, _ in given}) > 1:
            raise BadInput(
                f"{self.label}: the workers' optimizers have different parameter groups or kinds (their settings "
                f"count {sorted({len(h) for h, _ in given})} values): build the same optimizer on every rank"
            )
        total = sum(weight for _, weight in given)
        shares = [weight / total if total > 0 else 1.0 / len(given) for _, weight in given]
        return tuple(
            sum(share * hyper[i] for share, (hyper, _) in zip(shares, given, strict=True)) for i in range(len(first))
        )

    def _fragment_step(self, recs: list[tuple[HeldPush, float]]) -> torch.Tensor | None:
        """One outer step on a fragment (module docstring): the weighted sum of
        the deltas, as it travels back at the fragment's width, through the
        fragment's own outer optimizer, into a copy of the model."""
        fragment = recs[0][0].fragment
        if fragment is None or any(rec.fragment != fragment for rec, _ in recs):
            shown = sorted({str(rec.fragment) for rec, _ in recs})
            raise PolicyError(f"{self.label}: one Apply mixes pushes of different fragments or none: {shown}")
        total: torch.Tensor | None = None
        for rec, weight in recs:
            if rec.payload is not None:
                total = rec.payload * weight if total is None else total.add_(rec.payload, alpha=weight)
        if total is None or self.theta is None:
            return None
        lo, hi = fragment.lo, fragment.hi
        message = encode(total.detach().cpu().numpy(), fragment.bits)  # (read back: exactly wire's values)
        self.fragment_means[(lo, hi)] = message
        total = torch.from_numpy(decode(message, hi - lo, fragment.bits)).to(total.device)
        stepper = self._fragment_outer.get((lo, hi))
        if stepper is None:
            stepper = self._fragment_outer[(lo, hi)] = fragment_stepper(self.outer)
        moved = outer_fragment_step(stepper, self.theta[lo:hi], total)
        new = self.theta.clone()
        new[lo:hi] = moved
        return new

    def lose(self, push_id: int) -> int:
        """A push that never reached the server (its worker left while it was
        on its way): no longer held, neither applied nor dropped (it stays
        outstanding, as on real processes). Returns the steps it carried."""
        rec = self.pushes.pop(push_id, None)
        if rec is None:
            return 0
        self._release(push_id)
        return rec.steps

    def drop(self, cmd: Drop, now_s: float) -> None:
        steps = 0
        for push_id in cmd.push_ids:
            rec = self.pushes.pop(push_id, None)
            if rec is None:
                raise PolicyError(f"{self.label}: Drop names push {push_id}, which is unknown or already used")
            self._release(push_id)
            steps += rec.steps
        self.dropped_steps += steps
        self.trace.write({"t": now_s, "ev": "drop", "ids": list(cmd.push_ids), "steps": steps, "reason": cmd.reason})

    def overwritten(self, worker: int, steps: int, now_s: float) -> None:
        """Local steps a pull replaced before they were pushed."""
        self.dropped_steps += steps
        self.trace.write({"t": now_s, "ev": "drop", "ids": [], "steps": steps, "reason": "overwritten", "w": worker})

    # ------------------------------------------------------- checkpoints
    _COUNTERS = (
        "version",
        "next_push_id",
        "started_steps",
        "steps",
        "samples",
        "applied_steps",
        "applied_samples",
        "dropped_steps",
        "bytes_sent",
        "staleness_sum",
        "staleness_n",
        "max_staleness",
    )

    def state_dict(self) -> dict[str, Any]:
        """The run's accounting so far, as plain numbers and lists (a
        checkpoint's part; the model and the optimizers are saved beside it).
        ``held`` names the pushes held but not yet applied or dropped."""
        state: dict[str, Any] = {key: int(getattr(self, key)) for key in self._COUNTERS}
        state["math_time_s"] = float(self.math_time_s)
        state["worker_bytes"] = [int(b) for b in self.worker_bytes]
        state["curve"] = [[float(v) for v in row] for row in self.curve]
        state["left"] = [dict(x) for x in self.left]
        state["joined"] = [dict(x) for x in self.joined]
        state["notes"] = [dict(x) for x in self.notes]
        state["held"] = sorted(self.pushes)
        return state

    def fragment_states(self) -> list[list[Any]]:
        """The outer optimizer's state of each fragment stepped so far
        (Streaming DiLoCo; [lo, hi, state] each), for a checkpoint."""
        return [[lo, hi, stepper.state_dict()] for (lo, hi), stepper in sorted(self._fragment_outer.items())]

    def load_fragment_states(self, states: list[list[Any]]) -> None:
        """Go on with a checkpoint's :meth:`fragment_states`."""
        for lo, hi, state in states:
            stepper = fragment_stepper(self.outer)
            stepper.load_state_dict(state)
            self._fragment_outer[(int(lo), int(hi))] = stepper

    def load_state_dict(self, state: dict[str, Any], now_s: float, *, goes_on: bool = True) -> int:
        """Continue the accounting of a checkpoint (a resumed run). What was
        under way when it was saved — pushes held, unpushed local steps,
        steps in progress — died with the processes: if the run ``goes_on``
        the computed steps among it are booked as dropped (one ``drop``
        record, reason ``restart``, at ``now_s``) and those not yet computed
        are started again, so every computed step of the run stays applied,
        dropped or outstanding, and no more are applied or dropped than were
        computed; a run that had already ended keeps it outstanding, as
        its summary said. Returns the number of steps dropped."""
        for key in self._COUNTERS:
            setattr(self, key, int(state[key]))
        self.math_time_s = float(state.get("math_time_s", 0.0))
        self.worker_bytes = [int(b) for b in state.get("worker_bytes", [])]  # (absent: a checkpoint from before)
        self.curve = [[float(v) for v in row] for row in state["curve"]]
        self.left = [dict(x) for x in state.get("left", [])]
        self.joined = [dict(x) for x in state.get("joined", [])]  # (absent: a checkpoint from before)
        self.notes = [dict(x) for x in state.get("notes", [])]
        self.resumed_at_s = now_s  # (workers that left before are back, unless they leave again)
        self.pushes = {}
        for push_id in list(self._push_base):
            self._release(push_id)
        # computed steps not yet applied or dropped are lost; steps started but not computed were never
        # counted as computed and are simply started again (dropping them too would book more steps
        # applied or dropped than were ever computed)
        lost = max(0, self.steps - self.applied_steps - self.dropped_steps)
        held = [int(i) for i in state.get("held", [])]
        if goes_on:
            self.started_steps = min(self.started_steps, self.steps)
        if goes_on and (lost or held):
            self.dropped_steps += lost
            self.trace.write({"t": now_s, "ev": "drop", "ids": held, "steps": lost, "reason": "restart"})
        return lost if goes_on else 0

    # -------------------------------------------------------- evaluation
    def evaluate(self, now_s: float, model: torch.Tensor | None = None) -> None:
        """Evaluate the global model (``model``: it whole, where the ledger
        holds a part of it: sharded servers): a trace ``eval`` record with
        every metric of the workload, in its order, and a ``curve`` row
        ``[t, value, ...]`` (the same order; the summary picks the target
        metric's column). A value that is not finite (a diverged model) is
        recorded as None."""
        if self.wants_evaluation(now_s):
            theta = model if model is not None else self.theta
            assert theta is not None
            self.record_evaluation(now_s, self.workload.evaluate_metrics(theta), self.version)

    def wants_evaluation(self, now_s: float) -> bool:
        """Whether there is a model and metrics to evaluate, and no evaluation at ``now_s`` yet."""
        return not (self.theta is None or not self.workload.metrics or (self.curve and self.curve[-1][0] == now_s))

    def record_evaluation(self, now_s: float, values: dict[str, float], version: int) -> None:
        """Book an evaluation of model ``version`` taken at ``now_s`` (see :meth:`evaluate`)."""
        # a diverged model's loss is inf or NaN: recorded as null (JSON has neither)
        metrics = {name: _finite_or_none(values[name]) for name in self.workload.metrics}
        self.curve.append([now_s, *metrics.values()])
        self.trace.write({"t": now_s, "ev": "eval", **metrics, "version": version})

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
        # each worker's time in the run: until it left (its own loop ended, or it died), not
        # after, which is neither waiting nor working (N × wall time when nobody left)
        n = len(compute_s)
        in_run_s = away_times(n, wall_s, self.left, self.joined, self.resumed_at_s)
        total_s = sum(in_run_s)
        denom = total_s if total_s > 0 else 1.0
        compute, comm = sum(compute_s), sum(comm_s)
        wait_s = [max(0.0, t - c - m) for t, c, m in zip(in_run_s, compute_s, comm_s, strict=True)]
        names = list(self.workload.metrics)
        metric, target = scenario.stop.target.metric, scenario.stop.target.value
        if names:
            direction = scenario.stop.target.direction_for(self.workload.name, self.workload.metrics)
            column = 1 + names.index(metric)
            curve = [[row[0], row[column]] for row in self.curve]
        else:  # nothing evaluated (a training loop without an evaluation): no metric, no target
            metric, target, direction, curve = None, None, None, []
        values = [v for _, v in curve]
        finite = [v for v in values if v is not None]
        if direction == "max":
            reached = next((t for t, v in curve if v is not None and v >= target), None)
            best = max(finite, default=None)
        else:
            reached = next((t for t, v in curve if v is not None and v <= target), None)
            best = min(finite, default=None)
        final = values[-1] if values else None
        diverged_at = next((row[0] for row in self.curve if any(v is None for v in row[1:])), None)
        # accuracy targets keep the fields of before (docs/architecture.md §6), as aliases
        accuracy = metric == "accuracy"
        out = {
            "policy": self.policy.name,
            "label": self.label,
            "params": config_values(self.policy.config),
            "scenario": scenario.name,
            # what running the scenario as asked changed (Scenario.notes: lists cut to the worker count)
            "notes": list(getattr(scenario, "notes", ())),
            "driver": driver,
            "seed": scenario.job.seed,
            "workers": n,
            "target_metric": metric,
            "target_value": target,
            "target_direction": direction,
            **({"target_accuracy": target} if accuracy else {}),
            "time_to_target_s": reached,
            "final_metric": final,
            "best_metric": best,
            "diverged_at_s": diverged_at,
            "final_metrics": dict(zip(names, self.curve[-1][1:], strict=True)) if self.curve else None,
            **({"final_accuracy": final, "best_accuracy": best} if accuracy else {}),
            "wall_time_s": wall_s,
            "compute_share": compute / denom,
            "comm_share": comm / denom,
            "wait_share": max(0.0, 1.0 - (compute + comm) / denom) if total_s > 0 else 0.0,
            "samples_per_s": self.samples / wall_s if wall_s > 0 else 0.0,
            "steps": self.steps,
            "applied_steps": self.applied_steps,
            "dropped_steps": self.dropped_steps,
            "outstanding_steps": self.started_steps - self.applied_steps - self.dropped_steps,
            "updates": self.version,
            "bytes_sent": self.bytes_sent,
            "max_staleness": self.max_staleness,
            "mean_staleness": self.staleness_sum / self.staleness_n if self.staleness_n else 0.0,
            "metric_curve": curve,
            **({"accuracy_curve": [list(p) for p in curve]} if accuracy else {}),
            "per_worker": {
                "compute_s": compute_s,
                "comm_s": comm_s,
                "wait_s": wait_s,
                "steps": worker_steps,
                "bytes": [self.worker_bytes[w] if w < len(self.worker_bytes) else 0 for w in range(n)],
            },
            "workers_left": self.left,
            "workers_joined": self.joined,
            "policy_notes": self.notes,
            "host_time_s": host_s,
            "math_time_s": self.math_time_s,
            "stop_reason": stop_reason,
            "trace": trace_name,
        }
        if self.keeps_bases:  # delay compensation: the models kept for it, at most at once
            out.update(max_kept_models=self.max_kept_models, uncompensated=self.uncompensated)
        out.update(extra or {})
        return out


def away_times(
    n: int, wall_s: float, left: list[dict[str, Any]], joined: list[dict[str, Any]], resumed_at_s: float | None
) -> list[float]:
    """Each worker's time in the run: ``wall_s`` less the time it was away,
    from a leave (``left``; one before a resume does not count) to its next
    join (``joined``) or the end."""
    moves: dict[int, list[tuple[float, int]]] = {}
    for gone in left:
        if resumed_at_s is None or gone["t"] >= resumed_at_s:
            moves.setdefault(gone["worker"], []).append((min(wall_s, float(gone["t"])), 0))
    for back in joined:
        moves.setdefault(back["worker"], []).append((min(wall_s, float(back["t"])), 1))
    out = [wall_s] * n
    for w, events in moves.items():
        away_since: float | None = None
        away = 0.0
        for t, kind in sorted(events):
            if kind == 0 and away_since is None:
                away_since = t
            elif kind == 1 and away_since is not None:
                away += t - away_since
                away_since = None
        if away_since is not None:
            away += wall_s - away_since
        out[w] = max(0.0, wall_s - away)
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


def update_model(
    theta: torch.Tensor | None,
    parts: Sequence[tuple[torch.Tensor | None, str, float]],
    lr: float,
    stepper: Stepper,
    outer: Stepper,
    implicit_momentum: float = 0.0,
) -> torch.Tensor | None:
    """``theta`` after an Apply of ``parts`` ((payload, kind, weight)), into a
    fresh tensor (the old model stays valid for pulls in flight), as
    :meth:`Ledger.apply` takes it — and each sharded server over its range
    (:mod:`hetsync.runtime.shards`). With a plain optimizer for the first
    part's kind, plain SGD: θ + Σ wᵢ·uᵢ (uᵢ = −lr·gᵢ for a gradient, δᵢ for
    a delta), one contribution at a time; else one step of ``stepper`` on
    the weighted gradient Σ wᵢ gᵢ (at ``lr``, its momentum lowered by
    ``implicit_momentum``), or of ``outer`` on the pseudo-gradient −Σ wᵢ δᵢ
    of deltas (at its own rate, not clipped). None when no part carries a
    payload (or, stepping, there is no model)."""
    kind = parts[0][1] if parts else "grad"
    if (outer if kind == "delta" else stepper).plain:
        new: torch.Tensor | None = None
        for payload, each, weight in parts:
            if payload is not None:
                scale = weight if each == "delta" else -lr * weight
                new = torch.add(theta, payload, alpha=scale) if new is None else new.add_(payload, alpha=scale)
        return new
    total: torch.Tensor | None = None
    for payload, _, weight in parts:
        if payload is not None:
            total = payload * weight if total is None else total.add_(payload, alpha=weight)
    if total is None or theta is None:
        return None
    if kind == "delta":
        return outer.descend(theta, total.neg_(), outer.cfg.lr, clip=False)
    if implicit_momentum > 0:  # (only then: a stepper of the user's may predate the parameter)
        return stepper.descend(theta, total, lr, implicit_momentum=implicit_momentum)
    return stepper.descend(theta, total, lr)


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
