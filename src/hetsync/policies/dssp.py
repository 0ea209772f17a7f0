"""DSSP — dynamic stale synchronous parallel (Zhao, An, Liu, Chen, "Dynamic
Stale Synchronous Parallel Distributed Training for Deep Learning", ICDCS
2019, arXiv 1908.11848).

SSP whose staleness threshold varies per worker within [s_L, s_L + r_max].
Clocks as in SSP: a worker's clock counts the steps the server has applied
from it, and a worker may start its step c only when every live worker's
clock is at least c − (its threshold). Gradients are applied on arrival with
weight 1/N (as ASP); a worker pulls the newest model before each step it is
allowed to take.

Every threshold starts at the lower bound s_L. When a worker's push takes it
past the lower bound (its clock is s_L + 1 ahead of the slowest worker's)
and it holds no grant, the synchronization controller
(:func:`hetsync.algos.dssp.dssp_extra_iterations`) predicts its next pushes
``t + r·I`` from its last push time and last interval, and the next push of
the slowest worker from that one's, and grants the r in [0, r_max] whose
push lands closest to the slowest one's: its threshold becomes s_L + r, so
it stops about when the slowest worker's push lets it continue and waits
least (r = 0: it waits now, as in SSP(s_L)). The grant lasts until the
worker is back within s_L of the slowest; its next crossing asks the
controller again. Intervals run from the moment a worker is let go on a
step to the arrival of its push, so blocked time is excluded. The paper
describes the controller for the fastest worker; here any worker that
crosses the lower bound asks it (with N > 2 a middle worker can cross too),
and "the slowest" is, among the workers with the smallest clock, the one
whose next push is predicted last (a worker that has not pushed yet counts
as due now).

A worker that leaves is no longer waited for. A worker that joins
(``WorkerJoined``) takes the slowest live worker's clock, as under SSP (its
own would hold everyone back), with no grant (threshold s_L) and its measured
interval kept, and starts a step at once on the model it holds, the current
one.

The step gap never exceeds s_L + r_max (``step_gap_bound``); s_L = 3,
r_max = 12 are the paper's defaults.

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.

Staleness remedies (:mod:`hetsync.policies.staleness`), all off by default,
as for ASP: ``lr_scale=inverse|sqrt|zhang`` (Zhang, Gupta, Lian, Liu,
"Staleness-Aware Async-SGD for Distributed Deep Learning", IJCAI 2016),
``compensate=λ`` (DC-ASGD: Zheng et al., "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017) and ``momentum=corrected``
(Mitliagkas, Zhang, Hadjis, Ré, "Asynchrony begets Momentum, with an
Application to Deep Learning", Allerton 2016; N = the live workers).
E.g. ``dssp:lr_scale=inverse``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsync.algos.dssp import dssp_extra_iterations
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
    WorkerJoined,
    WorkerLeft,
    param,
    slowest_clock,
    state_list,
)
from hetsync.policies.staleness import StalenessConfig, StalePushes


@dataclass(frozen=True, kw_only=True)
class DSSPConfig(StalenessConfig):
    s_L: int = param(3, help="lower staleness bound in steps", ge=0)
    r_max: int = param(12, help="most extra steps the controller may grant", ge=0)


class DSSP(StalePushes):
    name = "dssp"
    summary = "dynamic SSP: per-worker staleness bound in [s_L, s_L + r_max], set at run time"
    config_class = DSSPConfig
    config: DSSPConfig
    takes_joins = True

    def __init__(self, ctx: PolicyContext, **params: object) -> None:
        super().__init__(ctx, **params)
        self.s_L = self.config.s_L
        self.r_max = self.config.r_max
        self.clock = [0] * self.n
        self.threshold = [self.s_L] * self.n
        self.alive = set(range(self.n))
        self.blocked: set[int] = set()
        self.released_s = [0.0] * self.n  # when the worker was let go on its current step
        self.interval_s: list[float | None] = [None] * self.n  # its last step, release to push arrival
        self.grant_counts = [0] * (self.r_max + 1)  # how often the controller chose each r

    def step_gap_bound(self) -> int | None:
        return self.s_L + self.r_max

    # checkpoints: the measured intervals the controller predicts from, and
    # its statistics. Clocks and grants start again at 0: a resumed run starts
    # every worker from the same global model, a synchronization point.
    def state_dict(self) -> dict[str, Any]:
        return {"interval_s": list(self.interval_s), "grant_counts": list(self.grant_counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        intervals = state_list(self.name, state, "interval_s", self.n)
        self.interval_s = [None if x is None else float(x) for x in intervals]
        self.grant_counts = [int(c) for c in state_list(self.name, state, "grant_counts", self.r_max + 1)]

    def start(self, now_s: float) -> list[Command]:
        self.released_s = [now_s] * self.n
        return [Compute(worker=w, batch_size=self.ctx.batch_size) for w in range(self.n)]

    def _slowest_clock(self) -> int:
        return min(self.clock[w] for w in self.alive)

    def _slowest_next(self, now_s: float) -> tuple[float, float]:
        """(last push, interval) of the slowest worker, its next push predicted no earlier than now."""
        low = self._slowest_clock()
        best: tuple[float, float] | None = None
        for q in sorted(self.alive):
            if self.clock[q] != low:
                continue
            last = self.released_s[q]  # the slowest is never blocked: let go at its last push
            interval = self.interval_s[q]
            interval = max(interval if interval is not None else 0.0, now_s - last)
            if best is None or last + interval > best[0] + best[1]:
                best = (last, interval)
        assert best is not None
        return best

    def _grant(self, w: int, now_s: float) -> None:
        interval = self.interval_s[w]
        assert interval is not None
        slow_last, slow_interval = self._slowest_next(now_s)
        r = dssp_extra_iterations(now_s, interval, slow_last, slow_interval, self.r_max)
        self.grant_counts[r] += 1
        self.threshold[w] = self.s_L + r

    def _release(self, now_s: float) -> list[Command]:
        slowest = self._slowest_clock()
        ready = sorted(w for w in self.blocked if self.clock[w] - slowest <= self.threshold[w])
        self.blocked.difference_update(ready)
        for w in ready:
            self.released_s[w] = now_s
        return [Pull(worker=w) for w in ready]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, ComputeDone):
            return [Push(worker=event.worker, kind="grad")]
        if isinstance(event, PushArrived):
            w, now = event.worker, event.now_s
            apply = self.apply_push(event, 1.0 / self.n, len(self.alive))
            if w not in self.alive:
                return [apply]
            self.clock[w] += 1
            self.interval_s[w] = max(0.0, now - self.released_s[w])
            gap = self.clock[w] - self._slowest_clock()
            if gap <= self.s_L:
                self.threshold[w] = self.s_L  # back within the lower bound: any grant is over
            elif self.threshold[w] == self.s_L:
                self._grant(w, now)  # crossing the lower bound with no grant: ask the controller
            self.blocked.add(w)  # _release lets it go at once if the gap allows
            return [apply, *self._release(now)]
        if isinstance(event, PullDone):
            return [Compute(worker=event.worker, batch_size=self.ctx.batch_size)]
        if isinstance(event, WorkerLeft):
            self.alive.discard(event.worker)
            self.blocked.discard(event.worker)
            return self._release(event.now_s) if self.alive else []
        if isinstance(event, WorkerJoined):
            w = event.worker
            if w in self.alive:
                return []
            self.clock[w] = slowest_clock(self.clock, self.alive, w)
            self.threshold[w] = self.s_L
            self.released_s[w] = event.now_s
            self.alive.add(w)
            return [Compute(worker=w, batch_size=self.ctx.batch_size)]
        return []
