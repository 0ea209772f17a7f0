"""Workers that come back on real processes (issue 30 item 2, docs/membership.md).

A worker leaves (its process is killed, as the scenario's ``membership`` or
the kill fault says) and the launcher starts it again: it comes back on a
pairwise session with rank 0 (:mod:`hetsync.runtime.session`), gets the
current model and its place in the data, and trains on. Each run is ``hetsync
run`` on loopback (about 20 s on a 2-core machine, start-up included); the
refusals start no process.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from hetsync.cli import main
from hetsync.driver import policy_labels
from hetsync.errors import BadInput
from hetsync.runtime.config import ProcessOptions, RunConfig
from hetsync.runtime.launch import launch_run, server_log_tail
from hetsync.scenario import load_scenario

T = 8.0  # seconds of training
SMALL = ["--scenario", "homogeneous-8", "--set", "jitter=0", "--set", f"max_time_s={T}", "--no-plots"]
AWAY = "membership=[{worker: 1, leave_s: 2.0, join_s: 4.0}]"


def _trace(out: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / f"trace-{label}.jsonl").read_text().splitlines()]


def _came_back_and_trained(run: dict[str, Any], records: list[dict[str, Any]], w: int = 1) -> None:
    """``w`` left (or started absent), came back, held the model and took steps after; every step is booked."""
    assert [x["worker"] for x in run["workers_left"]] == [w]
    (joined,) = run["workers_joined"]
    assert joined["worker"] == w and run["workers_left"][0]["t"] < joined["t"] <= joined["ready_s"] < T
    (record,) = [r for r in records if r["ev"] == "joined"]
    assert record["w"] == w and record["nbytes"] > 0 and record["version"] > 0
    after = [r for r in records if r["ev"] == "compute" and r["w"] == w and r["t"] >= joined["ready_s"]]
    assert len(after) > 0, "the worker that came back took no step"
    # its steps went on from where it was: numbered after those it took before it left
    before = [r["step"] for r in records if r["ev"] == "compute" and r["w"] == w and r["t"] < joined["t"]]
    assert min(r["step"] for r in after) == (max(before) + 1 if before else 0)
    assert run["stop_reason"] == "max_time"
    assert run["steps"] <= run["applied_steps"] + run["dropped_steps"] + run["outstanding_steps"]
    assert run["steps"] == sum(run["per_worker"]["steps"])


@pytest.mark.dist
@pytest.mark.parametrize("spec", ["bsp", "asp"])
def test_a_worker_that_leaves_comes_back_and_trains(spec, tmp_path, capsys):
    out = tmp_path / spec
    argv = ["run", *SMALL, "--nproc", "2", "-p", spec, "--set", AWAY, "--out", str(out)]
    assert main(argv) == 0, server_log_tail(out)
    (run,) = json.loads((out / "summary.json").read_text())
    _came_back_and_trained(run, _trace(out, spec))
    assert 1.5 < run["workers_left"][0]["t"] < 3.5  # it left at its leave_s (run seconds)
    assert run["workers_left"][0]["reason"] == "membership"  # (as the simulator books it)
    assert "worker 1 joined" in capsys.readouterr().out


@pytest.mark.dist
def test_a_worker_that_starts_absent_joins_later_and_trains(tmp_path):
    argv = ["run", *SMALL, "--nproc", "2", "-p", "asp", "--set", "membership=[{worker: 1, join_s: 2.0}]"]
    assert main([*argv, "--out", str(tmp_path)]) == 0, server_log_tail(tmp_path)
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    _came_back_and_trained(run, _trace(tmp_path, "asp"))
    assert run["workers_left"][0]["reason"] == "absent at the start" and run["workers_left"][0]["t"] < 0.5


@pytest.mark.dist
@pytest.mark.parametrize("restarts", [0, 1])
def test_max_worker_restarts_brings_a_killed_worker_back(restarts, tmp_path):
    process = ProcessOptions(out=tmp_path, kill_worker=1, kill_at_s=2.0, max_worker_restarts=restarts)
    overrides = {"jitter": 0, "max_time_s": T}
    config = RunConfig(scenario="homogeneous-8", overrides=overrides, policies=("bsp",), process=process, plots=False)
    assert launch_run(config, 2, timeout_s=200) == 0, server_log_tail(tmp_path)
    (run,) = json.loads((tmp_path / "summary.json").read_text())
    if restarts:
        _came_back_and_trained(run, _trace(tmp_path, "bsp"))
        assert run["workers_left"][0]["reason"].startswith("connection lost")
    else:  # as before: it stays gone
        assert [x["worker"] for x in run["workers_left"]] == [1] and run["workers_joined"] == []


# ---------------------------------------------------------------- refusals
def _refused(tmp_path: Path, capsys: Any, *args: str) -> str:
    argv = ["run", *SMALL, "--nproc", "2", "--out", str(tmp_path / "r"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err, err
    assert not (tmp_path / "r" / "logs").exists()  # refused before any process started
    return err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-p", "p2p-random", "--set", AWAY], "peer to peer"),
        (["-p", "bsp", "--path", "collective", "--set", AWAY], "path ps only"),
        (["-p", "bsp,asp", "--set", AWAY], "one policy per run"),
        (["-p", "bsp", "--servers", "2", "--set", AWAY], "one server only"),
        (["-p", "streaming-diloco", "--max-worker-restarts", "1"], "takes_joins is False"),
    ],
    ids=["p2p", "collective", "several", "servers", "takes-no-joins"],
)
def test_what_cannot_come_back_is_refused_in_one_line(args, said, tmp_path, capsys):
    assert said in _refused(tmp_path, capsys, *args)


def test_membership_in_a_run_that_may_resume_is_refused(tmp_path, capsys):
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt"), "--set", AWAY, "-p", "bsp"]
    assert "would play the leaves already past again" in _refused(tmp_path, capsys, *ckpt, "--max-restarts", "1")


def test_hetsync_launch_refuses_membership():
    sc = load_scenario("homogeneous-8", workers=2, membership=[{"worker": 1, "leave_s": 2.0, "join_s": 4.0}])
    with pytest.raises(BadInput, match="hetsync launch"):
        policy_labels(sc, ["bsp"], driver="loop")


def test_max_worker_restarts_is_checked():
    with pytest.raises(BadInput, match="max_worker_restarts must be an integer >= 0"):
        ProcessOptions(max_worker_restarts=-1)
    with pytest.raises(BadInput, match="max_worker_restarts 1: .*path ps only"):
        ProcessOptions(max_worker_restarts=1, path="collective")


# ------------------------------------------------------- the launcher's plan
class _Proc:
    def __init__(self, pid: int, code: int | None) -> None:
        self.pid, self.returncode = pid, code

    def poll(self) -> int | None:
        return self.returncode


class _Dead:
    def __init__(self, rank: int, pid: int, code: int | None = -9) -> None:
        self.rank, self.proc, self.log = rank, _Proc(pid, code), io.StringIO()


def test_the_launcher_starts_dead_workers_again_as_planned():
    from hetsync.runtime.launch import Rejoins, _Restarter

    started: list[tuple[int, int]] = []

    def start(rank: int, life: int) -> Any:
        started.append((rank, life))
        return _Dead(rank, 100 + len(started), None)

    plan = Rejoins({0: (4.0, None)}, max_worker_restarts=1)  # worker 0: back at 4 s, then gone for good
    r = _Restarter(plan, start)
    current: dict[int, Any] = {1: _Dead(1, 1), 2: _Dead(2, 2), 3: _Dead(3, 3, code=0)}  # rank 3 ended well
    assert len(r.look(current, formed_at=10.0, now=12.0)) == 1
    assert started == [(2, 1)]  # worker 1 (rank 2) died: again at once, the one restart allowed
    current[2] = _Dead(2, 7)  # ... and it died again: no restart left
    r.look(current, formed_at=10.0, now=13.0)
    assert started == [(2, 1)]
    r.look(current, formed_at=10.0, now=14.0)  # worker 0 (rank 1) comes back at 10 + 4 s
    assert started == [(2, 1), (1, 1)]
    current[1] = _Dead(1, 8)  # its second life ends: the scenario has it gone for good
    r.look(current, formed_at=10.0, now=20.0)
    assert started == [(2, 1), (1, 1)] and r.used == 1
