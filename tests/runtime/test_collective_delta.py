"""Delta rounds on the collective path (hetsync.runtime.collective): local
SGD's and DiLoCo's model averages reduced among the workers, each taking the
outer step itself from the model of the last round."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.mark.dist
@pytest.mark.parametrize("spec", ["local-sgd", "diloco:H=4"])
def test_hetsync_run_averages_the_same_models_on_either_path_and_ends_with_a_round_open(tmp_path, spec):
    """Local SGD (plain averaging) and DiLoCo (inner AdamW, outer Nesterov
    momentum) on elastic-4-signal, 2 workers, a budget of 42 steps each: 10
    rounds of H=4 local steps, then 2 steps of an eleventh round that never
    closes (no worker is given its pushing step). Through rank 0 or
    all-reduced among the workers: the same final model (the tenth round's),
    and the open round ends everywhere, so no worker is lost at the stop."""
    from hetsync.cli import main

    models, runs = {}, {}
    for path in ("ps", "collective"):
        out = tmp_path / path
        args = ["run", "-s", "elastic-4-signal", "-p", spec, "--nproc", "2", "--path", path, "--no-plots"]
        code = main([*args, "--set", "max_steps=42", "--set", "max_time_s=120", "--out", str(out)])
        assert code == 0
        (run,) = json.loads((out / "summary.json").read_text())
        (saved,) = out.glob("model-*.pt")
        models[path] = torch.load(saved, weights_only=True)
        runs[path] = run
    for path, run in runs.items():
        assert run["path"] == path and run["stop_reason"] == "max_steps", run
        assert run["updates"] == 10 and run["applied_steps"] == 80 and run["outstanding_steps"] == 4, run
        assert run["workers_left"] == [], run
    diff = max((models["ps"][k] - models["collective"][k]).abs().max().item() for k in models["ps"])
    assert diff <= 1e-5, diff
    # a round moves a delta up and a model down per worker on ps (4M with 2 workers); the ring of 2 all-reduces
    # in 2(k−1) = 2 phases, each member sending M/2 (2M in all) (M: the scenario's model_bytes)
    ps_bytes = runs["ps"]["bytes_sent"]
    assert ps_bytes % (10 * 4) == 0 and runs["collective"]["bytes_sent"] * 2 == ps_bytes, runs
    assert runs["collective"]["final_metric"] == pytest.approx(runs["ps"]["final_metric"], abs=1e-6)
