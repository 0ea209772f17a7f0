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


@pytest.mark.dist
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


@pytest.mark.dist
def test_bench_sim_prints_and_writes_json(tmp_path, capsys):
    path = tmp_path / "b.json"
    argv = ["bench", "sim", "--scenario", "default", "--max-steps", "5", "--policies", "asp", "--large", "none"]
    assert main([*argv, "--repeat", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    metrics = {r["metric"]: r["value"] for r in rows}
    assert metrics["gradient steps simulated per second"] > 0
    assert metrics["run time / gradient-math time"] > 1.0
    assert "events per second" in capsys.readouterr().out


def _popen_interruptible(argv: list[str]) -> subprocess.Popen:
    """The child with SIGINT at its default: a suite started in the background
    (``make test &``) has SIGINT ignored, and a child would inherit that."""
    import signal

    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)


def _wait_for(path, proc, timeout_s: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s}s"
        time.sleep(0.02)


@pytest.mark.dist
def test_ctrl_c_reports_the_finished_runs_and_sets_the_partial_one_aside(tmp_path):
    """SIGINT in the second of three runs: exit 130 without a traceback, the
    first run's table, plots and page, the interrupted run's trace renamed
    so nothing reads it as a run; `hetsync report` rebuilds the folder."""
    import signal

    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "hetsync", "compare", "-s", "default", "-p", "bsp,asp,ssp:s=3", "-o", str(out)]
    # the first run is short, the second long enough to be interrupted
    argv += ["--set", "max_time_s=60"]
    proc = _popen_interruptible(argv)
    _wait_for(out / "summary.json", proc)
    _wait_for(out / "trace-asp.jsonl", proc)  # the second run has begun (a loaded machine may lag between them)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr + stdout
    assert "interrupted: 1 of 3 runs finished; not finished: asp, ssp(s=3)" in stdout
    assert "bsp" in stdout and "TTA" in stdout  # the finished run's table
    assert [r["label"] for r in json.loads((out / "summary.json").read_text())] == ["bsp"]
    assert (out / "accuracy.png").is_file() and (out / "timeline-bsp.png").is_file()
    assert (out / "report.html").is_file()
    assert not (out / "trace-asp.jsonl").exists() and (out / "trace-asp.jsonl.partial").is_file()

    (out / "report.html").unlink()
    (out / "timeline-bsp.png").unlink()
    proc = subprocess.run([sys.executable, "-m", "hetsync", "report", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "bsp" in proc.stdout and "TTA" in proc.stdout
    assert (out / "timeline-bsp.png").read_bytes()[:4] == b"\x89PNG"
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # accuracy, shares, bsp's timeline
    assert "<td>bsp</td>" in page


def test_report_refuses_a_folder_without_finished_runs(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
    (tmp_path / "trace-asp.jsonl.partial").write_text("")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.json" in err and "trace-asp.jsonl.partial" in err


def test_a_new_run_replaces_an_earlier_runs_files_and_keeps_the_users(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "-s", "default", "-p", "bsp,asp", "--set", "max_time_s=2", "-o", str(out)]) == 0
    assert (out / "trace-asp.jsonl").exists() and (out / "timeline-asp.png").exists()
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["compare", "-s", "default", "-p", "ssp:s=3", "--set", "max_time_s=2", "-o", str(out)]) == 0
    assert "set aside the results of an earlier run" in capsys.readouterr().out
    left = sorted(p.name for p in out.iterdir())
    assert left == [
        ".hetsync-manifest.json",
        "accuracy.png",
        "model-ssp-s-3.pt",
        "notes.txt",
        "report.html",
        "shares.png",
        "summary.json",
        "timeline-ssp-s-3.png",
        "trace-ssp-s-3.jsonl",
        "trace.json",
    ]


def test_markup_in_scenario_names_and_labels_is_printed_literally(tmp_path, capsys):
    path = tmp_path / "odd.yaml"
    path.write_text("name: '[bold]odd[/] [x'\nworkers: 2\nmax_time_s: 1\nworkload: digits-mlp\n")
    assert main(["compare", "-s", str(path), "-p", "bsp", "-o", str(tmp_path / "o"), "--no-plots"]) == 0
    shown = capsys.readouterr().out
    assert "[bold]odd[/] [x" in shown


def test_the_launchers_reason_is_read_only_when_the_launcher_ended_the_run(tmp_path):
    from hetsync.runtime.launch import launcher_reason as _launcher_reason

    assert _launcher_reason(tmp_path) is None  # no status at all
    (tmp_path / "exit-status.json").write_text('{"code": 1, "error": "boom"}')
    assert _launcher_reason(tmp_path) is None  # the server's own status
    (tmp_path / "exit-status.json").write_text('{"code": 1, "by": "launcher", "error": "rank 0 (the server) died"}')
    assert _launcher_reason(tmp_path) == "rank 0 (the server) died"
    (tmp_path / "exit-status.json").write_text("[not json")
    assert _launcher_reason(tmp_path) is None


def test_a_worker_left_reason_with_brackets_is_printed_literally(tmp_path):
    """gloo's error text holds [...]: printing it as rich markup raised
    MarkupError after a run whose worker died (exit 1 for a run that ended 0)."""
    import argparse

    from rich.console import Console

    from hetsync.cli import _finish

    reason = "connection reset: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:5"
    run = {"label": "bsp", "scenario": "s", "workers": 2, "trace": None, "time_to_target_s": None}
    run["workers_left"] = [{"worker": 1, "t": 2.5, "reason": reason}]
    con = Console(width=300, record=True)
    _finish(con, argparse.Namespace(no_plots=True, md=None), [run], tmp_path)
    assert f"bsp: worker 1 left at 2.50s ({reason})" in con.export_text()


@pytest.mark.dist
def test_ctrl_c_during_hetsync_run_reports_the_finished_policy(tmp_path):
    """SIGINT to `hetsync run` in its second policy: exit 130, the first
    policy's table, the second's trace set aside, no process left."""
    import signal

    out = tmp_path / "dist"
    argv = [sys.executable, "-m", "hetsync", "run", "-s", "hetero-4", "-p", "bsp,asp", "--nproc", "2"]
    argv += ["--set", "max_time_s=3", "-o", str(out), "--no-plots"]
    proc = _popen_interruptible(argv)
    _wait_for(out / "summary.json", proc, timeout_s=150)
    _wait_for(out / "trace-asp.jsonl", proc, timeout_s=60)  # asp has started: its trace is there to set aside
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    assert "interrupted: 1 of 2 runs finished; not finished: asp" in stdout
    assert (out / "trace-asp.jsonl.partial").is_file() and not (out / "trace-asp.jsonl").exists()
    logs = "".join(p.read_text(errors="replace") for p in (out / "logs").glob("rank-*.log"))
    assert "KeyboardInterrupt" not in logs
    assert _processes_naming(str(out)) == []


def _processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line holds ``text`` (from /proc)."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_bare_hetsync_shows_the_help_and_version_is_an_option(capsys):
    assert main([]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: hetsync") and "compare" in shown and "report" in shown
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("hetsync ")


def test_simulate_takes_the_same_policy_spelling_as_compare_and_run(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["simulate", "--policies", "bsp", "--set", "max_time_s=1", "-o", str(out), "--no-plots"]) == 0
    assert [r["label"] for r in json.loads((out / "summary.json").read_text())] == ["bsp"]
    out = tmp_path / "c"  # and compare the singular spelling simulate takes
    assert main(["compare", "--policy", "bsp", "--set", "max_time_s=1", "-o", str(out), "--no-plots"]) == 0
    assert [r["label"] for r in json.loads((out / "summary.json").read_text())] == ["bsp"]


def test_an_unknown_option_is_named_once_without_a_doubled_prefix(capsys):
    assert main(["compare", "--bogus"]) == 2
    assert capsys.readouterr().err == "hetsync: error: unrecognized arguments: --bogus\n"
    assert main(["compare", "--nproc", "x"]) == 2  # a sub-command's own error names it
    assert capsys.readouterr().err.startswith("hetsync: error: hetsync compare: argument --nproc")


@pytest.mark.dist
def test_compare_takes_runs_options_with_runtime_dist_and_refuses_them_in_the_simulator(tmp_path, capsys):
    argv = ["compare", "-s", "hetero-4", "-p", "bsp", "--set", "max_time_s=1", "--no-plots"]
    for extra, flag in [(["--throttle"], "--throttle"), (["--host", "::1"], "--host"), (["--nproc", "2"], "--nproc")]:
        assert main([*argv, "-o", str(tmp_path / "sim"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err and "--runtime dist" in err
    out = tmp_path / "dist"
    dist = [*argv, "-o", str(out), "--runtime", "dist", "--nproc", "2", "--throttle", "--worker-timeout-s", "30"]
    assert main(dist) == 0
    assert [r["driver"] for r in json.loads((out / "summary.json").read_text())] == ["dist"]


def test_the_simulator_takes_path_and_refuses_a_policy_that_cannot_use_it(tmp_path, capsys):
    """``compare`` and ``simulate`` in the simulator model either data path
    (issue 27, item 5); a policy that cannot take the one asked for is
    refused in one line, exit 2, before any run starts."""
    for command in ("compare", "simulate"):
        out = tmp_path / command
        argv = [command, "-s", "default", "--set", "max_time_s=1", "-o", str(out), "--no-plots"]
        assert main([*argv, "-p", "asp", "--path", "collective"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "asp cannot use path=collective" in err, err
        assert not (out / "summary.json").exists()
        assert main([*argv, "-p", "bsp", "--path", "collective"]) == 0
        assert "on path collective" in capsys.readouterr().out
        assert [r["path"] for r in json.loads((out / "summary.json").read_text())] == ["collective"]
    ps = ["compare", "-s", "default", "-p", "bsp", "--set", "max_time_s=1", "-o", str(tmp_path / "ps"), "--no-plots"]
    assert main(ps) == 0
    assert [r["path"] for r in json.loads((tmp_path / "ps" / "summary.json").read_text())] == ["ps"]


def test_a_repeated_policy_option_adds_its_specs():
    """``-p bsp -p asp`` is ``-p bsp,asp`` (it used to keep only the last one, silently)."""
    from hetsync.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["compare", "-p", "bsp", "-p", "ssp:s=3,asp"]).policies == "bsp,ssp:s=3,asp"
    assert parser.parse_args(["run", "--policy", "bsp", "-p", "lb-bsp"]).policies == "bsp,lb-bsp"
    assert parser.parse_args(["compare"]).policies is None


def test_compare_says_who_left_and_who_joined_on_a_membership_scenario(tmp_path, capsys):
    argv = ["compare", "--scenario", "membership-4", "--set", "max_time_s=2.5", "--policies", "asp"]
    assert main([*argv, "--out", str(tmp_path / "run"), "--no-plots"]) == 0
    shown = capsys.readouterr().out
    assert "asp: worker 3 left at 0.00s (absent at the start)" in shown
    assert "asp: worker 3 joined at 2.00s" in shown
    (run,) = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [j["worker"] for j in run["workers_joined"]] == [3]
    # a policy that takes no joins is refused before anything runs, in one line
    assert main([*argv[:-1], "streaming-diloco", "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot take a worker that joins" in err and "\n" not in err
