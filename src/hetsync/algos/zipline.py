"""ElasticBSP's sync-point search: ZipLine and its brute-force references.

Zhao, Papagelis, An, Chen, Liu, Hu, "Elastic Bulk Synchronous Parallel Model
for Distributed Deep Learning", ICDM 2019; and "ZipLine: an optimized
algorithm for the elastic bulk synchronous parallel model", *Machine
Learning* 110 (2021), doi 10.1007/s10994-021-06064-w.

The problem
-----------
``times`` is an ``n × R`` float array: row ``p`` holds worker ``p``'s
predicted next ``R`` push times, sorted ascending. A *choice* picks one
column per worker; the result is returned as iteration counts
``c[p] = column + 1`` (1-based: worker ``p`` runs ``c[p]`` iterations before
the barrier). With ``v[p] = times[p, c[p] − 1]``, ``lo = min(v)``,
``hi = max(v)``, the barrier at ``hi`` makes the earliest of the chosen
pushes wait ``spread = hi − lo`` (computed in float64). The search
minimizes the spread: the smallest range that holds one element of each of
``n`` sorted lists.

The tie rule ("earliest on ties"), exactly
------------------------------------------
Among all ``Rⁿ`` choices, the result minimizes the key
``(spread, hi, c)`` lexicographically, ``c`` compared as a tuple: the
smallest spread; among those, the earliest barrier ``hi``; among those, the
lexicographically smallest iteration vector. That vector is also the
componentwise smallest of the tied ones: ``c[p] = 1 + #{j : times[p, j] <
lo*}`` where ``lo*`` is the smallest window start of the optimal windows,
i.e. every worker takes its earliest point inside ``[lo*, hi*]``. All
functions here return exactly this vector; the tests check them against each
other and against enumeration of all ``Rⁿ`` choices.

Why the candidate windows suffice: for a window start ``v`` (a point of some
row), let every worker take its earliest point ``>= v``; that choice has
``lo = v`` and the smallest possible ``hi`` among choices with ``lo >= v``,
so the optimal key is reached by one of these ``n·R`` candidates, and the
tie rule becomes "smallest ``(hi − v, hi, v)``". Float subtraction is
monotone, so no rounding can reorder the candidates against the definition.
Starts ``v`` above some row's last point are infeasible.

The algorithms
--------------
- :func:`zipline`: the candidate maxima in one vectorized sweep. A point
  ``(q, j)`` is worker ``q``'s earliest point ``>= v`` exactly for
  ``times[q, j−1] < v <= times[q, j]``; since rows are sorted, the largest
  earliest-point over all workers is the running maximum of ``times[q, j]``
  over all points with ``times[q, j−1] < v``. Sorting the ``n·R`` left ends
  once and taking a prefix maximum gives every candidate's ``hi`` with one
  binary search: O(nR log nR) time, O(nR) memory, no Python loop.
- :func:`zipline_heap`: the paper's sweep form (the classic heap algorithm
  for the smallest range covering ``n`` sorted lists): keep each worker's
  current point in a min-heap and the running maximum; pop the minimum
  (the window start), record the window, advance that worker; stop when a
  worker runs out. The first pop of each distinct value sees every worker at
  its earliest point ``>=`` that value, so it evaluates exactly the
  candidates above. O(nR log n), in Python.
- :func:`gridscan`: the paper's GridScan reference: every point is tried as
  the window start and each worker's earliest point ``>=`` it is found by
  binary search (``np.searchsorted``, vectorized over the candidates, one
  call per worker): O(n²R log R). (The paper states O(R²n) for its
  GridScan; this is the formulation described for hetsync.)
- :func:`full_gridscan`: FullGridScan, the most naive correct form: for
  every point of every worker as window start, scan every worker's whole
  row for its earliest point ``>=`` the start, and compare the keys
  ``(spread, hi, c)`` directly: O(R²n²). Slow on purpose; the reference.

Measured: ``hetsync bench zipline`` (the paper reports ZipLine 2.38 s and
FullGridScan 207 s at n=1000, R=150).

Standard library and numpy only, like all of ``hetsync.algos``.
"""

from __future__ import annotations

import heapq

import numpy as np

__all__ = ["full_gridscan", "gridscan", "predict_push_times", "spread_of", "zipline", "zipline_heap"]


def _check(times: np.ndarray) -> np.ndarray:
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"times must be a 2-D array with n >= 1 rows and R >= 1 columns, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("times must be finite")
    if t.shape[1] > 1 and np.any(np.diff(t, axis=1) < 0):
        row = int(np.flatnonzero(np.any(np.diff(t, axis=1) < 0, axis=1))[0])
        raise ValueError(f"times rows must be sorted ascending; row {row} is not")
    return t


def _earliest_at_or_after(t: np.ndarray, lo: float) -> np.ndarray:
    """1-based iteration counts: each worker's earliest point >= lo."""
    counts: np.ndarray = (t < lo).sum(axis=1).astype(np.int64) + 1
    return counts


def predict_push_times(last_push_s: np.ndarray, interval_s: np.ndarray, R: int) -> np.ndarray:
    """ElasticBSP's prediction: worker p's next R push times ``e_p + i·I_p``, i = 1..R.

    Returns an ``n × R`` array whose rows are sorted ascending (intervals must
    be >= 0), ready for :func:`zipline`.
    """
    e = np.asarray(last_push_s, dtype=np.float64)
    interval = np.asarray(interval_s, dtype=np.float64)
    if e.ndim != 1 or interval.shape != e.shape:
        raise ValueError(f"last_push_s and interval_s must be 1-D of equal length, got {e.shape} and {interval.shape}")
    if int(R) != R or R < 1:
        raise ValueError(f"R must be an integer >= 1, got {R!r}")
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(interval))):
        raise ValueError("last_push_s and interval_s must be finite")
    if np.any(interval < 0):
        raise ValueError("interval_s must be >= 0")
    steps = np.arange(1, int(R) + 1, dtype=np.float64)
    return e[:, None] + steps[None, :] * interval[:, None]


def spread_of(times: np.ndarray, choice: np.ndarray) -> tuple[float, float]:
    """``(lo, hi)`` of the chosen push times (choice is 1-based, one per row)."""
    t = np.asarray(times, dtype=np.float64)
    v = t[np.arange(t.shape[0]), np.asarray(choice) - 1]
    return float(v.min()), float(v.max())


def zipline(times: np.ndarray) -> np.ndarray:
    """ZipLine, vectorized: the choice of minimal spread, earliest on ties.

    O(nR log nR); see the module docstring for the method and the exact tie
    rule. Returns an int64 array of 1-based iteration counts, one per row.
    """
    t = _check(times)
    n, R = t.shape
    if R == 1:
        return np.ones(n, dtype=np.int64)
    # Point (q, j) is worker q's earliest point >= v for left[q, j] < v <= t[q, j].
    left = np.empty_like(t)
    left[:, 0] = -np.inf
    left[:, 1:] = t[:, :-1]
    order = np.argsort(left, axis=None, kind="stable")
    left_sorted = left.ravel()[order]
    run_max = np.maximum.accumulate(t.ravel()[order])
    # Window starts beyond some worker's last point are infeasible.
    flat = t.ravel()
    starts = np.unique(flat[flat <= t[:, -1].min()])
    his = run_max[np.searchsorted(left_sorted, starts, side="left") - 1]
    spreads = his - starts
    tied = spreads == spreads.min()
    best_hi = his[tied].min()
    # starts are unique and ascending: the first tied one has the smallest start
    lo = starts[np.flatnonzero(tied & (his == best_hi))[0]]
    return _earliest_at_or_after(t, lo)


def zipline_heap(times: np.ndarray) -> np.ndarray:
    """ZipLine as a heap sweep over the n sorted lists: O(nR log n).

    Same result as :func:`zipline` (same tie rule), pure Python loop.
    """
    t = _check(times)
    n, R = t.shape
    rows = t.tolist()
    heap = [(row[0], p) for p, row in enumerate(rows)]
    heapq.heapify(heap)
    pos = [0] * n
    cur_max = max(row[0] for row in rows)
    best: tuple[float, float, float] | None = None
    prev: float | None = None
    while True:
        v, p = heapq.heappop(heap)
        if v != prev:  # first pop of this value: every worker sits at its earliest point >= v
            key = (cur_max - v, cur_max, v)
            if best is None or key < best:
                best = key
            prev = v
        j = pos[p] + 1
        if j == R:
            break  # worker p has no point beyond v: later starts are infeasible
        pos[p] = j
        nxt = rows[p][j]
        heapq.heappush(heap, (nxt, p))
        if nxt > cur_max:
            cur_max = nxt
    assert best is not None
    return _earliest_at_or_after(t, best[2])


def gridscan(times: np.ndarray) -> np.ndarray:
    """GridScan (reference): every point as window start, binary search per worker.

    O(n²R log R) work, vectorized over the ``n·R`` candidate starts with one
    ``np.searchsorted`` per worker. Same result and tie rule as :func:`zipline`.
    """
    t = _check(times)
    n, R = t.shape
    starts = t.ravel()
    starts = starts[starts <= t[:, -1].min()]  # every worker needs a point >= the start
    his = np.full(starts.shape, -np.inf)
    for q in range(n):
        idx = np.searchsorted(t[q], starts, side="left")
        np.maximum(his, t[q][idx], out=his)
    spreads = his - starts
    best = np.lexsort((starts, his, spreads))[0]  # spread, then hi, then start
    return _earliest_at_or_after(t, starts[best])


def full_gridscan(times: np.ndarray) -> np.ndarray:
    """FullGridScan (reference): the most naive correct search, O(R²n²).

    For every point of every worker as window start, scan every worker's whole
    row for its earliest point at or after it, and keep the smallest key
    ``(spread, hi, iteration vector)`` — the tie rule, compared as written.
    """
    t = _check(times)
    n, R = t.shape
    rows = np.arange(n)
    best: tuple[float, float, tuple[int, ...]] | None = None
    for p in range(n):
        for j in range(R):
            lo = t[p, j]
            at_or_after = t >= lo
            if not at_or_after[:, -1].all():
                continue  # some worker has no point at or after lo
            first = at_or_after.argmax(axis=1)
            hi = t[rows, first].max()
            key = (float(hi - lo), float(hi), tuple(int(c) + 1 for c in first))
            if best is None or key < best:
                best = key
    assert best is not None  # the smallest last point is always a feasible start
    return np.array(best[2], dtype=np.int64)
