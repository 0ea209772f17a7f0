"""``hetsync advise --verify`` on a profiled script's cluster launches the
user's script (issue 26, item 5, step 5): ``profile --script`` records the
script in ``cluster.yaml``, and ``--verify`` runs it under the shortlisted
policies on the cluster the profile emulated (:mod:`hetsync.advise.verify_script`,
:mod:`hetsync.run_as`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from hetsync import advise
from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.run_as import RUN_AS_ENV, RunAs, impose
from hetsync.scenario import load_scenario
from tests.userworkload.tinynet import TinyNet

ROOT = Path(__file__).resolve().parents[2]
TINYNET = ROOT / "tests" / "userworkload" / "tinynet.py"


@pytest.mark.dist
def test_verify_launches_the_profiled_script_under_the_shortlist_on_the_emulated_cluster(tmp_path, capsys):
    """profile --script tinynet.py (its own hetero-4 emulated) → advise --verify: every verified
    run is the script's TinyNet, under the shortlisted policy in place of the script's 'bsp', on
    the cluster the profile played, with advise's time limit and target; the table is filled."""
    prof = tmp_path / "prof"
    argv = ["profile", "--script", str(TINYNET), "--nproc", "2", "--workload", "tinynet:workload"]
    assert main([*argv, "--compute-s", "1", "--link-reps", "1", "-o", str(prof), "--no-plots"]) == 0
    capsys.readouterr()
    cluster = prof / "cluster.yaml"
    sc = load_scenario(str(cluster))
    assert sc.job.script is not None and sc.job.script["path"] == str(TINYNET) and sc.job.script["args"] == []
    assert sc.job.script["emulate"]["name"] == "hetero-4" and sc.job.script["emulate"]["delay_s"] == [0.01, 0.04]

    out = tmp_path / "adv"
    argv = ["advise", "-s", str(cluster), "--set", "max_time_s=3", "--seeds", "1", "-p", "asp"]
    assert main([*argv, "--verify", "-o", str(out), "--no-plots"]) == 0
    shown = capsys.readouterr().out
    assert f"your script {TINYNET}" in shown and "TTA measured (s)" in shown
    advice = json.loads((out / "advice.json").read_text())
    v = advice["verification"]
    shortlist = advice["shortlist"]
    assert shortlist[0] == advice["recommendation"]["spec"] and "bsp" in shortlist
    assert [r["spec"] for r in v["runs"]] == shortlist
    assert v["script"] == str(TINYNET) and v["emulated"] == "hetero-4"
    emulated = yaml.safe_load((out / "verify" / "emulated.yaml").read_text())
    assert emulated["delay_s"] == [0.01, 0.04] and emulated["max_time_s"] == 3.0
    gathered = {r["label"]: r for r in json.loads((out / "verify" / "summary.json").read_text())}
    tiny = {k: t.shape for k, t in TinyNet().state_dict().items()}
    for row in v["runs"]:
        label = row["label"]
        # predicted against measured: every column filled, the time to target where the run reached it
        # (3 s reach it on a machine at rest; a loaded one may not, and the row says so: None, no error figure)
        run = gathered[label]
        assert row["predicted_time_to_target_s"] is not None, row
        assert row["measured_time_to_target_s"] == run["time_to_target_s"], (row, run)
        assert (row["time_to_target_error"] is None) == (run["time_to_target_s"] is None), row
        assert row["predicted_samples_per_s"] > 0 and row["measured_samples_per_s"] > 0, row
        assert run["script"] == str(TINYNET) and run["driver"] == "dist" and run["workers"] == 2
        assert run["scenario"] == "hetero-4" and run["target_metric"] == "accuracy" and run["target_value"] == 0.9
        assert row["measured_samples_per_s"] == run["samples_per_s"]
        folder = out / "verify" / run["folder"]
        spec, path, _ = advise.split_choice(row["spec"])  # (bsp@collective: the script's loop on that path)
        assert run["path"] == path, run
        # the script's own model trained: its module's state_dict, 82 parameters
        (model,) = folder.glob("model-*.pt")
        state = torch.load(model, weights_only=True)
        assert {k: t.shape for k, t in state.items()} == tiny and sum(t.numel() for t in state.values()) == 82
        log = (folder / "logs" / "rank-0.log").read_text()
        assert f"hetsync advise --verify runs this script under {spec!r}" in log
        assert "it replaces the script's hetsync.init('bsp', scenario='hetero-4')" in log
        assert (out / "verify" / run["trace"]).is_file()  # linked beside the gathered summary
    assert main(["report", str(out / "verify"), "--no-plots"]) == 0  # the gathered runs read as a folder's


@pytest.mark.dist
def test_verify_of_a_script_without_evaluate_compares_samples_per_s_and_says_why_no_time_to_target(tmp_path, capsys):
    """The script's arguments are its own (script.args): with --no-evaluate it reports no metric, and
    the table says so where the measured time to target would be; samples/s are still compared."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "name": "tiny-profiled",
                "workers": 2,
                "workload": f"{TINYNET}:workload",
                "batch_size": 32,
                "lr": 0.01,
                "optimizer": {"name": "adamw"},
                "target": {"metric": "accuracy", "value": 0.9},
                "max_time_s": 2.0,
                "eval_every_s": 0.5,
                "fixed_s": 0.001,
                "per_sample_s": 0.0,
                "delay_s": [0.005, 0.02],
                "script": {"path": str(TINYNET), "args": ["--no-evaluate"], "cwd": str(tmp_path), "emulate": None},
            }
        )
    )
    out = tmp_path / "adv"
    assert main(["advise", "-s", str(cluster), "--seeds", "1", "-p", "bsp", "--verify", "-o", str(out)]) == 0
    shown = capsys.readouterr().out
    rows = json.loads((out / "advice.json").read_text())["verification"]["runs"]
    assert sorted(row["spec"] for row in rows) == ["bsp", "bsp@collective"]  # (BSP on either path, both for real)
    for row in rows:
        assert row["measured_note"] == "no evaluate=" and row["measured_time_to_target_s"] is None
        assert row["predicted_time_to_target_s"] is not None and row["measured_samples_per_s"] > 0
        assert row["samples_per_s_error"] is not None
    gathered = {r["label"]: r for r in json.loads((out / "verify" / "summary.json").read_text())}
    assert gathered["bsp@collective"]["path"] == "collective" and gathered["bsp"]["path"] == "ps"
    assert gathered["bsp@collective"]["trace"] != gathered["bsp"]["trace"]
    assert "no evaluate=" in shown and "the script passes no evaluate= to hetsync.init" in shown
    assert "on no emulated cluster" in (out / "advice.html").read_text()


SCRIPTED = """\
name: scripted
workers: 2
workload: digits-mlp
max_time_s: 2
fixed_s: 0.001
per_sample_s: 0.0
script:
  path: {path}
  args: []
  cwd: {cwd}
  emulate: {emulate}
"""


@pytest.mark.parametrize(
    "path, cwd, emulate, needle",
    [
        ("{tmp}/gone.py", "{tmp}", "null", "no longer exists: put it back, set script: path:"),
        ("{script}", "{tmp}/gone", "null", "script.cwd '{tmp}/gone' (the folder the profile ran it from"),
        ("{script}", "{tmp}", "{tmp}/gone.yaml", "script.emulate (the cluster the profile played) cannot be used"),
    ],
)
def test_verify_refuses_a_script_that_is_gone_before_simulating(tmp_path, capsys, path, cwd, emulate, needle):
    script = tmp_path / "train.py"
    script.write_text("")
    fill = {"tmp": tmp_path, "script": script}
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        SCRIPTED.format(path=path.format(**fill), cwd=cwd.format(**fill), emulate=emulate.format(**fill))
    )
    out = tmp_path / "adv"
    assert main(["advise", "-s", str(cluster), "--seeds", "1", "-p", "bsp", "--verify", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle.format(**fill) in err, err
    assert not out.exists()  # refused before anything was simulated or written


@pytest.mark.parametrize(
    "script, needle",
    [
        ("[a.py]", "scenario key 'script' must be a mapping"),
        ("{args: []}", "scenario key 'script.path' must be the training script's path"),
        ("{path: a.py, args: [1]}", "scenario key 'script.args' must be a list"),
        ("{path: a.py, flags: 1}", "scenario key 'script.flags' is unknown"),
    ],
)
def test_a_cluster_files_script_key_is_checked(tmp_path, script, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"workers: 2\nmax_time_s: 1\nscript: {script}\n")
    with pytest.raises(BadInput, match=needle):
        load_scenario(str(path))


def test_run_as_replaces_the_scripts_policy_cluster_and_job_and_says_so_on_rank_0(monkeypatch, capsys):
    run_as = RunAs(
        policy="ssp:s=3",
        scenario="hetero-4",
        job={"max_time_s": 5, "target": {"metric": "accuracy", "value": 0.8}},
        throttle=True,
        by="hetsync advise --verify",
    )
    monkeypatch.setenv(RUN_AS_ENV, run_as.to_env())
    overrides = {"target_accuracy": 0.9, "batch_size": 16, "max_time_s": 60}
    got = impose("bsp", None, overrides, False, 0)
    assert got == ("ssp:s=3", "hetero-4", {"batch_size": 16, **run_as.job}, True)  # (the target replaced)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs this script under 'ssp:s=3' on cluster hetero-4" in err
    assert "it replaces the script's hetsync.init('bsp', scenario=None)" in err
    impose("bsp", None, {}, False, 1)  # a worker says nothing
    assert capsys.readouterr().err == ""
    monkeypatch.delenv(RUN_AS_ENV)
    assert impose("bsp", "hetero-4", {"max_time_s": 1}, False, 0) == ("bsp", "hetero-4", {"max_time_s": 1}, False)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[1]", "must be a JSON object"),
        ("{", "must be a JSON object"),
        ('{"scenario": "hetero-4"}', "'policy' is required"),
        ('{"policy": "bsp", "pace": true}', "unknown key 'pace'"),
        ('{"policy": "bsp", "job": {"lr": 1}}', "'job' key 'lr' is not imposed"),
        ('{"policy": "bsp", "throttle": "yes"}', "'throttle' must be true or false"),
    ],
)
def test_a_bad_run_as_variable_names_what_is_wrong(monkeypatch, text, needle):
    monkeypatch.setenv(RUN_AS_ENV, text)
    with pytest.raises(BadInput, match=f"{RUN_AS_ENV}.*{needle}|{needle}"):
        impose("bsp", None, {}, False, 0)


def test_a_run_without_the_target_metric_is_said_so_in_the_table():
    from hetsync.advise import NO_EVALUATE, missing_metric

    assert missing_metric({"final_metrics": None, "metric_curve": []}, "accuracy") == NO_EVALUATE
    assert missing_metric({"final_metrics": {"loss": 0.3}, "metric_curve": [[1, 0.3]]}, "accuracy") == "no accuracy"
    assert missing_metric({"final_metrics": {"accuracy": 0.9}}, "accuracy") is None
    assert missing_metric({}, "accuracy") is None  # (no run: nothing to say)


def test_the_script_entry_keeps_the_cluster_the_profile_played_at_its_worker_count(tmp_path):
    """--emulate NAME or a path relative to where the profile ran: its cluster keys, per-worker
    values resolved for the profile's workers; a file gone since (a raw.json from elsewhere) stays
    its path, for --verify to refuse by name; nothing emulated: null."""
    from hetsync.advise.profile import script_entry

    (tmp_path / "two.yaml").write_text("workers: 2\nmax_time_s: 9\ndelay_s: [0.0, 0.03]\nbatch_size: 8\n")
    raw = {"workers": 3, "cwd": str(tmp_path), "script": ["python", "train.py", "--epochs", "2"]}
    entry = script_entry(raw | {"emulate": "hetero-4", "emulated_by": "--emulate"})
    assert entry is not None
    assert entry["path"] == str(tmp_path / "train.py") and entry["args"] == ["--epochs", "2"]
    assert entry["emulate"]["delay_s"] == [0.01, 0.025, 0.04] and entry["emulate"]["workers"] == 3
    own = script_entry(raw | {"emulate": "two.yaml", "emulated_by": "--emulate"})["emulate"]
    assert own["delay_s"] == [0.0, 0.03, 0.0] and "max_time_s" not in own and "batch_size" not in own
    gone = script_entry(raw | {"emulate": "gone.yaml", "emulated_by": "--emulate"})["emulate"]
    assert gone == str(tmp_path / "gone.yaml")
    assert script_entry(raw | {"emulate": None})["emulate"] is None
    assert script_entry({"workers": 2}) is None  # the built-in job's raw.json
