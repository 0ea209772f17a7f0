import json

import numpy as np
import pytest

from hetsync.benches import faults
from hetsync.cli import main


def test_fault_draws_are_seeded_and_fall_inside_the_run():
    def draws(seed):
        rng = np.random.default_rng(seed)
        return [faults.draw_fault(kind, rng) for kind in faults.KINDS for _ in range(20)]

    assert draws(3) == draws(3) and draws(3) != draws(4)
    for f in draws(0):
        assert 0.3 * faults.RUN_S <= f.at_s <= 0.7 * faults.RUN_S
        if f.kind == "server-kill":
            assert f.rank == 0 and f.pause_s == 0
        else:
            assert 1 <= f.rank <= faults.WORKERS
        if f.kind == "worker-stop":  # some pauses shorter than the worker timeout, some longer
            assert 0.5 * faults.WORKER_TIMEOUT_S <= f.pause_s <= 2.0 * faults.WORKER_TIMEOUT_S
    pauses = [f.pause_s for f in draws(0) if f.kind == "worker-stop"]
    assert min(pauses) < faults.WORKER_TIMEOUT_S < max(pauses)


def test_the_declared_soak_covers_every_family_a_users_loop_and_thirty_faulted_runs():
    runs = faults.matrix(faults.JOBS, faults.KINDS)
    assert len(runs) >= 30
    assert {kind for _, kind in runs} == set(faults.KINDS)
    jobs = {job for job, _ in runs}
    assert any(j.loop for j in jobs) and any(j.path == "collective" for j in jobs)
    assert any(j.policy.startswith("p2p") for j in jobs)
    families = {"bsp", "asp", "ssp", "dssp", "elastic-bsp", "wbsp", "lb-bsp", "backup", "local-sgd", "diloco"}
    assert families <= {j.policy.split(":")[0] for j in jobs if j.path == "ps" and not j.loop}
    assert not any(j.loop and kind == "link-slow" for j, kind in runs)
    back = {j.name for j, kind in runs if kind == "worker-restart"}  # (workers come back on path ps, with a server)
    assert "own-loop" in back and "asp" in back and not back & {"p2p-random", "bsp-collective"}


def test_every_kinds_fault_is_said_in_words():
    rng = faults.np.random.default_rng(0)
    said = {kind: faults.fault_text(faults.draw_fault(kind, rng)) for kind in faults.KINDS}
    assert said["server-kill"].startswith("rank 0 SIGKILL at") and "started again" in said["worker-restart"]


def test_commands_carry_the_faults_options():
    bsp, loop = faults.JOBS[0], next(j for j in faults.JOBS if j.loop)
    kill = faults.Fault("server-kill", 2.0, 0)
    argv = faults.command(bsp, kill, faults.Path("/o"), faults.Path("/s.py"))
    assert argv[2:4] == ["hetsync", "run"] and "--max-restarts" in argv and "--checkpoint-dir" in argv
    slow = faults.command(bsp, faults.Fault("link-slow", 2.5, 2), faults.Path("/o"), faults.Path("/s.py"))
    load = json.loads(next(a for a in slow if a.startswith("link_load=")).split("=", 1)[1])
    assert load["workers"] == [1] and load["phase_s"] == load["on_s"] == load["period_s"] - 2.5
    looped = faults.command(loop, kill, faults.Path("/o"), faults.Path("/s.py"))
    assert looped[2:4] == ["hetsync", "launch"] and "--max-restarts" in looped and looped[-1] == "/o/ckpt"
    back = faults.Fault("worker-restart", 3.0, 1)
    for job in (bsp, loop):
        argv = faults.command(job, back, faults.Path("/o"), faults.Path("/s.py"))
        assert argv[argv.index("--max-worker-restarts") + 1] == "1" and "--max-restarts" not in argv
    assert "--max-worker-restarts" not in faults.command(bsp, kill, faults.Path("/o"), faults.Path("/s.py"))


def test_update_times_read_the_trace_on_each_legs_clock():
    records = [
        {"t": 0.0, "ev": "start"},
        {"t": 1.0, "ev": "apply"},
        {"t": 2.0, "ev": "apply"},
        {"t": 1.5, "ev": "compute", "end": 2.6},
        {"t": 2.9, "ev": "apply"},
    ]
    assert faults.update_times(records, 100.0, 100.0) == pytest.approx([101.0, 102.0, 102.9])
    # a restart: after the resume record the clock went on from the checkpoint (1.0), from wall time 109
    resumed = [*records, {"t": 1.0, "ev": "resume"}, {"t": 1.2, "ev": "send", "end": 1.7}]
    assert faults.update_times(resumed, 100.0, 109.0) == pytest.approx([101.0, 102.0, 102.9, 110.7])


def test_time_to_recover_is_the_longest_stall_from_the_fault():
    updates = [1.0, 2.0, 2.1, 5.0, 5.1, 5.2]
    # the fault at 2.05: stalls of 0.05, 2.9, 0.1, 0.1 and 0.3 to the end; the next update 0.05 s after it
    stall, first = faults.time_to_recover(updates, 2.05, 5.5)
    assert stall == pytest.approx(2.9) and first == pytest.approx(0.05)
    assert faults.time_to_recover(updates, 1.5, 9.0)[0] == pytest.approx(3.8)  # stalled at the end too
    assert faults.time_to_recover(updates, 5.3, 8.0) == (pytest.approx(2.7), None)  # nothing after it


def _outcome(kind, **kw):
    base = {"job": "bsp", "kind": kind, "fault": "x", "finished": True, "exit": 0, "lost": [], "leftovers": []}
    return {
        **base,
        "elapsed_s": 10.0,
        "recover_s": None,
        "next_update_s": None,
        "samples_per_s": 100.0,
        "kept": None,
        **kw,
    }


def test_per_kind_rows_count_and_summarize_the_runs():
    outcomes = [
        _outcome("fault-free"),
        _outcome("worker-kill", recover_s=0.1, next_update_s=0.01, kept=0.9),
        _outcome("worker-kill", recover_s=0.3, kept=0.7, exit=1, lost=["trace: no end record"]),
        _outcome("worker-kill", recover_s=0.2, next_update_s=0.1, kept=0.8, finished=False, exit=None, leftovers=["1"]),
    ]
    rows = faults.kind_rows(outcomes)
    cell = {(r["policy"], r["metric"]): r for r in rows}
    assert cell["worker-kill", "runs"]["value"] == 3
    assert cell["worker-kill", "finished"]["shown"] == "2/3" and cell["worker-kill", "exit 0"]["shown"] == "1/3"
    assert cell["worker-kill", "results lost"]["value"] == 1
    assert cell["worker-kill", "processes left over"]["value"] == 1
    assert cell["worker-kill", "updates again after the fault"]["shown"] == "2/3"
    assert cell["worker-kill", "time to recover (s)"]["shown"] == "0.20 [0.10–0.30]"
    assert cell["worker-kill", "throughput kept (x)"]["value"] == pytest.approx(0.8)
    assert cell["fault-free", "time to recover (s)"]["shown"] == "—"
    assert not any(r["policy"] == "server-kill" for r in rows)  # only kinds that ran
    per_run = faults.run_rows(outcomes)
    assert {r["policy"] for r in per_run} == {"bsp · worker-kill"}  # the fault-free runs are the baselines


def test_bad_jobs_or_faults_exit_2(capsys):
    assert main(["bench", "faults", "--jobs", "nope"]) == 2
    assert "--jobs" in capsys.readouterr().err
    assert main(["bench", "faults", "--jobs", "own-loop", "--faults", "link-slow"]) == 2


@pytest.mark.dist
def test_bench_faults_quick_every_run_finishes_and_nothing_is_left_over(tmp_path):
    rows_path = tmp_path / "rows.json"
    assert main(["bench", "faults", "--quick", "--out", str(tmp_path / "runs"), "--json", str(rows_path)]) == 0
    outcomes = json.loads((tmp_path / "runs" / "outcomes.json").read_text())
    faulted = [o for o in outcomes if o["kind"] != "fault-free"]
    assert [(o["job"], o["kind"]) for o in faulted] == list(faults.QUICK)
    for o in outcomes:
        assert o["finished"] and not o["lost"] and o["leftovers"] == [], o
        assert o["exit"] == 0, o  # hetsync run finishes with the workers it has left
    for o in outcomes:
        assert o["recover_s"] is not None and o["recover_s"] >= 0, o
    for o in faulted:
        assert o["kept"] is not None and 0 < o["kept"] < 1.5, o
    rows = json.loads(rows_path.read_text())
    assert {(r["policy"], r["metric"]) for r in rows} >= {
        ("worker-kill", "processes left over"),
        ("fault-free", "runs"),
    }
