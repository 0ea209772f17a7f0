"""LR schedulers in a user's own loop: under BSP, rank 0's copy of the
user's optimizer takes every step, so it must run at the learning rate,
momentum and betas the workers' schedulers set — whichever side of
``sync.optimizer`` the scheduler was built on. Each family is one launch of
tests/runtime/loop_schedules.py against DDP (one DDP run for all of them);
in every launch one worker builds its scheduler before ``sync.optimizer`` and
one after, and rank 0 builds it before (its copy of the optimizer changed by
the scheduler's construction) or never (it keeps the lr it was built with),
alternately by family."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from hetsync.runtime.launch import LOOPBACK, _environment, agent_command, free_port, launch, server_log_tail

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

SCRIPT = Path(__file__).with_name("loop_schedules.py")
STEPS = 20


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Every family's parameters after STEPS steps of plain DDP on 2 ranks (one torchrun agent)."""
    out = tmp_path_factory.mktemp("ddp")
    cmd = agent_command(
        0, 1, LOOPBACK, free_port(), ["ddp", str(out), str(STEPS)], nproc_per_node=2, script=str(SCRIPT)
    )
    done = subprocess.run(cmd, env=_environment(LOOPBACK), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.mark.parametrize(
    ("family", "path"),
    [
        ("onecycle", "ps"),  # SGD + Nesterov; lr and momentum cycled; rank 0 never sees the scheduler
        ("cyclic", "ps"),  # AdamW; lr and beta1 cycled; rank 0 built it too
        ("lambda", "ps"),  # AdamW; one lambda per parameter group; rank 0 never sees the scheduler
        ("sequential", "ps"),  # SGD + momentum; ChainedScheduler(SequentialLR(LinearLR, CosineAnnealingLR), StepLR)
        # the collective path (hetsync.runtime.collective): the workers all-reduce during backward and
        # each steps its own optimizer with its own scheduler, as under DDP
        ("onecycle", "collective"),
        ("cyclic", "collective"),
    ],
)
def test_bsp_in_your_loop_follows_the_workers_scheduler_as_ddp_does(tmp_path, reference, family, path):
    env = {"HETSYNC_PATH": path}
    code = launch(2, [family, str(tmp_path), str(STEPS)], tmp_path, timeout_s=240, script=str(SCRIPT), env=env)
    assert code == 0, server_log_tail(tmp_path)
    ours = torch.load(tmp_path / "model-bsp.pt", weights_only=True)
    ddp = torch.load(reference / f"ddp-{family}.pt", weights_only=True)
    assert sorted(ours) == sorted(ddp)
    diff = max((ours[k] - ddp[k]).abs().max().item() for k in ours)
    print(f"{family} on {path}: max |ours - DDP| = {diff:.3g}")
    assert diff <= 1e-5, f"{family} on {path}: the parameters differ from DDP's by {diff:.3g} after {STEPS} steps"
