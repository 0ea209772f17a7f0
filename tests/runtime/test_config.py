"""The run config every rank is given: one dataclass, built from ``hetsync
run``'s arguments or from ``python -m hetsync.runtime``'s flags, validated in
one place, and read back from the JSON file as it was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetsync.cli import _run_config, build_parser
from hetsync.errors import BadInput
from hetsync.runtime.__main__ import build_parser as runtime_parser
from hetsync.runtime.__main__ import config_from_args
from hetsync.runtime.config import CONFIG_NAME, ProcessOptions, RunConfig


def _from_flags(argv: list[str]) -> RunConfig:
    parser = runtime_parser()
    return config_from_args(parser.parse_args(argv), parser)


def test_the_file_reads_back_as_written(tmp_path):
    config = RunConfig(
        scenario="hetero-4",
        overrides={"max_time_s": 5, "seed": 3, "slowdown": [1, 2]},
        policies=("bsp", "ssp:s=3"),
        process=ProcessOptions(out=tmp_path, checkpoint_dir=tmp_path / "ck", throttle=True, kill_worker=1),
        plots=False,
    )
    path = config.write(tmp_path / CONFIG_NAME)
    assert RunConfig.read(path) == config
    assert json.loads(path.read_text())["process"]["checkpoint_dir"] == str(tmp_path / "ck")


def test_hetsync_run_and_the_runtime_flags_build_the_same_config(tmp_path):
    out = str(tmp_path / "o")
    argv = ["-s", "hetero-4", "--set", "max_time_s=5", "--seed", "7", "-p", "bsp,asp", "-o", out]
    argv += ["--worker-timeout-s", "30", "--throttle", "--no-plots", "--checkpoint-every-s", "2"]
    args = build_parser().parse_args(["run", *argv])
    from_cli = _run_config(args, ["bsp", "asp"], Path(out))
    flags = ["--scenario", "hetero-4", "--set", "max_time_s=5", "--seed", "7", "--policies", "bsp,asp"]
    flags += ["--out", out, "--worker-timeout-s", "30", "--throttle", "--no-plots", "--checkpoint-every-s", "2"]
    assert _from_flags(flags) == from_cli
    path = from_cli.write(tmp_path / CONFIG_NAME)
    assert _from_flags(["--config", str(path)]) == from_cli


def test_config_and_other_flags_are_refused_together(tmp_path):
    path = RunConfig().write(tmp_path / CONFIG_NAME)
    with pytest.raises(BadInput, match="--seed"):
        _from_flags(["--config", str(path), "--seed", "1"])


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"scenario": "default", "polices": ["bsp"]}, "'polices'"),
        ({"process": {"worker_timeout_s": 0}}, "worker_timeout_s"),
        ({"process": {"checkpoint_every_s": "often"}}, "checkpoint_every_s"),
        ({"process": {"startup_timeout_s": float("nan")}}, "startup_timeout_s"),
        ({"process": {"throttle": "yes"}}, "process.throttle"),
        ({"process": {"out": 3}}, "process.out"),
        ({"process": {"kill_worker": 1.5}}, "kill_worker"),
        ({"policies": []}, "policies"),
        ({"scenario": ""}, "scenario"),
        ({"plots": 1}, "plots"),
        ([], "JSON object"),
    ],
)
def test_bad_config_names_the_key(raw, named):
    with pytest.raises(BadInput, match=named):
        RunConfig.from_dict(raw)


def test_an_unreadable_file_is_bad_input(tmp_path):
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        RunConfig.read(tmp_path / "c.json")
    with pytest.raises(BadInput, match="cannot read"):
        RunConfig.read(tmp_path / "missing.json")


def test_the_scenario_and_specs_are_resolved_on_the_rank():
    config = RunConfig(scenario="hetero-4", overrides={"seed": 5, "workers": 3})
    sc = config.load_scenario()
    assert (sc.job.seed, sc.cluster.workers) == (5, 3)
    assert config.specs(sc) == list(sc.job.policies)  # none given: the scenario's
    assert RunConfig(policies=("asp",)).specs(sc) == ["asp"]


def test_advise_verify_hands_the_runtime_a_config(tmp_path):
    from hetsync.advise import verify_args

    config = verify_args("hetero-4", ["max_time_s=4"], 2, ["bsp", "asp"], tmp_path / "verify")
    assert config == RunConfig(
        scenario="hetero-4",
        overrides={"max_time_s": 4, "seed": 2},
        policies=("bsp", "asp"),
        process=ProcessOptions(out=tmp_path / "verify", throttle=True),
        plots=False,
    )


def test_the_scenario_can_ask_for_its_modelled_timing_and_the_flags_add_to_it():
    from hetsync.scenario import load_scenario

    plain, paper = load_scenario("hetero-4"), load_scenario("wbsp-h1")
    assert (plain.timing.runtime_timing, paper.timing.runtime_timing) == ("real", "modelled")
    assert ProcessOptions().emulation(plain) == (False, False)
    assert ProcessOptions(pace=True).emulation(plain) == (False, True)
    assert ProcessOptions().emulation(paper) == (True, True)
    assert ProcessOptions().emulation(load_scenario("wbsp-h1", runtime_timing="real")) == (False, False)
    measured = load_scenario("hetero-4", fixed_s="measured")
    with pytest.raises(BadInput, match="--pace needs scenario .*'measured'"):
        ProcessOptions(pace=True).emulation(measured)
    with pytest.raises(BadInput, match="runtime_timing"):
        load_scenario("hetero-4", runtime_timing="paced")
    assert _from_flags(["--scenario", "hetero-4", "--pace"]).process.pace
