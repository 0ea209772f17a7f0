"""hetsync.loop: a user's own training script (model, DataLoader, AdamW,
schedule) under every policy, as real processes (hetsync launch / torchrun
agents, gloo on loopback). The script is tests/runtime/loop_train.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.policies import REGISTRY
from hetsync.runtime.launch import LOOPBACK, _environment, agent_command, free_port, launch, server_log_tail

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

SCRIPT = Path(__file__).with_name("loop_train.py")


def launched(out: Path, policy: str, steps: int, *extra: str, nproc: int = 2) -> list[dict]:
    code = launch(nproc, [policy, str(out), str(steps), *extra], out, timeout_s=240, script=str(SCRIPT))
    assert code == 0, server_log_tail(out)
    return json.loads((out / "summary.json").read_text())


def ddp(out: Path, steps: int, nproc: int = 2) -> dict[str, torch.Tensor]:
    """The same script under plain DDP (one torchrun agent, loopback rendezvous)."""
    cmd = agent_command(
        0, 1, LOOPBACK, free_port(), ["ddp", str(out), str(steps)], nproc_per_node=nproc, script=str(SCRIPT)
    )
    done = subprocess.run(cmd, env=_environment(LOOPBACK), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return torch.load(out / "ddp.pt", weights_only=True)


def test_bsp_in_your_loop_equals_ddp_with_adamw_and_a_schedule(tmp_path):
    steps = 20  # the StepLR halves the lr at 5, 10, 15: the server must follow the workers' schedule
    runs = launched(tmp_path, "bsp", steps)
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True)  # a state_dict, loadable as is
    reference = ddp(tmp_path, steps)
    assert sorted(ours) == sorted(reference)
    assert max((ours[k] - reference[k]).abs().max().item() for k in ours) <= 1e-5
    import sys

    sys.path.insert(0, str(SCRIPT.parent))
    from loop_train import Net, build

    net = Net()
    net.load_state_dict(ours)
    start, _, _ = build()
    moved = max((net.state_dict()[k] - start.state_dict()[k]).abs().max().item() for k in ours if "frozen" not in k)
    assert moved > 0.05  # trained, and the frozen layer was left alone:
    assert torch.equal(ours["frozen.weight"], start.state_dict()["frozen.weight"])
    (run,) = runs
    assert run["steps"] == 2 * steps and run["updates"] == steps and run["stop_reason"] == "no workers left"
    assert [x["reason"] for x in run["workers_left"]] == ["its training loop ended"] * 2
    assert run["final_metrics"]["accuracy"] > 0.5


def test_a_loop_stopped_and_resumed_from_its_checkpoint_equals_ddp_run_through(tmp_path):
    """BSP for 8 steps with checkpoints, then a new launch with resume=True to
    step 20: the server's AdamW moments, the model and the version come back
    from the checkpoint, the script fast-forwards its schedule by
    ``sync.first_step`` and ``sync.loader`` skips the samples already drawn,
    so the result is DDP's 20 uninterrupted steps."""
    ckpt = tmp_path / "ckpt"
    (run,) = launched(tmp_path, "bsp", 8, "-", str(ckpt))
    assert run["updates"] == 8 and (ckpt / "ckpt-bsp.pt").is_file()
    (run,) = launched(tmp_path, "bsp", 20, "-", str(ckpt), "resume")
    assert run["resumed_from"]["steps"] == 16 and run["resumed_from"]["version"] == 8
    assert run["resumed_from"]["trace"] == "continued"  # hetsync launch set the first run's trace aside
    records = [json.loads(line) for line in (tmp_path / run["trace"]).read_text().splitlines()]
    assert sum(r["ev"] == "resume" for r in records) == 1
    assert sum(r["ev"] == "apply" for r in records) == 20
    assert run["updates"] == 20 and run["stop_reason"] == "no workers left"
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True)
    reference = ddp(tmp_path, 20)
    assert max((ours[k] - reference[k]).abs().max().item() for k in ours) <= 1e-5


def test_the_saved_and_evaluated_model_holds_the_workers_batchnorm_statistics(tmp_path):
    """Only the workers' forward passes move BatchNorm's running statistics;
    rank 0 never trains. The server averages the workers' last ones (floats;
    ``num_batches_tracked``: the largest) into the model it saves."""
    steps = 12
    (run,) = launched(tmp_path, "asp", steps, "bn")
    ours = torch.load(tmp_path / "model-asp.pt", weights_only=True)
    workers = [torch.load(tmp_path / f"buffers-{w}.pt", weights_only=True) for w in range(2)]
    for key in ("norm.running_mean", "norm.running_var"):
        assert torch.allclose(ours[key], (workers[0][key] + workers[1][key]) / 2, atol=1e-6), key
    assert not torch.allclose(ours["norm.running_var"], torch.ones(24))  # not BatchNorm's initial statistics
    assert ours["norm.num_batches_tracked"].item() == steps
    assert run["final_metrics"]["accuracy"] > 0.4


def test_resume_without_its_checkpoint_is_refused_before_any_process_group(tmp_path, monkeypatch):
    import hetsync

    monkeypatch.setenv("RANK", "0")  # rank 0 holds the checkpoint (workers may be on other machines)
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(BadInput, match="needs checkpoint_dir="):
        hetsync.init("bsp", resume=True)
    with pytest.raises(BadInput, match=r"ckpt-ssp-s-2\.pt' does not exist .*drop resume=True"):
        hetsync.init("ssp:s=2", checkpoint_dir=tmp_path, resume=True)


@pytest.mark.parametrize(
    "policy", [p if p != "diloco" else "diloco:H=5" for p in REGISTRY]
)  # (12 steps: a partial round)
def test_every_policy_trains_your_model_to_the_end_of_your_loop(tmp_path, policy):
    steps = 12
    (run,) = launched(tmp_path, policy, steps)
    assert run["stop_reason"] == "no workers left", run
    assert run["steps"] >= 2 * steps if policy.startswith("lb-bsp") else run["steps"] == 2 * steps
    assert run["updates"] > 0
    if run.get("topology") != "p2p":  # every step the loops took is in the model or booked as dropped:
        assert run["applied_steps"] + run["dropped_steps"] == run["steps"], run  # (none left in flight)
        assert run["outstanding_steps"] == 0, run
    assert run["final_metrics"]["accuracy"] > 0.4  # 3 classes: better than chance after 24 steps
    assert (tmp_path / run["trace"]).stat().st_size > 0
    assert isinstance(torch.load(tmp_path / f"model-{run['trace'][6:-6]}.pt", weights_only=True), dict)


def test_a_worker_that_dies_leaves_and_the_others_finish(tmp_path):
    (run,) = launched(tmp_path, "bsp", 12, "1", nproc=3)  # worker 1 is killed at its 4th step
    gone = {x["worker"]: x["reason"] for x in run["workers_left"]}
    assert gone[1].startswith("connection lost")
    assert gone[0] == gone[2] == "its training loop ended"
    assert run["per_worker"]["steps"][0] == run["per_worker"]["steps"][2] == 12


def test_init_outside_torchrun_says_how_to_launch(monkeypatch):
    import hetsync

    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(BadInput, match="must run under torchrun or hetsync launch"):
        hetsync.init("bsp")


def test_a_bad_policy_is_refused_before_any_process_group(monkeypatch):
    import hetsync

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")  # no MASTER_ADDR: forming a group would fail differently
    with pytest.raises(BadInput, match="unknown policy"):
        hetsync.init("nope")
    with pytest.raises(BadInput, match="'max' or 'min'"):
        hetsync.init("bsp", metrics={"bleu": "up"})


def test_launch_refuses_a_missing_script(tmp_path, capsys):
    assert main(["launch", "--out", str(tmp_path), str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
