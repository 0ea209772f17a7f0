"""How a worker's step time grows with its batch, and how it spreads: fitted
from measured steps. One code for the two places hetsync fits a cluster —
``hetsync profile`` (:mod:`hetsync.advise.profile`, which writes
``cluster.yaml`` from a short real job) and ``auto`` while it trains
(:mod:`hetsync.policies.auto`'s fixed share of a step;
:mod:`hetsync.sim.forecast`'s noise and stragglers of the window it
simulates from). Pure: numpy and the standard library.

- :func:`fit_step_cost`: ``seconds = fixed_s + per_sample_s · batch``, both
  coefficients ≥ 0, by least squares over ``(batch, seconds)`` rows.
- :func:`fit_worker`: one worker's steps (rows ``start_s, batch, seconds,
  gradient seconds``), outliers left out (more than :data:`OUTLIER_RATIO`
  times their batch size's median), a straight line or a knee
  (:func:`fit_knee`: flat, then linear) through the medians per batch size.
- :func:`decompose`: the workers as one base cost times a per-worker
  ``slowdown`` plus a per-worker ``delay_s``.
- The outliers: in runs in time, **background load** (:func:`fit_load`);
  isolated, **transient stragglers** (:func:`fit_transients`); the spread of
  the rest, the **noise** (:func:`fit_jitter`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsync.errors import BadInput

OUTLIER_RATIO = 1.5  # a step this many times its (worker, batch) median is an outlier
MIN_RUN = 3  # outliers this many steps in a row are load, not transient stragglers
RELIABLE_PER_SAMPLE = 0.25  # per-sample share of the reference step above which slopes tell slowdowns apart
KNEE_GAIN = 4.0  # a knee shows when the hinge fit's squared error is this many times smaller than the line's
# three sizes: a knee shows when the middle median lies below the outer two's chord by this share of their rise,
KNEE_BEND = 0.05
KNEE_SHARE = 0.02  # by this share of the middle step (more than a busy machine's drift)
KNEE_NOISE = 3.0  # and by this many standard errors of the medians
NEGLIGIBLE = 0.02  # a fitted delay under this share of the base step is written as 0


def fit_step_cost(
    table: Sequence[tuple[int, float]],
    *,
    fixed_s: float | None = None,
    per_sample_s: float | None = None,
) -> tuple[float, float]:
    """Least-squares ``(fixed_s, per_sample_s)`` of ``seconds = fixed_s +
    per_sample_s · batch`` over the table's ``(batch, seconds)`` rows, both
    coefficients >= 0. A coefficient given is kept and only the other is
    fitted."""
    if not table:
        raise ValueError("no measurements to fit")
    b = np.array([float(row[0]) for row in table])
    t = np.array([float(row[1]) for row in table])
    if fixed_s is not None and per_sample_s is not None:
        return fixed_s, per_sample_s
    if fixed_s is not None:
        return fixed_s, _slope_through(b, t - fixed_s)
    if per_sample_s is not None:
        return max(0.0, float(np.mean(t - per_sample_s * b))), per_sample_s
    # the two-variable problem: the unconstrained optimum if it is feasible,
    # else the best of the boundary solutions (a convex problem: one of them)
    candidates = [(max(0.0, float(np.mean(t))), 0.0), (0.0, _slope_through(b, t))]
    if np.ptp(b) > 0:
        slope, intercept = np.polyfit(b, t, 1)
        if slope >= 0 and intercept >= 0:
            candidates.insert(0, (float(intercept), float(slope)))
    return min(candidates, key=lambda c: float(np.sum((c[0] + c[1] * b - t) ** 2)))


def _slope_through(b: np.ndarray, t: np.ndarray) -> float:
    """The least-squares slope of a line through the origin, clipped at 0."""
    denom = float(np.sum(b * b))
    return max(0.0, float(np.sum(b * t)) / denom) if denom > 0 else 0.0


# ------------------------------------------------------------------ compute
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerFit:
    """One worker's measured step times."""

    worker: int
    steps: int
    fixed_s: float  # fit of the median step time per batch size
    per_sample_s: float
    table: tuple[tuple[int, float, int], ...]  # (batch, median s, steps)
    outliers: int = 0
    load_steps: int = 0  # outliers in runs (background load)
    knee_batch: int | None = None
    failed_batches: tuple[int, ...] = ()
    # the gradient alone (each step's time before an emulation's sleep; the whole step without --emulate
    # and on a paced emulation, whose modelled step is the emulated cluster's step)
    gradient_fixed_s: float = 0.0
    gradient_per_sample_s: float = 0.0

    def step_s(self, batch: int) -> float:
        return self._curve(self.fixed_s, self.per_sample_s, batch)

    def gradient_s(self, batch: int) -> float:
        return self._curve(self.gradient_fixed_s, self.gradient_per_sample_s, batch)

    def _curve(self, fixed_s: float, per_sample_s: float, batch: int) -> float:
        if self.knee_batch is not None:
            return fixed_s + per_sample_s * max(0, batch - self.knee_batch)
        return fixed_s + per_sample_s * batch

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "steps": self.steps,
            "fixed_s": self.fixed_s,
            "per_sample_s": self.per_sample_s,
            "table": [list(row) for row in self.table],
            "outliers": self.outliers,
            "load_steps": self.load_steps,
            "knee_batch": self.knee_batch,
            "failed_batches": list(self.failed_batches),
            "gradient_fixed_s": self.gradient_fixed_s,
            "gradient_per_sample_s": self.gradient_per_sample_s,
        }


def medians_by_batch(steps: Sequence[Sequence[float]]) -> dict[int, float]:
    """The median seconds of the steps at each batch size (rows: start_s, batch, seconds, ...)."""
    groups: dict[int, list[float]] = {}
    for row in steps:
        groups.setdefault(int(row[1]), []).append(float(row[2]))
    return {b: statistics.median(v) for b, v in sorted(groups.items())}


def median_errors(steps: Sequence[Sequence[float]]) -> list[float]:
    """The standard error of each batch size's median step (in
    :func:`medians_by_batch`'s order): 1.2533 σ / √n, σ from the median
    absolute deviation (robust to the outliers a busy machine leaves)."""
    groups: dict[int, list[float]] = {}
    for row in steps:
        groups.setdefault(int(row[1]), []).append(float(row[2]))
    out = []
    for _, values in sorted(groups.items()):
        med = statistics.median(values)
        sigma = 1.4826 * statistics.median(abs(v - med) for v in values)
        out.append(1.2533 * sigma / math.sqrt(len(values)))
    return out


def outlier_mask(steps: Sequence[Sequence[float]], ratio: float = OUTLIER_RATIO) -> list[bool]:
    """Whether each step took more than ``ratio`` times its batch size's median."""
    med = medians_by_batch(steps)
    return [float(row[2]) > ratio * med[int(row[1])] for row in steps]


def load_runs(mask: Sequence[bool], min_run: int = MIN_RUN) -> list[tuple[int, int]]:
    """The runs of at least ``min_run`` consecutive outliers, as [first, last] step indices."""
    runs, start = [], None
    for i, flagged in enumerate([*mask, False]):
        if flagged and start is None:
            start = i
        elif not flagged and start is not None:
            if i - start >= min_run:
                runs.append((start, i - 1))
            start = None
    return runs


def fit_knee(
    table: Sequence[tuple[int, float]], se: Sequence[float] | None = None, *, force: bool = False
) -> tuple[int, float, float] | None:
    """A knee curve, as the simulator's GPU-like workers step: flat up to a
    batch k, linear after it (``fixed_s + per_sample_s · max(0, b − k)``).
    Returns (k, fixed_s, per_sample_s) where the medians show one, else None.

    Four sizes or more: a hinge at one of the measured sizes (two sizes at or
    below it, two above) that fits :data:`KNEE_GAIN` times better than a
    straight line. Three sizes: a curve whose per-sample cost rises — the
    middle median lies below the chord of the outer two by at least
    :data:`KNEE_BEND` of their rise and :data:`KNEE_SHARE` of the middle step
    and, given ``se`` (each median's standard error), by more than
    :data:`KNEE_NOISE` standard errors — gets the hinge through the three
    points (rounded to a whole k, then fitted): a superlinear CPU step (the
    activations outgrow a cache) that a line would overstate at the middle
    size and understate at the largest. Below the smallest size the curve
    is flat, a guess. ``force``: the best hinge even where a line fits as
    well (when the cluster's other workers show the knee), None only
    where no hinge can be fitted."""
    if len(table) < 3:
        return None
    order = sorted(range(len(table)), key=lambda i: table[i][0])
    rows = [(int(table[i][0]), float(table[i][1])) for i in order]
    b = np.array([float(r[0]) for r in rows])
    t = np.array([r[1] for r in rows])
    if len(rows) == 3:
        return _bend_knee(b, t, None if se is None else [float(se[i]) for i in order], force)
    f, p = fit_step_cost(rows)
    line_err = float(np.sum((f + p * b - t) ** 2))
    best: tuple[float, int, float, float] | None = None
    for i in range(1, len(rows) - 2):  # k = b[i]: at least two sizes at or below, two above
        fitted = _hinge(b, t, int(b[i]))
        if fitted is None:
            continue
        err = float(np.sum((fitted[1] + fitted[2] * np.maximum(0.0, b - b[i]) - t) ** 2))
        if best is None or err < best[0]:
            best = (err, *fitted)
    if best is None or (not force and best[0] * KNEE_GAIN > line_err):
        return None
    return best[1], best[2], best[3]


def _hinge(b: np.ndarray, t: np.ndarray, k: int) -> tuple[int, float, float] | None:
    """Least-squares (k, fixed_s, per_sample_s) of ``fixed_s + per_sample_s · max(0, b − k)``; None if not increasing."""
    x = np.maximum(0.0, b - k)
    A = np.stack([np.ones_like(x), x], axis=1)
    (c, slope), *_ = np.linalg.lstsq(A, t, rcond=None)
    if c < 0 or slope <= 0:
        return None
    return k, float(c), float(slope)


def _bend_knee(b: np.ndarray, t: np.ndarray, se: list[float] | None, force: bool) -> tuple[int, float, float] | None:
    """Three sizes: the hinge through them where the per-sample cost rises (see :func:`fit_knee`)."""
    (b1, b2, b3), (t1, t2, t3) = b, t
    upper = (t3 - t2) / (b3 - b2)  # the per-sample cost between the two larger sizes
    if upper <= 0:
        return None
    w = (b2 - b1) / (b3 - b1)
    bend = t1 + (t3 - t1) * w - t2  # how far the middle median lies below the outer two's chord
    if not force:
        if bend < KNEE_BEND * (t3 - t1) or bend < KNEE_SHARE * t2:
            return None
        if se is not None and bend <= KNEE_NOISE * math.sqrt(se[1] ** 2 + ((1 - w) * se[0]) ** 2 + (w * se[2]) ** 2):
            return None
    k = b2 - min(b2 - b1, max(0.0, t2 - t1) / upper)  # where the line through the larger two leaves t1's level
    return _hinge(b, t, int(round(k)))


def fit_worker(
    worker: int, steps: Sequence[Sequence[float]], failed: Sequence[int] = (), *, knee: bool | None = None
) -> WorkerFit:
    """Fit one worker's base cost to its steps' medians per batch size,
    outliers left out: a knee curve where the medians show one
    (:func:`fit_knee`), else a straight line. ``knee``: True fits the knee
    curve wherever one can be fitted, False a line (the cluster's other
    workers decided: :func:`fit_profile`)."""
    if not steps:
        raise BadInput(f"worker {worker} timed no step: give the profile more time (--compute-s)")
    mask = outlier_mask(steps)
    kept = [row for row, out in zip(steps, mask, strict=True) if not out]
    med = medians_by_batch(kept)
    counts = {b: sum(int(r[1]) == b for r in kept) for b in med}
    table = [(b, s) for b, s in med.items()]
    gradient = [(b, s) for b, s in medians_by_batch([(r[0], r[1], r[3]) for r in kept]).items()]
    hinge = None if knee is False else fit_knee(table, median_errors(kept), force=bool(knee))
    if hinge is not None:
        k, fixed_s, per_sample_s = hinge
        sizes = np.array([float(b) for b, _ in gradient])
        own = _hinge(sizes, np.array([s for _, s in gradient]), k)  # the gradient alone, bent at the same size
        if own is not None:
            _, g_fixed_s, g_per_sample_s = own
        else:
            g_fixed_s = min(s for _, s in gradient)  # flat up to the knee
            g_per_sample_s = per_sample_s * g_fixed_s / fixed_s if fixed_s > 0 else per_sample_s
    else:
        k = None
        fixed_s, per_sample_s = fit_step_cost(table)
        g_fixed_s, g_per_sample_s = fit_step_cost(gradient)
    in_runs = sum(last - first + 1 for first, last in load_runs(mask))
    return WorkerFit(
        worker=worker,
        steps=len(steps),
        fixed_s=fixed_s,
        per_sample_s=per_sample_s,
        table=tuple((b, s, counts[b]) for b, s in table),
        outliers=sum(mask),
        load_steps=in_runs,
        knee_batch=k,
        failed_batches=tuple(sorted(failed)),
        gradient_fixed_s=g_fixed_s,
        gradient_per_sample_s=g_per_sample_s,
    )


def decompose(fits: Sequence[WorkerFit], batch: int) -> tuple[float, float, list[float], list[float], int]:
    """One base cost and per-worker (slowdown, delay_s) that reproduce every
    worker's fitted step time: ``base(b) · slowdown_w + delay_w``.

    The base is the gradient alone on the fastest worker (at ``batch``): what
    the runtime's workers time before they apply a scenario's slowdown and
    delay, so that ``hetsync run`` on the written scenario plays the
    measured cluster again (without ``--emulate`` it is that worker's whole
    step). Where the per-sample cost is a large enough share of the base
    (:data:`RELIABLE_PER_SAMPLE`) the slopes tell a slower processor
    (``slowdown`` = slope ratio) from a constant extra (``delay_s``, the rest
    of the intercept); otherwise every extra is a delay (the runtime sleeps
    it as such). Returns (fixed_s, per_sample_s, slowdowns, delays, reference worker)."""
    ref = min(fits, key=lambda f: f.step_s(batch))
    f0, p0 = ref.gradient_fixed_s, ref.gradient_per_sample_s
    base = ref.gradient_s(batch)
    if base <= 0:  # no gradient timed apart: the reference's whole step is the base
        f0, p0, base = ref.fixed_s, ref.per_sample_s, ref.step_s(batch)
    reliable = base > 0 and p0 * batch >= RELIABLE_PER_SAMPLE * base
    slowdowns, delays = [], []
    for fit in fits:
        step = fit.step_s(batch)
        if reliable and fit.per_sample_s > 0:
            s = max(1e-3, fit.per_sample_s / p0)
            d = fit.fixed_s - s * f0
            if d < 0:  # the intercept says faster: keep the step time at this batch, as a slowdown
                s, d = step / base, 0.0
        else:
            s, d = 1.0, max(0.0, step - base)
        if d < NEGLIGIBLE * base:  # measurement noise, not a delay
            d = 0.0
        slowdowns.append(float(s))
        delays.append(float(d))
    return f0, p0, slowdowns, delays, ref.worker


def step_ratios(steps: Sequence[Sequence[float]], delay_s: float) -> list[float]:
    """Each step's base part over its batch size's median base part (the
    delay taken off both): the factor a simulator's noise, straggle or load
    would have to apply to the base to produce it."""
    med = medians_by_batch(steps)
    out = []
    for row in steps:
        base = med[int(row[1])] - delay_s
        out.append((float(row[2]) - delay_s) / base if base > 0 else 1.0)
    return out


def mean_matched_delays(
    per_worker: Sequence[Sequence[Sequence[float]]],
    batch: int,
    base_s: float,
    slowdowns: Sequence[float],
    delays: Sequence[float],
    straggler: tuple[float, float],
    load: LoadFit | None,
) -> list[float]:
    """Per worker, the delay that makes the simulator's *mean* step at
    ``batch`` the measured mean. The fits above are medians, and the
    simulator's noise, stragglers and load scale only the base part of a
    step; on a machine whose steps are mostly a constant part (an emulated
    delay, a sleep that wakes late under load, a data loader) the spread of
    that part is lost, and the mean step — what a run's throughput pays —
    comes out short. The difference goes into the constant part (never
    below 0). ``straggler`` is (probability, factor)."""
    prob, factor = straggler
    out = []
    for w, steps in enumerate(per_worker):
        times = [float(r[2]) for r in steps if int(r[1]) == batch]
        if not times:
            out.append(float(delays[w]))
            continue
        mult = 1 + prob * (factor - 1)
        if load is not None and w in load.workers and load.period_s > 0:
            mult *= 1 + min(1.0, load.on_s / load.period_s) * (load.factor - 1)
        expected_s = base_s * slowdowns[w] * mult + delays[w]
        out.append(max(0.0, float(delays[w] + statistics.fmean(times) - expected_s)))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadFit:
    workers: tuple[int, ...]
    period_s: float
    on_s: float
    factor: float

    def to_yaml(self) -> dict[str, Any]:
        return {
            "workers": list(self.workers),
            "period_s": round(float(self.period_s), 6),
            "on_s": round(float(self.on_s), 6),
            "factor": round(float(self.factor), 4),
        }


def fit_load(per_worker: Sequence[Sequence[Sequence[float]]], delays: Sequence[float]) -> LoadFit | None:
    """A square-wave background load from the workers whose outliers come in
    runs (two runs at least, to see a period, holding most of the worker's
    outliers): the median run length is
    ``on_s``, the median gap between run starts ``period_s``, the median
    ratio inside runs the factor. None when no worker shows one."""
    loaded, periods, ons, factors = [], [], [], []
    for w, steps in enumerate(per_worker):
        if not steps:
            continue
        mask = outlier_mask(steps)
        runs = load_runs(mask)
        in_runs = sum(b - a + 1 for a, b in runs)
        if len(runs) < 2 or 2 * in_runs < sum(mask):  # a few runs among many spikes: transients, by chance together
            continue
        ratios = step_ratios(steps, delays[w])
        starts = [float(steps[a][0]) for a, _ in runs]
        ends = [float(steps[b][0]) + float(steps[b][2]) for _, b in runs]
        loaded.append(w)
        periods.append(statistics.median(np.diff(starts)))
        ons.append(statistics.median(e - s for s, e in zip(starts, ends, strict=True)))
        factors += [ratios[i] for a, b in runs for i in range(a, b + 1)]
    if not loaded:
        return None
    period = float(statistics.median(periods))
    on = min(float(statistics.median(ons)), period)
    factor = max(1.0, float(statistics.median(factors)))
    return LoadFit(workers=tuple(loaded), period_s=period, on_s=on, factor=factor)


def fit_transients(
    per_worker: Sequence[Sequence[Sequence[float]]], delays: Sequence[float]
) -> tuple[float, float, int, int]:
    """Transient stragglers: outliers not in a run of load. Returns
    (probability per step, median factor on the base, outliers, steps)."""
    factors, total = [], 0
    for w, steps in enumerate(per_worker):
        if not steps:
            continue
        mask = outlier_mask(steps)
        in_runs = {i for a, b in load_runs(mask) for i in range(a, b + 1)}
        ratios = step_ratios(steps, delays[w])
        total += len(steps) - len(in_runs)
        factors += [ratios[i] for i, out in enumerate(mask) if out and i not in in_runs]
    if not factors or total == 0:
        return 0.0, 1.0, 0, total
    return len(factors) / total, max(1.0, statistics.median(factors)), len(factors), total


def fit_jitter(per_worker: Sequence[Sequence[Sequence[float]]], delays: Sequence[float]) -> float:
    """The log-sd of the step noise on the base part: 1.4826 × the median
    absolute deviation of log(ratio) over the steps that are not outliers."""
    logs = []
    for w, steps in enumerate(per_worker):
        if not steps:
            continue
        mask = outlier_mask(steps)
        logs += [math.log(r) for r, out in zip(step_ratios(steps, delays[w]), mask, strict=True) if not out and r > 0]
    if len(logs) < 3:
        return 0.0
    arr = np.array(logs)
    return float(1.4826 * np.median(np.abs(arr - np.median(arr))))
