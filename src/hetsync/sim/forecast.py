"""Forecasts for a policy that asks (``Forecast``, auto's): each candidate
simulated from the global model as it is now, on the cluster the run
measured, for a short horizon; the answer is each candidate's loss at its end
(``ForecastDone``). This is what weighs convergence per sample, which a
ranking by throughput cannot see (issue 31, item 1): local SGD learning more
per sample than BSP on a cluster, backup's late gradients lost, LB-BSP's
batches still being learned.

The cluster is fitted from the run's own measurements, not read from the
scenario the simulator plays (on real processes there is no such scenario):
each live worker's step at batch b takes ``T·(f + (1 − f)·b/B)`` — ``T`` the
median of its latest step times at the common batch ``B``, ``f`` the share
that does not grow with the batch (auto's fit) — with the window's noise
and transient stragglers fitted by the profile's code
(:mod:`hetsync.algos.stepfit`: the robust spread of the steps that are not
outliers, and how often and by how much the outliers straggle); every round
pays the measured overhead once (as the latency of the push and of the
pull, on links too fast to cost more). What is not measured is not played:
no load that comes and goes (a window of steps has no times to see a
period in), no membership. The simulation starts from the ledger's
global model with fresh optimizer state (the server's momentum is not
carried: the candidates start alike), a seed of its own per ask and seed.

:func:`fitted_scenario` is the pure part; :func:`forecast` runs it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hetsync.algos.stepfit import fit_jitter, fit_transients
from hetsync.policies.base import Forecast, ForecastDone
from hetsync.scenario import Scenario, StepCost

MAX_JITTER = 1.0  # (a log-normal sigma: a window of wildly spread steps is not played wilder than this)
FAST_LINK_BPS = 1e15  # links that cost nothing beyond their latency: the overhead is measured whole


def fitted_scenario(sc: Scenario, cmd: Forecast, seed: int) -> Scenario:
    """The cluster ``cmd`` measured, as a scenario of the job ``sc`` runs:
    one worker per row of ``cmd.step_s``, the step cost ``T·(f + (1 − f)·b/B)``
    (``fixed_s`` 0 and ``per_sample_s`` 1/B, so each worker's ``slowdown`` is
    its growing part and its ``delay_s`` its fixed part), the window's noise
    and transient stragglers as ``hetsync profile`` fits them (``jitter``:
    :func:`~hetsync.algos.stepfit.fit_jitter`; ``straggler_prob`` and
    ``straggler_factor``: :func:`~hetsync.algos.stepfit.fit_transients`), the
    round overhead as latency, ``horizon_s`` long."""
    rows = [np.asarray(r, dtype=float) for r in cmd.step_s]
    typical = np.array([float(np.median(r)) for r in rows])
    fixed = np.clip(np.asarray(cmd.fixed, dtype=float), 0.0, 1.0)
    # the window's noise and transient stragglers, as hetsync profile fits them (on the part a batch moves)
    B = sc.job.batch_size
    per_worker = [[(0.0, B, float(t), float(t)) for t in r] for r in rows]
    delays = [float(d) for d in fixed * typical]
    jitter = min(fit_jitter(per_worker, delays), MAX_JITTER)
    straggler_prob, straggler_factor, _, _ = fit_transients(per_worker, delays)
    n = len(rows)
    cluster = dataclasses.replace(
        sc.cluster,
        workers=n,
        slowdown=tuple(max(float(s), 1e-9) for s in (1.0 - fixed) * typical),
        delay_s=tuple(float(d) for d in fixed * typical),
        saturation_batch=(),
        max_batch=(),
        background_load=None,
        link_load=None,
        membership=(),
        bandwidth_Bps=(FAST_LINK_BPS,) * n,
        server_bandwidth_Bps=FAST_LINK_BPS,
        latency_s=cmd.overhead_s / 2,  # (a round's push and pull each pay it)
        server_s_per_message=0.0,
        control_latency=False,
    )
    timing = dataclasses.replace(
        sc.timing,
        device="cpu",
        step=StepCost(fixed_s=0.0, per_sample_s=1.0 / sc.job.batch_size),
        jitter=jitter,
        straggler_prob=straggler_prob,
        straggler_factor=straggler_factor,
    )
    return dataclasses.replace(
        sc,
        name=f"{sc.name}-forecast",
        description="the cluster a run measured (hetsync.sim.forecast)",
        cluster=cluster,
        job=dataclasses.replace(sc.job, seed=seed, policies=tuple(cmd.candidates)),
        stop=dataclasses.replace(sc.stop, max_time_s=cmd.horizon_s, max_steps=None, eval_every_s=cmd.horizon_s),
        timing=timing,
        source=None,
    )


def forecast(
    sc: Scenario,
    workload: Any,
    theta: torch.Tensor | None,
    cmd: Forecast,
    now_s: float,
    *,
    simulation: Callable[..., Any],
) -> ForecastDone:
    """Each candidate of ``cmd`` simulated from ``theta`` on the fitted
    cluster (:func:`fitted_scenario`), ``cmd.seeds`` seeds each: its loss at
    the end of the horizon, answered at ``now_s``; ``simulation`` is the
    simulator's ``Simulation`` (handed in: the engine imports this module). Without the model's math (``theta`` None) there
    is nothing to forecast: ``scores`` None."""
    if theta is None:
        return ForecastDone(now_s=now_s, ask=cmd.ask, why="a run without gradient math has no model to forecast from")
    scores = []
    for spec in cmd.candidates:
        losses = []
        for k in range(cmd.seeds):
            seed = (sc.job.seed * 1_000_003 + cmd.ask * 101 + k) % 2**32
            sim = simulation(fitted_scenario(sc, cmd, seed), spec, workload=workload, initial_model=theta)
            final = sim.run().summary.get("final_metrics") or {}
            loss = final.get("loss")
            losses.append(float(loss) if loss is not None and math.isfinite(loss) else math.inf)
        scores.append((spec, tuple(losses)))
    return ForecastDone(now_s=now_s, ask=cmd.ask, metric="loss", scores=tuple(scores))
