"""Checkpoints and --resume on the collective path (issue 27, item 7): the
model and the server's optimizer state live on the workers there, so a
checkpoint asks them for both (protocol.SnapshotCmd) and a resumed run goes
on as if it had not stopped."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytestmark = pytest.mark.dist  # starts real processes

RUN = ["run", "-s", "elastic-4-signal", "-p", "bsp", "--nproc", "2", "--path", "collective", "--no-plots"]


def _run(out, *extra):
    from hetsync.cli import main

    assert main([*RUN, "--out", str(out), "--set", "max_time_s=120", *extra]) == 0
    (summary,) = json.loads((out / "summary.json").read_text())
    return summary, torch.load(out / "model-bsp.pt", weights_only=True)


def _diff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_a_resumed_collective_run_ends_where_an_uninterrupted_one_does(tmp_path):
    """BSP with momentum SGD, 2 workers: 20 rounds with checkpoints (every
    0.1 s while it runs, so several are taken as rounds go on, and one at the
    end), then resumed to 40 — the model an uninterrupted 40-round run ends
    with, exactly: the workers' copies of the server's momentum were saved
    with the model. Resumed without them (the workers' files gone), the run
    says so and ends elsewhere."""
    whole, model_whole = _run(tmp_path / "whole", "--set", "max_steps=40")
    ckpt = tmp_path / "ckpt"
    first, _ = _run(
        tmp_path / "cut", "--set", "max_steps=20", "--checkpoint-dir", str(ckpt), "--checkpoint-every-s", "0.1"
    )
    assert first["path"] == "collective" and first["updates"] == 20 and first["workers_left"] == [], first
    saved = torch.load(ckpt / "ckpt-bsp.pt", weights_only=True)
    assert saved["version"] == 20
    for w in range(2):  # each worker's copy of the server's optimizer, as of the checkpoint's version
        rounds = torch.load(ckpt / f"ckpt-bsp.worker-{w}.pt", weights_only=True)["rounds"]
        assert rounds["version"] == 20 and rounds["replica"]["state"], rounds
    bare = tmp_path / "bare"
    shutil.copytree(ckpt, bare)
    for f in bare.glob("*.worker-*.pt"):
        f.unlink()

    resumed, model_resumed = _run(tmp_path / "cut", "--set", "max_steps=40", "--checkpoint-dir", str(ckpt), "--resume")
    assert resumed["resumed_from"]["version"] == 20 and resumed["resumed_from"]["fresh"] == [], resumed
    assert resumed["updates"] == whole["updates"] == 40 and resumed["path"] == "collective"
    assert _diff(model_whole, model_resumed) <= 1e-6

    fresh, model_fresh = _run(tmp_path / "fresh", "--set", "max_steps=40", "--checkpoint-dir", str(bare), "--resume")
    assert any("server's optimizer state" in x for x in fresh["resumed_from"]["fresh"]), fresh["resumed_from"]
    assert _diff(model_whole, model_fresh) > 1e-4  # (momentum restarted from zero at round 20)
