"""The run folder: nothing lost, ever (issue 30, item 4). An earlier run's
results are set aside until the new run finishes and put back when it fails
without results; only files the manifest records as hetsync's are moved; a
folder holding the user's files under hetsync's names, and a run whose
inputs are among the results it would replace, are refused before anything
is touched; atomic JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsync import outdir
from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.outdir import MANIFEST, PREVIOUS, begin, partial_name, write_json_atomic


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def earlier_run(out: Path, names=("summary.json", "trace-bsp.jsonl", "logs/rank-0.log", "accuracy.png")) -> None:
    """A finished run of hetsync in ``out``: its files, recorded."""
    rep = begin(out)
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(f"old {name}")
    assert rep.finish(True) is None


def test_a_finished_run_records_its_files_and_the_next_one_drops_them(tmp_path):
    out = tmp_path / "run"
    earlier_run(out)
    (out / "notes.txt").write_text("mine")
    assert json.loads((out / MANIFEST).read_text())["files"] == [
        "accuracy.png",
        "logs/rank-0.log",
        "summary.json",
        "trace-bsp.jsonl",
    ]
    rep = begin(out)
    assert rep.set_aside == 5  # the four files and the manifest, renamed, not deleted
    assert sorted(tree(out)) == [MANIFEST, "notes.txt"] + [f"{PREVIOUS}/{n}" for n in sorted(tree(out / PREVIOUS))]
    (out / "summary.json").write_text("new")
    rep.finish(True)
    assert tree(out) == {MANIFEST: (out / MANIFEST).read_bytes(), "notes.txt": b"mine", "summary.json": b"new"}


def test_a_run_that_fails_without_results_puts_the_earlier_ones_back(tmp_path):
    out = tmp_path / "run"
    earlier_run(out)
    before = tree(out)
    rep = begin(out)
    (out / "trace-asp.jsonl.partial").write_text("half")
    line = rep.finish(False)
    assert "back in" in line and "failed-run" in line
    after = tree(out)
    assert {k: v for k, v in after.items() if k != MANIFEST and not k.startswith("failed-run/")} == {
        k: v for k, v in before.items() if k != MANIFEST
    }
    assert after["failed-run/trace-asp.jsonl.partial"] == b"half"
    begin(out).finish(True)  # the failed run's output is recorded as hetsync's: the next run may replace it
    assert sorted(tree(out)) == [MANIFEST]


def test_a_run_that_wrote_nothing_leaves_the_folder_as_it_was(tmp_path):
    out = tmp_path / "run"
    earlier_run(out)
    before = tree(out)
    rep = begin(out)
    assert "back in" in rep.finish(False)
    assert tree(out) == before


def test_an_interrupted_run_with_results_keeps_them_and_the_earlier_ones(tmp_path):
    out = tmp_path / "run"
    earlier_run(out)
    rep = begin(out)
    (out / "summary.json").write_text("one of two runs")
    line = rep.finish(False)
    assert PREVIOUS in line
    assert (out / "summary.json").read_text() == "one of two runs"
    assert (out / PREVIOUS / "summary.json").read_text() == "old summary.json"
    begin(out).finish(False)  # and a third run that fails at once still loses neither
    assert (out / "summary.json").read_text() == "one of two runs"
    assert (out / PREVIOUS / "summary.json").read_text() == "old summary.json"


def test_files_of_a_run_killed_before_it_recorded_them_are_hetsyncs(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    begin(out)  # ... and the process is killed: no finish
    (out / "trace-bsp.jsonl").write_text("partial")
    (out / "logs").mkdir()
    (out / "logs" / "rank-1.log").write_text("log")
    assert outdir.recorded(out) == [MANIFEST, "logs/rank-1.log", "trace-bsp.jsonl"]
    rep = begin(out)
    rep.finish(True)
    assert sorted(tree(out)) == [MANIFEST, "notes.txt"]


@pytest.mark.parametrize(
    "name",
    ["accuracy.png", "logs/mine.log", "model-final.pt", "report.md", "summary.json"],
    ids=["plot", "log", "model", "report", "no-manifest"],
)
def test_the_users_files_under_hetsyncs_names_are_refused_and_kept(tmp_path, name):
    out = tmp_path / "run"
    earlier_run(out, names=("summary.json", "trace-bsp.jsonl", "logs/rank-0.log"))
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text("mine") if name != "summary.json" else (out / MANIFEST).unlink()
    before = tree(out)
    with pytest.raises(BadInput, match="did not record as its own"):
        begin(out)
    assert tree(out) == before


def test_an_input_among_the_results_is_refused(tmp_path):
    out = tmp_path / "run"
    earlier_run(out, names=("summary.json", "cluster.yaml"))
    before = tree(out)
    with pytest.raises(BadInput, match="is an input of this run"):
        begin(out, inputs=[out / "cluster.yaml"])
    assert tree(out) == before


def test_an_input_that_stays_is_left_where_it_is(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "raw.json").write_text("measured by torchrun")  # written by profile_job, not recorded
    rep = begin(out, stay=[out / "raw.json"])
    (out / "cluster.yaml").write_text("fitted")
    rep.finish(True)
    assert (out / "raw.json").read_text() == "measured by torchrun"
    assert json.loads((out / MANIFEST).read_text())["files"] == ["cluster.yaml"]


def test_traces_can_come_back_as_partial_for_a_script_that_resumes(tmp_path):
    out = tmp_path / "run"
    earlier_run(out)
    begin(out, keep_traces=True)
    assert (out / "trace-bsp.jsonl.partial").read_text() == "old trace-bsp.jsonl"
    assert (out / PREVIOUS / "trace-bsp.jsonl").read_text() == "old trace-bsp.jsonl"


def test_a_run_resuming_in_place_keeps_and_records_the_earlier_files(tmp_path):
    out = tmp_path / "run"
    earlier_run(out)
    rep = begin(out, set_aside=False)
    (out / "model-bsp.pt").write_text("new")
    rep.finish(True)
    assert set(json.loads((out / MANIFEST).read_text())["files"]) >= {"summary.json", "model-bsp.pt"}


def test_a_checkpoint_folder_inside_out_stays_put_for_resume(tmp_path):
    out = tmp_path / "run"
    earlier_run(out, names=("summary.json", "ckpt/ckpt-bsp.pt"))
    begin(out, keep_traces=True).finish(True)  # hetsync launch ... --resume: the script finds its checkpoint
    assert (out / "ckpt" / "ckpt-bsp.pt").read_text() == "old ckpt/ckpt-bsp.pt"
    assert not (out / "summary.json").exists()


def test_write_json_atomic_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, [1])
    write_json_atomic(path, [{"a": 2}])
    assert json.loads(path.read_text()) == [{"a": 2}]
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_partial_name():
    assert partial_name(Path("o/trace-bsp.jsonl")) == Path("o/trace-bsp.jsonl.partial")


# the cases of issue 30, on the command line: the earlier results survive byte for byte


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("earlier") / "out"
    assert main(["simulate", "-p", "bsp", "--set", "max_time_s=1", "-o", str(out), "--no-plots"]) == 0
    return out


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "-p", "bsp", "--set", "workload=nosuch"],
        ["simulate", "-p", "bsp", "--set", "workload_args={hidden: -3}"],
        ["simulate", "-p", "bsp", "-s", "TMP/perplexity.yaml"],
        ["run", "-p", "bsp", "--nproc", "2", "--host", "nosuch.invalid"],
        ["compare", "-p", "bsp", "--set", "max_time_s=1", "--md", "OUT/summary.json"],
        ["report", "OUT", "--md", "OUT/summary.json"],
        ["advise", "-s", "OUT/cluster.yaml", "--seeds", "1"],
    ],
    ids=[
        "unknown-workload",
        "bad-workload-args",
        "metric-the-workload-lacks",
        "host",
        "md-summary",
        "report-md",
        "scenario-in-out",
    ],
)
def test_a_refused_command_leaves_an_earlier_run_as_it_was(tmp_path, finished, argv, capsys):
    out = tmp_path / "out"
    import shutil

    shutil.copytree(finished, out)
    (out / "cluster.yaml").write_text("workers: 2\n")  # recorded as hetsync's below, as profile writes it
    manifest = json.loads((out / MANIFEST).read_text())
    (out / MANIFEST).write_text(json.dumps({**manifest, "files": manifest["files"] + ["cluster.yaml"]}))
    (tmp_path / "perplexity.yaml").write_text("workers: 2\nmax_time_s: 1\ntarget: {metric: perplexity, value: 3}\n")
    before = tree(out)
    args = [a.replace("TMP", str(tmp_path)).replace("OUT", str(out)) for a in argv]
    if args[0] != "report":
        args += ["-o", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hetsync: error: ")
    assert tree(out) == before


def test_the_logs_of_a_restarted_jobs_earlier_attempt_are_hetsyncs_and_set_aside_with_the_rest(tmp_path):
    out = tmp_path / "run"
    earlier_run(out, names=("summary.json", "logs/rank-0.log", "logs-attempt-0/rank-0.log"))
    (out / "logs-mine").mkdir()
    (out / "logs-mine" / "notes.txt").write_text("mine")  # a folder of the user's: not hetsync's name
    rep = begin(out)
    assert rep.set_aside == 4  # the three files and the manifest
    assert not (out / "logs-attempt-0").exists() and (out / PREVIOUS / "logs-attempt-0" / "rank-0.log").is_file()
    assert (out / "logs-mine" / "notes.txt").read_text() == "mine"
    assert outdir.hetsync_writes("logs-attempt-3/rank-1.log") and not outdir.hetsync_writes("logs-mine/x.log")
