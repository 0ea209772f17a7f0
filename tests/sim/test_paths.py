"""The simulator's two data paths (issue 27, item 5): ``ps`` (pushes into the
server's node and pulls out of it: the server's incast) and ``collective``
(a round's model all-reduced in a ring among its workers; the server hears
small reports and sends small commands). Same math on both, so the same
final model; only the timing and the bytes moved differ, each against its
closed form here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hetsync.errors import BadInput, PolicyError
from hetsync.policies import bsp as bsp_module
from hetsync.policies.base import Apply
from hetsync.runner import compare
from hetsync.scenario import scenario_from_dict
from hetsync.sim.engine import Simulation, simulate
from hetsync.trace import schema_error
from tests.sim.conftest import make_scenario

STEP_S = 0.01  # every step: fixed 10 ms
B = 1e8  # the fast workers' links (bytes/s)
SLOW = B / 4  # worker 2's link
M = 3_000_000  # model bytes: 3 chunks of 1 MB in a ring of 3
L = 0.001  # latency of every flow (and of a message, with control_latency)


def records(path: Path, ev: str | None = None) -> list[dict]:
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in recs if ev is None or r["ev"] == ev]


def slow_link(**keys):
    """3 equal workers (10 ms steps, no noise); worker 2's link is 4x slower;
    the server's link is the fastest worker's (the scenario's default)."""
    raw = {
        "workers": 3,
        "workload": "digits-logreg",
        "batch_size": 8,
        "max_steps": 2,
        "fixed_s": STEP_S,
        "per_sample_s": 0.0,
        "jitter": 0.0,
        "bandwidth_Bps": [B, B, SLOW],
        "latency_s": L,
        "model_bytes": M,
        "policies": ["bsp"],
    }
    return scenario_from_dict(raw | keys)


def second_steps(trace: Path) -> list[float]:
    return [r["t"] for r in sorted(records(trace, "compute"), key=lambda r: r["w"]) if r["step"] == 1]


@pytest.mark.parametrize("batch_math", [False, True])
def test_collective_bsp_reaches_the_ps_runs_model(batch_math):
    """The same rounds, the same pushes applied with the same weights: the
    same model (only the order of a round's pushes differs, so float rounding)."""
    sc = make_scenario(workers=4, workload="digits-mlp", lr=0.2, max_steps=25, seed=3, bandwidth_Bps=1e7)
    ps = Simulation(sc, "bsp", batch_math=batch_math).run()
    coll = Simulation(sc, "bsp", batch_math=batch_math, path="collective").run()
    assert torch.allclose(coll.params, ps.params, rtol=0, atol=1e-6), (coll.params - ps.params).abs().max()
    for key in ("updates", "steps", "applied_steps", "outstanding_steps", "final_accuracy"):
        assert coll.summary[key] == pytest.approx(ps.summary[key], abs=1e-6), key
    assert coll.summary["updates"] == 25 and coll.summary["outstanding_steps"] == 0


def test_the_ps_round_is_the_servers_incast_and_the_collective_round_the_rings_slowest_link(tmp_path):
    """ps: the 3 pushes share the server's downlink (capacity B) max-min:
    worker 2 gets B/4 (its uplink), workers 0 and 1 3B/8 each until they are
    done at M/(3B/8), then worker 2 alone at B/4 — its push lands 4M/B (+L)
    after the step; the pulls out of the server's uplink mirror it, so worker
    2 starts its second step at s + 2(4M/B + L), and workers 0 and 1, whose
    pulls end at 8M/3B, earlier. collective: the ring of 3 runs 2(k−1) = 4
    phases, each as long as its slowest flow — a chunk of M/3 through worker
    2's link — so every worker starts its second step at s + 4(L + (M/3)/(B/4))."""
    ps_trace, coll_trace = tmp_path / "ps.jsonl", tmp_path / "coll.jsonl"
    ps = simulate(slow_link(), "bsp", trace_path=ps_trace, math=False).summary
    coll = simulate(slow_link(), "bsp", trace_path=coll_trace, math=False, path="collective").summary

    incast = 4 * M / B + L  # the pushes' (and the pulls') last landing
    fast_pull = 8 * M / (3 * B) + L
    assert second_steps(ps_trace) == pytest.approx([STEP_S + incast + fast_pull] * 2 + [STEP_S + 2 * incast])
    k = 3
    ring_s = 2 * (k - 1) * (L + math.ceil(M / k) / SLOW)
    assert second_steps(coll_trace) == pytest.approx([STEP_S + ring_s] * 3)
    assert STEP_S + ring_s < STEP_S + 2 * incast  # (0.174 s against 0.252 s: the ring wins here)
    assert ps["wall_time_s"] == pytest.approx(2 * (STEP_S + 2 * incast))
    assert coll["wall_time_s"] == pytest.approx(2 * (STEP_S + ring_s))

    # the bytes each path moves: a push and a pull of the model per worker and round, through
    # the server; a ring's 2(k−1) phases of k chunks of M/k among the workers, none to the server
    assert ps["bytes_sent"] == 2 * (2 * k * M)
    assert coll["bytes_sent"] == 2 * (2 * (k - 1) * k * math.ceil(M / k))
    assert {r["nbytes"] for r in records(coll_trace, "push")} == {0}
    assert {r["nbytes"] for r in records(coll_trace, "pull")} == {0}
    rings = records(coll_trace, "allreduce")
    assert len(rings) == 2 * k and {(r["workers"], r["nbytes"]) for r in rings} == {(k, M)}
    assert [r["end"] - r["t"] for r in rings] == pytest.approx([ring_s] * 2 * k)


def test_with_control_latency_the_ring_starts_when_the_last_report_has_arrived(tmp_path):
    """Commands and reports travel L: the first step starts at L, its report
    (with the carried push) reaches the server L after it ends, the Apply
    starts the ring then, and the pull commands (sent at once, L on the way)
    wait for it."""
    trace = tmp_path / "t.jsonl"
    simulate(slow_link(control_latency=True), "bsp", trace_path=trace, math=False, path="collective")
    ring_s = 4 * (L + (M / 3) / SLOW)
    pushes = records(trace, "push")[:3]
    assert [p["end"] - p["t"] for p in pushes] == pytest.approx([L] * 3)
    assert records(trace, "apply")[0]["t"] == pytest.approx(L + STEP_S + L)
    assert second_steps(trace) == pytest.approx([L + STEP_S + L + ring_s] * 3)


def test_the_trace_and_the_summary_name_the_path(tmp_path):
    for path in ("ps", "collective"):
        trace = tmp_path / f"{path}.jsonl"
        summary = simulate(slow_link(), "bsp", trace_path=trace, math=False, path=path).summary
        assert summary["path"] == path
        recs = records(trace)
        assert [schema_error(r) for r in recs] == [None] * len(recs)
        # a ps trace is what it was before paths existed (no key); a collective one says so
        assert recs[0].get("path") == (None if path == "ps" else "collective")
    p2p = Simulation(make_scenario(workers=2, max_steps=2), "p2p-allreduce", math=False).run().summary
    assert p2p["path"] is None  # peer to peer: neither path (its exchanges are its own)


def test_lb_bsp_runs_on_the_collective_path(tmp_path):
    sc = make_scenario(workers=3, slowdown=[1.0, 1.5, 2.0], max_steps=12, bandwidth_Bps=1e7, model_bytes=10**6)
    trace = tmp_path / "t.jsonl"
    s = Simulation(sc, "lb-bsp", trace_path=trace, path="collective").run().summary
    assert s["path"] == "collective" and s["updates"] >= 11 and s["outstanding_steps"] == 0
    assert len(records(trace, "allreduce")) == 3 * s["updates"]


def test_a_policy_that_cannot_use_the_path_is_refused_in_one_line(tmp_path):
    sc = make_scenario(max_steps=2)
    with pytest.raises(BadInput) as e:
        Simulation(sc, "asp", path="collective")
    assert "asp cannot use path=collective" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BadInput, match="path must be one of ps, collective"):
        Simulation(sc, "bsp", path="ring")
    # a comparison is refused before any run starts
    with pytest.raises(BadInput, match="asp cannot use path=collective"):
        compare(sc, ["bsp", "asp"], tmp_path / "out", path="collective")
    assert not (tmp_path / "out" / "summary.json").exists()


def test_an_apply_that_is_not_the_batch_weighted_mean_is_refused_on_the_collective_path(monkeypatch):
    """What the collective path reduces is the batch-weighted mean; an Apply
    weighting otherwise cannot be carried (as on the runtime: check_round)."""
    real = bsp_module.apply_and_pull

    def doubled(pushes, **kwargs):
        commands = real(pushes, **kwargs)
        apply = commands[0]
        return [Apply(contributions=tuple((i, 2 * w) for i, w in apply.contributions), lr=apply.lr), *commands[1:]]

    monkeypatch.setattr(bsp_module, "apply_and_pull", doubled)
    sc = make_scenario(workers=2, max_steps=2)
    Simulation(sc, "bsp", math=False).run()  # (ps: the server applies whatever it is told)
    with pytest.raises(PolicyError, match="batch-weighted mean.*path=ps"):
        Simulation(sc, "bsp", math=False, path="collective").run()
