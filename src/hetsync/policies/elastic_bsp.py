"""ElasticBSP — elastic bulk synchronous parallel with ZipLine barriers (Zhao,
Papagelis, An, Chen, Liu, Hu, "Elastic Bulk Synchronous Parallel Model for
Distributed Deep Learning", ICDM 2019; ZipLine in *Machine Learning* 2021,
doi 10.1007/s10994-021-06064-w).

BSP with barriers at variable times. Between two barriers (a superstep)
workers run different numbers of iterations, pushing ASP-style: the server
applies each gradient on arrival with weight 1/N (learning rate ``lr``, as
ASP), and the pusher pulls the latest model and goes on. A worker that has
run its quota of iterations waits at the barrier; when every live worker has
arrived, all pull the same model (the barrier pull) and the next superstep
begins.

Choosing the quotas: at each barrier the server predicts every worker's next
R push times ``e_p + i·I_p`` (i = 1..R), where ``I_p`` is the worker's last
interval (from the moment it was let go on its last iteration to the
arrival of that push, so waiting is excluded) and ``e_p`` its last push
time. Every worker's last push is absorbed by the barrier and its next
iteration starts there, so ``e_p`` is the barrier time for all. ZipLine
(:func:`hetsync.algos.zipline.zipline`) picks one predicted push per worker
with the smallest spread max − min, earliest on ties; worker p's quota is
the index of its pick (1..R), so the next barrier falls where the chosen
pushes are predicted to bunch up and fast workers fill the slow ones' time
with extra iterations instead of idling. Before any history there is
nothing to predict from, so the first superstep is one iteration for
everyone (it measures the intervals). R is the look-ahead (15–240 in the
paper); R = 1 is BSP with per-arrival application.

Staleness is bounded inside a superstep but the gap in step counts between
fast and slow workers grows by up to R − 1 per superstep, so no step-gap
bound is promised (``step_gap_bound`` is None).

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.

Staleness remedies (:mod:`hetsync.policies.staleness`), all off by default,
as for ASP: ``lr_scale=inverse|sqrt`` (Zhang, Gupta, Lian, Liu,
"Staleness-Aware Async-SGD for Distributed Deep Learning", IJCAI 2016),
``compensate=λ`` (DC-ASGD: Zheng et al., "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017) and ``momentum=corrected``
(Mitliagkas, Zhang, Hadjis, Ré, "Asynchrony begets Momentum, with an
Application to Deep Learning", Allerton 2016; N = the live workers).
E.g. ``elastic-bsp:R=15:compensate=0.04``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsync.algos.zipline import predict_push_times, zipline
from hetsync.policies.base import (
    Command,
    Compute,
    ComputeDone,
    Event,
    PolicyContext,
    Pull,
    PullDone,
    Push,
    PushArrived,
    WorkerLeft,
    param,
    state_list,
)
from hetsync.policies.staleness import StalenessConfig, StalePushes


@dataclass(frozen=True, kw_only=True)
class ElasticBSPConfig(StalenessConfig):
    R: int = param(15, help="look-ahead: predicted pushes per worker", ge=1)


class ElasticBSP(StalePushes):
    name = "elastic-bsp"
    summary = "ElasticBSP: barriers where ZipLine predicts pushes bunch up; ASP-style in between"
    config_class = ElasticBSPConfig
    config: ElasticBSPConfig

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.R = self.config.R
        self.alive = set(range(self.n))
        self.quota = [1] * self.n  # iterations left in the current superstep
        self.at_barrier: set[int] = set()
        self.released_s = [0.0] * self.n  # when the worker was let go on its current iteration
        self.interval_s = [0.0] * self.n  # its last iteration, release to push arrival
        self.supersteps = 0
        self.last_quota: dict[int, int] = dict.fromkeys(range(self.n), 1)

    # checkpoints: the measured intervals ZipLine predicts from, and the
    # superstep statistics. A resumed run's first superstep takes its quotas
    # from those predictions (instead of a one-iteration measuring superstep).
    def state_dict(self) -> dict[str, Any]:
        return {
            "interval_s": list(self.interval_s),
            "supersteps": self.supersteps,
            "last_quota": [[w, q] for w, q in sorted(self.last_quota.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.interval_s = [float(x) for x in state_list(self.name, state, "interval_s", self.n)]
        self.supersteps = int(state["supersteps"])
        self.last_quota = {int(w): int(q) for w, q in state["last_quota"]}
        if self.supersteps:
            times = predict_push_times(np.zeros(self.n), np.array(self.interval_s), self.R)
            self.quota = [int(q) for q in zipline(times).tolist()]

    def start(self, now_s: float) -> list[Command]:
        self.released_s = [now_s] * self.n
        return [Compute(worker=w, batch_size=self.ctx.batch_size) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            return [Push(worker=event.worker, kind="grad")]
        if isinstance(event, PushArrived):
            return self._on_push(event)
        if isinstance(event, PullDone):
            return [Compute(worker=event.worker, batch_size=self.ctx.batch_size)]
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.at_barrier.discard(event.worker)
            return self._maybe_barrier(event.now_s)
        return []

    def _on_push(self, event: PushArrived) -> list[Command]:
        w, now = event.worker, event.now_s
        cmds: list[Command] = [self.apply_push(event, 1.0 / self.n, len(self.alive))]
        if w not in self.alive:
            return cmds
        self.interval_s[w] = max(0.0, now - self.released_s[w])
        self.quota[w] -= 1
        if self.quota[w] > 0:
            self.released_s[w] = now
            return [*cmds, Pull(worker=w)]
        self.at_barrier.add(w)
        return cmds + self._maybe_barrier(now)

    def _maybe_barrier(self, now_s: float) -> list[Command]:
        if not self.alive or not self.alive <= self.at_barrier:
            return []
        workers = sorted(self.alive)
        times = predict_push_times(
            np.full(len(workers), now_s), np.array([self.interval_s[w] for w in workers]), self.R
        )
        counts = zipline(times)
        for w, count in zip(workers, counts.tolist(), strict=True):
            self.quota[w] = count
            self.released_s[w] = now_s
        self.last_quota = dict(zip(workers, counts.tolist(), strict=True))
        self.at_barrier.clear()
        self.supersteps += 1
        return [Pull(worker=w) for w in workers]
