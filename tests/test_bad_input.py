"""Bad input ends in exit status 2 with one line naming the key or value
(README, docs/architecture.md §6): no traceback, no hang, bounded memory. The table is
issue 14's list of inputs that were not handled so (item 9), plus neighbours
of them; every case is refused before a simulation starts or a process is
launched, so the whole table runs in-process in seconds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hetsync import cli
from hetsync.cli import main


@pytest.fixture(autouse=True)
def _nothing_runs(monkeypatch):
    """Bad input must be refused before anything runs: a case that got as
    far as the simulator or the launcher fails at once instead of running."""
    from hetsync import runner
    from hetsync.runtime import launch

    def refuse(*args, **kwargs):
        raise AssertionError("the bad input reached the simulator or the launcher")

    monkeypatch.setattr(runner, "compare", refuse)
    monkeypatch.setattr(launch, "launch", refuse)
    try:  # memory estimates compare with a machine of 16 GiB, whatever this one has
        from hetsync import limits

        monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 16 * 2**30)
    except ImportError:
        pass


def write(tmp: Path, text: str, name: str = "s.yaml") -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def sim(tmp: Path, *args: str) -> list[str]:
    """``simulate -p bsp`` on the default scenario for a moment (it never gets to run)."""
    return ["simulate", "-p", "bsp", "--set", "max_time_s=1", "-o", str(tmp / "out"), *args]


def sets(*overrides: str):
    return lambda t: sim(t, *[a for o in overrides for a in ("--set", o)])


def scenario_file(text: str):
    return lambda t: ["compare", "-s", write(t, text), "-o", str(t / "out")]


def run(*args: str):
    return lambda t: ["run", "-s", "hetero-4", "-p", "bsp", "--nproc", "2", "-o", str(t / "out"), *args]


BOMB = "\n".join(
    ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
)
NESTED = "[" * 5000 + "]" * 5000


def bomb_under(key: str) -> str:
    """A scenario whose ``key`` holds a billion-laughs document (10⁹ values)."""
    body = "\n".join("  " + line for line in BOMB.splitlines())
    return f"workers: 2\nmax_steps: 1\n{key}:\n{body}\n"


# ------------------------------------------------------------- checkpoints
def checkpoint(tmp: Path, change=None, *, scenario="hetero-4", workers=2, raw: bytes | None = None) -> str:
    """A checkpoint folder holding ``ckpt-bsp.pt`` as a run of ``scenario``
    with ``workers`` workers would save it, then changed by ``change``."""
    from hetsync.runtime import server
    from hetsync.scenario import load_scenario
    from hetsync.workloads import make_workload

    folder = tmp / "ck"
    folder.mkdir()
    path = folder / "ckpt-bsp.pt"
    if raw is not None:
        path.write_bytes(raw)
        return str(folder)
    sc = load_scenario(scenario).with_workers(workers)
    wl = make_workload(sc.job.workload, **sc.job.workload_args)
    state = {
        "identity": {
            "scenario": sc.name,
            "workload": wl.name,
            "workload_args": json.dumps(sc.job.workload_args, sort_keys=True, default=str),
            "workers": workers,
            "seed": sc.job.seed,
            "policy": "bsp",
            "n_params": wl.n_params,
        },
        "theta": wl.init_params(sc.job.seed),
        "version": 5,
        "elapsed_s": 2.5,
        "steps": 10,
        "curve": [[0.0, 0.1, 2.3], [2.5, 0.6, 1.1]],
        "policy": "bsp",
        "scenario": sc.name,
        "policy_state": {},
    }
    if hasattr(server, "CHECKPOINT_FORMAT"):
        state["format"] = server.CHECKPOINT_FORMAT
    if change is not None:
        change(state)
    torch.save(state, path)
    return str(folder)


def resume_from(make):
    return lambda t: run("--checkpoint-dir", make(t), "--resume")(t)


def truncated(tmp: Path) -> str:
    whole = Path(checkpoint(tmp)) / "ckpt-bsp.pt"
    data = whole.read_bytes()
    whole.unlink()
    (tmp / "ck").rmdir()
    return checkpoint(tmp, raw=data[: len(data) // 2])


def drop(key):
    return lambda state: state.pop(key)


def put(key, value):
    return lambda state: state.__setitem__(key, value)


def identity(key, value):
    return lambda state: state["identity"].__setitem__(key, value)


def a_file(tmp: Path) -> str:
    return write(tmp, "not a folder", "taken")


# ------------------------------------------------------------- report folders
def summary_folder(tmp: Path, *, raw=None, trace_bytes: bytes | None = None, **changes) -> str:
    """A folder as ``simulate -p bsp`` leaves it (one run, its trace), with
    the run's record changed by ``changes``, or ``raw`` as the whole summary,
    or the trace replaced by ``trace_bytes``."""
    folder = tmp / "runs"
    folder.mkdir()
    recs = [
        {"t": 0.0, "ev": "start", "workers": 2, "policy": "bsp", "scenario": "s", "seed": 0, "model_nbytes": 8},
        {"t": 0.0, "ev": "compute", "w": 0, "end": 1.0, "step": 0, "batch": 8, "base": 0},
        {"t": 1.0, "ev": "eval", "accuracy": 0.5, "loss": 1.0, "version": 1},
        {"t": 1.0, "ev": "end", "wall_time_s": 1.0, "reason": "max_time"},
    ]
    trace = folder / "trace-bsp.jsonl"
    trace.write_bytes(trace_bytes if trace_bytes is not None else "".join(json.dumps(r) + "\n" for r in recs).encode())
    run_record = {
        "policy": "bsp", "label": "bsp", "params": {}, "scenario": "s", "driver": "sim", "seed": 0, "workers": 2,
        "target_metric": "accuracy", "target_value": 0.9, "target_direction": "max", "target_accuracy": 0.9,
        "time_to_target_s": None, "final_metric": 0.5, "best_metric": 0.5, "final_accuracy": 0.5,
        "best_accuracy": 0.5, "final_metrics": {"accuracy": 0.5, "loss": 1.0}, "wall_time_s": 1.0,
        "compute_share": 0.5, "comm_share": 0.0, "wait_share": 0.5, "samples_per_s": 8.0, "steps": 1,
        "applied_steps": 0, "dropped_steps": 0, "outstanding_steps": 1, "updates": 0, "bytes_sent": 0,
        "max_staleness": 0, "mean_staleness": 0.0, "metric_curve": [[1.0, 0.5]], "accuracy_curve": [[1.0, 0.5]],
        "per_worker": {"compute_s": [1.0, 0.0], "comm_s": [0.0, 0.0], "wait_s": [0.0, 1.0], "steps": [1, 0]},
        "trace": trace.name, "stop_reason": "max_time", "workers_left": [], "notes": [],
    }  # fmt: skip
    run_record.update(changes)
    (folder / "summary.json").write_text(json.dumps([run_record] if raw is None else raw))
    return str(folder)


# (case, argv from tmp_path, a word the one-line message must contain)
CASES = [
    # --- item 9: tracebacks
    ("nested-5000-levels", scenario_file(f"workers: 2\nmax_steps: 1\nworkload_args: {NESTED}\n"), "nested"),
    ("slowdown-linspace-words", sets("slowdown={linspace: [a, b]}"), "slowdown.linspace"),
    ("lr-inf", sets("lr=.inf"), "'lr'"),
    ("delay_s-inf", sets("delay_s=.inf"), "'delay_s[0]'"),
    ("jitter-inf", sets("jitter=.inf"), "'jitter'"),
    ("jitter-1e300", sets("jitter=1e300"), "'jitter'"),
    ("latency_s-inf", sets("latency_s=.inf"), "'latency_s'"),
    ("batch_size-1e12", sets("batch_size=1000000000000"), "'batch_size'"),
    ("seed-negative", sets("seed=-1"), "'seed'"),
    ("--seed-negative", lambda t: sim(t, "--seed", "-5"), "--seed"),
    ("seed-1e23", sets("seed=100000000000000000000000"), "'seed'"),
    ("dssp-r_max-1e21", lambda t: sim(t, "-p", "dssp:r_max=1000000000000000000000"), "'r_max'"),
    ("-o-existing-file", lambda t: sim(t, "-o", a_file(t)), "--out"),
    ("-o-under-a-file", lambda t: sim(t, "-o", a_file(t) + "/sub"), "--out"),
    ("-o-dev-null", lambda t: sim(t, "-o", "/dev/null"), "--out"),
    ("-o-unwritable", lambda t: sim(t, "-o", "/proc/hetsync-test-out"), "--out"),
    ("--md-a-folder", lambda t: sim(t, "--md", str(t)), "--md"),
    # --- item 9: hangs or memory exhaustion
    ("alias-bomb-workload_args", scenario_file(bomb_under("workload_args")), "aliases"),
    ("alias-bomb-description", scenario_file(bomb_under("description")), "aliases"),
    ("alias-bomb-slowdown", scenario_file(bomb_under("slowdown")), "aliases"),
    ("alias-bomb-in---set", sets("workload_args={" + BOMB.replace("\n", ", ") + "}"), "aliases"),
    ("workers-1e12", sets("workers=1000000000000"), "'workers'"),
    ("eval_every_s-1e-9", sets("eval_every_s=1e-9"), "'eval_every_s'"),
    ("elastic-bsp-R-1e8", lambda t: sim(t, "-p", "elastic-bsp:R=100000000"), "'R'"),
    ("elastic-bsp-R-times-workers", lambda t: sim(t, "-p", "elastic-bsp:R=5000", "--set", "workers=4000"), "workers"),
    ("lb-bsp-lags-squared", lambda t: sim(t, "-p", "lb-bsp:lags=100000"), "'lags'"),
    ("batch-memory-estimate", lambda t: ["compare", "-s", "lm-8", "--set", "batch_size=1000000"], "GiB"),
    # --- item 9: exit 1 with the reason only in logs/rank-0.log
    ("--worker-timeout-s-0", run("--worker-timeout-s", "0"), "--worker-timeout-s"),
    ("--worker-timeout-s--1", run("--worker-timeout-s", "-1"), "--worker-timeout-s"),
    ("--checkpoint-every-s-0", run("--checkpoint-every-s", "0"), "--checkpoint-every-s"),
    ("--checkpoint-dir-a-file", lambda t: run("--checkpoint-dir", a_file(t))(t), "--checkpoint-dir"),
    ("resume-corrupt", resume_from(lambda t: checkpoint(t, raw=bytes(range(256)) * 20)), "cannot be read"),
    ("resume-truncated", resume_from(truncated), "cannot be read"),
    ("resume-wrong-shape", resume_from(lambda t: checkpoint(t, put("theta", torch.zeros(7)))), "shape"),
    ("resume-missing-key", resume_from(lambda t: checkpoint(t, drop("version"))), "'version'"),
    ("resume-nan-clock", resume_from(lambda t: checkpoint(t, put("elapsed_s", math.nan))), "elapsed_s"),
    ("resume-other-workload", resume_from(lambda t: checkpoint(t, identity("workload", "tinylm"))), "workload"),
    # --- item 9: accepted silently
    ("duplicate-yaml-key", scenario_file("workers: 2\nmax_steps: 1\nlr: 0.1\nlr: 5\n"), "'lr' is given twice"),
    ("slowdown-inf", sets("slowdown=.inf"), "'slowdown[0]'"),
    ("fixed_s-inf", sets("fixed_s=.inf"), "'fixed_s'"),
    ("straggler_factor-inf", sets("straggler_factor=.inf"), "'straggler_factor'"),
    ("model_bytes-1e29", sets("model_bytes=100000000000000000000000000000"), "'model_bytes'"),
    ("compare-dist-nproc-0", lambda t: ["compare", "--runtime", "dist", "--nproc", "0", "-o", str(t)], "--nproc"),
    ("--worker-timeout-s-nan", run("--worker-timeout-s", "nan"), "--worker-timeout-s"),
    ("--checkpoint-every-s-nan", run("--checkpoint-every-s", "nan"), "--checkpoint-every-s"),
    ("resume-without-checkpoint-dir", run("--resume"), "--checkpoint-dir"),
    ("resume-missing-checkpoint-dir", lambda t: run("--resume", "--checkpoint-dir", str(t / "nope"))(t), "not exist"),
    (
        "resume-other-scenario-into-default",
        lambda t: (
            ["run", "-s", "default", "-p", "bsp", "-o", str(t / "o"), "--checkpoint-dir", checkpoint(t)] + ["--resume"]
        ),
        "scenario",
    ),
    ("--nproc-500", run("--nproc", "500"), "1..64"),
    # --- neighbours of the cases above
    ("per_sample_s-inf", sets("per_sample_s=.inf"), "'per_sample_s'"),
    ("saturation_batch-inf", sets("saturation_batch=.inf"), "'saturation_batch[0]'"),
    ("max_batch-fraction", sets("max_batch=2.5"), "'max_batch[0]'"),
    ("uniform-words", sets("delay_s={uniform: [0, x]}"), "delay_s.uniform"),
    ("background_load-factor-inf", sets("background_load={period_s: 2, on_s: 1, factor: .inf}"), "factor"),
    ("max_time_s-1e300", sets("max_time_s=1e300"), "'max_time_s'"),
    ("workers-null", sets("workers=~"), "'workers' is required"),
    ("lr-1e30-diverges", sets("lr=1e30"), "'lr'"),
    ("recursive-alias", scenario_file("workers: 2\nmax_steps: 1\nworkload_args: &a {x: *a}\n"), "alias"),
    ("duplicate-key-in---set", sets("target={metric: accuracy, value: 0.5, value: 0.9}"), "twice"),
    ("diloco-outer_lr-inf", lambda t: sim(t, "-p", "diloco:outer_lr=inf"), "'outer_lr'"),
    ("ssp-s-1e30", lambda t: sim(t, "-p", "ssp:s=1000000000000000000000000000000"), "'s'"),
    ("--seed-too-big", lambda t: sim(t, "--seed", str(2**32)), "--seed"),
    ("bench---json-a-folder", lambda t: ["bench", "sim", "--max-steps", "1", "--json", str(t)], "--json"),
    ("checkpoint-dir-under-a-file", lambda t: run("--checkpoint-dir", a_file(t) + "/ck")(t), "--checkpoint-dir"),
    ("resume-nan-model", resume_from(lambda t: checkpoint(t, lambda s: s.update(theta=s["theta"] * math.nan))), "NaN"),
    ("resume-negative-version", resume_from(lambda t: checkpoint(t, put("version", -3))), "'version'"),
    (
        "resume-other-worker-count",
        lambda t: run("--checkpoint-dir", checkpoint(t, workers=3), "--resume")(t),
        "workers is 3",
    ),
    # --- issue 30 item 5: refused only after the run had started
    (
        "compare-dist-1001-workers",
        lambda t: ["compare", "--runtime", "dist", "--set", "workers=1001", "-o", str(t)],
        "--nproc",
    ),
    # --- issue 30 item 5: hangs
    ("scenario-file-16MiB", scenario_file("workers: 2\nmax_steps: 1\n#" + "x" * (16 * 2**20 - 26) + "\n"), "at most"),
    # --- issue 30 item 5: accepted silently
    ("policy-parameter-twice", lambda t: sim(t, "-p", "ssp:s=3:s=4"), "'s' is given twice"),
    (
        "p2p-random-p-100-on-2-workers",
        lambda t: sim(t, "-p", "p2p-random:p=100", "--set", "workers=2"),
        "'p' must be < workers",
    ),
    ("selmcast-p-as-many-as-workers", lambda t: sim(t, "-p", "selmcast:p=8"), "'p' must be < workers"),
    ("backup-b-on-run", lambda t: run("-p", "backup:b=2")(t), "'b' must be < workers"),  # (a neighbour: refused before)
    # --- issue 30 item 5: a policy of the user's own that does not import or start
    ("user-policy-sys-exit-at-import", lambda t: sim(t, "-p", "tests.userpolicy.exits:X"), "called sys.exit(7)"),
    (
        "user-policy-raises-at-import",
        lambda t: sim(t, "-p", "tests.userpolicy.raises_at_import:X"),
        "raised RuntimeError",
    ),
    (
        "user-policy-raises-in-init",
        lambda t: sim(t, "-p", "tests.userpolicy.broken:RaisesInInit"),
        "creating it raised",
    ),
    # --- issue 28 item 4: Streaming DiLoCo on real processes: the parameter-server path on one server
    (
        "streaming-diloco-on-sharded-servers",
        lambda t: ["run", "-s", "hetero-4", "-p", "streaming-diloco", "--nproc", "2", "--servers", "2", "-o", str(t)],
        "pushes and pulls fragments, which the servers' ranges would cut: use --servers 1",
    ),
    (
        "streaming-diloco-on-the-collective-path",
        lambda t: [
            "run",
            "-s",
            "hetero-4",
            "-p",
            "streaming-diloco",
            "--nproc",
            "2",
            "--path",
            "collective",
            "-o",
            str(t),
        ],
        "cannot use path=collective",
    ),
    (
        "simulator-only-policy-in-a-dist-comparison",
        lambda t: [
            "compare",
            "--runtime",
            "dist",
            "--nproc",
            "2",
            "-p",
            "bsp,tests.userpolicy.halfsync:SimulatorOnly",
            "-o",
            str(t),
        ],
        "policy 'tests.userpolicy.halfsync:SimulatorOnly' is simulator only for now",
    ),
    (
        "streaming-diloco-bits",
        lambda t: sim(t, "-p", "streaming-diloco:bits=16"),
        "parameter 'bits' must be 32, 8 or 4",
    ),
    ("streaming-diloco-tau", lambda t: sim(t, "-p", "streaming-diloco:H=10:P=2:tau=5"), "parameter 'tau' must be < 5"),
    # --- issue 30 item 5: report reads what it is given
    (
        "report-strings-for-numbers",
        lambda t: ["report", summary_folder(t, wall_time_s="3.5")],
        "'wall_time_s' is '3.5'",
    ),
    ("report-summary-not-a-list", lambda t: ["report", summary_folder(t, raw={"label": "bsp"})], "not a list of runs"),
    (
        "report-record-not-an-object",
        lambda t: ["report", summary_folder(t, raw=["bsp"])],
        "run 1: is 'bsp', not an object",
    ),
    ("report-curve-of-words", lambda t: ["report", summary_folder(t, metric_curve=[["0", "x"]])], "'metric_curve'"),
    ("report-trace-outside-the-folder", lambda t: ["report", summary_folder(t, trace="../x.jsonl")], "'trace'"),
    ("report-binary-trace", lambda t: ["report", summary_folder(t, trace_bytes=bytes(range(256)) * 40)], "not a JSON"),
]


@pytest.mark.parametrize("argv_fn, needle", [pytest.param(f, n, id=i) for i, f, n in CASES])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv_fn, needle):
    argv = argv_fn(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hetsync: error: "), err
    assert "Traceback" not in err
    assert needle in err, err


def test_the_table_covers_every_case_of_the_issue():
    assert len(CASES) >= 50
    assert len({case for case, _, _ in CASES}) == len(CASES)


# --------------------------------------------------- checks that pass good input
def parse(argv: list[str]):
    return cli.build_parser().parse_args(argv)


def test_a_good_checkpoint_passes_the_checks_before_launch(tmp_path):
    args = parse(run("--checkpoint-dir", checkpoint(tmp_path), "--resume")(tmp_path))
    assert cli._load(args).cluster.workers == 2  # read, and found to be this run's


def test_good_options_pass(tmp_path):
    (tmp_path / "out").mkdir()
    args = parse(run("--worker-timeout-s", "0.5", "--checkpoint-every-s", "2", "--seed", "4294967295")(tmp_path))
    assert (args.worker_timeout_s, args.checkpoint_every_s, args.seed, args.nproc) == (0.5, 2.0, 4294967295, 2)
    assert args.out == str(tmp_path / "out")
    args = parse(sim(tmp_path, "--md", str(tmp_path / "new" / "page.md")))
    assert args.md == tmp_path / "new" / "page.md"
    assert parse(["run", "--nproc", "64", "-o", str(tmp_path)]).nproc == 64


# ------------------------------------------------------------ item 4: notes
def test_a_cut_per_worker_list_is_said_and_recorded(tmp_path, capsys, monkeypatch):
    monkeypatch.undo()  # this one really simulates (for half a virtual second)
    path = write(tmp_path, "workers: 4\nmax_time_s: 0.5\nslowdown: [1, 1, 1, 4]\n")
    out = tmp_path / "out"
    argv = ["simulate", "-s", path, "-p", "bsp", "--set", "workers=3", "-o", str(out), "--no-plots"]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    notes = [line for line in shown.splitlines() if line.startswith("note: ")]
    assert notes == ["note: scenario 's' has 4 workers, running 3: slowdown keeps its first 3 values and drops [4]"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["notes"] == [notes[0].removeprefix("note: ")]
    assert summary[0]["workers"] == 3


def test_run_says_it_runs_fewer_workers_than_the_scenario_has(tmp_path, capsys):
    args = parse(["run", "-s", "default", "-o", str(tmp_path)])  # --nproc 4 by default; default has 8
    scenario = cli._load(args)
    assert scenario.cluster.workers == 4 and scenario.cluster.slowdown == (1.0, 1.0, 1.0, 1.25)
    shown = capsys.readouterr().out
    assert "note: scenario 'default' has 8 workers, running 4" in shown
    assert "drops [1.5, 2.0, 2.5, 3.0] (--nproc 4)" in shown
    assert scenario.notes == (
        "scenario 'default' has 8 workers, running 4: slowdown keeps its first 4 values and drops [1.5, 2.0, 2.5, 3.0]",
    )
    cli._load(args)  # compare --runtime dist loads twice: said once
    assert "note:" not in capsys.readouterr().out


def test_no_note_when_nothing_changes(tmp_path, capsys):
    scenario = cli._load(parse(["run", "-s", "hetero-4", "-o", str(tmp_path)]))
    assert scenario.notes == () and "note:" not in capsys.readouterr().out


def test_the_report_folder_of_the_table_reports_as_it_is(tmp_path, capsys):
    """The folder the report cases change: as written, it reports (so each case fails for its change alone)."""
    folder = summary_folder(tmp_path)
    assert main(["report", folder]) == 0
    shown = capsys.readouterr()
    assert "bsp" in shown.out and shown.err == ""
    assert (Path(folder) / "timeline-bsp.png").is_file()


def test_a_damaged_trace_is_the_one_line_report_prints(tmp_path, capsys):
    """Not the table first and the error after it (11 lines): the error alone."""
    assert main(["report", summary_folder(tmp_path, trace_bytes=bytes(range(256)) * 40)]) == 2
    shown = capsys.readouterr()
    assert shown.out == "" and shown.err.count("\n") == 1 and "trace-bsp.jsonl:1 is not a JSON record" in shown.err


def test_policy_specs_are_refused_before_the_workload_is_built(tmp_path, monkeypatch):
    """ssp:s=10000 on 1,001 workers: refused by its bound on s × workers before
    anything slow happens (the workload, its data, a memory estimate)."""
    from hetsync import workloads

    def built(*args, **kwargs):
        raise AssertionError("the workload was built before the policy specs were checked")

    monkeypatch.setattr(workloads, "make_workload", built)
    for argv in (
        sim(tmp_path, "-p", "ssp:s=10000", "--set", "workers=1001"),
        ["compare", "-p", "bsp,ssp:s=3:s=4", "-o", str(tmp_path / "o")],
        run("-p", "p2p-random:p=2"),
    ):
        argv = argv(tmp_path) if callable(argv) else argv
        with pytest.raises(cli.BadInput):
            cli.run(argv)
