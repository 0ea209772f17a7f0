"""Workers that come back, or join late, in a user's own training loop
(``hetsync launch``; issue 30 item 2, docs/membership.md).

A worker process of the script that dies is started again by the launcher
(``--max-worker-restarts``) and its ``hetsync.init`` comes back on a
session of its own; a job started with ``--nproc-max`` takes one more
worker while it runs (``hetsync launch --join OUT``). The script is
tests/runtime/loop_rejoin.py; each run trains a few seconds on loopback.
The refusals start no process, but one: the script's own policy is known
only to its ``hetsync.init``, which refuses it on every rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.runtime.launch import JOB_FILE, server_log_tail

SCRIPT = Path(__file__).with_name("loop_rejoin.py")
BATCH = 16  # the script's batch_size


def _summary(out: Path) -> dict[str, Any]:
    (run,) = json.loads((out / "summary.json").read_text())
    return dict(run)


def _lives(out: Path, worker: int) -> list[dict[str, Any]]:
    """What each life of ``worker``'s loop wrote as it ended (the script's ``life-<worker>-<pid>.json``), in order."""
    found = [json.loads(p.read_text()) for p in out.glob(f"life-{worker}-*.json")]
    return sorted(found, key=lambda life: life["first_step"])


@pytest.mark.dist
def test_a_killed_worker_of_your_loop_comes_back_where_its_data_was(tmp_path):
    """BSP, 2 workers, 6 s: worker 1 kills itself before its 4th step; the
    launcher starts it again, its ``hetsync.init`` comes back on a session,
    gets the model, and its loop goes on at ``sync.first_step`` with the
    samples after those it had drawn. The run exits 0: the worker's last
    life ended well."""
    out = tmp_path / "out"
    argv = ["launch", "--nproc", "2", "--max-worker-restarts", "1", "--out", str(out)]
    assert main([*argv, str(SCRIPT), "bsp", str(out), "6", "1"]) == 0, server_log_tail(out)
    run = _summary(out)
    (left,) = [x for x in run["workers_left"] if x["worker"] == 1]
    assert left["reason"].startswith("connection lost"), left
    (joined,) = run["workers_joined"]
    assert joined["worker"] == 1 and left["t"] < joined["t"] <= joined["ready_s"] < 6.0
    records = [json.loads(line) for line in (out / run["trace"]).read_text().splitlines()]
    assert [r["w"] for r in records if r["ev"] == "joined"] == [1]
    (life,) = _lives(out, 1)  # (the killed life wrote nothing: SIGKILL)
    # it had taken 3 steps (2 if the last report died with it): BSP had it wait for the round before each
    assert 2 <= life["first_step"] <= 3 and life["drawn_before"] == BATCH * life["first_step"], life
    assert life["taken"] > 10  # it trained after it came back
    steps = [r["step"] for r in records if r["ev"] == "compute" and r["w"] == 1 and r["t"] >= joined["ready_s"]]
    assert min(steps) == life["first_step"]  # its step numbers go on where the run booked it
    assert abs(run["per_worker"]["steps"][1] - (life["first_step"] + life["taken"])) <= 1
    assert run["stop_reason"] == "max_time" and run["final_metrics"]["accuracy"] > 0.6  # (3 classes)


@pytest.mark.dist
def test_a_job_started_with_nproc_max_takes_a_worker_that_joins_while_it_runs(tmp_path, capsys):
    """``--nproc 2 --nproc-max 3``: the server knows 3 workers from the
    start, worker 2 absent (booked ``left`` at 0, as a scenario's late
    starter); ``hetsync launch --join OUT`` starts it into the running job,
    on a session, and the policy (ASP) gives it work at once."""
    out = tmp_path / "out"
    job = [sys.executable, "-m", "hetsync", "launch", "--nproc", "2", "--nproc-max", "3", "--out", str(out)]
    # (20 s: under load the joining process takes 15-19 s to start — torch, hetsync — and must join a running job)
    args = [str(SCRIPT), "asp", str(out), "20"]
    started = subprocess.Popen([*job, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((out / JOB_FILE).exists() and (out / "logs" / ".started").exists()):
            assert started.poll() is None and time.monotonic() < deadline, started.communicate()[0]
            time.sleep(0.1)
        assert main(["launch", "--join", str(out), *args]) == 0, server_log_tail(out)
        said = started.communicate(timeout=120)[0]
    finally:
        if started.poll() is None:
            started.kill()
    assert started.returncode == 0, said + server_log_tail(out)
    assert f"hetsync launch --join {out}" in said  # the job says how to join it
    assert "worker 2 joins the job" in capsys.readouterr().out
    run = _summary(out)
    (absent,) = [x for x in run["workers_left"] if x["worker"] == 2]
    assert absent["reason"] == "absent at the start" and absent["t"] < 0.5, absent
    (joined,) = run["workers_joined"]
    assert joined["worker"] == 2 and 0 < joined["t"] <= joined["ready_s"] < 20.0
    (life,) = _lives(out, 2)
    assert life["first_step"] == 0 and life["drawn_before"] == 0 and life["taken"] > 10
    assert abs(run["per_worker"]["steps"][2] - life["taken"]) <= 1  # (a step the run's end cut off)
    assert not (out / JOB_FILE).exists()  # (no worker joins a job that is over)
    server_log = (out / "logs" / "rank-0.log").read_text()
    assert "worker 2 joined at" in server_log and "came back" not in server_log  # (it was never in before)


# ---------------------------------------------------------------- refusals
def _refused(tmp_path: Path, capsys: Any, *args: str) -> str:
    out = tmp_path / "r"
    given = args if "--join" in args else ("--out", str(out), *args)  # (--join takes the job's --out)
    assert main(["launch", *given, str(SCRIPT), "bsp", str(out), "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err, err
    assert not (out / "logs").exists()  # refused before any process started
    return err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--nproc", "3", "--nproc-max", "2"], "--nproc-max 2 is below --nproc 3"),
        (["--nproc-max", "3", "--path", "collective"], "--nproc-max: 1 worker(s) may join, on path ps only"),
        (["--max-worker-restarts", "1", "--path", "collective"], "max_worker_restarts 1: a restarted worker comes"),
        (["--nproc-max", "3", "--max-restarts", "1"], "with --max-restarts 1"),
        (
            ["--join", "X", "--nproc-max", "3"],
            "takes the running job's settings from X/rendezvous.json: drop --nproc-max",
        ),
    ],
    ids=["below-nproc", "nproc-max-collective", "restarts-collective", "nproc-max-resumes", "join-with-options"],
)
def test_what_cannot_join_or_come_back_is_refused_before_any_process_starts(args, said, tmp_path, capsys):
    assert said in _refused(tmp_path, capsys, *args)


def test_join_needs_a_running_job_with_a_free_place(tmp_path, capsys):
    assert "no job is running there" in _refused(tmp_path, capsys, "--join", str(tmp_path / "none"))
    job = tmp_path / "job"
    (job / "logs").mkdir(parents=True)
    rendezvous: dict[str, Any] = {"host": "127.0.0.1", "port": 1, "world": 3, "nproc": 2, "nproc_max": 3}
    rendezvous |= {"launcher_pid": os.getpid(), "script": str(SCRIPT.resolve()), "args": ["asp"]}
    (job / JOB_FILE).write_text(json.dumps(rendezvous))
    assert "the job runs " in _refused(tmp_path, capsys, "--join", str(job))  # (bsp: not the job's asp)
    rendezvous["args"] = ["bsp", str(tmp_path / "r"), "2"]  # what _refused gives the script
    (job / JOB_FILE).write_text(json.dumps(rendezvous))
    (job / "logs" / ".worker-2.joined").touch()  # worker 2 joined already
    assert "has all its workers" in _refused(tmp_path, capsys, "--join", str(job))
    rendezvous["launcher_pid"] = 2**22 + 1  # (above pid_max's default: no such process)
    (job / JOB_FILE).write_text(json.dumps(rendezvous))
    assert "the job there has ended" in _refused(tmp_path, capsys, "--join", str(job))


def test_nproc_max_below_the_world_is_refused_by_init(monkeypatch):
    import hetsync

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("HETSYNC_NPROC_MAX", "1")
    with pytest.raises(BadInput, match="--nproc-max must be at least --nproc"):
        hetsync.init("bsp")


@pytest.mark.dist
def test_a_policy_that_cannot_take_a_worker_back_is_refused_by_the_scripts_init(tmp_path, capsys):
    """The launcher does not know the script's policy: every rank's
    ``hetsync.init`` refuses it before any traffic (one line, exit 2)."""
    out = tmp_path / "out"
    argv = ["launch", "--nproc", "2", "--max-worker-restarts", "1", "--out", str(out)]
    assert main([*argv, str(SCRIPT), "p2p-random", str(out), "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--max-worker-restarts 1: policy 'p2p-random' is peer to peer" in err and "\n" not in err, err
