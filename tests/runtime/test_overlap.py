"""WBSP-overlap on real processes: a worker's steps go on while its push or
its pull is in flight (runtime.lanes: the link lanes beside the steps, and
continuous steps that never wait for the server)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from hetsync.runtime.launch import launch, server_log_tail
from hetsync.trace import read_trace

pytestmark = [
    pytest.mark.dist,  # starts real processes: make test-fast leaves it out
    pytest.mark.serial,  # steps and transfers timed against each other and against the scenario's
]


def test_steps_go_on_while_a_push_or_a_pull_is_in_flight(tmp_path):
    # real step times (about a millisecond), throttled links: every push and pull of wbsp-h1's
    # 4 MB model lasts 32 ms, many fast steps long
    args = ["--scenario", "wbsp-h1", "--policies", "wbsp-overlap", "--throttle", "--set", "max_time_s=4"]
    args += ["--set", "runtime_timing=real"]
    code = launch(3, [*args, "--no-plots", "--out", str(tmp_path)], tmp_path, timeout_s=300)
    assert code == 0, server_log_tail(tmp_path)
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    records = read_trace(tmp_path / run["trace"])
    steps = Counter(r["w"] for r in records if r["ev"] == "compute")
    fast = steps.most_common(1)[0][0]  # a worker without wbsp-h1's injected 0.5 s
    computes = [(r["t"], r["end"]) for r in records if r["ev"] == "compute" and r["w"] == fast]
    for kind in ("push", "pull"):
        transfers = [(r["t"], r["end"]) for r in records if r["ev"] == kind and r["w"] == fast]
        assert transfers, kind
        assert all(0 <= t <= end for t, end in transfers), kind
        behind = [sum(1 for s, e in computes if t < s and e < end) for t, end in transfers]
        overlapped = sum(1 for n in behind if n >= 2)
        assert overlapped >= len(transfers) / 2, f"{kind}es with two steps or more behind them: {behind}"
    # transfers behind steps cost no communication time (the simulator's books)
    assert run["comm_share"] < run["compute_share"]
    assert run["steps"] <= run["applied_steps"] + run["dropped_steps"] + run["outstanding_steps"]


def test_modelled_timing_makes_steps_last_as_the_scenario_says(tmp_path):
    """wbsp-h1 asks for its modelled timing on real processes: fast steps last
    0.1 s (±10% noise), the sleeping workers' 0.6 s, and transfers 32 ms, which
    WBSP-overlap still runs beside its steps."""
    args = ["--scenario", "wbsp-h1", "--policies", "wbsp-overlap", "--set", "max_time_s=3", "--no-plots"]
    code = launch(3, [*args, "--out", str(tmp_path)], tmp_path, timeout_s=300)
    assert code == 0, server_log_tail(tmp_path)
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    records = read_trace(tmp_path / run["trace"])
    durations: dict[int, list[float]] = {}
    for r in records:
        if r["ev"] == "compute":
            durations.setdefault(r["w"], []).append(r["end"] - r["t"])
    median = {w: sorted(d)[len(d) // 2] for w, d in durations.items()}
    assert 0.08 <= median[0] <= 0.13 and 0.55 <= median[2] <= 0.7, median  # of 3 workers, w2 sleeps
    pushes = [r["end"] - r["t"] for r in records if r["ev"] == "push" and r["w"] == 0]
    assert pushes and min(pushes) >= 0.030, pushes  # 4 MB at 1 Gb/s, throttled
    # overlapped, a fast worker computes ~90% of a 3 s run on a quiet machine (0.887-0.889 seen on a
    # loaded one, at this commit and the one before); without the overlap its 32 ms transfers per 0.1 s
    # step would leave it at most 1 / 1.32 = 76%
    assert run["compute_share"] >= 0.85, run["compute_share"]
