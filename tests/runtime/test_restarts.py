"""Rank 0 survives (issue 30, item 1): ``hetsync run --max-restarts N``
starts the job again from its checkpoints when the server is killed, and
the summary accounts it as one run across the restart; without restarts
left, the killed server's runs still get a summary, rebuilt from their
traces and marked interrupted. Real processes: the command as a user runs
it, rank 0 killed with SIGKILL once it has trained a while."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetsync.salvage import INTERRUPTED
from hetsync.summary import read_summary

pytestmark = pytest.mark.dist  # starts real processes

RUN = ["run", "-s", "hetero-4", "-p", "bsp", "--nproc", "2", "--no-plots", "--set", "eval_every_s=0.25"]


def _start(out: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [str(Path(sys.executable).with_name("hetsync")), *RUN, "-o", str(out), *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _server(out: Path) -> int | None:
    """The pid of this run's rank 0 (forked by its zygote, whose command line names the folder)."""
    for entry in Path("/proc").iterdir():
        try:
            named = entry.name.isdigit() and (entry / "comm").read_text().strip() == "hetsync-rank-0"
            if named and str(out) in (entry / "cmdline").read_text():
                return int(entry.name)
        except OSError:
            continue
    return None


def _kill_the_server_once_it_has_evaluated(
    proc: subprocess.Popen[str], out: Path, evals: int = 3, checkpoint: Path | None = None
) -> None:
    """SIGKILL rank 0 once its trace has ``evals`` evaluations (and ``checkpoint`` exists: on a
    loaded machine the third evaluation can come before the first checkpoint is saved)."""
    deadline = time.monotonic() + 120
    trace = out / "trace-bsp.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        seen = trace.read_text().count('"ev":"eval"') if trace.exists() else 0
        saved = checkpoint is None or checkpoint.exists()
        pid = _server(out)
        if seen >= evals and saved and pid is not None:
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never got going: {proc.poll()=}")


def test_a_killed_server_is_restarted_from_its_checkpoint_and_the_run_is_one_run(tmp_path):
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    every = ("--checkpoint-dir", str(ckpt), "--checkpoint-every-s", "0.5", "--max-restarts", "1")
    proc = _start(out, "--set", "max_time_s=6", *every)
    _kill_the_server_once_it_has_evaluated(proc, out, checkpoint=ckpt / "ckpt-bsp.pt")
    console, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, console
    assert "restart 1 of 1, from the checkpoints" in " ".join(console.split())
    (run,) = read_summary(out / "summary.json")
    (restart,) = run["restarts"] or []
    assert str(restart["reason"]).startswith("rank 0 (the server) was killed by SIGKILL"), restart
    assert str(out / "logs-attempt-0" / "rank-0.log") in str(restart["reason"])  # the first attempt's logs, kept
    assert (out / "logs-attempt-0" / "rank-0.log").is_file() and (out / "logs" / "rank-0.log").is_file()
    resumed = run["resumed_from"] or {}
    assert resumed["version"] > 0  # it went on from a checkpoint, not from the start
    assert run["stop_reason"] != INTERRUPTED and run["updates"] > resumed["version"]
    assert (run["wall_time_s"] or 0) >= 6.0  # one run's clock across the restart, to its time limit
    records = [json.loads(line) for line in (out / "trace-bsp.jsonl").read_text().splitlines()]
    assert sum(r["ev"] == "resume" for r in records) == 1 and sum(r["ev"] == "start" for r in records) == 1


def test_a_killed_server_without_restarts_leaves_a_summary_rebuilt_from_its_trace(tmp_path):
    out = tmp_path / "out"
    proc = _start(out, "--set", "max_time_s=60")
    _kill_the_server_once_it_has_evaluated(proc, out)
    console, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, console
    (run,) = read_summary(out / "summary.json")
    assert run["label"] == "bsp" and run["stop_reason"] == INTERRUPTED
    assert (run["steps"] or 0) > 0 and (run["updates"] or 0) > 0 and run["trace"] == "trace-bsp.jsonl"
    assert (run["final_metrics"] or {}).get("accuracy") is not None and len(run["metric_curve"] or []) >= 3
    assert "from the trace" in " ".join(run["notes"] or [])


def test_max_restarts_needs_a_checkpoint_dir(tmp_path):
    from hetsync.cli import main

    assert main([*RUN, "-o", str(tmp_path / "out"), "--max-restarts", "2"]) == 2


LOOP = """
import sys, time, torch, hetsync
from torch import nn

sync = hetsync.init("bsp", scenario="hetero-4", checkpoint_dir=sys.argv[1], checkpoint_every_s=0.3)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = sync.optimizer(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
for step in range(sync.first_step, 120):  # a resumed worker goes on where the checkpoint left it
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.05)
sync.finish()
"""


def test_hetsync_launch_restarts_your_loop_and_it_goes_on_from_its_checkpoint(tmp_path):
    script, out = tmp_path / "train.py", tmp_path / "out"
    script.write_text(LOOP)
    argv = [str(Path(sys.executable).with_name("hetsync")), "launch", "--nproc", "2", "-o", str(out)]
    proc = subprocess.Popen(
        [*argv, "--max-restarts", "1", str(script), str(tmp_path / "ckpt")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "ckpt").glob("*")) or _server(out) is None:  # a checkpoint is there
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)
    os.kill(_server(out) or 0, signal.SIGKILL)
    console, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, console
    assert "restart 1 of 1" in " ".join(console.split())
    (run,) = read_summary(out / "summary.json")
    assert run["restarts"] and (run["resumed_from"] or {})["version"] > 0, run
    assert run["per_worker"]["steps"] == [120, 120]  # every step of the loops, across the restart
