"""Streaming DiLoCo in the simulator: it runs to the end, moves the bytes
its fragments and their width say, and with one fragment, no overlap, no
mixing and 32 bits it is DiLoCo exactly."""

from __future__ import annotations

import json

import pytest
import torch

from hetsync.algos.quantize import fragment_nbytes
from hetsync.sim.engine import Simulation
from hetsync.workloads import make_workload
from tests.sim.conftest import make_scenario

SLOW_LINKS = {"bandwidth_Bps": [2e6, 4e6, 8e6, 1e7], "model_bytes": 40_000, "latency_s": 0.001}


def scenario(**over):
    raw = {"workload": "digits-mlp", "max_steps": 40, "slowdown": [1.0, 1.3, 1.7, 2.5], "jitter": 0.2, "seed": 5}
    return make_scenario(**{**raw, **SLOW_LINKS, **over})


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_a_run_reaches_the_end_with_the_bytes_its_fragments_take(tmp_path, bits):
    sc = scenario()
    trace = tmp_path / "t.jsonl"
    spec = f"streaming-diloco:H=6:P=2:tau=2:bits={bits}:inner_lr=0.01"
    s = Simulation(sc, spec, trace_path=trace).run().summary
    assert s["stop_reason"] == "max_steps" and s["steps"] == 40 * 4
    assert s["steps"] == s["applied_steps"] + s["dropped_steps"] + s["outstanding_steps"]
    assert s["dropped_steps"] == 0  # a merge overwrites nothing
    n = make_workload("digits-mlp").n_params
    size = {(0, 4096): fragment_nbytes(40_000, n, 0, 4096, bits), (4096, n): fragment_nbytes(40_000, n, 4096, n, bits)}
    moved = [0] * 4
    transfers = [r for r in records(trace) if r["ev"] in ("push", "pull")]
    for r in transfers:
        assert r["bits"] == bits and r["nbytes"] == size[tuple(r["frag"])], r
        moved[r["w"]] += r["nbytes"]
    assert s["per_worker"]["bytes"] == moved and sum(moved) == s["bytes_sent"]
    # every worker pushed (and pulled) fragment 1 after steps 3, 9, 15, ... and fragment 0 after 6, 12, ...
    pushes = [r for r in transfers if r["ev"] == "push"]
    assert 4 * s["updates"] <= len(pushes) < 4 * (s["updates"] + 1)  # (the last round may be left open)
    assert {tuple(r["frag"]) for r in pushes} == set(size)
    assert s["updates"] >= 40 // 3 - 2  # about one fragment every 3 of the slowest worker's steps
    if bits == 32:  # a sync moves its fragment's share of the declared 40 kB (each rounded up to a byte)
        assert 0 <= size[(0, 4096)] + size[(4096, n)] - 40_000 < 2
    else:
        assert size[(0, 4096)] == -(-40_000 * 4096 * bits // (n * 32)) + 4


def test_fewer_bits_move_fewer_bytes_and_change_the_model_a_little():
    sc = scenario(workers=4)
    runs = {b: Simulation(sc, f"streaming-diloco:H=6:P=2:tau=1:bits={b}:inner_lr=0.01").run() for b in (32, 8, 4)}
    sent = {b: r.summary["bytes_sent"] / r.summary["updates"] for b, r in runs.items()}
    assert sent[8] == pytest.approx(sent[32] / 4, rel=0.01) and sent[4] == pytest.approx(sent[32] / 8, rel=0.01)
    start = make_workload("digits-mlp").init_params(sc.job.seed)
    moved = (runs[32].params - start).abs().max().item()
    for b in (8, 4):
        off = (runs[b].params - runs[32].params).abs().max().item()
        assert 0 < off < moved, (b, off, moved)  # quantized for real, and still the same training


def test_one_fragment_no_overlap_no_mixing_in_32_bits_is_diloco():
    sc = scenario(max_steps=30)
    diloco = Simulation(sc, "diloco:H=5:inner_lr=0.01").run()
    stream = Simulation(sc, "streaming-diloco:H=5:P=1:tau=0:alpha=0:bits=32:inner_lr=0.01").run()
    a, b = diloco.summary, stream.summary
    for key in ("steps", "applied_steps", "updates", "bytes_sent", "wall_time_s", "outstanding_steps"):
        assert a[key] == b[key], key
    assert a["per_worker"]["bytes"] == b["per_worker"]["bytes"]
    assert torch.allclose(diloco.params, stream.params, rtol=0, atol=1e-6)
    assert a["final_metrics"] == pytest.approx(b["final_metrics"], abs=1e-6)


def test_the_trace_names_the_fragment_and_a_merge_keeps_local_steps(tmp_path):
    trace = tmp_path / "t.jsonl"
    sc = scenario(max_steps=12)
    Simulation(sc, "streaming-diloco:H=4:P=2:tau=1:bits=8:inner_lr=0.01", trace_path=trace).run()
    recs = records(trace)
    pulls = [r for r in recs if r["ev"] == "pull"]
    assert pulls and all(r["frag"] in ([0, 4096], [4096, 4810]) and r["bits"] == 8 for r in pulls)
    assert not [r for r in recs if r["ev"] == "drop"]
    # every worker computes on: its step after a push starts as the push leaves (tau = 1 overlaps it)
    for w in range(4):
        mine = [r for r in recs if r.get("w") == w and r["ev"] in ("compute", "push")]
        for i, r in enumerate(mine[:-1]):
            if r["ev"] == "push":
                assert mine[i + 1]["ev"] == "compute" and mine[i + 1]["t"] == r["t"], (w, r)
