"""hetsync.compare / hetsync.simulate: the simulator from Python, writing what the CLI writes."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import hetsync
from hetsync.errors import BadInput
from hetsync.workloads import from_module


def moons():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 2, generator=g)
    y = (x[:, 0] * x[:, 1] > 0).long()
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    return from_module("quadrants", model, train=(x[:500], y[:500]), test=(x[500:], y[500:]))


def test_compare_on_your_workload_returns_the_summaries_and_writes_the_cli_outputs(tmp_path):
    runs = hetsync.compare("default", "bsp,ssp:s=2", workload=moons(), out=tmp_path, max_time_s=2, workers=4)
    assert [r["label"] for r in runs] == ["bsp", "ssp(s=2)"]
    assert all(r["workers"] == 4 and r["wall_time_s"] == pytest.approx(2.0) for r in runs)
    assert json.loads((tmp_path / "summary.json").read_text()) == runs
    for name in ["accuracy.png", "shares.png", "report.html", "trace.json", "trace-bsp.jsonl"]:
        assert (tmp_path / name).stat().st_size > 0, name
    first = json.loads((tmp_path / "trace-bsp.jsonl").read_text().splitlines()[0])
    assert first["ev"] == "start"
    mine = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))  # the final model loads into the module
    mine.load_state_dict(torch.load(tmp_path / "model-ssp-s-2.pt", weights_only=True))


def test_simulate_is_one_policy_and_matches_compare(tmp_path):
    one = hetsync.simulate("default", "asp", out=tmp_path / "a", plots=False, max_time_s=1)
    (same,) = hetsync.compare("default", ["asp"], out=tmp_path / "b", plots=False, max_time_s=1)
    assert one["final_metric"] == same["final_metric"] and one["steps"] == same["steps"]
    assert not (tmp_path / "a" / "report.html").exists()


def test_bad_input_names_what_is_wrong(tmp_path):
    with pytest.raises(BadInput, match="unknown policy"):
        hetsync.compare("default", ["nope"], out=tmp_path)
    with pytest.raises(BadInput, match="max_time_s"):
        hetsync.simulate("default", "bsp", out=tmp_path, max_time_s=-1)
    with pytest.raises(BadInput, match="Workload"):
        hetsync.compare("default", ["bsp"], workload=object(), out=tmp_path)  # type: ignore[arg-type]
