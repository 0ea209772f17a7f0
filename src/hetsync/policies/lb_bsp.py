"""LB-BSP — load-balanced bulk synchronous parallel (semi-dynamic load balancing).

Chen, Weng, Wang, Li, Li, "Semi-dynamic load balancing: efficient
distributed learning in non-dedicated environments", SoCC 2020
(arXiv 1806.02508). The paper reports training up to 54% faster than BSP
on EC2 clusters with background load injected by a stress tool.

BSP rounds, as in ``bsp.py``: every live worker computes one gradient on
the same global version and pushes it (the push is chained to the step);
when all have pushed, the server applies their samples-weighted mean (the
weight of worker i is x_i / X, its batch over the global batch) and every
worker pulls the new model with its next step chained to the pull. What
LB-BSP adds is *where* the work goes: at each barrier the batch-size manager
re-sizes every worker's next mini-batch x_i to its current processing
capability so that all workers reach the next barrier together, while the
global batch X = Σ x_i stays fixed (X = N × the scenario's batch size, so
one round moves the model like one BSP round). Load is balanced only at
iteration boundaries, never inside an iteration ("semi-dynamic").

The manager learns from what the policy sees anyway: ``ComputeDone`` gives
each step's batch, its compute time and the background load the worker's
resource monitor reported; the time from the round's ``Pull`` (or the start)
to the worker's ``PushArrived``, less its compute time, is its
communication time per iteration (pull, push and any other overhead). That
difference is measured the same way by both drivers; the event timestamps
in between are not (the runtime reports a chained pull, step and push in
one reply, so its ``PullDone`` arrives when the push does). Two variants (``hetsync.algos.lbbsp`` has the math):

- ``variant=cpu``: predict each worker's sample throughput with an online
  autoregressive model of its recent throughputs and loads (the paper's
  NARX network; here recursive least squares with forgetting,
  ``predictor=rls``, or a plain moving average, ``predictor=ewma``), then
  split X so that ``x_i / v_i + c_i`` is equal for all workers.
- ``variant=gpu``: fit each worker's flat-then-linear step-time curve from
  its recent (batch, time) pairs, solve for equal finish under the memory
  caps, and damp the move (the step halves when a worker's direction of
  change reverses).

Memory caps: the cluster's per-worker caps (``PolicyContext.max_batch``,
the scenario's ``max_batch``) unless the ``max_batch`` parameter overrides
them with one value for all workers or ``v0/v1/...`` per worker (cycled
over the workers). The first round is an equal split.

A worker that leaves is no longer waited for; a gradient it had already
pushed in the open round is applied with the others. X is then shared by
the workers left. A worker that joins (``WorkerJoined``) waits for the round
in flight to close; X is then shared among the live workers and it, sized
from what its predictor learned before it left (an equal share's worth if it
never ran), and it pulls with them. With no live worker it starts at once
with the whole X (up to its cap). The same for ``lb-bsp-static``.

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsync.algos.lbbsp import CPUBatchManager, EWMAPredictor, GPUBatchManager, RLSPredictor, largest_remainder
from hetsync.errors import BadInput
from hetsync.policies.base import (
    Command,
    Compute,
    ComputeDone,
    Event,
    Policy,
    PolicyConfig,
    PolicyContext,
    PushArrived,
    WorkerJoined,
    WorkerLeft,
    admit,
    apply_and_pull,
    everyone_pushed,
    param,
    state_list,
)
from hetsync.policies.config import config_params, config_values

COMM_ALPHA = 0.3  # smoothing of the measured communication time per iteration


def parse_caps(policy: str, raw: str, workers: int) -> list[int] | None:
    """``""`` → None; ``"256"`` → 256 for everyone; ``"512/256/128"`` → cycled over the workers."""
    text = raw.strip()
    if not text:
        return None
    try:
        values = [int(v) for v in text.split("/")]
    except ValueError:
        raise BadInput(
            f"policy {policy!r} parameter 'max_batch' must be an integer or integers separated by '/', got {raw!r}"
        ) from None
    if any(v < 1 for v in values):
        raise BadInput(f"policy {policy!r} parameter 'max_batch' must be >= 1 everywhere, got {raw!r}")
    return [values[i % len(values)] for i in range(workers)]


def max_batch_param() -> str:
    """The ``max_batch`` field every balanced policy's config ends with."""
    return param("", help="memory caps on the batch: N, or N0/N1/... per worker (cycled); empty: none")


class BalancedBSP(Policy):
    """BSP rounds with per-worker batch sizes chosen at every barrier.

    Subclasses implement ``_observe`` (a finished step), ``_observe_comm``
    (a worker's communication time per iteration), ``_allocate`` (the
    next round's batches of the live workers, adding up to X) and
    ``_max_batch`` (their config's ``max_batch``: the last field, so labels
    show it last)."""

    collective = True  # rounds of a batch-weighted gradient mean (path=collective all-reduces them)

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.total = self.n * ctx.batch_size  # the global batch X, fixed
        self.caps = parse_caps(self.name, self._max_batch(), self.n)
        if self.caps is None and ctx.max_batch:
            self.caps = list(ctx.max_batch)
        if self.caps is not None and sum(self.caps) < self.total:
            raise BadInput(
                f"policy {self.name!r} parameter 'max_batch': the caps add up to {sum(self.caps)}, "
                f"less than the global batch {self.total} (workers × batch_size)"
            )
        self.alive = set(range(self.n))
        self.joining: set[int] = set()  # joined during the round in flight: live from the next one
        self.round: list[PushArrived] = []
        self.batch: dict[int, int] = {}
        self.rounds = 0
        self._duration_s: dict[int, float] = {}  # compute time of the worker's current step
        self._sent_at: dict[int, float] = {}  # when its current iteration began (its pull, or the start)
        self.comm_s = [0.0] * self.n  # smoothed push + pull seconds per iteration
        self.comm_seen: set[int] = set()

    # -------------------------------------------------------- subclass API
    def _max_batch(self) -> str:
        raise NotImplementedError

    def _observe(self, event: ComputeDone) -> None:
        raise NotImplementedError

    def _observe_comm(self, worker: int, comm_s: float) -> None:
        pass

    def _allocate(self, workers: list[int]) -> dict[int, int]:
        raise NotImplementedError

    # ------------------------------------------------------------- helpers
    def equal_split(self, workers: list[int]) -> dict[int, int]:
        caps = None if self.caps is None else [self.caps[w] for w in workers]
        shares = [self.total / len(workers)] * len(workers)
        return dict(zip(workers, largest_remainder(shares, self.total, hi=caps), strict=True))

    def _next_batches(self, workers: list[int]) -> dict[int, int]:
        if self.caps is not None and sum(self.caps[w] for w in workers) <= self.total:
            return {w: self.caps[w] for w in workers}  # too few left to hold X: everyone at its cap
        return self._allocate(workers)

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.batch[w], push="grad")

    def step_gap_bound(self) -> int | None:
        return 0

    always_shown: tuple[str, ...] = ()
    takes_joins = True

    @property
    def label(self) -> str:
        """The name, with the parameters in ``always_shown`` and those that differ from their defaults."""
        values = config_values(self.config)
        shown = [
            f"{p.name}={values[p.name]}"
            for p in config_params(type(self.config))
            if p.name in self.always_shown or values[p.name] != p.default
        ]
        return f"{self.name}({','.join(shown)})" if shown else self.name

    # --------------------------------------------------------- checkpoints
    # What was learned: the batches of the round in progress, the smoothed
    # communication times and the round count (subclasses add their
    # predictors). The open round's gradients die with the workers; a resumed
    # run does that round again with the same batches.
    def state_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "batch": [[w, b] for w, b in sorted(self.batch.items())],
            "comm_s": list(self.comm_s),
            "comm_seen": sorted(self.comm_seen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = int(state["rounds"])
        self.batch = {int(w): int(b) for w, b in state["batch"]}
        self.comm_s = [float(x) for x in state_list(self.name, state, "comm_s", self.n)]
        self.comm_seen = {int(w) for w in state["comm_seen"]}

    # -------------------------------------------------------------- events
    def start(self, now_s: float) -> list[Command]:
        workers = sorted(self.alive)
        if set(self.batch) != set(workers) or sum(self.batch.values()) != self.total:
            self.batch = self.equal_split(workers)  # a fresh start (a resumed run keeps its batches)
        self._sent_at = dict.fromkeys(self.alive, now_s)
        return [self._step(w) for w in sorted(self.alive)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            self._duration_s[event.worker] = event.duration_s
            self._observe(event)
            return []
        if isinstance(event, PushArrived):
            w = event.worker
            if w in self._sent_at and w in self._duration_s:
                comm = max(0.0, event.now_s - self._sent_at.pop(w) - self._duration_s[w])
                seen = w in self.comm_seen
                self.comm_s[w] = self.comm_s[w] + COMM_ALPHA * (comm - self.comm_s[w]) if seen else comm
                self.comm_seen.add(w)
                self._observe_comm(w, comm)
            self.round.append(event)
            return self._maybe_close(event.now_s)
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.joining.discard(event.worker)
            return self._maybe_close(event.now_s)
        if isinstance(event, WorkerJoined):
            w = event.worker
            if not admit(self.alive, self.joining, w):
                return []
            self.batch = self._next_batches([w])  # alone: the global batch is its (up to its cap)
            self._sent_at[w] = event.now_s
            return [self._step(w)]
        return []

    def _maybe_close(self, now_s: float) -> list[Command]:
        if not everyone_pushed(self.round, self.alive):
            return []
        pushes, self.round = self.round, []
        self.rounds += 1
        self.alive |= self.joining  # the workers that joined during the round: sized in from the next
        self.joining.clear()
        workers = sorted(self.alive)
        if workers:
            self.batch = self._next_batches(workers)
            for w in workers:
                self._sent_at[w] = now_s
        return apply_and_pull(pushes, lr=self.ctx.lr, next_steps=[self._step(w) for w in workers])


@dataclass(frozen=True, kw_only=True)
class LBBSPConfig(PolicyConfig):
    variant: str = param(
        "cpu",
        help="cpu: predict throughput from recent speed and load, split X for equal finish; "
        "gpu: fit flat-then-linear step curves, equal-finish solve, damped",
        choices=("cpu", "gpu"),
    )
    predictor: str = param(
        "rls", help="cpu variant: rls (online linear NARX) or ewma (smoothed throughput)", choices=("rls", "ewma")
    )
    # the regression keeps a (2 + 2·lags)² matrix per worker
    lags: int = param(2, help="cpu/rls: past iterations the regression looks at", ge=1, le=32)
    history: int = param(
        20,
        help="memory in iterations (rls: forgetting factor 1 − 1/history; gpu: half-life of old observations)",
        ge=2,
    )
    max_batch: str = max_batch_param()


class LBBSP(BalancedBSP):
    name = "lb-bsp"
    summary = "BSP with per-worker batch sizes re-sized at every barrier for equal finish (LB-BSP, SoCC 2020)"
    config_class = LBBSPConfig
    config: LBBSPConfig
    always_shown = ("variant",)

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        cfg = self.config
        self.manager: CPUBatchManager | GPUBatchManager
        if cfg.variant == "cpu":
            self.manager = CPUBatchManager(
                self.n, self.total, predictor=cfg.predictor, lags=cfg.lags, history=cfg.history, caps=self.caps
            )
        else:
            self.manager = GPUBatchManager(self.n, self.total, history=cfg.history, caps=self.caps)

    def _max_batch(self) -> str:
        return self.config.max_batch

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "manager": manager_state(self.manager)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        load_manager_state(self.manager, state["manager"])

    def _observe(self, event: ComputeDone) -> None:
        self.manager.observe(event.worker, event.batch_size, event.duration_s, event.load)

    def _observe_comm(self, worker: int, comm_s: float) -> None:
        self.manager.observe_comm(worker, comm_s)

    def _allocate(self, workers: list[int]) -> dict[int, int]:
        return self.manager.allocate(workers)


# ------------------------------------------------------------- checkpoints
def manager_state(manager: CPUBatchManager | GPUBatchManager) -> dict[str, Any]:
    """A batch manager's learned state as plain lists and numbers (the
    predictors' or step curves' data, loads, communication estimates)."""
    state: dict[str, Any] = {
        "load": list(manager.load),
        "comm": list(manager.comm),
        "comm_seen": list(manager._comm_seen),
    }
    if isinstance(manager, CPUBatchManager):
        state["predictors"] = [_predictor_state(p) for p in manager.predictors]
        return state
    state["estimators"] = [
        {"tick": e.tick, "largest": e.largest, "bins": [[b, *rec] for b, rec in e.bins.items()]}
        for e in manager.estimators
    ]
    d = manager.damper
    state["damper"] = {"step": list(d.step), "direction": list(d.direction), "streak": list(d.streak)}
    state["current"] = [[w, b] for w, b in sorted(manager.current.items())]
    return state


def load_manager_state(manager: CPUBatchManager | GPUBatchManager, state: dict[str, Any]) -> None:
    n = manager.n
    manager.load = [float(x) for x in state_list("lb-bsp", state, "load", n)]
    manager.comm = [float(x) for x in state_list("lb-bsp", state, "comm", n)]
    manager._comm_seen = [bool(x) for x in state_list("lb-bsp", state, "comm_seen", n)]
    if isinstance(manager, CPUBatchManager):
        for p, saved in zip(manager.predictors, state_list("lb-bsp", state, "predictors", n), strict=True):
            _load_predictor(p, saved)
        return
    for e, saved in zip(manager.estimators, state_list("lb-bsp", state, "estimators", n), strict=True):
        e.tick, e.largest = int(saved["tick"]), int(saved["largest"])
        e.bins = {int(b): [float(mean), float(count), float(last)] for b, mean, count, last in saved["bins"]}
    d, saved = manager.damper, state["damper"]
    d.step = [float(x) for x in state_list("lb-bsp", saved, "step", n)]
    d.direction = [int(x) for x in state_list("lb-bsp", saved, "direction", n)]
    d.streak = [int(x) for x in state_list("lb-bsp", saved, "streak", n)]
    manager.current = {int(w): int(b) for w, b in state["current"]}


def _predictor_state(p: RLSPredictor | EWMAPredictor) -> dict[str, Any]:
    if isinstance(p, EWMAPredictor):
        return {"value": p.value}
    return {
        "theta": p.theta.tolist(),
        "P": p.P.tolist(),
        "scale": p.scale,
        "ys": list(p.ys),
        "us": list(p.us),
        "observed": p.observed,
    }


def _load_predictor(p: RLSPredictor | EWMAPredictor, state: dict[str, Any]) -> None:
    if isinstance(p, EWMAPredictor):
        p.value = None if state["value"] is None else float(state["value"])
        return
    d = 2 + 2 * p.lags
    theta, cov = np.asarray(state["theta"], dtype=float), np.asarray(state["P"], dtype=float)
    if theta.shape != (d,) or cov.shape != (d, d):
        raise ValueError(f"policy 'lb-bsp': checkpoint predictor state must have {d} coefficients")
    p.theta, p.P = theta, cov
    p.scale = None if state["scale"] is None else float(state["scale"])
    p.ys = deque((float(y) for y in state["ys"]), maxlen=p.lags)
    p.us = deque((float(u) for u in state["us"]), maxlen=p.lags + 1)
    p.observed = int(state["observed"])
