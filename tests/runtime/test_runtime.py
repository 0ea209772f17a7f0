"""The runtime as real processes (as hetsync run starts them), gloo, a server and workers.

Each test launches real processes on loopback (about half a minute of start-up
each on a 2-core machine), so the runs are short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hetsync.cli import main
from hetsync.policies import REGISTRY
from hetsync.runtime.launch import free_port, launch, launch_ddp, server_log_tail

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

FAST = ["--scenario", "homogeneous-8", "--set", "jitter=0", "--set", "max_time_s=null", "--no-plots"]


def run(tmp: Path, *args: str, nproc: int = 3) -> list[dict]:
    code = launch(nproc, [*args, "--out", str(tmp)], tmp, timeout_s=300)
    assert code == 0, server_log_tail(tmp)
    return json.loads((tmp / "summary.json").read_text())


def test_every_policy_runs_to_completion(tmp_path, capsys):
    short = {"diloco": "diloco:H=3", "async-local-sgd": "async-local-sgd:H=2"}  # an outer step within 6 steps
    real = [name for name, cls in REGISTRY.items() if not cls.simulator_only]  # (the rest is refused: test_bad_input)
    specs = [short.get(s, s) for s in real]
    argv = ["compare", "--runtime", "dist", "--nproc", "3", "--scenario", "homogeneous-8", "--set", "jitter=0"]
    argv += ["--set", "max_time_s=null", "--set", "max_steps=6", "--policies", ",".join(specs), "--out", str(tmp_path)]
    assert main(argv) == 0, server_log_tail(tmp_path)
    assert "on torch.distributed" in capsys.readouterr().out
    runs = json.loads((tmp_path / "summary.json").read_text())
    assert [r["policy"] for r in runs] == real
    for r in runs:
        assert r["driver"] == "dist" and r["workers"] == 3
        assert r["stop_reason"] == "max_steps", r["label"]
        assert r["steps"] > 0 and r["updates"] > 0, r["label"]
        assert r["steps"] <= r["applied_steps"] + r["dropped_steps"] + r["outstanding_steps"], r["label"]
        assert (tmp_path / r["trace"]).stat().st_size > 0
        assert (
            0.0 <= r["compute_share"] <= 1.0 and abs(r["compute_share"] + r["comm_share"] + r["wait_share"] - 1) < 1e-6
        )


@pytest.mark.parametrize(
    "recipe",
    [[], ["--set", "optimizer={name: adamw, weight_decay: 0.01}", "--set", "lr=0.003", "--set", "clip_norm=1.0"]],
    ids=["sgd", "adamw"],
)
def test_bsp_equals_ddp(tmp_path, recipe):
    steps = 50  # (2 workers: the 3 processes of a launch, DDP's 2 and its agent are most of the test's time)
    run(tmp_path, *FAST, *recipe, "--set", f"max_steps={steps}", "--policies", "bsp", nproc=2)
    assert launch_ddp(2, ["--scenario", "homogeneous-8", "--steps", str(steps), *recipe], tmp_path) == 0
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True)  # both the module's state_dict
    ddp = torch.load(tmp_path / "ddp-model.pt", weights_only=True)
    assert sorted(ours) == sorted(ddp)
    assert max((ours[k] - ddp[k]).abs().max().item() for k in ours) <= 1e-5
    assert max(v.abs().max().item() for v in ours.values()) > 0.1  # a trained model, not two zero vectors


# (the bounds below hold on a loaded machine: a SIGKILLed worker's connection resets at once, and
# the server's loop wakes at its time limit however busy the cores are)
def test_killed_worker_does_not_hang_the_run(tmp_path):
    runs = run(
        tmp_path,
        *FAST,
        "--set",
        "max_time_s=6",
        "--policies",
        "bsp,asp",
        "--kill-worker",
        "1",
        "--kill-at-s",
        "1.5",
        "--worker-timeout-s",
        "5",
    )
    bsp = runs[0]
    assert [x["worker"] for x in bsp["workers_left"]] == [1]
    assert 1.5 <= bsp["workers_left"][0]["t"] < 4.0  # noticed promptly
    assert bsp["stop_reason"] == "max_time" and bsp["wall_time_s"] == pytest.approx(6.0, abs=0.5)
    steps = bsp["per_worker"]["steps"]
    assert steps[0] > steps[1] and steps[2] > steps[1]  # the others went on without it
    # the next policy starts without the dead worker and finishes too
    assert runs[1]["workers_left"][0]["worker"] == 1 and runs[1]["steps"] > 0


def test_resume_continues_from_the_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    args = ["--policies", "bsp", "--checkpoint-dir", str(ckpt)]
    first = run(tmp_path / "a", *FAST, "--set", "max_steps=10", *args, nproc=2)[0]
    assert first["updates"] == 10
    saved = torch.load(ckpt / "ckpt-bsp.pt", weights_only=True)
    assert saved["version"] == 10
    second = run(tmp_path / "b", *FAST, "--set", "max_steps=20", *args, "--resume", nproc=2)[0]
    assert second["resumed_from"]["version"] == 10
    assert second["updates"] == 20  # versions continue from the checkpoint: 10 more rounds
    assert second["accuracy_curve"][: len(first["accuracy_curve"])] == first["accuracy_curve"]
    assert second["accuracy_curve"][-1][0] > first["wall_time_s"]  # the clock continues too


def test_torchrun_example_trains_a_user_module(tmp_path):
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=3", "--master-addr=127.0.0.1"]
    cmd += [f"--master-port={free_port()}", str(root / "examples" / "torchrun_custom_model.py")]
    cmd += ["--out", str(tmp_path), "--max-time-s", "1.5"]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads((tmp_path / "summary.json").read_text())
    assert [r["label"] for r in runs] == ["bsp", "ssp(s=2)"]
    assert all(r["driver"] == "dist" and r["workers"] == 2 and r["steps"] > 0 for r in runs)


def test_a_run_past_its_time_limit_leaves_every_ranks_stacks_in_its_log(tmp_path):
    # a run of a minute given 3 s: the launcher asks each rank for its threads' stacks, then gives up
    args = [*FAST, "--set", "max_time_s=60", "--policies", "bsp", "--out", str(tmp_path)]
    with pytest.raises(TimeoutError, match="stacks"):
        launch(2, args, tmp_path, timeout_s=3)
    for rank in (0, 1):
        log = (tmp_path / "logs" / f"rank-{rank}.log").read_text()
        assert "Current thread" in log or "Thread 0x" in log, log[-2000:]
        assert 'File "' in log  # a Python stack, frame by frame
