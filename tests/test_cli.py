"""The command line: bad input exits 2 with one line naming the problem;
compare writes summary, traces and plots."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hetsync.cli import main

SUMMARY_KEYS = {
    "policy",
    "scenario",
    "seed",
    "workers",
    "target_accuracy",
    "time_to_target_s",
    "final_accuracy",
    "wall_time_s",
    "compute_share",
    "wait_share",
    "comm_share",
    "samples_per_s",
    "steps",
    "updates",
    "bytes_sent",
    # named metrics (docs/formats.md); the accuracy fields above are their aliases for accuracy targets
    "target_metric",
    "target_value",
    "target_direction",
    "final_metric",
    "best_metric",
    "final_metrics",
    "metric_curve",
}


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "argv_fn, needle",
    [
        (lambda t: ["compare", "--policies", "bsp,nope", "--out", str(t)], "'nope'"),
        (lambda t: ["simulate", "--policy", "ssp:q=1", "--out", str(t)], "'q'"),
        (lambda t: ["simulate", "--policy", "ssp:s=-2", "--out", str(t)], "'s'"),
        (lambda t: ["compare", "--scenario", write(t, "workers: 4\nmax_steps: 3\nwrokers: 5\n")], "'wrokers'"),
        (lambda t: ["compare", "--scenario", write(t, "workers: 0\nmax_steps: 3\n")], "'workers'"),
        (
            lambda t: ["compare", "--scenario", write(t, "workers: 2\nmax_steps: 3\nbandwidth_Bps: -5\n")],
            "'bandwidth_Bps",
        ),
        (lambda t: ["compare", "--scenario", write(t, "workers: [2\nmax_steps: {\n")], "not valid YAML"),
        (lambda t: ["compare", "--scenario", write(t, "- just\n- a list\n")], "mapping"),
        (lambda t: ["compare", "--scenario", "no-such-scenario"], "'no-such-scenario'"),
        (lambda t: ["compare", "--set", "lr=-1", "--out", str(t)], "'lr'"),
        (lambda t: ["compare", "--set", "workload=imagenet", "--out", str(t)], "'imagenet'"),
        (lambda t: ["compare", "--scenario", write(t, "workers: 2\n")], "max_time_s"),
        (lambda t: ["bogus"], "invalid choice"),
        (
            lambda t: ["simulate", "-p", "bsp", "--set", "target={metric: perplexity, value: 40}", "-o", str(t)],
            "scenario key 'target.metric': workload 'digits-mlp' reports accuracy, loss; got 'perplexity'",
        ),
        (
            lambda t: ["compare", "--set", "target={metric: loss, value: 1}", "--set", "target_accuracy=0.9"],
            "'target_accuracy'",
        ),
        (lambda t: ["compare", "--set", "target={metric: loss, value: 1, direction: down}"], "'target.direction'"),
        (lambda t: ["compare", "--set", "optimizer=adam", "--out", str(t)], "'optimizer.name'"),
        (
            lambda t: ["compare", "--set", "optimizer={name: sgd, momentum: -1}", "--out", str(t)],
            "'optimizer.momentum'",
        ),
        (
            lambda t: ["compare", "--set", "schedule={name: step, milestones: [20, 10]}", "--out", str(t)],
            "'schedule.milestones'",
        ),
        (lambda t: ["compare", "--set", "schedule={name: cosine}", "--out", str(t)], "'schedule.total_steps'"),
        (lambda t: ["compare", "--set", "clip_norm=-1", "--out", str(t)], "'clip_norm'"),
        (lambda t: ["simulate", "-p", "diloco:outer_lr=-1", "--out", str(t)], "'outer_lr'"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv_fn, needle):
    assert main(argv_fn(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert needle in err, err


def test_real_entry_point_exit_code_and_no_traceback(tmp_path):
    path = write(tmp_path, "workers: 2\nmax_steps: 3\nbandwidth_Bps: -1e6\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hetsync", "compare", "--scenario", path], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bandwidth_Bps" in proc.stderr and "Traceback" not in proc.stderr


def test_compare_writes_summary_traces_and_plots(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "compare",
        "--scenario",
        "default",
        "--set",
        "max_time_s=4",
        "--policies",
        "bsp,asp,ssp:s=2",
        "--out",
        str(out),
        "--md",
        str(tmp_path / "doc" / "page.md"),
    ]
    assert main(argv) == 0
    runs = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in runs] == ["bsp", "asp", "ssp(s=2)"]
    for r in runs:
        assert r.keys() >= SUMMARY_KEYS
        assert r["wall_time_s"] == pytest.approx(4.0)
        assert (out / r["trace"]).stat().st_size > 0
    for name in ["accuracy.png", "shares.png", "timeline-bsp.png", "timeline-asp.png", "timeline-ssp-s-2.png"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    shown = capsys.readouterr().out
    assert "ssp(s=2)" in shown and "TTA" in shown
    page = (tmp_path / "doc" / "page.md").read_text()
    assert "| ssp(s=2) |" in page and "![accuracy](img/page-accuracy.png)" in page
    assert (tmp_path / "doc" / "img" / "page-accuracy.png").stat().st_size > 0


def test_listings(capsys):
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    for name in ["bsp", "asp", "ssp", "local-sgd", "backup"]:
        assert name in out
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in ["default", "homogeneous-8", "transient-16", "large-1024"]:
        assert name in out


def test_bench_sim_prints_and_writes_json(tmp_path, capsys):
    path = tmp_path / "b.json"
    assert main(["bench", "sim", "--scenario", "default", "--max-steps", "5", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    metrics = {r["metric"]: r["value"] for r in rows}
    assert metrics["gradient steps simulated per second"] > 0
    assert metrics["run time / gradient-math time"] > 1.0
    assert "events per second" in capsys.readouterr().out
