"""WBSP and WBSP-overlap driven by the simulator: the trace keeps the rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsync.sim.engine import Simulation
from tests.sim.conftest import make_scenario

HETERO = {
    "workers": 4,
    "delay_s": {"workers": "half", "value": 0.05},
    "jitter": 0.2,
    "bandwidth_Bps": 2e6,
    "model_bytes": 20_000,
    "latency_s": 0.001,
}


def run(tmp_path: Path, policy: str, **overrides):
    trace = tmp_path / "t.jsonl"
    sim = Simulation(make_scenario(**{**HETERO, **overrides}), policy, trace_path=trace, math=False)
    summary = sim.run().summary
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    return sim, summary, records


@pytest.mark.parametrize("policy", ["wbsp", "wbsp-overlap"])
def test_every_round_has_every_worker_and_fast_workers_push_more(tmp_path, policy):
    sim, s, records = run(tmp_path, policy, max_steps=None, max_time_s=3.0)
    pushes = {r["id"]: r for r in records if r["ev"] == "push"}
    applies = [r for r in records if r["ev"] == "apply"]
    assert len(applies) >= 5
    for a in applies:
        assert {pushes[i]["w"] for i in a["ids"]} == set(range(4))  # nobody is left out of a round
        assert set(a["weights"]) == {1 / 4}
    steps = s["per_worker"]["steps"]
    assert min(steps[:2]) > 2 * max(steps[2:])  # workers 0-1 are fast: several steps per round
    assert s["wait_share"] == 0.0  # workers never wait
    closers = sim.policy.closers
    assert set(closers) <= {2, 3} and len(closers) == len(applies)  # a slow worker closes each round


def test_plain_wbsp_loses_nothing_and_stays_one_version_stale(tmp_path):
    _, s, records = run(tmp_path, "wbsp", max_steps=30)
    assert s["dropped_steps"] == 0
    assert s["max_staleness"] <= 1
    used = {i for r in records if r["ev"] == "apply" for i in r["ids"]}
    held = [r for r in records if r["ev"] == "push" and r["id"] not in used]
    last_apply = max(r["t"] for r in records if r["ev"] == "apply")
    assert all(r["end"] >= last_apply for r in held)  # only the open round is held at the stop
    assert s["outstanding_steps"] == sum(r["steps"] for r in held)


def test_overlap_never_stops_computing_and_pushes_one_at_a_time(tmp_path):
    _, s, records = run(tmp_path, "wbsp-overlap", max_steps=None, max_time_s=3.0)
    assert s["compute_share"] == pytest.approx(1.0)
    for w in range(4):
        mine = sorted((r["t"], r["end"]) for r in records if r["ev"] == "push" and r["w"] == w)
        assert all(end <= nxt for (_, end), (nxt, _) in zip(mine, mine[1:], strict=False))
