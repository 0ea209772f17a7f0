"""LB-BSP's batch-size manager, as pure pieces.

Chen, Weng, Wang, Li, Li, "Semi-dynamic load balancing: efficient
distributed learning in non-dedicated environments", SoCC 2020
(arXiv 1806.02508). At every BSP barrier the manager resizes each worker's
next mini-batch x_i so that all workers finish the iteration together,
keeping the global batch X = Σ x_i fixed (gradients are then combined with
weights x_i / X, which is the batch-weighted mean BSP already applies).

Two sizing algorithms, one per kind of cluster:

- **CPU** (:class:`CPUBatchManager`): a worker's sample throughput v_i
  (samples/s) is predicted from its recent throughputs and the background
  load its resource monitor reported. The paper uses a NARX network (a
  recurrent net with exogenous inputs); here the same inputs feed a small
  online linear model, :class:`RLSPredictor` (recursive least squares with
  forgetting over lagged throughputs, lagged inverse loads and the latest
  load reading), with :class:`EWMAPredictor` (a smoothed throughput that
  ignores the load) as the simple reference. Batches then solve
  ``x_i / v_i + c_i = T`` for all i with ``Σ x_i = X``
  (:func:`equal_finish_split`; c_i is the worker's communication time per
  iteration), rounded to integers by largest remainder.
- **GPU** (:class:`GPUBatchManager`): a GPU's step time is flat up to a
  saturation batch and linear above it, ``t(b) = a`` for ``b ≤ s`` and
  ``a + k·(b − s)`` above, and GPU memory caps the batch. Each worker's
  curve is fitted online from its recent (batch, duration) pairs
  (:func:`fit_step_curve`); the batches are the equal-finish solution over
  the fitted curves (:func:`equal_finish_batches`: the smallest T such that
  the largest batches finishing by T add up to X, by bisection), and
  :class:`Damper` moves each worker only part of the way there, halving its
  step whenever its direction of change reverses (oscillation).

Everything here is deterministic: the same observations give the same
batches on every machine, so the DDP controller (``hetsync.ddp_balance``)
runs it on every rank without a coordinator. Standard library and numpy
only, like all of ``hetsync.algos``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CPUBatchManager",
    "Damper",
    "EWMAPredictor",
    "GPUBatchManager",
    "RLSPredictor",
    "StepCurve",
    "StepCurveEstimator",
    "equal_finish_batches",
    "equal_finish_split",
    "fit_step_curve",
    "largest_remainder",
]

_BISECT_ITERS = 200


# ------------------------------------------------------------------ rounding
def _bounds(n: int, total: int, lo: int, hi: Sequence[int] | None) -> list[int]:
    if n < 1:
        raise ValueError("need at least one worker")
    if int(total) != total or total < 1:
        raise ValueError(f"total must be a positive integer, got {total!r}")
    if int(lo) != lo or lo < 0:
        raise ValueError(f"lo must be an integer >= 0, got {lo!r}")
    caps = [int(total)] * n if hi is None else [int(h) for h in hi]
    if len(caps) != n:
        raise ValueError(f"hi has {len(caps)} values for {n} workers")
    if any(h < lo for h in caps):
        raise ValueError(f"every cap must be >= lo={lo}, got {caps}")
    if n * lo > total:
        raise ValueError(f"total {total} cannot give {n} workers at least {lo} each")
    if sum(caps) < total:
        raise ValueError(f"the caps add up to {sum(caps)}, less than the total {total}")
    return caps


def largest_remainder(
    shares: Sequence[float], total: int, *, lo: int = 1, hi: Sequence[int] | None = None
) -> list[int]:
    """Integers near ``shares`` that add up to exactly ``total``, each in [lo, hi_i].

    Hamilton's method: round every share down (into its bounds), then give
    the missing units one by one to the largest remainders (ties: lower
    index first); if clamping to ``lo`` made the sum too large, take units
    back from the most over-allocated first. Shares that do not add up to
    ``total`` are accepted; the passes repeat until the sum is exact.
    """
    n = len(shares)
    caps = _bounds(n, total, lo, hi)
    want = [float(s) for s in shares]
    if not all(math.isfinite(s) for s in want):
        raise ValueError(f"shares must be finite, got {list(shares)}")
    out = [min(max(math.floor(s), lo), c) for s, c in zip(want, caps, strict=True)]
    diff = int(total) - sum(out)
    while diff > 0:
        order = sorted(range(n), key=lambda i: (-(want[i] - out[i]), i))
        for i in order:
            if diff == 0:
                break
            if out[i] < caps[i]:
                out[i] += 1
                diff -= 1
    while diff < 0:
        order = sorted(range(n), key=lambda i: (-(out[i] - want[i]), i))
        for i in order:
            if diff == 0:
                break
            if out[i] > lo:
                out[i] -= 1
                diff += 1
    return out


def _bisect_increasing(f: Callable[[float], float], target: float, lo_t: float, hi_t: float) -> float:
    """Smallest T in [lo_t, hi_t] (to float precision) with f(T) >= target; f nondecreasing."""
    if f(lo_t) >= target:
        return lo_t
    for _ in range(_BISECT_ITERS):
        mid = 0.5 * (lo_t + hi_t)
        if mid <= lo_t or mid >= hi_t:
            break
        if f(mid) >= target:
            hi_t = mid
        else:
            lo_t = mid
    return hi_t


# ------------------------------------------------------------ CPU: the split
def equal_finish_split(
    speeds_sps: Sequence[float],
    total: int,
    *,
    comm_s: Sequence[float] | None = None,
    lo: int = 1,
    caps: Sequence[int] | None = None,
) -> list[int]:
    """Integer batches with ``x_i / v_i + c_i`` equal across workers and Σ x_i = total.

    ``speeds_sps``: predicted sample throughput v_i of each worker (> 0);
    ``comm_s``: its communication time per iteration c_i (default 0). With
    no bound active the real solution is ``x_i = v_i·(T − c_i)``,
    ``T = (X + Σ v_i c_i) / Σ v_i``; a worker whose share falls below ``lo``
    or above its cap is held there and the others share the rest (T by
    bisection). The real shares are rounded by :func:`largest_remainder`.
    """
    n = len(speeds_sps)
    bound = _bounds(n, total, lo, caps)
    v = [float(s) for s in speeds_sps]
    if not all(math.isfinite(s) and s > 0 for s in v):
        raise ValueError(f"speeds must be finite and > 0, got {list(speeds_sps)}")
    c = [0.0] * n if comm_s is None else [max(0.0, float(x)) for x in comm_s]
    if len(c) != n or not all(math.isfinite(x) for x in c):
        raise ValueError(f"comm_s must hold {n} finite values, got {comm_s!r}")

    def shares(t: float) -> list[float]:
        return [min(max(vi * (t - ci), lo), hi) for vi, ci, hi in zip(v, c, bound, strict=True)]

    t_free = (total + sum(vi * ci for vi, ci in zip(v, c, strict=True))) / sum(v)
    free = [vi * (t_free - ci) for vi, ci in zip(v, c, strict=True)]
    if all(lo <= x <= hi for x, hi in zip(free, bound, strict=True)):
        return largest_remainder(free, total, lo=lo, hi=bound)
    t_lo = min(ci + lo / vi for vi, ci in zip(v, c, strict=True))
    t_hi = max(ci + hi / vi for vi, ci, hi in zip(v, c, bound, strict=True))
    t = _bisect_increasing(lambda t: sum(shares(t)), total, t_lo, t_hi)
    return largest_remainder(shares(t), total, lo=lo, hi=bound)


# ---------------------------------------------------------- CPU: predictors
class EWMAPredictor:
    """Exponentially weighted moving average of the observed throughput.

    The simple reference: it ignores the load signal, so after a load
    change it needs a few iterations to catch up.
    """

    def __init__(self, alpha: float = 0.5) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.alpha = alpha
        self.value: float | None = None

    def observe(self, throughput: float, load: float = 1.0) -> None:
        _check_observation(throughput, load)
        self.value = throughput if self.value is None else self.value + self.alpha * (throughput - self.value)

    def predict(self, load: float | None = None) -> float | None:
        return self.value


class RLSPredictor:
    """Online autoregressive model with exogenous input (a linear NARX).

    The throughput of iteration k, scaled by the worker's first observed
    throughput, is regressed on ``[1, y_{k-1} .. y_{k-p}, u_k, u_{k-1} ..
    u_{k-p}]`` with ``u = 1/load``: the last p throughputs, and the load
    during the iteration and the p before it (throughput is about
    proportional to 1/load). For the next iteration the load is not known
    yet; ``predict(load)`` uses the latest monitor reading in its place (a
    persistence forecast of the exogenous input).

    Recursive least squares with forgetting factor ``forgetting`` (memory of
    about 1 / (1 − forgetting) iterations). The covariance is kept bounded
    (its trace at most ``max_trace``), because a load that stays constant
    for a long time excites no direction and would let it grow without
    limit. The model starts as "the next throughput equals the last one"
    and falls back to that whenever its prediction is non-positive or
    outside [1/4, 4] times the recent range.
    """

    def __init__(self, lags: int = 2, forgetting: float = 0.95, *, prior: float = 10.0, max_trace: float = 1e4) -> None:
        if int(lags) != lags or lags < 1:
            raise ValueError(f"lags must be an integer >= 1, got {lags!r}")
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting!r}")
        self.lags = int(lags)
        self.forgetting = float(forgetting)
        self.max_trace = float(max_trace)
        d = 2 + 2 * self.lags
        self.theta = np.zeros(d)
        self.theta[1] = 1.0  # persistence: y_k = y_{k-1}
        self.P = np.eye(d) * float(prior)
        self.scale: float | None = None
        self.ys: deque[float] = deque(maxlen=self.lags)  # newest first
        self.us: deque[float] = deque(maxlen=self.lags + 1)  # newest first
        self.observed = 0

    def _features(self, ys: Sequence[float], us: Sequence[float]) -> np.ndarray:
        phi = np.empty(2 + 2 * self.lags)
        phi[0] = 1.0
        phi[1 : 1 + self.lags] = ys
        phi[1 + self.lags :] = us
        return phi

    def _full(self) -> bool:
        return len(self.ys) == self.lags and len(self.us) == self.lags + 1

    def observe(self, throughput: float, load: float = 1.0) -> None:
        _check_observation(throughput, load)
        if self.scale is None:
            self.scale = throughput
        y = throughput / self.scale
        u = 1.0 / load
        self.us.appendleft(u)
        if self._full():
            phi = self._features(list(self.ys), list(self.us))
            p_phi = self.P @ phi
            gain = p_phi / (self.forgetting + phi @ p_phi)
            self.theta = self.theta + gain * (y - phi @ self.theta)
            self.P = (self.P - np.outer(gain, p_phi)) / self.forgetting
            self.P = 0.5 * (self.P + self.P.T)
            trace = float(np.trace(self.P))
            if trace > self.max_trace:
                self.P *= self.max_trace / trace
        self.ys.appendleft(y)
        self.observed += 1

    def predict(self, load: float | None = None) -> float | None:
        """Predicted throughput of the next iteration, given the latest load reading."""
        if self.scale is None:
            return None
        last = self.ys[0] * self.scale
        if len(self.ys) < self.lags or len(self.us) < self.lags:
            return last
        u_now = 1.0 / load if load is not None else self.us[0]
        phi = self._features(list(self.ys), [u_now, *list(self.us)[: self.lags]])
        guess = float(phi @ self.theta) * self.scale
        recent = [y * self.scale for y in self.ys]
        if not math.isfinite(guess) or not min(recent) / 4 <= guess <= 4 * max(recent):
            return last
        return guess


def _check_observation(throughput: float, load: float) -> None:
    if not (math.isfinite(throughput) and throughput > 0):
        raise ValueError(f"throughput must be finite and > 0, got {throughput!r}")
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"load must be finite and > 0, got {load!r}")


class _CommEstimate:
    """Each worker's communication time per round, smoothed (EWMA): the
    part of a round that does not shrink with a smaller batch."""

    def __init__(self, workers: int, comm_alpha: float) -> None:
        self.comm = [0.0] * workers
        self._comm_seen = [False] * workers
        self.comm_alpha = comm_alpha

    def observe_comm(self, worker: int, comm_s: float) -> None:
        if not (math.isfinite(comm_s) and comm_s >= 0):
            return
        if self._comm_seen[worker]:
            self.comm[worker] += self.comm_alpha * (comm_s - self.comm[worker])
        else:
            self.comm[worker], self._comm_seen[worker] = comm_s, True


class CPUBatchManager(_CommEstimate):
    """LB-BSP's CPU-cluster manager: predict throughputs, split X for equal finish.

    ``observe`` takes each finished iteration (batch, compute seconds, the
    load the worker saw); ``observe_comm`` its communication seconds per
    iteration (smoothed); ``allocate`` returns the next batches of the given
    workers. A worker with no observation yet is assumed as fast as the
    mean of the others (or all equal at the start). ``predictor="rls"``
    forgets with factor 1 − 1/history; ``"ewma"`` smooths with
    ``ewma_alpha``.
    """

    def __init__(
        self,
        workers: int,
        total: int,
        *,
        predictor: str = "rls",
        lags: int = 2,
        history: int = 20,
        caps: Sequence[int] | None = None,
        comm_alpha: float = 0.3,
        ewma_alpha: float = 0.3,
    ) -> None:
        if predictor not in ("rls", "ewma"):
            raise ValueError(f"predictor must be 'rls' or 'ewma', got {predictor!r}")
        if int(history) != history or history < 1:
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        self.n = workers
        self.total = int(total)
        self.caps = None if caps is None else [int(c) for c in caps]
        _bounds(workers, self.total, 1, self.caps)
        self.predictors: list[RLSPredictor | EWMAPredictor]
        if predictor == "rls":
            self.predictors = [RLSPredictor(lags, 1.0 - 1.0 / max(history, 2)) for _ in range(workers)]
        else:
            self.predictors = [EWMAPredictor(ewma_alpha) for _ in range(workers)]
        self.load = [1.0] * workers
        _CommEstimate.__init__(self, workers, comm_alpha)

    def observe(self, worker: int, batch: int, duration_s: float, load: float = 1.0) -> None:
        if duration_s <= 0:
            return  # nothing to learn from an instant step
        self.predictors[worker].observe(batch / duration_s, load)
        self.load[worker] = load

    def predicted_speeds(self, workers: Sequence[int]) -> list[float | None]:
        return [self.predictors[w].predict(self.load[w]) for w in workers]

    def allocate(self, workers: Sequence[int]) -> dict[int, int]:
        workers = list(workers)
        caps = None if self.caps is None else [self.caps[w] for w in workers]
        speeds = self.predicted_speeds(workers)
        known = [s for s in speeds if s is not None and s > 0]
        if not known:
            return dict(
                zip(
                    workers,
                    largest_remainder([self.total / len(workers)] * len(workers), self.total, hi=caps),
                    strict=True,
                )
            )
        fill = sum(known) / len(known)
        v = [s if s is not None and s > 0 else fill for s in speeds]
        x = equal_finish_split(v, self.total, comm_s=[self.comm[w] for w in workers], caps=caps)
        return dict(zip(workers, x, strict=True))


# -------------------------------------------------------- GPU: step curves
@dataclass(frozen=True, slots=True)
class StepCurve:
    """``t(b) = flat_s`` for b ≤ saturation, ``flat_s + slope_s·(b − saturation)`` above."""

    flat_s: float
    saturation: float
    slope_s: float  # seconds per sample above saturation

    def time_s(self, batch: float) -> float:
        return self.flat_s + self.slope_s * max(0.0, batch - self.saturation)

    def max_batch_within(self, budget_s: float) -> float:
        """The largest (real) batch whose step takes at most ``budget_s``; -inf if none, inf if unbounded."""
        if budget_s < self.flat_s:
            return -math.inf
        if self.slope_s <= 0:
            return math.inf
        return self.saturation + (budget_s - self.flat_s) / self.slope_s


def fit_step_curve(
    batches: Sequence[float], durations_s: Sequence[float], weights: Sequence[float] | None = None
) -> StepCurve:
    """Weighted least-squares flat-then-linear curve through (batch, duration) pairs.

    The break point is tried at 0 and at every observed batch size but the
    largest; for each, ``a`` and ``k`` are fitted by weighted least squares
    with ``a, k ≥ 0``, and the break with the smallest weighted squared
    error wins (ties: the smallest break, i.e. the curve that extrapolates
    linearly downward, so that a smaller batch gets tried and a flat part is
    found from data). With a single distinct batch size the time is taken as
    proportional to the batch (``t = t̄·b/b̄``), the least committal guess.
    """
    b = np.asarray(batches, dtype=float)
    t = np.asarray(durations_s, dtype=float)
    w = np.ones_like(b) if weights is None else np.asarray(weights, dtype=float)
    if b.shape != t.shape or b.shape != w.shape or b.size == 0:
        raise ValueError("need as many durations (and weights) as batches, at least one")
    if not (np.all(np.isfinite(b)) and np.all(b > 0) and np.all(np.isfinite(t)) and np.all(t >= 0)):
        raise ValueError("batches must be > 0 and durations >= 0, all finite")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
        raise ValueError("weights must be finite, >= 0, and not all 0")
    distinct = np.unique(b[w > 0])
    if distinct.size == 1:
        mean_t = float(w @ t / w.sum())
        return StepCurve(flat_s=0.0, saturation=0.0, slope_s=mean_t / float(distinct[0]))
    best: tuple[float, StepCurve] | None = None
    for s in [0.0, *distinct[:-1].tolist()]:
        z = np.maximum(0.0, b - s)
        a, k = _nonneg_line(z, t, w)
        sse = float(w @ (t - a - k * z) ** 2)
        if best is None or sse < best[0] - 1e-12 * (1.0 + best[0]):
            best = (sse, StepCurve(flat_s=a, saturation=s, slope_s=k))
    assert best is not None
    return best[1]


def _nonneg_line(z: np.ndarray, t: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least squares ``t ≈ a + k·z`` with a ≥ 0 and k ≥ 0."""
    sw = float(w.sum())
    zm, tm = float(w @ z) / sw, float(w @ t) / sw
    zc = z - zm
    szz = float(w @ (zc * zc))
    k = float(w @ (zc * (t - tm))) / szz if szz > 0 else 0.0
    a = tm - k * zm
    if k < 0:
        return tm, 0.0
    if a < 0:
        zz = float(w @ (z * z))
        return 0.0, (float(w @ (z * t)) / zz if zz > 0 else 0.0)
    return a, k


class StepCurveEstimator:
    """One worker's step-time curve, learned online.

    Observations are kept per distinct batch size (a running mean of the
    time, over at most ``cap`` observations so that it keeps moving), and
    the curve is fitted on those points, each weighted by its count and by
    its age: the weight halves every ``history`` observations since the
    point was last seen. Binning is what keeps the fit identified once the
    batches have settled: a window of recent raw observations would then
    hold one or two nearly equal batch sizes and say nothing about the
    slope, while the bins still remember the batch sizes the worker ran on
    its way there. At most ``2·history`` bins are kept (the oldest go).
    """

    def __init__(self, history: int = 20, *, cap: int = 8) -> None:
        if int(history) != history or history < 1:
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        self.history = int(history)
        self.cap = cap
        self.tick = 0
        self.bins: dict[int, list[float]] = {}  # batch -> [mean time, count, last tick]
        self.largest = 0

    def observe(self, batch: int, duration_s: float) -> None:
        if not (math.isfinite(duration_s) and duration_s > 0 and batch >= 1):
            return
        self.tick += 1
        self.largest = max(self.largest, int(batch))
        rec = self.bins.get(int(batch))
        if rec is None:
            self.bins[int(batch)] = [duration_s, 1.0, float(self.tick)]
            if len(self.bins) > 2 * self.history:
                del self.bins[min(self.bins, key=lambda k: (self.bins[k][2], k))]
            return
        rec[1] = min(rec[1] + 1.0, float(self.cap))
        rec[0] += (duration_s - rec[0]) / rec[1]
        rec[2] = float(self.tick)

    def curve(self) -> StepCurve | None:
        if not self.bins:
            return None
        keys = sorted(self.bins)
        weights = [self.bins[k][1] * 0.5 ** ((self.tick - self.bins[k][2]) / self.history) for k in keys]
        return fit_step_curve(keys, [self.bins[k][0] for k in keys], weights)


def equal_finish_batches(
    curves: Sequence[StepCurve],
    total: int,
    *,
    comm_s: Sequence[float] | None = None,
    caps: Sequence[int] | None = None,
    lo: int = 1,
) -> list[int]:
    """Integer batches that minimize the slowest worker's ``t_i(x_i) + c_i`` with Σ x_i = total.

    ``x_i(T)``, the largest integer batch in [lo, cap_i] whose step ends by
    T, is nondecreasing in T; bisection finds the smallest T with
    ``Σ x_i(T) ≥ total`` (never below ``max_i t_i(lo) + c_i``: nobody
    finishes sooner than its smallest batch allows). Where that overshoots
    (flat parts let several workers take more at no cost) the surplus is
    taken back in proportion to ``x_i − lo``, which finishes no one later.
    """
    n = len(curves)
    bound = _bounds(n, total, lo, caps)
    c = [0.0] * n if comm_s is None else [max(0.0, float(x)) for x in comm_s]
    if len(c) != n:
        raise ValueError(f"comm_s must hold {n} values")

    def batches(t: float) -> list[int]:
        out = []
        for curve, ci, hi in zip(curves, c, bound, strict=True):
            budget = t - ci
            x = curve.max_batch_within(budget + 1e-12 * max(1.0, abs(budget)))  # float slack
            out.append(lo if x < lo else hi if x >= hi else max(lo, math.floor(x + 1e-9)))
        return out

    t_lo = max(curve.time_s(lo) + ci for curve, ci in zip(curves, c, strict=True))
    t_hi = max(curve.time_s(hi) + ci for curve, ci, hi in zip(curves, c, bound, strict=True))
    t = _bisect_increasing(lambda t: sum(batches(t)), total, t_lo, max(t_hi, t_lo))
    x = batches(t)
    while sum(x) < total:  # float rounding left a unit short: give it where it ends soonest
        i = min((i for i in range(n) if x[i] < bound[i]), key=lambda i: (curves[i].time_s(x[i] + 1) + c[i], i))
        x[i] += 1
    surplus = sum(x) - total
    if surplus > 0:
        room = [xi - lo for xi in x]
        cut = largest_remainder([surplus * r / sum(room) for r in room], surplus, lo=0, hi=room)
        x = [xi - ci for xi, ci in zip(x, cut, strict=True)]
    return x


class Damper:
    """Moves each worker only part of the way to its target batch.

    Each worker starts with step 1 (go all the way). When the direction of
    its change reverses (it grew last time and shrinks now, or the other
    way round) its step halves, down to ``min_step``: that is the paper's
    cure for oscillation. After two moves in the same direction the step
    doubles again (up to 1), so a worker whose speed really changed is not
    held back forever. Changes smaller than one sample count as no move.
    """

    def __init__(self, workers: int, *, min_step: float = 1 / 16) -> None:
        self.step = [1.0] * workers
        self.direction = [0] * workers
        self.streak = [0] * workers
        self.min_step = min_step

    def damp(
        self,
        workers: Sequence[int],
        current: Sequence[int],
        target: Sequence[int],
        total: int,
        caps: Sequence[int] | None,
    ) -> list[int]:
        moved = []
        for w, cur, tgt in zip(workers, current, target, strict=True):
            delta = tgt - cur
            sign = 0 if abs(delta) < 1 else (1 if delta > 0 else -1)
            if sign:
                if self.direction[w] and sign != self.direction[w]:
                    self.step[w] = max(self.min_step, self.step[w] / 2)
                    self.streak[w] = 0
                else:
                    self.streak[w] += 1
                    if self.streak[w] >= 2:
                        self.step[w] = min(1.0, self.step[w] * 2)
                        self.streak[w] = 0
                self.direction[w] = sign
            moved.append(cur + self.step[w] * delta)
        scale = total / sum(moved)
        return largest_remainder([m * scale for m in moved], total, hi=caps)


class GPUBatchManager(_CommEstimate):
    """LB-BSP's GPU-cluster manager: fit step curves, equal-finish solve, damp.

    Learns each worker's :class:`StepCurve` from its (batch, duration / load)
    pairs with a :class:`StepCurveEstimator`, solves :func:`equal_finish_batches` with the
    memory ``caps`` and the measured communication times, and damps the
    move with a :class:`Damper`. A curve is never extrapolated beyond twice
    the largest batch the worker has run (a trust region: a fit on batches
    that all sat in the flat part would otherwise promise any batch for
    free), unless the caps left that way cannot hold X.
    """

    def __init__(
        self,
        workers: int,
        total: int,
        *,
        history: int = 20,
        caps: Sequence[int] | None = None,
        comm_alpha: float = 0.3,
        trust: float = 2.0,
    ) -> None:
        if int(history) != history or history < 2:
            raise ValueError(f"history must be an integer >= 2, got {history!r}")
        self.n = workers
        self.total = int(total)
        self.caps = None if caps is None else [int(c) for c in caps]
        _bounds(workers, self.total, 1, self.caps)
        self.estimators = [StepCurveEstimator(int(history)) for _ in range(workers)]
        self.load = [1.0] * workers
        _CommEstimate.__init__(self, workers, comm_alpha)
        self.trust = trust
        self.damper = Damper(workers)
        self.current: dict[int, int] = {}

    def observe(self, worker: int, batch: int, duration_s: float, load: float = 1.0) -> None:
        if not (math.isfinite(duration_s) and duration_s > 0 and load > 0):
            return
        self.estimators[worker].observe(batch, duration_s / load)
        self.load[worker] = load
        self.current[worker] = batch

    def curve(self, worker: int) -> StepCurve | None:
        """The worker's fitted curve at load 1 (None before its first step)."""
        return self.estimators[worker].curve()

    def allocate(self, workers: Sequence[int]) -> dict[int, int]:
        workers = list(workers)
        m = len(workers)
        caps = None if self.caps is None else [self.caps[w] for w in workers]
        equal = largest_remainder([self.total / m] * m, self.total, hi=caps)
        fitted = [self.curve(w) for w in workers]
        if any(c is None for c in fitted) or any(w not in self.current for w in workers):
            return dict(zip(workers, equal, strict=True))
        curves = [
            StepCurve(c.flat_s * self.load[w], c.saturation, c.slope_s * self.load[w])
            for c, w in zip(fitted, workers, strict=True)
            if c is not None
        ]
        hard = caps if caps is not None else [self.total] * m
        trusted = [
            min(h, max(1, math.ceil(self.trust * self.estimators[w].largest)))
            for h, w in zip(hard, workers, strict=True)
        ]
        limits = trusted if sum(trusted) >= self.total else hard
        comm = [self.comm[w] for w in workers]
        target = equal_finish_batches(curves, self.total, comm_s=comm, caps=limits)
        current = [self.current[w] for w in workers]
        if sum(current) != self.total:  # the set of workers changed: start from the target
            return dict(zip(workers, target, strict=True))
        return dict(zip(workers, self.damper.damp(workers, current, target, self.total, caps), strict=True))
