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


# ------------------------------------------- a user policy that breaks the contract (issue 30, item 5)
BROKEN = "tests.userpolicy.broken"


@pytest.mark.parametrize(
    ("cls", "rule", "event"),
    [
        ("Raises", "on_event raised KeyError: 'no such key'", "PushArrived of worker"),
        ("RaisesLines", "on_event raised ValueError: the first line says it (last event", "PushArrived of worker"),
        ("WordWeight", "Apply gives push 0 the weight 'half', not a number", "PushArrived of worker"),
        ("ReturnsNone", "on_event returned NoneType, not a list of commands", "PushArrived of worker"),
        ("ReturnsText", "unknown command 'pull worker 0'", "PushArrived of worker"),
        ("NoSuchWorker", "Compute names worker 9, not in 0..3", "start at t=0 s"),
        ("StringWorker", "Compute names worker '0', not in 0..3", "start at t=0 s"),
        ("Flood", "on_event returned 10000000 commands, more than the 10064 one call may return", "PushArrived"),
        ("Forever", "on_event ran longer than 0.5 s and was stopped (HETSYNC_POLICY_CALL_TIMEOUT_S", "PushArrived"),
        ("NeverContinues", "stalled", "last event: PushArrived of worker"),
    ],
)
def test_a_contract_breach_is_one_line_naming_the_policy_the_event_and_the_rule(
    cls, rule, event, tmp_path, capsys, monkeypatch
):
    # the bound is short where it is what the case is about; elsewhere a loaded machine must not reach it
    # (building Flood's 10 million commands took longer than 0.5 s on a busy 2-core machine)
    monkeypatch.setenv("HETSYNC_POLICY_CALL_TIMEOUT_S", "0.5" if cls == "Forever" else "60")
    monkeypatch.delenv("HETSYNC_DEBUG", raising=False)
    argv = ["simulate", "-s", "hetero-4", "-p", f"{BROKEN}:{cls}", "--set", "max_time_s=2", "--no-plots"]
    assert main([*argv, "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hetsync: error: "), err
    assert "Traceback" not in err and rule in err and event in err, err
    name = policy_class(f"{BROKEN}:{cls}").name
    assert name in err


def test_the_traceback_of_a_breach_is_shown_with_hetsync_debug(tmp_path, capsys, monkeypatch):
    argv = ["simulate", "-s", "hetero-4", "-p", f"{BROKEN}:Raises", "--set", "max_time_s=2", "--no-plots"]
    assert main([*argv, "-o", str(tmp_path / "a")]) == 1
    assert "HETSYNC_DEBUG=1 shows the traceback" in capsys.readouterr().err
    monkeypatch.setenv("HETSYNC_DEBUG", "1")
    assert main([*argv, "-o", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and 'return {}["no such key"]' in err  # the policy's own line
    assert err.splitlines()[-1].startswith("hetsync: error: policy raises: on_event raised KeyError")


def test_a_breach_from_python_is_a_policy_error_and_the_contract_check_names_it(tmp_path):
    import hetsync
    from hetsync.errors import PolicyError

    with pytest.raises(PolicyError, match=r"policy raises: on_event raised KeyError") as caught:
        hetsync.simulate("hetero-4", f"{BROKEN}:Raises", out=tmp_path, plots=False, max_time_s=1)
    assert isinstance(caught.value.__cause__, KeyError)  # the policy's own exception, chained
    import numpy as np

    with pytest.raises(ContractError, match="returned NoneType, not a list of commands"):
        check_contract(f"{BROKEN}:ReturnsNone", random_cluster(np.random.default_rng(0)))


def test_a_runaway_call_is_stopped_within_its_bound(tmp_path, monkeypatch):
    import time

    import hetsync
    from hetsync.errors import PolicyError

    monkeypatch.setenv("HETSYNC_POLICY_CALL_TIMEOUT_S", "0.3")
    t0 = time.monotonic()
    with pytest.raises(PolicyError, match="ran longer than 0.3 s"):
        hetsync.simulate("hetero-4", f"{BROKEN}:Forever", out=tmp_path, plots=False, max_time_s=1)
    assert time.monotonic() - t0 < 30  # (the bound, its watchdog's poll and the run's start)
    from hetsync.driver import policycall

    assert policycall._calls == {}  # the watchdog watches no call any more
    time.sleep(0.5)  # and raises nothing later in this thread
    assert sum(range(10)) == 45


def test_the_time_bound_is_read_up_front_and_can_be_turned_off(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HETSYNC_POLICY_CALL_TIMEOUT_S", "soon")
    assert main(["simulate", "-s", "hetero-4", "-p", SPEC, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "HETSYNC_POLICY_CALL_TIMEOUT_S must be a number of seconds >= 0 (0: no bound), got 'soon'" in err
    assert not (tmp_path / "o").exists()
    from hetsync.driver import policycall

    monkeypatch.setenv("HETSYNC_POLICY_CALL_TIMEOUT_S", "0")
    assert policycall.call_timeout_s() is None
    monkeypatch.delenv("HETSYNC_POLICY_CALL_TIMEOUT_S")
    assert policycall.call_timeout_s() == policycall.DEFAULT_TIMEOUT_S == 10.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "tests.userpolicy.exits:X",
            "policy 'tests.userpolicy.exits:X': importing tests.userpolicy.exits called sys.exit(7)",
        ),
        ("tests.userpolicy.raises_at_import:X", "importing tests.userpolicy.raises_at_import raised RuntimeError"),
        (f"{BROKEN}:RaisesInInit", "creating it raised RuntimeError: cannot start"),
    ],
)
def test_a_user_policy_that_exits_or_raises_before_it_runs_is_bad_input(spec, message, capsys):
    assert main(["simulate", "-s", "default", "-p", spec, "--set", "max_time_s=1"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.dist
@pytest.mark.parametrize(("cls", "rule"), [("Raises", "on_event raised KeyError"), ("Forever", "ran longer than 1 s")])
def test_a_breach_on_real_processes_is_one_line_and_the_traceback_is_in_the_log(
    cls, rule, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("HETSYNC_POLICY_CALL_TIMEOUT_S", "1" if cls == "Forever" else "60")  # (the ranks inherit it)
    out = tmp_path / "out"
    argv = ["run", "-s", "hetero-4", "-p", f"{BROKEN}:{cls}", "--nproc", "2", "--set", "max_time_s=20", "--no-plots"]
    assert main([*argv, "-o", str(out)]) == 1
    shown = [ln for ln in capsys.readouterr().out.splitlines() if "policy" in ln.lower()]
    breach = [ln for ln in shown if rule in ln]
    assert len(breach) == 1 and "(last event: PushArrived of worker" in breach[0], shown
    assert f"(traceback in {out}/logs/rank-0.log)" in breach[0]
    assert "Traceback" in (out / "logs" / "rank-0.log").read_text()
