"""A policy of your own, outside hetsync: named module:Class on every
command, and checked with hetsync.testing (tests/userpolicy/halfsync.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hetsync.cli import main
from hetsync.errors import BadInput
from hetsync.policies import parse_policy_spec, policy_class
from hetsync.testing import ContractError, check_contract, check_policy, random_cluster

SPEC = "tests.userpolicy.halfsync:HalfSync"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # the user's package is on the path, as an installed one would be


def test_module_class_specs_parse_with_parameters():
    assert parse_policy_spec(SPEC) == (SPEC, {})
    assert parse_policy_spec(f"{SPEC}:quorum=0.75") == (SPEC, {"quorum": "0.75"})
    assert parse_policy_spec("ssp:s=3") == ("ssp", {"s": "3"})


def test_a_user_policy_passes_the_contract():
    runs = check_policy(f"{SPEC}:quorum=0.5", clusters=12)
    assert len(runs) == 12 and all(r["policy"] == "halfsync" for r in runs)


def test_a_user_policy_without_parameters_declares_no_config():
    spec = "tests.userpolicy.halfsync:EveryPush"
    runs = check_policy(spec, clusters=3)
    assert [r["label"] for r in runs] == ["everypush"] * 3 and all(r["params"] == {} for r in runs)
    with pytest.raises(BadInput, match=r"policy 'everypush' has no parameter 'k' \(parameters: none\)"):
        check_policy(f"{spec}:k=1", clusters=1)


def test_a_user_policys_parameters_are_checked_from_its_config():
    with pytest.raises(BadInput, match=r"policy 'halfsync' parameter 'quorum' must be <= 1, got 2\.0"):
        check_policy(f"{SPEC}:quorum=2", clusters=1)


def test_the_contract_catches_a_policy_that_stalls():
    import numpy as np

    sc = random_cluster(np.random.default_rng(1))
    with pytest.raises(ContractError, match="stalled"):  # OneRound never lets the pushers go on
        check_contract("tests.userpolicy.halfsync:OneRound", sc)


def test_a_user_policy_runs_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["compare", "-s", "default", "-p", f"bsp,{SPEC}", "--set", "max_time_s=3", "--no-plots", "-o", str(out)]
    assert main(argv) == 0
    runs = json.loads((out / "summary.json").read_text())
    assert [r["policy"] for r in runs] == ["bsp", "halfsync"]
    assert runs[1]["updates"] > runs[0]["updates"]  # half-sync rounds close sooner than BSP's


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.userpolicy.nothere:X", "cannot import module 'tests.userpolicy.nothere'"),
        ("tests.userpolicy.halfsync:Missing", "has no 'Missing'"),
        ("tests.userpolicy.halfsync:math", "is not a hetsync.policies.base.Policy subclass"),
    ],
)
def test_a_user_policy_that_does_not_import_is_one_line(spec, message, capsys):
    with pytest.raises(BadInput, match=message):
        policy_class(parse_policy_spec(spec)[0])
    assert main(["simulate", "-s", "default", "-p", spec, "--set", "max_time_s=1"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert sys.modules.get("tests.userpolicy.nothere") is None


def test_an_installed_package_registers_its_policy_by_entry_point(tmp_path, monkeypatch):
    """What pip writes for a package whose pyproject.toml has
    [project.entry-points."hetsync.policies"] halfsync = "...:HalfSync"."""
    info = tmp_path / "userpolicy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userpolicy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hetsync.policies]\nhalfsync = {SPEC}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = policy_class("halfsync")
    assert cls.__name__ == "HalfSync" and cls.__module__ == "tests.userpolicy.halfsync"
    runs = check_policy("halfsync:quorum=0.75", clusters=2)
    assert [r["label"] for r in runs] == ["halfsync(quorum=0.75)"] * 2
