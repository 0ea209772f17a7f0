"""``hetsync.init("auto")`` in a user's own loop under ``hetsync launch``
(issue 31, items 1, 3 and 4): a script written as a user would bring it
(loop_auto.py), on a machine with a noisy neighbour (its last worker 40 ms
slower a step from its 6th), switches away from BSP while the loop runs,
loses no step, and the console says what it switched to and why. Asked to
forecast (``forecast=on``), a loop of one's own answers that the simulator cannot run its model, and
the measured throughput decides."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from hetsync.summary import read_summary

pytestmark = pytest.mark.dist

SCRIPT = Path(__file__).with_name("loop_auto.py")
STEPS = 80
SPEC = "auto:window=8:forecast=on"


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    out = tmp_path_factory.mktemp("loop-auto")
    hetsync = str(Path(sys.executable).with_name("hetsync"))
    cmd = [hetsync, "launch", "--nproc", "3", "--out", str(out), str(SCRIPT), SPEC, str(STEPS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    (run,) = read_summary(out / "summary.json")
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()), dict(run)


def test_auto_in_your_loop_leaves_bsp_for_a_noisy_neighbour_and_loses_no_step(launched):
    code, console, run = launched
    assert code == 0, console
    switches = [n for n in run["policy_notes"] if n["what"] == "switch"]
    assert switches and switches[0]["detail"]["from"] == "bsp", run["policy_notes"]
    (asked,) = [n for n in run["policy_notes"] if n["what"] == "forecast"]  # (asked once: then it stops asking)
    assert asked["detail"]["by"] == "throughput" and "simulator cannot run it" in asked["detail"]["why"]
    assert asked["t"] <= switches[0]["t"] and "forecast" not in switches[0]["detail"]
    assert all(a["detail"]["to"] == b["detail"]["from"] for a, b in itertools.pairwise(switches))
    # every step the three loops took is in the model or booked as dropped (backup's late ones, a switch's)
    assert run["steps"] == 3 * STEPS and run["outstanding_steps"] == 0
    assert run["applied_steps"] + run["dropped_steps"] == run["steps"]
    assert run["stop_reason"] == "no workers left"


def test_the_console_names_each_switch_with_its_predicted_gain(launched):
    code, console, run = launched
    switches = [n for n in run["policy_notes"] if n["what"] == "switch"]
    count = f"{len(switches)} switch{'es' if len(switches) > 1 else ''} of policy"
    assert (
        f"auto(window=8,forecast=on): {count} (among bsp, lb-bsp, backup, local-sgd, by measured samples a second"
        in console
    )
    first = switches[0]["detail"]
    assert f"bsp → {first['to']}: predicted {first['gain']:.2f}× the samples a second" in console, console
