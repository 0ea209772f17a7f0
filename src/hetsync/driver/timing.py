"""Compute timing model (docs/architecture.md §5), shared by both drivers: the
simulator takes its step durations from it, and a runtime worker sleeps
after each real step for the extra share it gives that worker
(:meth:`TimingModel.extra_sleep_s`).

A step of worker w with batch b, started at virtual time t, takes

    base(b) · slowdown_w · noise · straggle · load_w(t) + delay_w

- ``base(b) = fixed_s + per_sample_s · b`` on CPU-like workers; on GPU-like
  workers it is flat up to the saturation batch and linear after it:
  ``fixed_s + per_sample_s · max(0, b − saturation_batch_w)`` (a batch above
  ``max_batch_w``, the memory cap, is refused before it gets here:
  :meth:`hetsync.driver.core.DriverCore.start_step`).
- ``noise`` is lognormal with mean 1 and log-sd ``jitter``;
- ``straggle`` is ``straggler_factor`` with probability ``straggler_prob``;
- ``load_w(t)`` is the background-load square wave, if any;
- ``delay_w`` is the injected per-step delay (the WBSP paper's sleep).

Each worker draws from its own random stream, so worker w's k-th step has
the same noise under every policy (common random numbers make comparisons
between policies sharper). When the noise is the stream's only draw (no
stragglers), a worker's normals are drawn ``_NOISE_CHUNK`` at a time: numpy
fills an array with the very values that as many single draws give, in the
same order, for a twelfth of the calls.
"""

from __future__ import annotations

import math

import numpy as np

from hetsync.scenario import Scenario

_NOISE_CHUNK = 16  # normals drawn at a time per worker (when the noise is the only draw)


class TimingModel:
    def __init__(self, scenario: Scenario) -> None:
        self.sc = scenario
        seeds = np.random.SeedSequence([scenario.job.seed, 0x71E]).spawn(scenario.cluster.workers)
        self._rngs = [np.random.default_rng(s) for s in seeds]
        self._sigma = scenario.timing.jitter
        self._mu = -0.5 * scenario.timing.jitter**2  # E[exp(N(mu, sigma))] = 1
        # normals drawn ahead, last one first (pop), per worker; only when no other draw interleaves
        self._chunked = self._sigma > 0 and not scenario.timing.straggler_prob > 0
        self._normals: list[list[float]] = [[] for _ in range(scenario.cluster.workers)] if self._chunked else []
        self._base_s: dict[tuple[int, int], tuple[float, float]] = {}  # (worker, batch): (base, delay)

    def step_duration_s(self, worker: int, batch_size: int, now_s: float) -> float:
        found = self._base_s.get((worker, batch_size))
        if found is None:
            sc = self.sc
            found = self._base_s[worker, batch_size] = (
                sc.nominal_step_s(worker, batch_size) - sc.cluster.delay_s[worker],
                sc.cluster.delay_s[worker],
            )
        base, delay = found
        return base * self.random_factor(worker, now_s) + delay

    def random_factor(self, worker: int, now_s: float) -> float:
        """noise · straggle · load for one step (the static slowdown is in the base)."""
        sc = self.sc
        factor = 1.0
        if self._chunked:
            normals = self._normals[worker]
            if not normals:
                normals += reversed(self._rngs[worker].normal(self._mu, self._sigma, _NOISE_CHUNK).tolist())
            factor *= math.exp(normals.pop())
        elif self._sigma > 0:
            factor *= math.exp(self._rngs[worker].normal(self._mu, self._sigma))
        if sc.timing.straggler_prob > 0 and self._rngs[worker].random() < sc.timing.straggler_prob:
            factor *= sc.timing.straggler_factor
        if sc.cluster.background_load is not None:
            factor *= sc.cluster.background_load.factor_at(worker, now_s)
        return factor

    def load_factor(self, worker: int, now_s: float) -> float:
        """The background load on the worker at ``now_s`` (1.0 when none)."""
        load = self.sc.cluster.background_load
        return 1.0 if load is None else load.factor_at(worker, now_s)

    def extra_sleep_s(self, worker: int, measured_s: float, now_s: float, *, paced_batch: int | None = None) -> float:
        """For real processes: how long to sleep after a step that really took
        ``measured_s`` so that it lasts as the scenario says this worker's
        steps last (slowdown, noise, stragglers, load) plus the injected
        delay. A step cannot be made faster than it really was.

        With ``paced_batch`` (the runtime's ``--pace``) the step lasts the
        whole modelled :meth:`step_duration_s` of that batch, as in the
        simulator; without it, the real step is stretched by the slowdown
        (the real base cost stands in for ``fixed_s + per_sample_s · b``)."""
        if paced_batch is not None:
            return max(0.0, self.step_duration_s(worker, paced_batch, now_s) - measured_s)
        factor = self.sc.cluster.slowdown[worker] * self.random_factor(worker, now_s)
        return max(0.0, measured_s * (factor - 1.0)) + self.sc.cluster.delay_s[worker]
