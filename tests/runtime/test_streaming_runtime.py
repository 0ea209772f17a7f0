"""Streaming DiLoCo on real processes (issue 28 item 4): fragments pushed as
the bytes of their encoded deltas, pulled as the encoded mean of the round's
deltas (each worker takes the fragment's outer step itself), merged by a
later step (hetsync.runtime.worker, hetsync.runtime.server).

One launch holds both runs: a start-up costs about half a minute here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hetsync.algos.quantize import fragment_nbytes
from hetsync.cli import main
from hetsync.report import safe_name
from hetsync.runtime.launch import server_log_tail
from hetsync.scenario import load_scenario
from hetsync.sim.engine import simulate
from hetsync.workloads import make_workload

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

STEPS = 20  # per worker (max_steps counts each worker's)
WORKERS = 3
# tau=0: each worker merges right after its push, so every sync is a barrier and each
# worker takes exactly STEPS steps, as in the simulator; 32 bits: the mean of the deltas
# is not re-quantized, so the order the pushes arrive in moves it by float rounding only
# inner_lr: AdamW at the scenario's SGD rate (0.1) diverges
EXACT = "streaming-diloco:tau=0:bits=32:inner_lr=0.01"
FOUR_BITS = "streaming-diloco:bits=4:inner_lr=0.01"
SETTINGS = {"jitter": 0, "max_time_s": None, "max_steps": STEPS}


@pytest.fixture(scope="module")
def streamed(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("streaming")
    argv = ["run", "--nproc", str(WORKERS), "--scenario", "homogeneous-8", "--no-plots", "--out", str(out)]
    for key, value in SETTINGS.items():
        argv += ["--set", f"{key}={'null' if value is None else value}"]
    assert main([*argv, "--policies", f"{EXACT},{FOUR_BITS}"]) == 0, server_log_tail(out)
    return out, json.loads((out / "summary.json").read_text())


def traced(out: Path, run: dict, ev: str) -> list[dict]:
    return [r for r in map(json.loads, (out / run["trace"]).read_text().splitlines()) if r["ev"] == ev]


def test_the_runtime_lands_on_the_simulators_model(streamed):
    """Fragments synced in turn, each worker's delta measured from what it last
    merged, the outer Nesterov step per fragment, the merge keeping α of the
    worker's own values: the same math on both drivers, so the same model."""
    out, runs = streamed
    run = runs[0]
    assert run["stop_reason"] == "max_steps" and run["steps"] == STEPS * WORKERS
    sc = load_scenario("homogeneous-8", **SETTINGS).with_workers(WORKERS)
    sim = simulate(sc, EXACT)
    assert run["updates"] == sim.summary["updates"] == STEPS // 5  # a fragment synced every 5 steps (H=10, P=2)
    saved = torch.load(out / f"model-{safe_name(run['label'])}.pt", weights_only=True)
    module = make_workload(sc.job.workload, **sc.job.workload_args).module_with(torch.zeros_like(sim.params))
    module.load_state_dict(saved)
    ours = torch.cat([p.detach().reshape(-1) for p in module.parameters() if p.requires_grad])
    assert (ours - sim.params).abs().max().item() <= 1e-5
    assert (
        ours - make_workload(sc.job.workload, **sc.job.workload_args).init_params(sc.job.seed)
    ).abs().max().item() > 0.01


def test_a_fragment_travels_at_its_width_both_ways(streamed):
    out, runs = streamed
    run = runs[1]
    assert run["stop_reason"] == "max_steps" and run["updates"] > 0 and run["final_accuracy"] > 0.3
    n = make_workload("digits-mlp").n_params
    model_nbytes = load_scenario("homogeneous-8").job.model_bytes or 4 * n
    pushes, pulls = traced(out, run, "push"), traced(out, run, "pull")
    assert pushes and pulls and {p["bits"] for p in pushes + pulls} == {4}
    for p in pushes + pulls:  # the encoded delta, or mean: an eighth of float32's bytes and the scale
        lo, hi = p["frag"]
        assert p["nbytes"] == fragment_nbytes(model_nbytes, n, lo, hi, 4)
    frags = {tuple(p["frag"]) for p in pushes}
    assert len(frags) == 2 and {tuple(p["frag"]) for p in pulls} == frags
    assert sum(p["nbytes"] for p in pushes) + sum(p["nbytes"] for p in pulls) == run["bytes_sent"]
    # every step is booked with a push that was applied (none left on the workers at the end but the tail)
    assert run["steps"] == run["applied_steps"] + run["dropped_steps"] + run["outstanding_steps"]


def test_a_resumed_run_goes_on_with_each_fragments_outer_state(tmp_path):
    """Checkpoints keep each fragment's outer optimizer state; after a resume
    the pulls carry the fragments' values (the workers' copies of the outer
    optimizer died with them) and the run goes on to its end."""
    ckpt, argv = tmp_path / "ckpt", ["run", "--nproc", "2", "--scenario", "homogeneous-8", "--no-plots"]
    argv += ["--set", "jitter=0", "--set", "max_time_s=null", "-p", FOUR_BITS, "--checkpoint-dir", str(ckpt)]
    first, second = tmp_path / "first", tmp_path / "second"
    assert main([*argv, "--set", "max_steps=10", "--out", str(first)]) == 0, server_log_tail(first)
    (server,) = [p for p in ckpt.glob("*.pt") if ".worker-" not in p.name]  # (the workers' files beside it)
    saved = torch.load(server, weights_only=True)
    assert {(lo, hi) for lo, hi, _ in saved["fragment_outer_states"]} <= {(0, 4096), (4096, 4810)}
    assert saved["fragment_outer_states"]  # (fragment 1 syncs after step 5, 0 after step 10: one or both stepped)
    assert all(state["state"] for _, _, state in saved["fragment_outer_states"])  # (Nesterov's momentum buffers)
    assert main([*argv, "--set", "max_steps=20", "--resume", "--out", str(second)]) == 0, server_log_tail(second)
    (run,) = json.loads((second / "summary.json").read_text())
    assert run["stop_reason"] == "max_steps" and run["resumed_from"] is not None
    assert run["updates"] > saved["version"]
    pulls = [r for r in map(json.loads, (second / run["trace"]).read_text().splitlines()) if r["ev"] == "pull"]
    resumed_at = saved["elapsed_s"]
    assert {p["bits"] for p in pulls if p["t"] >= resumed_at} == {32}
