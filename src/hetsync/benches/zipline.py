"""``hetsync bench zipline``: ElasticBSP's sync-point search, ZipLine against
its brute-force references (GridScan, FullGridScan), on random predicted
push times for n workers × R look-ahead.

Inputs follow ElasticBSP's prediction: worker p's last push ``e_p ~ U[0, 4)``
and interval ``I_p ~ U[1, 4)`` s, rows ``e_p + i·I_p`` (i = 1..R), one seeded
draw per cell shared by every algorithm. Cells run smallest first; before a
cell, each algorithm's time is estimated from its largest finished cell by
its complexity (ZipLine nR·log nR, the heap form nR·log n, GridScan
n²R·log R, FullGridScan n²R²) and skipped when the estimate exceeds
``--budget-s``. Fast cells are repeated and the median kept. Every algorithm
that ran must return the same choice as ZipLine, or the bench fails.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np

from hetsync.algos.zipline import full_gridscan, gridscan, predict_push_times, zipline, zipline_heap
from hetsync.benches.common import Row
from hetsync.errors import BadInput

NAME = "zipline"

PAPER_CELL = (1000, 150)
PAPER_NOTE = "ZipLine 2.38 s, FullGridScan 207 s"
TABLE = "seconds per search (median of repeats for fast cells)"
SPEEDUP_TABLE = "ZipLine's speed-up over FullGridScan"
REPEAT_BELOW_S = 0.2  # cells faster than this are repeated (median)

Algo = tuple[str, Callable[[np.ndarray], np.ndarray], Callable[[int, int], float]]
ALGOS: tuple[Algo, ...] = (
    ("zipline", zipline, lambda n, r: n * r * math.log2(n * r + 1)),
    ("zipline-heap", zipline_heap, lambda n, r: n * r * math.log2(n + 1)),
    ("gridscan", gridscan, lambda n, r: n * n * r * math.log2(r + 1)),
    ("full-gridscan", full_gridscan, lambda n, r: float(n * n * r * r)),
)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=_int_list, default=[10, 100, 1000], help="worker counts (default 10,100,1000)")
    p.add_argument("--R", type=_int_list, default=[15, 150, 960], help="look-aheads (default 15,150,960)")
    p.add_argument("--budget-s", type=float, default=20.0, help="skip a cell estimated above this (default 20)")
    p.add_argument("--repeats", type=int, default=5, help="runs of a fast cell, median kept (default 5)")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> list[Row]:
    if args.budget_s < 0:
        raise BadInput(f"--budget-s must be >= 0, got {args.budget_s}")
    if args.repeats < 1:
        raise BadInput(f"--repeats must be >= 1, got {args.repeats}")
    return bench_zipline(args.n, args.R, budget_s=args.budget_s, repeats=args.repeats, seed=args.seed)


def _time(fn: Callable[[np.ndarray], np.ndarray], times: np.ndarray, repeats: int) -> tuple[float, int, np.ndarray]:
    t0 = time.perf_counter()
    result = fn(times)
    runs = [time.perf_counter() - t0]
    while runs[0] < REPEAT_BELOW_S and len(runs) < repeats:
        t0 = time.perf_counter()
        fn(times)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), len(runs), result


def bench_zipline(
    ns: list[int], rs: list[int], *, budget_s: float = 20.0, repeats: int = 5, seed: int = 0
) -> list[Row]:
    cells = sorted({(n, r) for n in ns for r in rs}, key=lambda c: (c[0] * c[1], c[0]))
    rate: dict[str, float] = {}  # seconds per complexity unit, from the largest finished cell
    largest: dict[str, float] = {}
    measured: dict[tuple[int, int], list[Row]] = {}
    for n, r in cells:
        rng = np.random.default_rng([seed, n, r])
        times = predict_push_times(rng.uniform(0.0, 4.0, n), rng.uniform(1.0, 4.0, n), r)
        rows: list[Row] = []
        seconds: dict[str, float] = {}
        reference: tuple[str, np.ndarray] | None = None
        where = f"n={n} R={r}"
        for name, fn, cost in ALGOS:
            units = cost(n, r)
            keys = {
                "policy": name,
                "row_name": "algorithm",
                "metric": where,
                "unit": "s",
                "setting": TABLE,
                "n": n,
                "R": r,
            }
            if name in rate and rate[name] * units > budget_s:
                est = rate[name] * units
                rows.append(
                    {**keys, "value": None, "estimate_s": est, "shown": f"skipped (est. {est:.3g})", "skipped": True}
                )
                continue
            secs, runs, result = _time(fn, times, repeats)
            if reference is None:
                reference = (name, result)
            elif not np.array_equal(result, reference[1]):
                raise RuntimeError(f"{name} disagrees with {reference[0]} at {where}")
            if units >= largest.get(name, 0.0):
                largest[name] = units
                rate[name] = secs / units
            seconds[name] = secs
            rows.append({**keys, "value": secs, "runs": runs})
        if "zipline" in seconds and "full-gridscan" in seconds:
            rows.append(
                {
                    "policy": "zipline speed-up over full-gridscan",
                    "row_name": "algorithm",
                    "metric": where,
                    "value": seconds["full-gridscan"] / seconds["zipline"],
                    "unit": "x",
                    "setting": SPEEDUP_TABLE,
                    "n": n,
                    "R": r,
                }
            )
        if (n, r) == PAPER_CELL:
            rows.append({"metric": f"paper, {where}", "value": PAPER_NOTE, "unit": "", "setting": "Zhao et al. 2021"})
        measured[(n, r)] = rows
    return [row for cell in sorted(measured) for row in measured[cell]]
