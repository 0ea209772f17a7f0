"""ASP — asynchronous parallel (Hogwild-style parameter server; Dean et al.
2012, Downpour SGD).

Nobody waits. A worker computes a gradient on whatever model it holds and
pushes it; the server applies it on arrival with weight 1/N (learning rate
``lr``, so N pushes move the model about as far as one BSP step), and the
pusher pulls the latest model and carries on. Throughput is the sum of the
workers' rates, paid for with staleness: a slow worker's gradient was
computed on a model several versions old.

A worker that joins (``WorkerJoined``) holds the current global model and
starts its next step at once; there is no round to wait for.

Optimizer state (hetsync.recipe): only the server's ``optimizer`` steps (on
every ``Apply``, at ``lr`` times the schedule); its state — momentum, Adam
moments — lives on the server with the global model. Workers take no local
steps, so they hold no optimizer state and a pull replaces parameters only.

Staleness remedies (:mod:`hetsync.policies.staleness`), all off by default:
``lr_scale=inverse|sqrt|zhang`` — the push's rate × 1/max(1, τ) or 1/√max(1, τ)
(Zhang, Gupta, Lian, Liu, "Staleness-Aware Async-SGD for Distributed Deep
Learning", IJCAI 2016); ``compensate=λ`` — DC-ASGD's delay compensation
g + λ·g⊙g⊙(θ_now − θ_then) (Zheng et al., "Asynchronous Stochastic Gradient
Descent with Delay Compensation", ICML 2017); ``momentum=corrected`` — the
server's momentum lowered by the implicit 1 − 1/N of N asynchronous workers
(Mitliagkas, Zhang, Hadjis, Ré, "Asynchrony begets Momentum, with an
Application to Deep Learning", Allerton 2016). E.g. ``asp:lr_scale=inverse``.
"""

from __future__ import annotations

from hetsync.policies.base import (
    Command,
    Compute,
    Event,
    Pull,
    PushArrived,
    WorkerJoined,
)
from hetsync.policies.staleness import StalenessConfig, StalePushes


class ASP(StalePushes):
    name = "asp"
    summary = "asynchronous: apply every gradient on arrival (weight 1/N), nobody waits"
    config_class = StalenessConfig
    config: StalenessConfig
    takes_joins = True

    def _step(self, w: int) -> Compute:
        return Compute(worker=w, batch_size=self.ctx.batch_size, push="grad")

    def start(self, now_s: float) -> list[Command]:
        return [self._step(w) for w in range(self.n)]

    def on_event(self, event: Event) -> list[Command]:
        if isinstance(event, PushArrived):
            return [
                self.apply_push(event, 1.0 / self.n, self.n),
                Pull(worker=event.worker, then=self._step(event.worker)),
            ]
        if isinstance(event, WorkerJoined):  # it holds the current model: it steps at once
            return [self._step(event.worker)]
        return []
