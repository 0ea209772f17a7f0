"""--resume on real processes: a run killed mid-way and resumed goes on as
if it had not stopped — one continuous trace, the accounting of the whole
run, the checkpoint's policy state (issue 14, item 2).

Each run is ``hetsync run --nproc 2`` (the server and two workers, forked
from one interpreter that imported torch once); the killed leg is stopped
with SIGKILL on the launcher and every process below it, as a power cut or
``kill -9`` would; the stopped ones with Ctrl-C (SIGINT) to the launcher,
which hands it on to the ranks as SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from hetsync.errors import BadInput
from hetsync.ledger import HeldPush, Ledger
from hetsync.policies import make_policy
from hetsync.policies.base import Apply, PolicyContext
from hetsync.runtime import checkpoint_check
from hetsync.runtime.checkpointer import Checkpointer
from hetsync.runtime.launch import server_log_tail
from hetsync.scenario import load_scenario
from hetsync.trace import TraceWriter, read_trace
from hetsync.workloads import make_workload

pytestmark = pytest.mark.dist  # starts real processes: make test-fast leaves it out

T = 8.0  # seconds of training in every run
KILL_AFTER_CKPT_S = 4.0  # the killed leg dies once a checkpoint at least this late exists ...
LINGER_S = 0.7  # ... and this long after it, so that it has run past the checkpoint
ARGS = ["--scenario", "hetero-4", "--set", f"max_time_s={T}", "--no-plots"]
# the runs cut within their first second or two, and resumed: no figure of theirs is compared with a whole run's
SHORT = ["--set", "max_time_s=4"]
# a run stopped by Ctrl-C: long enough that the signal lands mid-run on a loaded machine too (its resumption: SHORT)
LONG = ["--set", "max_time_s=60"]


def _agent(out: Path, *extra: str) -> subprocess.Popen:
    policy = [] if "--policies" in extra else ["--policies", "bsp"]
    cmd = [sys.executable, "-m", "hetsync", "run", "--nproc", "2", *ARGS, *policy, "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "agent.log").open("w")
    # (SIGINT at its default, as in a terminal: a suite run in the background, or an xdist worker, has it
    # ignored, and the launcher would inherit that and never see the tests' Ctrl-C)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=default_sigint)


def _ran(out: Path, *extra: str) -> list[dict]:
    """A leg nobody interrupts, as ``_agent`` starts it but in this process: its
    ranks are forked by the suite's kept zygote (a ``hetsync`` child imports
    torch twice over: 6 s of CPU a leg)."""
    from unittest import mock

    from hetsync.cli import main

    policy = [] if "--policies" in extra else ["--policies", "bsp"]
    with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"}):
        code = main(["run", "--nproc", "2", *ARGS, *policy, "--out", str(out), *extra])
    assert code == 0, server_log_tail(out)
    return json.loads((out / "summary.json").read_text())


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchelastic starts its ranks in new sessions)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree(proc: subprocess.Popen) -> None:
    for pid in [proc.pid, *_descendants(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):  # gone already
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _checkpoint_time(path: Path) -> float:
    try:
        return float(torch.load(path, weights_only=True)["elapsed_s"])
    except Exception:  # not written yet, or being replaced
        return -1.0


@pytest.fixture(scope="module")
def legs(tmp_path_factory):
    """A run killed after its checkpoint at >= 4 s, and its resumption."""
    root = tmp_path_factory.mktemp("resume")

    out, ckpt_dir = root / "cut", root / "ckpt"
    ckpt = ckpt_dir / "ckpt-bsp.pt"
    proc = _agent(out, "--checkpoint-dir", str(ckpt_dir), "--checkpoint-every-s", "1")
    deadline = time.monotonic() + 90
    try:
        while _checkpoint_time(ckpt) < KILL_AFTER_CKPT_S:
            assert proc.poll() is None, (out / "agent.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint came"
            time.sleep(0.1)
        time.sleep(LINGER_S)
    finally:
        _kill_tree(proc)
    saved = torch.load(ckpt, weights_only=True)
    trace = out / "trace-bsp.jsonl"
    size = trace.stat().st_size
    assert size >= saved.get("trace_bytes", 0)  # the checkpoint's records reached the file before it was saved
    # what the killed server wrote after its last checkpoint (a flush it made, or
    # records of a checkpoint it was saving) must not survive the resumption
    lines = trace.read_text().splitlines(keepends=True)
    with trace.open("a") as fh:
        fh.writelines(lines[-1:])

    resumed = _ran(out, "--checkpoint-dir", str(ckpt_dir), "--resume")[0]
    return {"resumed": resumed, "saved": saved, "trace": _records(trace), "ckpt": ckpt}


def test_the_resumed_trace_is_one_continuous_run(legs):
    recs, saved = legs["trace"], legs["saved"]
    computes = [r for r in recs if r["ev"] == "compute"]
    assert min(r["t"] for r in computes) < 0.5  # the killed run's records are kept (the issue: it began at 6 s)
    kinds = [r["ev"] for r in recs]
    assert kinds[0] == "start" and kinds.count("start") == 1  # continued, not started over
    assert kinds.count("resume") == 1 and kinds[-1] == "end" and kinds.count("end") == 1
    at = kinds.index("resume")
    t_resume = recs[at]["t"]
    assert t_resume == pytest.approx(saved["elapsed_s"])
    assert recs[at]["version"] == saved["version"]
    # before the resumption: the killed run's records up to its checkpoint, none later
    assert all(r["end"] <= t_resume for r in recs[:at] if "end" in r)
    # nothing twice: model versions 1..V once each, every step number of a worker once, push ids once
    versions = [r["version"] for r in recs if r["ev"] == "apply"]
    assert versions == list(range(1, len(versions) + 1))
    assert versions[-1] == legs["resumed"]["updates"]
    for w in range(legs["resumed"]["workers"]):
        steps = [r["step"] for r in computes if r["w"] == w]
        assert steps == list(range(len(steps))), f"worker {w}"
        starts = [r["t"] for r in computes if r["w"] == w]
        assert starts == sorted(starts)  # time only goes forward, across the resumption too
    ids = [r["id"] for r in recs if r["ev"] == "push"]
    assert len(ids) == len(set(ids))
    # no hole at the resumption: updates go on within a few BSP rounds (steps of 10-40 ms)
    applied = [r["t"] for r in recs if r["ev"] == "apply"]
    assert max(b - a for a, b in zip(applied, applied[1:], strict=False)) < 2.0  # (a loaded machine's margin)
    assert [r for r in recs if r["ev"] == "eval"][-1]["t"] == pytest.approx(T, abs=0.5)


def test_the_resumed_run_is_accounted_as_a_whole_run(legs):
    """The summary counts both legs once: read against the one continuous
    trace (an uninterrupted run for comparison would be a second run beside
    other tests, whose figures load moves by a third)."""
    resumed, recs = legs["resumed"], legs["trace"]
    computes = [r for r in recs if r["ev"] == "compute"]
    if os.environ.get("SHOW_FIGURES"):
        for key in ("compute_share", "wait_share", "comm_share", "samples_per_s", "steps", "wall_time_s"):
            print(f"{key}: {resumed[key]:.4g}")
        print("resumed_from", resumed["resumed_from"], "trace steps", len(computes))
    assert resumed["wall_time_s"] == pytest.approx(T, abs=0.5)
    assert resumed["resumed_from"]["trace"] == "continued"
    assert resumed["resumed_from"]["elapsed_s"] == pytest.approx(legs["saved"]["elapsed_s"])
    # a leg counted twice, or left out, is off by about 2×: every step of both legs once
    assert resumed["steps"] == len(computes) == sum(resumed["per_worker"]["steps"])
    assert min(r["t"] for r in computes) < 0.5 and max(r["end"] for r in computes) > T - 1.0
    busy_s = sum(r["end"] - r["t"] for r in computes)
    share = busy_s / (resumed["workers"] * resumed["wall_time_s"])
    assert resumed["compute_share"] == pytest.approx(share, abs=0.05)
    samples = sum(r["batch"] for r in computes)
    assert resumed["samples_per_s"] <= samples / resumed["wall_time_s"] * 1.01  # (applied samples: at most computed)
    assert resumed["samples_per_s"] >= 0.5 * samples / resumed["wall_time_s"]
    # every step is applied, dropped (work lost with the processes: reason restart) or outstanding
    lost = resumed["resumed_from"]["lost_steps"]
    assert 0 <= lost <= 2 * resumed["workers"]
    assert resumed["steps"] <= resumed["applied_steps"] + resumed["dropped_steps"] + resumed["outstanding_steps"]
    # the curve is the whole run's
    assert resumed["metric_curve"][0][0] < 0.5 and resumed["metric_curve"][-1][0] == pytest.approx(T, abs=0.5)


def test_a_checkpoint_of_another_scenario_or_workload_is_refused(legs):
    """The checkpoint the killed run left, offered to other runs."""
    ckpt = legs["ckpt"]

    def offer(name: str, **overrides: object) -> str:
        sc = load_scenario(name, **overrides).with_workers(2)
        wl = make_workload(sc.job.workload, **sc.job.workload_args)
        checkpointer = Checkpointer(ckpt, checkpoint_check.identity(sc, wl, "bsp", 2), workers=2)
        with pytest.raises(BadInput) as err:
            checkpointer.load(wl.init_params(sc.job.seed))
        return str(err.value)

    assert "scenario is 'hetero-4'" in offer("default")
    assert "workload is 'digits-mlp'" in offer("hetero-4", workload="digits-logreg")
    assert "seed is 0" in offer("hetero-4", seed=1)


# ------------------------------------------------ the pieces, without processes
def test_a_trace_is_cut_back_to_the_checkpoint_and_continued(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as tw:
        tw.write({"t": 0.0, "ev": "start"})
        tw.write({"t": 1.0, "ev": "apply", "version": 1})
        at = tw.flush()
        assert at == path.stat().st_size > 0
        tw.write({"t": 2.0, "ev": "apply", "version": 2})  # after the checkpoint: lost with the process
    with TraceWriter(path, resume_at=at) as tw:
        tw.write({"t": 1.0, "ev": "resume"})
        tw.write({"t": 2.5, "ev": "apply", "version": 2})
    assert [r["ev"] for r in read_trace(path)] == ["start", "apply", "resume", "apply"]
    assert [r["version"] for r in read_trace(path) if r["ev"] == "apply"] == [1, 2]


def _checkpointed_ledger(tmp_path: Path, *, started: int, evaluate: bool = True) -> tuple[Any, Any, Any, dict]:
    """A BSP ledger of 2 workers that applied a round of 2 steps and holds a
    third (3 computed, ``started`` started), and its checkpoint's state."""
    wl = make_workload("digits-logreg")
    policy = make_policy("bsp", PolicyContext(workers=2, batch_size=8, lr=0.1))
    with TraceWriter(tmp_path / "a.jsonl") as tw:
        a = Ledger(policy, wl, wl.init_params(0), tw)
        for w in range(2):
            a.hold(HeldPush(w, "grad", None, 0, 1, 8))
        a.started_steps, a.steps, a.samples, a.bytes_sent = started, 3, 24, 1000
        a.apply(Apply(contributions=((0, 0.5), (1, 0.5)), lr=0.1), 1.0)
        a.hold(HeldPush(0, "grad", None, 1, 1, 8))  # held at the checkpoint
        if evaluate:
            a.evaluate(1.5)
        state = json.loads(json.dumps(a.state_dict(), allow_nan=False))
    return wl, policy, a, state


def test_the_ledger_goes_on_from_its_state_and_drops_what_was_in_flight(tmp_path):
    wl, policy, a, state = _checkpointed_ledger(tmp_path, started=3)
    with TraceWriter(tmp_path / "b.jsonl") as tw:
        b = Ledger(policy, wl, wl.init_params(0), tw)
        assert b.load_state_dict(state, 2.0) == 1  # the held step died with the processes
    for key in ("version", "steps", "samples", "applied_steps", "applied_samples", "bytes_sent", "next_push_id"):
        assert getattr(b, key) == getattr(a, key), key
    assert b.curve == a.curve and b.pushes == {}
    assert b.dropped_steps == 1 and b.started_steps == b.applied_steps + b.dropped_steps
    (drop,) = read_trace(tmp_path / "b.jsonl")
    assert drop == {"t": 2.0, "ev": "drop", "ids": [2], "steps": 1, "reason": "restart"}
    # a run that had ended (its checkpoint at its time limit) is only summarized again: nothing is redone
    with TraceWriter(tmp_path / "c.jsonl") as tw:
        c = Ledger(policy, wl, wl.init_params(0), tw)
        assert c.load_state_dict(state, 2.0, goes_on=False) == 0
    assert c.dropped_steps == 0 and c.started_steps - c.applied_steps == 1  # still outstanding, as it was
    assert read_trace(tmp_path / "c.jsonl") == []


def test_sigterm_checkpoints_the_run_where_it_stands_and_resume_goes_on_from_there(tmp_path):
    """Ctrl-C under ``hetsync run``/``launch`` reaches the runtime processes
    as SIGTERM (runtime.launch._stop). Rank 0 then saves a checkpoint of the
    run as it stands, though the next periodic one is 1000 s away, and ends;
    ``--resume`` goes on from it."""
    out, ckpt_dir = tmp_path / "cut", tmp_path / "ckpt"
    proc = _agent(out, *LONG, "--checkpoint-dir", str(ckpt_dir), "--checkpoint-every-s", "1000")
    trace = out / "trace-bsp.jsonl"
    deadline = time.monotonic() + 90
    try:
        while not (trace.exists() and sum(r["ev"] == "apply" for r in _records(trace)) >= 5):
            assert proc.poll() is None, (out / "agent.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the launcher stops the ranks with SIGTERM
        assert proc.wait(timeout=60) == 130, (out / "agent.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    saved = torch.load(ckpt_dir / "ckpt-bsp.pt", weights_only=True)
    assert saved["version"] >= 5 and 0 < saved["elapsed_s"] < 4
    (resumed,) = _ran(out, *SHORT, "--checkpoint-dir", str(ckpt_dir), "--resume")
    assert resumed["resumed_from"]["version"] == saved["version"]
    assert resumed["updates"] > saved["version"] and resumed["stop_reason"] == "max_time"


def test_the_workers_local_optimizer_state_is_saved_and_a_resumed_run_goes_on_with_it(tmp_path):
    """DiLoCo's inner AdamW moments live on the workers: each saves its own
    beside the checkpoint (every --checkpoint-every-s and at the end) and a
    resumed run loads it, so a worker's AdamW step count goes on from the
    saved one instead of restarting at 0."""
    out, ckpt_dir = tmp_path / "cut", tmp_path / "ckpt"
    policy = ["--policies", "diloco:H=4"]
    proc = _agent(out, *policy, *LONG, "--checkpoint-dir", str(ckpt_dir), "--checkpoint-every-s", "0.5")
    files = [ckpt_dir / f"ckpt-diloco-h-4.worker-{w}.pt" for w in range(2)]
    deadline = time.monotonic() + 90
    try:
        while not all(_saved_step(f) >= 8 for f in files):
            assert proc.poll() is None, (out / "agent.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no worker saved its optimizer state"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, (out / "agent.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    saved_steps = [_saved_step(f) for f in files]
    books = torch.load(ckpt_dir / "ckpt-diloco-h-4.pt", weights_only=True)["peers"]
    (resumed,) = _ran(out, *policy, *SHORT, "--checkpoint-dir", str(ckpt_dir), "--resume")
    assert not any("optimizer state" in x for x in resumed["resumed_from"]["fresh"]), resumed["resumed_from"]
    for w, f in enumerate(files):
        after = resumed["per_worker"]["steps"][w] - books[w]["steps"]  # steps it computed after the resume
        assert after > 0, (w, resumed["per_worker"], books)  # (the resumed run went on: it has time left)
        # (+1: a step finished as the run ended is in the optimizer, not in the books)
        assert saved_steps[w] + after <= _saved_step(f) <= saved_steps[w] + after + 1, (w, saved_steps, after)


def _saved_step(path: Path) -> int:
    """The AdamW step count in a worker's saved optimizer state (-1: none yet)."""
    try:
        state = torch.load(path, weights_only=True)["stepper"]["state"]
        return int(next(iter(state.values()))["step"])
    except Exception:
        return -1


def test_steps_started_but_not_computed_at_the_checkpoint_are_started_again_not_dropped(tmp_path):
    # found by hetsync bench faults: a BSP round whose steps were under way at the checkpoint was booked
    # as 3 dropped steps never computed, so a resumed run applied or dropped more steps than it computed
    # two steps under way, one computed and held
    wl, policy, _, state = _checkpointed_ledger(tmp_path, started=5, evaluate=False)
    with TraceWriter(tmp_path / "b.jsonl") as tw:
        b = Ledger(policy, wl, wl.init_params(0), tw)
        assert b.load_state_dict(state, 2.0) == 1  # the computed, held step; the two under way start again
    assert b.steps == 3 and b.applied_steps + b.dropped_steps == 3 and b.started_steps == 3
    (drop,) = read_trace(tmp_path / "b.jsonl")
    assert drop["steps"] == 1 and drop["reason"] == "restart"
