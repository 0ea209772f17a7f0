"""hetsync profile --script: the user's own training loop (examples/own_loop_cnn.py)
timed on real processes with an emulated 2-worker cluster, fitted into a
scenario the simulator runs, and the same raw.json fitted again with --from-raw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsync.cli import main
from hetsync.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.dist, pytest.mark.serial]  # (the fits of timed steps: make test runs them alone)

CLUSTER = """\
description: "2 workers, the second 20 ms slower per step; 1 MB/s links"
workers: 2
workload: digits-mlp
batch_size: 16
lr: 0.5
max_time_s: 20
fixed_s: 0.0
per_sample_s: 0.00001
delay_s: [0.005, 0.025]
jitter: 0.0
bandwidth_Bps: 1.0e6
latency_s: 0.0005
"""


def test_profile_your_own_loop(tmp_path, capsys):
    cluster = tmp_path / "two.yaml"
    cluster.write_text(CLUSTER)
    out = tmp_path / "prof"
    script = ROOT / "examples" / "own_loop_cnn.py"
    argv = ["profile", "--script", str(script), "--nproc", "2", "--emulate", str(cluster)]
    argv += ["--compute-s", "2", "--link-reps", "2", "-o", str(out), "--no-plots", "--", "--policy", "bsp"]
    assert main(argv) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "next: hetsync advise -s" in printed
    raw = json.loads((out / "raw.json").read_text())
    assert raw["model"] == "SignalCNN" and raw["job"]["name"] == "hetero-4"  # the script's own scenario
    sc = load_scenario(str(out / "cluster.yaml"))
    assert sc.cluster.workers == 2 and sc.job.model_bytes == raw["model_bytes"]  # transfers cost the user's model
    prof = json.loads((out / "profile.json").read_text())
    steps = [len(r["compute"]["steps"]) for r in raw["per_rank"][1:]]
    assert min(steps) > 10, steps
    # worker 1 sleeps 20 ms more per step than worker 0: its loop is clearly slower
    slow, fast = sc.nominal_step_s(1, sc.job.batch_size), sc.nominal_step_s(0, sc.job.batch_size)
    assert slow > fast + 0.010, (fast, slow, prof)
    assert all(0.8e6 <= b <= 1.2e6 for b in sc.cluster.bandwidth_Bps), sc.cluster.bandwidth_Bps  # 1 MB/s links
    again = tmp_path / "again"
    assert main(["profile", "--from-raw", str(out / "raw.json"), "-o", str(again), "--no-plots"]) == 0
    assert load_scenario(str(again / "cluster.yaml")).job.model_bytes == raw["model_bytes"]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_profile_your_own_loop_with_the_module_on_a_gpu(tmp_path, capsys):
    """The same profile with the example's module on the GPU: each step is
    timed once the GPU's queued kernels are done, and the emulated delays
    still separate the two workers."""
    cluster = tmp_path / "two.yaml"
    cluster.write_text(CLUSTER)
    out = tmp_path / "prof"
    script = ROOT / "examples" / "own_loop_cnn.py"
    argv = ["profile", "--script", str(script), "--nproc", "2", "--emulate", str(cluster)]
    argv += ["--compute-s", "2", "--link-reps", "2", "-o", str(out), "--no-plots", "--"]
    assert main([*argv, "--policy", "bsp", "--device", "cuda"]) == 0, capsys.readouterr()
    raw = json.loads((out / "raw.json").read_text())
    steps = [r["compute"]["steps"] for r in raw["per_rank"][1:]]
    assert min(len(s) for s in steps) > 10, steps
    sc = load_scenario(str(out / "cluster.yaml"))
    assert sc.nominal_step_s(1, sc.job.batch_size) > sc.nominal_step_s(0, sc.job.batch_size) + 0.010


def test_profile_your_own_loop_plays_the_scenario_it_names(tmp_path, capsys):
    """Without --emulate the profile times the loop as hetsync launch runs it:
    examples/own_loop_cnn.py names hetero-4 (on 2 workers: delays of 10 and
    40 ms per step), and the fit keeps the slow worker slow. (Before, the
    script's scenario named the file and nothing else: both workers came out
    equal.) The margin is the injected 30 ms less a third: a sleep on a
    loaded machine can only last longer."""
    out = tmp_path / "prof"
    script = ROOT / "examples" / "own_loop_cnn.py"
    argv = ["profile", "--script", str(script), "--nproc", "2", "--compute-s", "2", "--link-reps", "1"]
    assert main([*argv, "-o", str(out), "--no-plots", "--", "--policy", "bsp"]) == 0, capsys.readouterr()
    sc = load_scenario(str(out / "cluster.yaml"))
    fast, slow = (sc.nominal_step_s(w, sc.job.batch_size) for w in range(2))
    assert slow > fast + 0.020, (fast, slow, sc.cluster.delay_s)
    assert "emulated the scenario the script passes to hetsync.init, 'hetero-4'" in capsys.readouterr().out
    raw = json.loads((out / "raw.json").read_text())
    assert raw["emulate"] == "hetero-4" and raw["emulated_by"] == "script"


def test_profile_a_loop_with_its_workload_named_and_simulate_that_model(tmp_path, capsys):
    """--workload MODULE:FUNCTION (a module beside the script): cluster.yaml
    names it with the script's optimizer and target, and the simulator runs
    it from another folder (the module is found by its file's path)."""
    script = ROOT / "tests" / "userworkload" / "tinynet.py"
    out = tmp_path / "prof"
    argv = ["profile", "--script", str(script), "--nproc", "2", "--workload", "tinynet:workload"]
    argv += ["--compute-s", "1", "--link-reps", "1", "-o", str(out), "--no-plots"]
    assert main(argv) == 0, capsys.readouterr()
    sc = load_scenario(str(out / "cluster.yaml"))
    assert (
        sc.job.workload == f"{script}:workload"
        and sc.job.model_bytes == json.loads((out / "raw.json").read_text())["model_bytes"]
    )
    assert sc.job.optimizer.name == "adamw" and sc.job.lr == 0.01 and sc.stop.target.value == 0.9
    compare = ["compare", "-s", str(out / "cluster.yaml"), "-p", "bsp", "--set", "max_time_s=0.5"]
    assert main([*compare, "-o", str(tmp_path / "cmp"), "--no-plots"]) == 0
    assert json.loads((tmp_path / "cmp" / "summary.json").read_text())[0]["final_metric"] is not None
